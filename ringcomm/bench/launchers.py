"""Starting each implementation's ranks from the parent, one implementation at a time.

Each run gets the same plan file and writes rank 0's report to its own file. No run can hang the
benchmark: the workers exit at the plan's deadline (faulthandler, see worker.start), and the
parent kills what is still running KILL_SLACK seconds after it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ringcomm import _slurm
from ringcomm._ports import free_port
from ringcomm._ranks import RANK_VARIABLES, start_rank
from ringcomm.bench.cluster import MPI_ACROSS_HOSTS, Cluster
from ringcomm.bench.plan import Plan
from ringcomm.launch import spawn

# A process is a rank of someone else's job when one of these is set (see ringcomm._environment).
_RANK_VARIABLES = (
    "RINGCOMM_RANK",
    "PMI_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "MV2_COMM_WORLD_RANK",
)
_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# How a run ended: 0, a failed process's exit status, or "timeout".
ExitStatus = Union[int, str]


def launched_as_rank(env=os.environ) -> bool:
    return (
        any(v in env for v in _RANK_VARIABLES)
        or all(v in env for v in _TORCHRUN_VARIABLES)
        or _slurm.is_step(env)
    )


IMPLEMENTATIONS = ("ringcomm", "gloo", "mpi", "torch-ringcomm")
# torch-ringcomm: ringcomm again, through torch.distributed (what the backend adds to the core).
PEERS = ("gloo", "mpi", "torch-ringcomm")

KILL_SLACK = 30.0  # seconds past the plan's deadline before the parent kills a run
_GRACE = 10.0  # after one rank fails, how long the others get to report it themselves
# Variables by which a launcher tells a process its rank: a peer's ranks must not inherit ours
# (ringcomm-run's and torchrun's, the store ringcomm-run serves, and MPI's).
_LAUNCHER_VARIABLES = RANK_VARIABLES + (
    "RINGCOMM_STORE",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_FD",
    "PMI_PORT",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_RANK",
)


@dataclass
class Outcome:
    implementation: str
    report: Optional[dict] = None  # rank 0's report (worker.run_plan), when the run succeeded
    note: Optional[str] = None  # why there is no report, or why it has no results

    @property
    def rows(self) -> list:
        return (self.report or {}).get("results", [])

    @property
    def variants(self) -> dict:
        """{algorithm, compression or transport: rows} when several were compared in turns
        (worker.run_plan), else {}."""
        return (self.report or {}).get("variants", {})


def clean_environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.setdefault("PYTHONUNBUFFERED", "1")
    # torch's C++ warnings, which a peer's ranks print once each where they do not matter here
    # ("The hostname of the client socket cannot be retrieved" on a simulated cluster's hosts):
    # errors still show. A user's own TORCH_CPP_LOG_LEVEL stands.
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    return env


def report_file(implementation: str, workdir: Path) -> Path:
    """Where rank 0 of ``implementation``'s run writes its report."""
    return workdir / f"{implementation}.json"


def _collect(
    implementation: str, report_path: Path, status: ExitStatus, nranks: int, mismatch_hint: str = ""
) -> Outcome:
    if status != 0:
        reason = "timed out" if status == "timeout" else f"exit status {status}"
        return Outcome(implementation, note=f"{implementation} run failed ({reason})")
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError) as error:
        return Outcome(implementation, note=f"{implementation} wrote no report ({error})")
    # Ranks that each saw a world of their own (an mpirun of another MPI than mpi4py's starts
    # singletons) time nothing worth a row: no data moves between them.
    seen = report.get("nranks")
    if seen is not None and seen != nranks:
        return Outcome(
            implementation,
            note=f"{implementation} results dropped: {nranks} ranks were started but rank 0 saw a "
            f"world of {seen}{mismatch_hint}",
        )
    return Outcome(implementation, report, report.get("skipped"))


def _worker_command(module: str, plan_path: Path, report_path: Path) -> list[str]:
    return [sys.executable, "-m", module, "--plan", str(plan_path), "--out", str(report_path)]


def run_ringcomm(
    plan: Plan, nranks: int, plan_path: Path, workdir: Path, cluster: Optional[Cluster] = None
) -> Outcome:
    report = report_file("ringcomm", workdir)
    command = _worker_command("ringcomm.bench.ringcomm_worker", plan_path, report)
    if cluster is not None:
        children = cluster.start(command[1:], clean_environment())
        status = wait_all(children, time.monotonic() + plan.timeout + KILL_SLACK)
    else:
        status = spawn(nranks, command, env=clean_environment())
    return _collect("ringcomm", report, status, nranks)


