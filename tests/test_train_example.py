"""examples/train.py end to end: one process, mpirun, torchrun. Loss must fall and every rank must
end with the same parameters (the script exits non-zero otherwise)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import REPO, worker_env

SCRIPT = str(REPO / "examples" / "train.py")
ARGS = ["--epochs", "2"]


def run(command):
    done = subprocess.run(
        command,
        env=worker_env({"OMP_NUM_THREADS": "1"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    assert "parameters identical on all" in done.stdout and ": True" in done.stdout, done.stdout
    return done.stdout


@pytest.fixture(autouse=True)
def needs_sklearn():
    pytest.importorskip("sklearn", reason="the example's data ships with scikit-learn")


def test_single_process():
    run([sys.executable, SCRIPT, *ARGS])


def mpirun_or_skip() -> str:
    mpirun = Path(sys.executable).with_name("mpirun")
    mpirun = str(mpirun) if mpirun.exists() else shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun not installed (pip install mpich)")
    return mpirun


def test_under_mpirun():
    out = run([mpirun_or_skip(), "-np", "4", sys.executable, SCRIPT, *ARGS])
    assert "all 4 ranks" in out


def test_ddp_on_the_ringcomm_backend():
    run([sys.executable, SCRIPT, *ARGS, "--api", "ddp"])
    out = run([mpirun_or_skip(), "-np", "2", sys.executable, SCRIPT, *ARGS, "--api", "ddp"])
    assert "all 2 ranks" in out


def test_under_torchrun():
    out = run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            SCRIPT,
            *ARGS,
            "--compression",
            "fp16",
        ]
    )
    assert "all 2 ranks" in out


def test_ddp_on_gloo_under_mpirun_for_comparison():
    out = run(
        [
            mpirun_or_skip(),
            "-np",
            "2",
            sys.executable,
            SCRIPT,
            *ARGS,
            "--api",
            "ddp",
            "--backend",
            "gloo",
        ]
    )
    assert "all 2 ranks" in out
