"""Ranks crowded onto few cores: the direct schedule's choice between reading peers' memory and
staging through shared memory follows other processes' use of the cores, call by call, with the
same answer on every rank (src/common/cpu_share.h, DirectGroup::stageInstead). The worker states
that use through RINGCOMM_SHM_CMA_OTHERS_CORES_FILE: the test holds whatever else runs on the
machine (tests/cpp/test_wait_policy.cc checks the measurement itself)."""

import pytest
from harness import assert_all_succeeded, run_job

SWITCHES = {
    "RINGCOMM_TRANSPORT": "shm",
    "RINGCOMM_SHM_CMA_MIN_BYTES": str(1 << 20),
    # The worker says others use a core, then none: any threshold between tells the two apart.
    "RINGCOMM_SHM_CMA_BUSY_CORES": "0.5",
    "RINGCOMM_DEBUG": "INFO",
    "RINGCOMM_DEBUG_SUBSYS": "TRANSPORT",
}


def test_crowded_ranks_switch_paths_as_other_processes_come_and_go(tmp_path):
    env = dict(SWITCHES, RINGCOMM_SHM_CMA_OTHERS_CORES_FILE=str(tmp_path / "others_cores"))
    outcomes = run_job(5, "crowded_switch.py", ["1.0"], env=env, deadline=120)
    assert_all_succeeded(outcomes)
    log = outcomes[0].stderr
    if "cross-memory attach unavailable" in log:
        pytest.skip("the ranks cannot read each other's memory here: there is nothing to switch")
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"][:20])
        assert outcome.result["digests"] == outcomes[0].result["digests"], outcome.rank
    staged = log.find("5 local ranks stage all-reduces of 1048576 B and more through shared memory")
    back = log.find("5 local ranks read all-reduces of 1048576 B and more from each other", staged)
    assert 0 <= staged < back, log[-3000:]
