"""ringcomm.torch: Horovod's collective functions, handles, compression and object helpers."""

import pytest
from harness import assert_all_succeeded, run_job


@pytest.mark.parametrize("size", [1, 3, 8])
def test_horovod_style_api(size):
    outcomes = run_job(size, "horovod_api.py", deadline=180)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
        assert outcome.result["identity"] == [size, size, 1, 0, True]
    # A 16 MiB asynchronous all-reduce is still running when poll() first looks at it, even at
    # one rank (the queue's thread runs it, as Horovod's does).
    assert any(o.result["seen_pending"] for o in outcomes)


# 1 rank (no peers) and 3 (uneven splits, several fused all-reduces); the queue's test below
# runs at 2 as well.
@pytest.mark.parametrize("size", [1, 3])
def test_distributed_optimizer_matches_single_process(size):
    # At 3 ranks, a fusion threshold small enough to split the gradients into several all-reduces.
    env = {"RINGCOMM_FUSION_THRESHOLD": "4096"} if size == 3 else None
    outcomes = run_job(size, "optimizer.py", env=env, deadline=240)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])


def test_a_name_some_rank_never_submits_is_reported_then_fails_and_the_queue_goes_on():
    outcomes = run_job(
        2,
        "horovod_stall.py",
        env={"RINGCOMM_TIMEOUT": "4", "RINGCOMM_STALL_WARNING": "1"},
        deadline=60,
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        other = 1 - outcome.rank
        assert f"rank(s) {other} have not submitted it" in outcome.stderr, outcome.describe()
        (error,) = outcome.result["errors"]
        assert error.startswith("TimeoutError"), error
        # Whichever rank's deadline came first names the rank that never submitted its tensor.
        assert "which never submitted it" in error and "timed out after" in error, error
        assert outcome.result["horovod_kind"], "not a HorovodInternalError"
        # The queue goes on: the next request succeeds.
        assert outcome.result["after"] == [2.0, 2.0]
        # Both ranks wait and nothing moves: the cycles keep their pace instead of spinning
        # (0.2 s of CPU time in the 4 s here; a spinning queue thread takes a core).
        assert outcome.result["stalled_cpu"] < 2.0, outcome.result["stalled_cpu"]


def test_a_waiting_caller_does_not_wait_out_the_cycle_time():
    # A 2 s cycle, and rank 1 submitting 0.1 s after rank 0 every round: each all-reduce takes
    # about 0.1 s where it took up to two cycles (rank 0's cycle with its request alone, then the
    # next) before a waiting caller kept the cycles coming.
    outcomes = run_job(
        2, "queue_waits.py", ["5", "0.1"], env={"RINGCOMM_CYCLE_TIME": "2000"}, deadline=120
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        took = sorted(outcome.result["took"])
        assert took[len(took) // 2] < 1.0, f"rank {outcome.rank}: rounds took {took} s"


@pytest.mark.parametrize("size", [1, 2, 3])
def test_tensor_queue_reducescatter_and_alltoall(size):
    outcomes = run_job(size, "queue_collectives.py", deadline=180)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])


@pytest.mark.parametrize("size", [1, 3])
def test_horovod_parity(size):
    outcomes = run_job(size, "horovod_parity.py", deadline=240)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
    # Every *_async returns with its operation still running, even at one rank.
    for operation in ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter"):
        assert any(o.result["seen_pending"][operation] for o in outcomes), operation


# 4: two hosts of two ranks (RINGCOMM_HOSTID), so that process sets span hosts or stay on one.
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_process_sets(size):
    hosts = {rank: {"RINGCOMM_HOSTID": f"host-{rank // 2}"} for rank in range(4)}
    outcomes = run_job(
        size, "horovod_process_sets.py", deadline=240, per_rank_env=hosts if size == 4 else None
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
