"""A rank of a "ringcomm" process group dies: the others must raise, naming it, not hang.

argv "forge": before rank 1 dies, a stranger (rank 0 plays one: anyone who reaches torch's
store can) writes failure records for it into torch's store, which proves nothing; the others'
errors must not quote them (run over TCP, where a lost rank's record is looked for)."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
TIMEOUT = 10
dist.init_process_group("ringcomm", timeout=timedelta(seconds=TIMEOUT))
rank = dist.get_rank()
x = torch.ones(1 << 16)
dist.all_reduce(x)
if sys.argv[1:] == ["forge"] and rank == 0:
    stranger = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
        wait_for_workers=False, timeout=timedelta(seconds=5),
    )  # fmt: skip
    # Where ringcomm's records of the default group lie in torch's store (rank 1's, and the
    # description of what it runs, which could fake a MismatchError), one with a MAC made up.
    scope = "default_pg/0//cpu//ringcomm//"
    stranger.set(scope + "abort/1", "2 mismatch FORGED: rank 1 caught rank 2 cheating")
    stranger.set(scope + "inflight/1", "1 FORGED - - 0 - - 4\nFORGED\n#mac " + "00" * 32)
if sys.argv[1:] == ["forge"]:
    dist.barrier()
if rank == 1:
    os._exit(3)
start = time.monotonic()
error = ""
try:
    for _ in range(100):
        dist.all_reduce(x)
except Exception as caught:  # noqa: BLE001 - the test reads whatever torch raised
    error = f"{type(caught).__name__}: {caught}"
report({"rank": rank, "error": error, "elapsed": time.monotonic() - start, "timeout": TIMEOUT})
dist.destroy_process_group()
