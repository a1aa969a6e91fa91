"""torch.distributed with backend "ringcomm": every operation, DDP, comm hooks, failures."""

import json
import re
import subprocess
import sys

import pytest
from harness import WORKERS, assert_all_succeeded, free_port, mpirun, run_job, worker_env


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


@pytest.mark.parametrize("size", [2, 3])
def test_ddp_and_comm_hooks_match_one_process(size):
    outcomes = run_torch_job(size, "torch_ddp.py", deadline=240)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])


@pytest.mark.timeout(120)
def test_future_is_complete_when_wait_returns():
    """gloo's order, which torchft relies on: the Future completes (value or error, callbacks
    run) before the Work, whose completion wakes wait(). 200 rounds each of all_reduce,
    broadcast, barrier and send/recv, then a receive that fails."""
    rounds = 200
    outcomes = run_torch_job(2, "torch_completion_order.py", args=[str(rounds)], deadline=90)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        result = outcome.result
        assert result["failures"] == [], f"{result['failed']} failures, first:\n" + "\n".join(
            result["failures"]
        )
        # The rank that leads a round chains its callback before the operation can complete
        # (half the rounds, a quarter for send/recv, where a send may complete at once): those
        # rounds did test the order.
        for operation in ("all_reduce", "broadcast", "barrier", "send_recv"):
            assert result["told"][operation] >= rounds // 4, result["told"]


@pytest.mark.timeout(120)
def test_dropping_a_backend_with_work_in_flight_never_hangs():
    """100 backends, each dropped by Python (its last reference, so its destructor runs holding
    the GIL) while two all-reduces run on it, one with a Python callback chained on its Future,
    the other's tensor held by nothing but its Work: the engine's threads need the GIL to finish
    them, and the destructor joins those threads. A rank that hangs prints where, at 60 s."""
    outcomes = run_torch_job(2, "torch_teardown.py", args=["100", "60"], deadline=90)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])


def test_exiting_with_a_group_left_open_exits_cleanly():
    """A program that exits without destroy_process_group(), Works with Python callbacks still
    finishing: ringcomm shuts its groups down at exit, before Python finalizes, so that no engine
    thread asks for the GIL of a dying interpreter (which terminated the process). Several runs,
    since the race was lost only sometimes."""
    for _ in range(3):
        outcomes = run_torch_job(2, "torch_exit_open.py", args=["20"], deadline=60)
        for outcome in outcomes:
            assert outcome.returncode == 0, outcome.describe()


def test_dead_rank_makes_the_others_raise_naming_it():
    outcomes = run_torch_job(3, "torch_failure.py", deadline=60)
    survivors = [o for o in outcomes if o.rank != 1]
    for outcome in survivors:
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()
        result = outcome.result
        assert "rank 1" in result["error"], result["error"]
        assert result["elapsed"] < result["timeout"] + 10, result


def test_records_a_stranger_writes_into_torchs_store_are_not_believed():
    """torch's store proves nothing: anyone who reaches it could write a failure record for a
    rank ("rank 1 reported: ...") or what it runs (a MismatchError). Records carry a MAC under
    the job's secret; the survivors name the dead rank and quote nothing the stranger wrote."""
    outcomes = run_torch_job(
        3, "torch_failure.py", args=["forge"], env={"RINGCOMM_TRANSPORT": "tcp"}, deadline=60
    )
    for outcome in (o for o in outcomes if o.rank != 1):
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()
        error = outcome.result["error"]
        assert "rank 1" in error and "FORGED" not in error, error
        assert "Mismatch" not in error, error


@pytest.mark.skipif(not mpirun(), reason="mpirun not installed (pip install mpich)")
def test_init_process_group_under_mpirun_needs_no_torch_variables():
    env = {
        k: v
        for k, v in worker_env().items()
        if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    done = subprocess.run(
        [mpirun(), "-np", "3", sys.executable, str(WORKERS / "torch_mpirun.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # mpirun forwards the ranks' output through one pipe: lines may run together.
    found = re.findall(r"RESULT (\{[^}]*\})", done.stdout)
    results = sorted((json.loads(text) for text in found), key=lambda r: r["rank"])
    assert results == [{"rank": r, "size": 3, "ok": True} for r in range(3)], (
        done.stdout + done.stderr
    )


def test_auto_follows_the_tuning_file(tmp_path):
    """The backend reads this host's tuning file as ringcomm.init() does, for each group's size,
    and so do ringcomm.torch's process sets (the cost model alone would say direct through
    shared memory at every size)."""
    from ringcomm import _tuning

    rules = {3: ("tree", "ring"), 2: ("ring", "tree")}  # world size: (up to 4 KiB, beyond)
    for size, (small, large) in rules.items():
        shm = [(4096, small), (_tuning.EVERY_SIZE, large)]
        _tuning.write(tmp_path / _tuning.tuning_file_name(size), size, {"shm": {"rules": shm}})
    outcomes = run_torch_job(3, "torch_tuned.py", env={"RINGCOMM_TUNING_DIR": str(tmp_path)})
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["ok"] and outcome.result["warnings"] == []
        assert outcome.result["chosen"] == outcome.result["hvd_chosen"] == ["tree", "ring"]
        if outcome.result["rank"] < 2:
            assert outcome.result["pair_chosen"] == ["ring", "tree"]
            assert outcome.result["hvd_pair_chosen"] == ["ring", "tree"]


@pytest.mark.parametrize("size", [2, 3])
def test_grad_scaler_skips_a_step_whose_gradient_overflowed_under_int8_and_fp8(size):
    # One rank's gradient holds an infinity at one weight: through ringcomm's comm hook (error
    # feedback on) every rank gets it there alone, GradScaler skips that step on every rank and
    # halves its scale, and the next steps go ahead (before, the error fed back kept a NaN and
    # every later step was skipped too).
    outcomes = run_torch_job(size, "torch_grad_scaler.py", deadline=120)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
