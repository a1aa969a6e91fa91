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
    if size > 1:
        # A 16 MiB asynchronous all-reduce is still running when poll() first looks at it.
        assert any(o.result["seen_pending"] for o in outcomes)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_distributed_optimizer_matches_single_process(size):
    # At 3 ranks, a fusion threshold small enough to split the gradients into several all-reduces.
    env = {"RINGCOMM_FUSION_THRESHOLD": "4096"} if size == 3 else None
    outcomes = run_job(size, "optimizer.py", env=env, deadline=240)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])


def test_a_name_some_rank_never_submits_is_reported_then_fails_every_rank():
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


@pytest.mark.parametrize("size", [1, 2, 3])
def test_tensor_queue_reducescatter_and_alltoall(size):
    outcomes = run_job(size, "queue_collectives.py", deadline=180)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
