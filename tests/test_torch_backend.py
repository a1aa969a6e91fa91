"""torch.distributed with backend "ringcomm": every operation, DDP, comm hooks, failures."""

import pytest
from harness import assert_all_succeeded, free_port, run_job


def run_torch_job(size, worker, deadline=240, args=(), env=None):
    return run_job(
        size,
        worker,
        args=args,
        deadline=deadline,
        env={"TEST_MASTER_PORT": str(free_port()), **(env or {})},
    )


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_every_operation(size):
    outcomes = run_torch_job(size, "torch_backend.py", deadline=280)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
        assert outcome.result["backend"] == "ringcomm"
