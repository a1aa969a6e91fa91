"""ringcomm.torch: Horovod's collective functions, handles, compression and object helpers."""

import pytest
from harness import assert_all_succeeded, run_job


@pytest.mark.parametrize("size", [1, 3])
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
    outcomes = run_job(size, "optimizer.py", deadline=240)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
