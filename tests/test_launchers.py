"""ringcomm.init() with no arguments under mpirun (MPICH from PyPI), torchrun and ringcomm-run."""

import contextlib
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


@pytest.mark.parametrize("form", ["script", "command"])
def test_ringcomm_run(form):
    program = [str(WORKERS / "launched.py")]
    if form == "command":  # as mpirun and horovodrun take it: python script.py
        program = [sys.executable, *program]
    run([sys.executable, "-m", "ringcomm.launch", "-np", str(NRANKS), *program])


def test_ringcomm_run_tells_a_script_from_a_command(tmp_path, monkeypatch):
    from ringcomm.launch import _command_of

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train").write_text("#!/usr/bin/env python3\nprint('hi')\n")
    (tmp_path / "train").chmod(0o755)
    (tmp_path / "job.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "job.sh").chmod(0o755)
    assert _command_of(["train.py", "-x"]) == [sys.executable, "train.py", "-x"]
    assert _command_of(["train", "-x"]) == [sys.executable, "train", "-x"]  # a Python script
    assert _command_of(["job.sh"]) == [str(tmp_path / "job.sh")]  # Popen would not find a bare name
    assert _command_of(["python3", "train.py"]) == ["python3", "train.py"]


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
    """Running: neither gone nor a zombie (an orphan waits for whoever adopts it to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@contextlib.contextmanager
def sleeping_ranks(tmp_path, *launcher_flags):
    """(ringcomm-run, its 3 ranks' pids) running tests/workers/sleeper.py; whatever is left of
    them is killed afterwards, whatever the test found (ranks in sessions of their own, one of
    which ignores SIGTERM, would outlive it)."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ringcomm.launch", *launcher_flags, "-np", "3",
         str(WORKERS / "sleeper.py"), str(tmp_path)],
        env=worker_env(None),
    )  # fmt: skip
    pids = []
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("[0-9]"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in tmp_path.glob("[0-9]")]
        assert len(pids) == 3
        yield launcher, pids
    finally:
        for pid in [launcher.pid, *pids]:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        launcher.wait()


# SIGINT: a terminal's Ctrl-C reaches only the launcher, whose ranks are in sessions of their own.
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_ringcomm_run_passes_signals_on_and_leaves_no_rank_behind(tmp_path, number):
    with sleeping_ranks(tmp_path, "--grace", "2") as (launcher, pids):
        # Each rank in a session of its own, as mpiexec and torchrun start theirs (_ranks.py).
        assert [os.getsid(pid) for pid in pids] == pids
        started = time.monotonic()
        launcher.send_signal(number)
        assert launcher.wait(timeout=30) == 128 + number
        assert time.monotonic() - started < 10
        time.sleep(0.2)
        assert not [pid for pid in pids if _alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ringcomm_run_killed_outright_leaves_no_rank_behind(tmp_path):
    # Ranks in sessions of their own are out of reach of a signal to the launcher's group: each
    # asks the kernel to kill it when the launcher dies (ringcomm/_ranks.py).
    with sleeping_ranks(tmp_path) as (launcher, pids):
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 10
        while [pid for pid in pids if _alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)]


def test_env_store_listens_where_master_addr_says():
    from ringcomm import _environment

    assert _environment._bind_address("127.0.0.1") == "127.0.0.1"
    assert _environment._bind_address("localhost") == "127.0.0.1"
    with pytest.warns(UserWarning, match="not an address of this machine"):
        assert _environment._bind_address("203.0.113.7") == "0.0.0.0"  # TEST-NET-3


# ---- Slurm: `srun -n N python train.py`, simulated by starting the tasks with srun's variables --

# What srun sets that ringcomm must not take from the test's own environment.
_LAUNCH_VARIABLES = (
    "RINGCOMM_RANK", "RINGCOMM_STORE", "RINGCOMM_SECRET", "RINGCOMM_SECRET_FILE", "RANK",
    "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK",
)  # fmt: skip


