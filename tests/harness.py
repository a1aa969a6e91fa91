"""Runs a test worker as N ranks and collects what each rank reported.

Workers print one line ``RESULT <json>`` at the end. Ranks get a store served here, so a test can
stall or kill ranks individually and still read the survivors' reports. Every job has a deadline:
ranks still running at it are killed and reported as timed out (a hang fails, it never blocks).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

import pytest

from ringcomm import _core, _secret
from ringcomm._ports import free_port  # noqa: F401 (tests import it from here)
from ringcomm.bench import netns

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parent.parent


@dataclass
class RankOutcome:
    rank: int
    returncode: Optional[int]  # None: killed at the job's deadline
    stdout: str
    stderr: str
    elapsed: float
    result: Optional[dict] = field(default=None)

    def describe(self) -> str:
        return (
            f"rank {self.rank} exited {self.returncode} after {self.elapsed:.1f}s\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def mpirun() -> str:
    """The mpirun of the MPICH wheel beside this Python, else one on PATH, else ""."""
    beside = Path(sys.executable).with_name("mpirun")
    return str(beside) if beside.exists() else (shutil.which("mpirun") or "")


def worker_env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("RINGCOMM_TIMEOUT", "60")
    env.update(extra or {})
    return env


@functools.lru_cache(maxsize=None)
def ucx_info() -> Optional[dict]:
    """What this build of ringcomm says of UCX (its version and lanes, as `ringcomm info`), or
    None where it has no UCX or none loads here. Asked in a child process: loading UCX into the
    test process would make it the one MPICH's mpi4py finds in tests that import both."""
    from ringcomm import _core

    if not _core.build_info()["ucx"]:
        return None
    probe = "from ringcomm import _core; import json; print(json.dumps(_core.ucx_info()))"
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=worker_env()
    )
    if found.returncode != 0:
        return None
    info = json.loads(found.stdout)
    return info if info["version"] else None


def ucx_built() -> bool:
    """Whether this build of ringcomm has UCX (RINGCOMM_TRANSPORT=ucx) and its library loads."""
    return ucx_info() is not None


@contextlib.contextmanager
def namespace_hosts(
    subnet: str, tag: str = "rc", link_names: Optional[Sequence[str]] = None
) -> Iterator[netns.Hosts]:
    """Two hosts made of network namespaces on `subnet` (ringcomm.bench.netns), deleted after;
    the test skips, saying why, where namespaces cannot be made."""
    try:
        with netns.two_hosts(subnet, tag=tag, link_names=link_names) as hosts:
            yield hosts
    except netns.NamespacesUnavailableError as reason:
        pytest.skip(str(reason))


# What failure tests run over besides shared memory: TCP, and UCX where this build has it.
NETWORK_TRANSPORTS = ["tcp", *(["ucx"] if ucx_built() else [])]


def run_job(
    nranks: int,
    worker: str,
    args: Sequence[str] = (),
    env: Optional[dict] = None,
    deadline: float = 240.0,
    per_rank_env: Optional[dict] = None,
    unreaped: Sequence[int] = (),
    newcomers: int = 0,
) -> list[RankOutcome]:
    """`unreaped`: ranks whose exit is not collected until every other rank has ended, so that
    one that dies stays a zombie meanwhile (as under a launcher that reaps late). `newcomers`:
    processes started beside the ranks with RINGCOMM_JOIN=1 and no rank, to join the running
    job (Communicator.grow); their outcomes follow the ranks'."""
    secret = _secret.new_secret()
    server = _core.TcpStoreServer("127.0.0.1", 0, secret)
    base = worker_env(env)
    base.update(
        RINGCOMM_STORE=f"127.0.0.1:{server.port}",
        RINGCOMM_WORLD_SIZE=str(nranks),
        RINGCOMM_SECRET=secret.decode(),
    )
    with tempfile.TemporaryDirectory() as logs:
        procs, files = [], []
        start = time.monotonic()
        for rank in range(nranks + newcomers):
            if rank < nranks:
                rank_env = dict(base, RINGCOMM_RANK=str(rank), **(per_rank_env or {}).get(rank, {}))
            else:
                rank_env = dict(base, RINGCOMM_JOIN="1", **(per_rank_env or {}).get(rank, {}))
            out = open(Path(logs) / f"{rank}.out", "w+")
            err = open(Path(logs) / f"{rank}.err", "w+")
            files.append((out, err))
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKERS / worker), *args],
                    env=rank_env,
                    stdout=out,
                    stderr=err,
                )
            )
        ended = [None] * (nranks + newcomers)
        watched = [(rank, proc) for rank, proc in enumerate(procs) if rank not in unreaped]
        while time.monotonic() - start < deadline and any(p.poll() is None for _, p in watched):
            for rank, proc in watched:
                if ended[rank] is None and proc.poll() is not None:
                    ended[rank] = time.monotonic() - start
            time.sleep(0.02)
        outcomes = []
        for rank, proc in enumerate(procs):
            timed_out = proc.poll() is None
            if timed_out:
                proc.kill()
            proc.wait()
            out, err = files[rank]
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
            out.close()
            err.close()
            result = None
            for line in stdout.splitlines():
                if line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT ") :])
            elapsed = ended[rank] if ended[rank] is not None else time.monotonic() - start
            outcomes.append(
                RankOutcome(
                    rank, None if timed_out else proc.returncode, stdout, stderr, elapsed, result
                )
            )
        server.stop()
        return outcomes


def assert_all_succeeded(outcomes: list[RankOutcome]) -> None:
    for outcome in outcomes:
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()


def start_ranks_on_hosts(
    hosts,
    argv: Sequence[str],
    env: dict,
    store_address: str,
    port: int,
    layout: Sequence[int] = (0, 0, 1, 1),
) -> list[subprocess.Popen]:
    """Ranks of `python argv...` on network-namespace hosts (ringcomm.bench.netns), rank r on host
    layout[r] (default 4 ranks, 2 on each of two hosts), meeting at store_address:port through
    env:// (env carries the job's secret)."""
    procs = []
    for rank, host in enumerate(layout):
        rank_env = worker_env(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(len(layout)),
                "MASTER_ADDR": store_address,
                "MASTER_PORT": str(port),
                **env,
            }
        )
        procs.append(
            subprocess.Popen(
                hosts.command(host, [sys.executable, *argv]),
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def results_of_ranks(procs: Sequence[subprocess.Popen], deadline: float) -> list[dict]:
    """finish_ranks(), asserting that every rank reported a result: the results, by rank."""
    results = []
    for result, code, out, err in finish_ranks(procs, deadline):
        assert result is not None, f"rank exited {code} without a result\n{out}\n{err[-4000:]}"
        results.append(result)
    return results


def finish_ranks(procs: Sequence[subprocess.Popen], deadline: float) -> list:
    """Waits for ranks started by start_ranks_on_hosts until `deadline` (time.monotonic()),
    killing the late ones: (last RESULT or None, return code, stdout, stderr) per rank."""
    finished = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        result = json.loads(lines[-1][len("RESULT ") :]) if lines else None
        finished.append((result, proc.returncode, out, err))
    return finished