def wait_all(children: list, deadline: float) -> ExitStatus:
    """0 when every child succeeded; else the first failure's status, or "timeout"."""
    failed_at, status = None, 0
    while any(c.poll() is None for c in children):
        for child in children:
            if child.returncode not in (None, 0) and status == 0:
                status, failed_at = child.returncode, time.monotonic()
        now = time.monotonic()
        if now > deadline or (failed_at is not None and now - failed_at > _GRACE):
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            return status or "timeout"
        time.sleep(0.05)
    return next((c.returncode for c in children if c.returncode != 0), status)


def torch_environment_on_this_host(nranks: int) -> dict:
    """torch.distributed's env:// rendezvous for ``nranks`` ranks on this host (each rank adds
    its RANK and LOCAL_RANK), for run_torch's peers and bench/ddp.py's jobs."""
    env = dict(
        clean_environment(),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(nranks),
        LOCAL_WORLD_SIZE=str(nranks),
    )
    # All ranks are on this host: keep gloo (a torch job's control group, whatever its backend)
    # on loopback rather than whatever the hostname resolves to (which in containers may be an
    # address that is not ours).
    if "GLOO_SOCKET_IFNAME" not in env and "lo" in (n for _, n in socket.if_nameindex()):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def run_torch(
    name: str,
    backend: str,
    plan: Plan,
    nranks: int,
    plan_path: Path,
    workdir: Path,
    cluster: Optional[Cluster] = None,
) -> Outcome:
    if importlib.util.find_spec("torch") is None:
        return Outcome(name, note=f"{name} skipped: torch is not installed (pip install torch)")
    report = report_file(name, workdir)
    command = _worker_command("ringcomm.bench.peers.torch_worker", plan_path, report)
    command[3:3] = ["--backend", backend]
    if cluster is not None:
        children = cluster.start(command[1:], clean_environment())
        status = wait_all(children, time.monotonic() + plan.timeout + KILL_SLACK)
        return _collect(name, report, status, nranks)
    base = torch_environment_on_this_host(nranks)
    children = [
        start_rank(command, dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(nranks)
    ]
    status = wait_all(children, time.monotonic() + plan.timeout + KILL_SLACK)
    return _collect(name, report, status, nranks)


def run_gloo(plan: Plan, nranks: int, plan_path: Path, workdir: Path, cluster=None) -> Outcome:
    return run_torch("gloo", "gloo", plan, nranks, plan_path, workdir, cluster)


def run_torch_ringcomm(
    plan: Plan, nranks: int, plan_path: Path, workdir: Path, cluster=None
) -> Outcome:
    return run_torch("torch-ringcomm", "ringcomm", plan, nranks, plan_path, workdir, cluster)


def find_mpirun() -> Optional[str]:
    """mpirun of the MPI this Python's mpi4py was installed with (same venv) first, then PATH."""
    here = Path(sys.executable).parent
    for name in ("mpirun", "mpiexec"):
        if (here / name).exists():
            return str(here / name)
    return shutil.which("mpirun") or shutil.which("mpiexec")


def run_mpi(
    plan: Plan, nranks: int, plan_path: Path, workdir: Path, cluster: Optional[Cluster] = None
) -> Outcome:
    mpirun = find_mpirun()
    if mpirun is None:
        return Outcome(
            "mpi",
            note="mpi skipped: no mpirun next to python or on PATH (pip install mpich mpi4py)",
        )
    if importlib.util.find_spec("mpi4py") is None:
        return Outcome("mpi", note="mpi skipped: mpi4py is not installed (pip install mpi4py)")
    report = report_file("mpi", workdir)
    worker = _worker_command("ringcomm.bench.peers.mpi_worker", plan_path, report)
    env = clean_environment()
    if cluster is not None:
        command = cluster.mpiexec(mpirun, worker, str(workdir))
        env.update(MPI_ACROSS_HOSTS)
        if len(set(cluster.hosts.links)) > 1:  # one UCX_NET_DEVICES for every host: none fits
            env.pop("UCX_NET_DEVICES")
    else:
        command = [mpirun, "-np", str(nranks), *worker]
    # Its own session, so that on timeout mpirun and what it started go down together. Hydra starts
    # each rank in a session of its own, out of reach of killpg: mpiexec is asked first, and it
    # stops its ranks itself.
    child = subprocess.Popen(command, env=env, start_new_session=True)
    status: ExitStatus
    try:
        status = child.wait(timeout=plan.timeout + KILL_SLACK)
    except subprocess.TimeoutExpired:
        child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=_GRACE)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        status = "timeout"
    hint = (
        f" (the mpirun found, {mpirun}, belongs to another MPI than the one mpi4py was built "
        "for: pip install mpich mpi4py into this environment, or put that MPI's mpirun first on "
        "PATH)"
    )
    return _collect("mpi", report, status, nranks, hint)


RUNNERS = {
    "ringcomm": run_ringcomm,
    "gloo": run_gloo,
    "mpi": run_mpi,
    "torch-ringcomm": run_torch_ringcomm,
}