def srun(nodes: list, extra=None, job_id=None, deadline=120, worker="slurm_task.py"):
    """Starts one task per entry of ``nodes`` (the node index of each), numbered as srun's block
    distribution numbers them; returns each task's RESULT, by rank."""
    names = [f"node{n:02d}" for n in sorted(set(nodes))]
    per_node = [nodes.count(n) for n in sorted(set(nodes))]
    job_id = job_id or str(100000 + os.getpid() % 800000)
    base = {k: v for k, v in worker_env(extra).items() if k not in _LAUNCH_VARIABLES}
    base.update(extra or {})
    base.update(
        SLURM_JOB_ID=job_id,
        SLURM_STEP_ID="0",
        SLURM_NTASKS=str(len(nodes)),
        SLURM_STEP_NUM_TASKS=str(len(nodes)),
        SLURM_STEP_NUM_NODES=str(len(names)),
        # Compressed, as srun writes it: node[00-01].
        SLURM_STEP_NODELIST=f"node[00-{len(names) - 1:02d}]" if len(names) > 1 else names[0],
        SLURM_STEP_TASKS_PER_NODE=",".join(map(str, per_node)),
    )
    tasks = []
    for rank, node in enumerate(nodes):
        env = dict(
            base,
            SLURM_PROCID=str(rank),
            SLURM_NODEID=str(node),
            SLURM_LOCALID=str(nodes[:rank].count(node)),
        )
        if len(names) > 1:
            env["RINGCOMM_HOSTID"] = names[node]  # the core tells hosts apart by this
        tasks.append(
            subprocess.Popen(
                [sys.executable, str(WORKERS / worker)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
    outputs = []
    try:
        for task in tasks:
            out, err = task.communicate(timeout=deadline)
            outputs.append((task.returncode, out, err))
    finally:
        for task in tasks:
            if task.poll() is None:
                task.kill()
    return outputs


def test_srun_one_node_needs_no_other_variables():
    outputs = srun([0, 0, 0, 0])
    assert all(code == 0 for code, _, _ in outputs), outputs
    results = results_of("".join(out for _, out, _ in outputs))
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    for r in results:
        assert r["ok"] and r["size"] == 4 and r["launcher"] == "slurm"
        assert r["identity"] == ["slurm", r["rank"], 4, r["rank"]]
        assert r["local_size"] == 4 and r["local_rank"] == r["rank"]
        # One node: the store stays on loopback, on the port derived from the job step.
        assert r["store"].startswith("127.0.0.1:")
        assert not r["secret_file_left"]


def test_srun_init_process_group_needs_no_other_variables():
    pytest.importorskip("torch")
    outputs = srun([0, 0], worker="slurm_torch_task.py", extra={"OMP_NUM_THREADS": "1"})
    assert all(code == 0 for code, _, _ in outputs), outputs
    results = results_of("".join(out for _, out, _ in outputs))
    assert [(r["rank"], r["local_rank"], r["size"], r["ok"]) for r in results] == [
        (0, 0, 2, True),
        (1, 1, 2, True),
    ]


def test_srun_across_nodes_with_a_secret_and_master_addr():
    # Two "nodes" on this host (RINGCOMM_HOSTID tells them apart, so they talk TCP); the store's
    # host comes from MASTER_ADDR, as Slurm scripts written for torch set it.
    outputs = srun(
        [0, 0, 1, 1],
        extra={"RINGCOMM_SECRET": "slurm-test-secret", "MASTER_ADDR": "127.0.0.1"},
    )
    assert all(code == 0 for code, _, _ in outputs), outputs
    results = results_of("".join(out for _, out, _ in outputs))
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert all(r["ok"] and r["host_count"] == 2 and r["local_size"] == 2 for r in results)
    assert [r["local_rank"] for r in results] == [0, 1, 0, 1]


def test_srun_across_nodes_without_a_secret_says_to_set_one(monkeypatch):
    from ringcomm import _environment, _secret

    for name in _LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_STEP_NODELIST", "gpu[7-8]")
    started = time.monotonic()
    with pytest.raises(_secret.NoSecretError, match="2 nodes.*RINGCOMM_SECRET"):
        _environment.detect(timeout=30)
    assert time.monotonic() - started < 5  # at once, not after the rendezvous timeout


def test_slurm_identity_and_torch_variables(monkeypatch):
    from ringcomm import _environment, _slurm
    from ringcomm.c10d import _mpi_rendezvous

    for name in _LAUNCH_VARIABLES + ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.setenv(name, "")  # so that monkeypatch removes what _fill_from_slurm sets
        monkeypatch.delenv(name)
    env = {
        "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "1", "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "6", "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2", "SLURM_STEP_NODELIST": "node[01-03,7]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x3),0",
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    identity = _environment.identify()
    port = _slurm.derived_port("4242", "1")
    assert (identity.launcher, identity.rank, identity.size) == ("slurm", 5, 6)
    assert (identity.local_rank, identity.local_size) == (1, 2)
    assert identity.store == f"node01:{port}"
    assert 15000 <= port < 30000 and port != _slurm.derived_port("4242", "2")
    _mpi_rendezvous._fill_from_slurm()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == (
        "5", "6", "1",
    )  # fmt: skip
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("node01", str(port + 1))
    # MASTER_PORT overrides the derived port; without a step, a batch script is not a task.
    monkeypatch.setenv("MASTER_PORT", "29999")
    assert _slurm.step().store_port == 29999
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name)
    assert _environment.launcher() == "slurm"
    monkeypatch.delenv("SLURM_STEP_ID")
    assert _environment.launcher() == "single"
    monkeypatch.setenv("SLURM_STEP_ID", "1")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")  # srun --pty bash: a single process
    assert _environment.launcher() == "single"


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node01", ["node01"]),
        ("node[01-03,7]", ["node01", "node02", "node03", "node7"]),
        ("a[8-10],b1,c[2]", ["a8", "a9", "a10", "b1", "c2"]),
        ("gpu[098-100]-ib", ["gpu098-ib", "gpu099-ib", "gpu100-ib"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("x-1.example.org,y", ["x-1.example.org", "y"]),
        ("", []),
    ],
)
def test_slurm_hostlist_expansion(text, hosts):
    from ringcomm import _slurm

    assert _slurm.expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["node[1-", "node]1[", "node[a-b]", "node[3-1]"])
def test_slurm_hostlist_refuses_malformed(text):
    from ringcomm import _slurm

    with pytest.raises(ValueError, match="hostlist"):
        _slurm.expand_hostlist(text)


def test_slurm_tasks_per_node():
    from ringcomm import _slurm

    assert _slurm.expand_tasks_per_node("4(x2),3") == [4, 4, 3]
    assert _slurm.expand_tasks_per_node("1") == [1]
    with pytest.raises(ValueError):
        _slurm.expand_tasks_per_node("4(y2)")
