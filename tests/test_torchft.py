"""torchft on ringcomm (issue 49): torchft's real Lighthouse and Manager, its DDP over replica
groups on ringcomm.torchft.ProcessGroupRingcomm; a replica killed with SIGKILL inside a step and
started again heals from a peer, and every step that several replicas commit has the same
parameters and optimizer state on each. Runs bench/torchft_compare.py (which drives it) on
fewer kills; skipped where torchft is not installed (pip install ringcomm[torchft])."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torchft = pytest.importorskip("torchft")

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "torchft_compare.py"


def heal(tmp_path, *args, secret: bool = False) -> list:
    """Runs the benchmark's kill-and-heal; with `secret`, every replica group shares one
    (RINGCOMM_SECRET), and the groups' ranks meet in ringcomm's mailboxes (the nightly's
    reconfigure route), not on torch's store."""
    out = tmp_path / "heal.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOMM_SECRET")}
    if secret:
        env["RINGCOMM_SECRET"] = os.urandom(16).hex()
    subprocess.run(
        [sys.executable, str(BENCH), "heal", "--json", str(out), "--deadline", "150", *args],
        check=True, timeout=170, cwd=REPO, env=env,
    )  # fmt: skip
    return json.loads(out.read_text())


@pytest.mark.timeout(180)
def test_ddp_replica_killed_and_restarted_heals_from_a_peer(tmp_path):
    """2 replica groups, two kills: each time the survivor goes on alone once the Lighthouse
    drops the dead replica (its heartbeat timeout, 1 s here), the restarted one heals (the state
    sent over ringcomm by torchft's PGTransport) and both commit identical steps again. With a
    shared secret: the groups meet in ringcomm's mailboxes."""
    (run,) = heal(
        tmp_path, "--kills", "2", "--replicas", "2", "--heartbeat-ms", "1000", secret=True
    )
    assert len(run["kills"]) == 2
    assert run["steps_compared"] >= 10, run
    for kill in run["kills"]:
        # The heartbeat timeout and a step; far below a collective's timeout (10 s).
        assert kill["next_step"] < 5.0, run


@pytest.mark.timeout(180)
def test_three_replica_groups_survive_a_kill(tmp_path):
    """3 replica groups: the two survivors form the quorum without the dead one and go on
    together; the restarted one joins them. No shared secret: the groups meet on torch's
    store, the secret in a file on this host."""
    (run,) = heal(tmp_path, "--kills", "1", "--replicas", "3", "--heartbeat-ms", "1000")
    assert len(run["kills"]) == 1
    assert run["steps_compared"] >= 5, run


@pytest.mark.timeout(180)
@pytest.mark.parametrize("algorithm", ["localsgd", "diloco"])
def test_local_sgd_and_diloco_heal(tmp_path, algorithm):
    """torchft's LocalSGD and DiLoCo (syncing every 2 local steps) on ringcomm: a replica
    killed between syncs restarts, heals, and the synced parameters agree again."""
    (run,) = heal(tmp_path, "--kills", "1", "--algorithm", algorithm, "--heartbeat-ms", "1000")
    assert len(run["kills"]) == 1
    assert run["steps_compared"] >= 5, run
