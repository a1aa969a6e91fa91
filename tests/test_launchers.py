"""ringcomm.init() with no arguments under mpirun (MPICH from PyPI), torchrun and ringcomm-run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import REPO, WORKERS, mpirun, worker_env

NRANKS = 4


def results_of(stdout: str) -> list[dict]:
    return sorted(
        (
            json.loads(line[len("RESULT ") :])
            for line in stdout.splitlines()
            if line.startswith("RESULT ")
        ),
        key=lambda r: r["rank"],
    )


def run(command, env=None, timeout=120):
    done = subprocess.run(
        command, env=worker_env(env), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    results = results_of(done.stdout)
    assert [r["rank"] for r in results] == list(range(NRANKS)), done.stdout + done.stderr
    assert all(r["size"] == NRANKS and r["local_size"] == NRANKS and r["ok"] for r in results)


@pytest.mark.skipif(not mpirun(), reason="mpirun not installed (pip install mpich)")
def test_mpirun_with_mpi4py():
    pytest.importorskip("mpi4py")
    run([mpirun(), "-np", str(NRANKS), sys.executable, str(WORKERS / "launched.py")])


@pytest.mark.skipif(not mpirun(), reason="mpirun not installed (pip install mpich)")
def test_mpirun_without_mpi4py_uses_pmi_variables_and_master_port():
    # A Python path entry that hides mpi4py makes the import fail, as on a machine without it.
    blocker = Path(__file__).parent / "workers" / "no_mpi4py"
    env = {
        "PYTHONPATH": f"{blocker}{os.pathsep}{REPO}",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29517",
    }
    run([mpirun(), "-np", str(NRANKS), sys.executable, str(WORKERS / "launched.py")], env=env)


def test_torchrun():
    pytest.importorskip("torch")
    run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={NRANKS}",
            str(WORKERS / "launched.py"),
        ],
        env={"OMP_NUM_THREADS": "1"},
    )


def test_ringcomm_run():
    run([sys.executable, "-m", "ringcomm.launch", "-np", str(NRANKS), str(WORKERS / "launched.py")])


def test_ringcomm_run_sets_torch_env_rendezvous():
    run(
        [
            sys.executable,
            "-m",
            "ringcomm.launch",
            "-np",
            str(NRANKS),
            str(WORKERS / "launched_torch.py"),
        ],
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_ringcomm_run_passes_signals_on_and_leaves_no_rank_behind(tmp_path, number):
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ringcomm.launch",
            "--grace",
            "2",
            "-np",
            "3",
            str(WORKERS / "sleeper.py"),
            str(tmp_path),
        ],
        env=worker_env(None),
    )
    deadline = time.monotonic() + 60
    while len(list(tmp_path.iterdir())) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p.read_text()) for p in tmp_path.iterdir()]
    assert len(pids) == 3
    started = time.monotonic()
    launcher.send_signal(number)
    assert launcher.wait(timeout=30) == 128 + number
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)]


def test_env_store_listens_where_master_addr_says():
    from ringcomm import _environment

    assert _environment._bind_address("127.0.0.1") == "127.0.0.1"
    assert _environment._bind_address("localhost") == "127.0.0.1"
    with pytest.warns(UserWarning, match="not an address of this machine"):
        assert _environment._bind_address("203.0.113.7") == "0.0.0.0"  # TEST-NET-3
