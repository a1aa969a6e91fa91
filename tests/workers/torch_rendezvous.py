"""torch's env:// variables for a worker started by tests/harness.py (which sets RINGCOMM_*)."""

import os


def use_harness_rendezvous() -> None:
    if "RINGCOMM_RANK" not in os.environ:
        return  # started with torch's own variables (tests/harness.py's start_ranks_on_hosts)
    os.environ.setdefault("RANK", os.environ["RINGCOMM_RANK"])
    os.environ.setdefault("WORLD_SIZE", os.environ["RINGCOMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:  # ringcomm-run sets it; tests/harness.py does not
        os.environ["MASTER_PORT"] = os.environ["TEST_MASTER_PORT"]
