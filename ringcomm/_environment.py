"""Who launched us: rank, world size and a store to meet the other ranks through.

Checked in this order:
  1. ringcomm's own launcher (``ringcomm-run``, ``ringcomm-bench``): RINGCOMM_RANK,
     RINGCOMM_WORLD_SIZE, RINGCOMM_STORE=host:port (a store the launcher serves). Under an
     elastic ``ringcomm-run`` (RINGCOMM_ELASTIC=1), the rank comes from its driver instead, and
     each init() meets in a generation of its own (ringcomm/elastic/worker.py).
  2. torchrun / torch.distributed's env:// convention: RANK, WORLD_SIZE, MASTER_ADDR,
     MASTER_PORT. Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) we join that
     store through torch; otherwise rank 0 serves a ringcomm store on MASTER_PORT.
  3. An MPI launcher (mpirun / mpiexec of MPICH or Open MPI, srun --mpi=pmi2/pmix): through mpi4py
     when it is installed and its MPI is the launcher's; otherwise rank and size from
     PMI_RANK/PMI_SIZE or OMPI_COMM_WORLD_RANK/SIZE and the store at MASTER_ADDR:MASTER_PORT
     (rank 0 serves it). An mpi4py of another MPI than the launcher's, with neither variable set,
     is an error that names both MPIs (mpi4py_of_launcher()).
  4. Slurm's srun (a job step's task, ringcomm/_slurm.py): rank, size and local rank from
     SLURM_PROCID, SLURM_STEP_NUM_TASKS and SLURM_LOCALID; the store on the step's first node, on
     a port derived from the job and step ids (MASTER_ADDR / MASTER_PORT override them).
  5. Nothing: a single process.

Each path also settles the job's secret (ringcomm/_secret.py): the caller's if it has one,
otherwise one made here the launcher's way, before the first connection to the store.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Optional

from ringcomm import _core, _secret, _slurm
from ringcomm.elastic import worker as elastic_worker

MPI_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
MPI_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


@dataclass
class LaunchEnvironment:
    rank: int
    size: int
    store: Any  # a _core.Store
    launcher: str
    secret: bytes  # the job's secret: every connection proves it
    keepalive: list = field(default_factory=list)  # store servers this process hosts
    # Rank 0's host-local secret file, removed once every rank has met (met()).
    secret_file: Optional[Any] = None
    # Set when ``store`` belongs to this rendezvous alone (an elastic generation's): every
    # process meets there under this scope, however many communicators it created before.
    scope: str = ""

    def met(self) -> None:
        """Every rank has joined: a secret file rank 0 wrote is no longer needed."""
        if self.secret_file is not None:
            _secret.remove_host_secret(self.secret_file)
            self.secret_file = None


def _integer(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer; got {value!r}") from None


def _first(names) -> Optional[str]:
    return next((n for n in names if n in os.environ), None)


def _host_port(text: str, variable: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{variable} must look like host:port; got {text!r}")
    return host.strip("[]"), int(port)


def _serve_or_join(
    serves: bool, host: str, port: int, timeout: float, secret: bytes, keepalive: list
):
    """One process (rank 0; under srun the first task on the first node) serves a ringcomm store
    on host:port, listening on that address only (MASTER_ADDR is rank 0's address; 127.0.0.1
    keeps the store off the network); everyone connects to it."""
    if serves:
        keepalive.append(_core.TcpStoreServer(_bind_address(host), port, secret))
    return _core.TcpStore(host, port, timeout, secret)


def _is_local_address(host: str) -> bool:
    try:
        with socket.socket() as probe:
            probe.bind((socket.gethostbyname(host), 0))
        return True
    except OSError:
        return False


def _host_local_secret(writes: bool, name: str, host: str, timeout: float):
    """(secret, file this process wrote or None) for a job whose launcher gives no secure
    channel: the file is named ``name`` (after the store's address, or the Slurm job step), which
    every rank knows; the store's server writes it."""
    path = _secret.host_file(name)
    if writes:
        return _secret.write_host_secret(path), path
    if not _is_local_address(host):
        raise _secret.missing_secret(f"rank 0 serves the store on {host}, another host")
    return _secret.read_host_secret(path, timeout), None


def _join_with_host_secret(
    serves: bool, name: str, host: str, port: int, timeout: float, keepalive: list
):
    """The store of a job without a given secret (env://, one-node srun), and the secret. A rank
    that read a stale file (from an earlier job on the same port) before the server replaced it
    is refused by the store: it reads the file again until the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        secret, path = _host_local_secret(serves, name, host, timeout)
        try:
            return _serve_or_join(serves, host, port, timeout, secret, keepalive), secret, path
        except RuntimeError as error:
            if serves or "proof" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _served_by_rank_0(
    rank: int,
    size: int,
    host: str,
    port: int,
    launcher: str,
    timeout: float,
    secret: bytes,
    keepalive: list,
) -> LaunchEnvironment:
    """The job of a launcher that names rank 0's address (MASTER_ADDR / MASTER_PORT: env://,
    and MPI without mpi4py) and gives no secure channel: rank 0 serves the store there, with the
    user's secret, or else with one in a file on this host that only this user can read."""
    if secret:
        store = _serve_or_join(rank == 0, host, port, timeout, secret, keepalive)
        return LaunchEnvironment(rank, size, store, launcher, secret, keepalive)
    store, secret, path = _join_with_host_secret(
        rank == 0, f"job-{host}-{port}", host, port, timeout, keepalive
    )
    return LaunchEnvironment(rank, size, store, launcher, secret, keepalive, path)


def _bind_address(host: str) -> str:
    """The numeric address ``host`` names, to listen on; every address when it names none of
    this machine's (a name that resolves elsewhere, as behind NAT), with a warning."""
    try:
        address = socket.gethostbyname(host)
        with socket.socket() as probe:
            probe.bind((address, 0))
        return address
    except OSError as error:
        warnings.warn(
            f"ringcomm: MASTER_ADDR={host} is not an address of this machine ({error}); "
            "rank 0 serves the store on every address",
            stacklevel=3,
        )
        return "0.0.0.0"


class TorchStoreAdapter(_core.Store):
    """Presents a torch.distributed Store (e.g. torchrun's agent store) as a ringcomm Store."""

    def __init__(self, store):
        super().__init__()
        self._store = store

    def set(self, key, value):
        self._store.set(key, value)

    def get(self, key, timeout):
        from datetime import timedelta

        if timeout <= 0:  # torch reads a zero timeout as "none": look instead of waiting
            if not self._store.check([key]):
                raise TimeoutError(f"store get('{key}'): not there")
            return self._store.get(key)
        self._store.wait([key], timedelta(seconds=timeout))
        return self._store.get(key)

    def add(self, key, delta):
        return self._store.add(key, delta)

    def try_get_many(self, keys, within):
        """Each key's value, or None: one request where every key is there (torch's multi_get,
        as for a rendezvous's records once counted), else a look at each."""
        try:
            if keys and self._store.check(keys):
                return list(self._store.multi_get(keys))
        except Exception:  # a store that cannot: a key at a time
            pass
        found = []
        for key in keys:
            try:
                found.append(self.get(key, 0))
            except Exception:
                found.append(None)
        return found


def torchrun_attempt_prefix(store, rank: int, size: int) -> str:
    """The keys of this attempt in torchrun's shared store (TORCHELASTIC_USE_AGENT_STORE=True,
    its c10d rendezvous by default), which outlives an attempt: a restarted group must not meet
    under the failed attempt's keys, which are still there (its job key would name shared memory
    that is gone).

    The attempt's number cannot be TORCHELASTIC_RESTART_COUNT across hosts: only the agent whose
    worker failed counts a restart, so the other hosts' workers read the failed attempt's keys
    (measured: 2 of 3 restarts across two hosts failed that way, "attaching shared memory ... No
    such file or directory"). Each rank counts its own starts in the store instead, per world
    size: every worker of every host starts once per attempt, and a group that grows or shrinks
    starts the count of its new size."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    attempt = store.add(f"ringcomm/run-{run}/starts/{size}/{rank}", 1)
    return f"ringcomm/run-{run}/size-{size}/attempt-{attempt}/"


def _torchrun(timeout: float, secret: bytes, keepalive: list) -> LaunchEnvironment:
    rank, size = _integer("RANK"), _integer("WORLD_SIZE")
    host, port = os.environ["MASTER_ADDR"], _integer("MASTER_PORT")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        from datetime import timedelta

        import torch.distributed as dist

        torch_store = dist.TCPStore(
            host, port, world_size=size, is_master=False, timeout=timedelta(seconds=timeout)
        )
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        adapter = TorchStoreAdapter(torch_store)
        store = _core.PrefixStore(torchrun_attempt_prefix(torch_store, rank, size), adapter)
        # The C++ side holds the adapter, but its Python half (the overrides) must stay alive too.
        keepalive.extend([torch_store, adapter])
        # torch's store proves nothing: the data links' secret comes from the user or this host.
        path = None
        if not secret:
            secret, path = _host_local_secret(
                rank == 0, f"job-{host}-{port}-{restart}", host, timeout
            )
        return LaunchEnvironment(rank, size, store, "torchrun", secret, keepalive, path)
    return _served_by_rank_0(rank, size, host, port, "env", timeout, secret, keepalive)


def _srun(timeout: float, secret: bytes, keepalive: list) -> LaunchEnvironment:
    """A task of ``srun -n N python train.py``. Slurm gives its tasks no secure channel: the
    secret is the user's (RINGCOMM_SECRET / _FILE, which srun passes on to every node), or, on a
    one-node step, a file on this host that only this user can read, named after the job step
    and written by the task that serves the store."""
    task = _slurm.step()
    serves, host, port = task.serves_store, task.store_host, task.store_port
    if secret:
        store = _serve_or_join(serves, host, port, timeout, secret, keepalive)
        return LaunchEnvironment(task.rank, task.size, store, "slurm", secret, keepalive)
    if not task.one_node:
        raise _secret.missing_secret(
            f"srun runs this step on {len(task.nodes)} nodes, and Slurm gives their tasks no "
            "secure channel to share one; export RINGCOMM_SECRET before srun, which passes it on"
        )
    store, secret, path = _join_with_host_secret(
        serves, task.secret_name, host, port, timeout, keepalive
    )
    return LaunchEnvironment(task.rank, task.size, store, "slurm", secret, keepalive, path)


def _survive_hydra_notices() -> None:
    """MPICH's launcher (hydra), run with -disable-auto-cleanup so that the survivors of a lost
    rank go on, tells them of the loss with SIGUSR1, which ends a process that has not asked for
    it otherwise. ringcomm finds lost ranks itself (and the survivors shrink: docs/guides/
    recovery.md), so it ignores that notice, unless the program handles SIGUSR1 itself."""
    if "HYDI_CONTROL_FD" not in os.environ:
        return
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set a handler; then the program decides
    if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _launcher_mpi() -> tuple[str, str]:
    """(kind, words) of the MPI launcher that started this process, from the variables it sets:
    "open-mpi" (Open MPI's mpirun, PMIx), "pmix" (another PMIx launcher: srun --mpi=pmix),
    "hydra" (MPICH's mpiexec, PMI), "pmi" (another PMI launcher: srun --mpi=pmi2), or ""."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env:
        return "open-mpi", "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is set)"
    if "PMIX_RANK" in env:
        return "pmix", "a PMIx launcher such as srun --mpi=pmix (PMIX_RANK is set)"
    if "HYDI_CONTROL_FD" in env:
        return "hydra", "MPICH's mpiexec (PMI_RANK and HYDI_CONTROL_FD are set)"
    if "PMI_RANK" in env:
        return "pmi", "a PMI launcher such as srun --mpi=pmi2 (PMI_RANK is set)"
    return "", f"an MPI launcher ({_first(MPI_RANK_VARIABLES)} is set)"


def _library_name(version: str) -> str:
    """The first line of MPI_Get_library_version's text, as "Open MPI v5.0.11", "MPICH 5.0.2"."""
    first = version.strip().splitlines()[0] if version.strip() else "an unknown MPI"
    return " ".join(first.split(",")[0].replace("Version:", "").split())


def _speaks_launcher(version: str, launcher: str) -> bool:
    """Whether an MPI library (MPI_Get_library_version's text) can start under ``launcher``. Open
    MPI 5 speaks PMIx only, so MPICH's PMI launcher gives it no world: each rank runs alone. The
    MPICH family (MPICH, Intel MPI, MVAPICH) aborts in MPI_Init under Open MPI's mpirun ("PMI
    version PMIx" unsupported); an MPICH built with PMIx may start under srun --mpi=pmix."""
    if version.startswith("Open MPI"):
        return launcher not in ("hydra", "pmi")
    if version.startswith(("MPICH", "Intel(R) MPI", "MVAPICH")):
        return launcher != "open-mpi"
    return True


def _mpi_mismatch(version: str, where: str) -> RuntimeError:
    _, launcher = _launcher_mpi()
    beside = os.path.join(sys.prefix, "bin", "mpirun")
    hint = f" (for this Python: {beside})" if os.path.exists(beside) else ""
    return RuntimeError(
        f"ringcomm: mpi4py ({where}) uses {_library_name(version)}, but {launcher} started this "
        f"process, and one MPI's launcher cannot start the ranks of another. Launch with the "
        f"mpirun of {_library_name(version)}{hint}, install mpi4py for the launcher's MPI, or "
        "set MASTER_ADDR and MASTER_PORT for ringcomm to meet without mpi4py "
        "(docs/troubleshooting.md, 'mpi4py of another MPI')"
    )


def _import_mpi_uninitialized(mpi4py: ModuleType) -> tuple[ModuleType, bool]:
    """mpi4py.MPI imported without MPI_Init (the library loaded, nothing started), so that its
    library can be checked against the launcher first: an MPICH under Open MPI's mpirun aborts
    the process inside MPI_Init, before any Python code could say why. Returns (MPI, whether
    ringcomm must initialize it as mpi4py would have at import)."""
    rc = mpi4py.rc
    saved = (rc.initialize, rc.finalize)
    automatic = rc.initialize in (True, "yes")
    if automatic:
        rc.initialize = False
        # mpi4py reads rc once, at this import: it still calls MPI_Finalize at exit as it would
        # after initializing MPI itself (rc.finalize None means "if mpi4py initialized it").
        if rc.finalize is None:
            rc.finalize = True
    try:
        from mpi4py import MPI
    finally:
        rc.initialize, rc.finalize = saved
    return MPI, automatic


def mpi4py_of_launcher() -> Optional[ModuleType]:
    """mpi4py's MPI module, initialized, when mpi4py is installed and its MPI is the launcher's.
    None when mpi4py is not installed, or when it is another MPI's and MASTER_ADDR and
    MASTER_PORT name the store to meet at instead (the ranks never start MPI then). Raises,
    naming both MPIs, when it is another MPI's and nothing names a store."""
    try:
        import mpi4py
    except ImportError:
        return None
    if "mpi4py.MPI" in sys.modules:  # the program imported it: MPI_Init has already run
        from mpi4py import MPI

        automatic = False
    else:
        MPI, automatic = _import_mpi_uninitialized(mpi4py)  # noqa: N806 (mpi4py's module name)
    version = MPI.Get_library_version()  # callable before MPI_Init
    matches = _speaks_launcher(version, _launcher_mpi()[0])
    if matches and automatic and not MPI.Is_initialized():
        rc = mpi4py.rc
        if rc.threads in (True, "yes"):
            MPI.Init_thread(getattr(MPI, f"THREAD_{str(rc.thread_level).upper()}"))
        else:
            MPI.Init()
    if matches and MPI.Is_initialized():
        # A library the rules above do not know, started alone: a world of one where the
        # launcher started more ranks.
        launched = _optional_integer(MPI_SIZE_VARIABLES)
        matches = launched is None or MPI.COMM_WORLD.Get_size() == launched
    if matches:
        return MPI
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return None
    raise _mpi_mismatch(version, os.path.dirname(mpi4py.__file__))


def _mpi(timeout: float, secret: bytes, keepalive: list) -> LaunchEnvironment:
    _survive_hydra_notices()
    MPI = mpi4py_of_launcher()  # noqa: N806 (mpi4py's module name)
    if MPI is not None:
        world = MPI.COMM_WORLD
        rank, size = world.Get_rank(), world.Get_size()
        hosts = world.allgather(socket.gethostname())
        address = None
        if rank == 0:
            # MPI's own channels carry the secret: it never touches the network in the clear.
            secret = secret or _secret.new_secret()
            single_host = len(set(hosts)) == 1
            server = _core.TcpStoreServer("127.0.0.1" if single_host else "0.0.0.0", 0, secret)
            keepalive.append(server)
            host = "127.0.0.1" if single_host else socket.gethostbyname(socket.gethostname())
            address = (host, server.port, secret)
        host, port, secret = world.bcast(address, root=0)
        return LaunchEnvironment(
            rank, size, _core.TcpStore(host, port, timeout, secret), "mpi4py", secret, keepalive
        )
    rank = _integer(_first(MPI_RANK_VARIABLES) or MPI_RANK_VARIABLES[0])
    size_variable = _first(MPI_SIZE_VARIABLES)
    if size_variable is None:
        raise RuntimeError(
            "launched by MPI, but no world size variable is set "
            f"({', '.join(MPI_SIZE_VARIABLES)}); install mpi4py"
        )
    size = _integer(size_variable)
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise RuntimeError(
            "launched by MPI without mpi4py: install mpi4py (pip install mpi4py), or "
            "set MASTER_ADDR and MASTER_PORT to where rank 0 can serve the store"
        )
    host, port = os.environ["MASTER_ADDR"], _integer("MASTER_PORT")
    return _served_by_rank_0(rank, size, host, port, "mpi", timeout, secret, keepalive)


MPI_LOCAL_RANK_VARIABLES = (
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
)
MPI_LOCAL_SIZE_VARIABLES = (
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)


def launcher() -> str:
    """Which launcher started this process, as detect() decides: "ringcomm", "env" (torchrun
    or env://), "mpi", "slurm" (srun) or "single". MPI's variables come before Slurm's: mpirun
    inside an allocation starts its ranks through srun, whose variables then describe mpirun's
    daemons, not the ranks."""
    if "RINGCOMM_RANK" in os.environ:
        return "ringcomm"
    if all(v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return "env"
    if _first(MPI_RANK_VARIABLES) is not None:
        return "mpi"
    if _slurm.is_step():
        return "slurm"
    return "single"


@dataclass
class LaunchIdentity:
    """What the environment says about this rank, read without meeting anyone (for
    ``python -m ringcomm info``); None where the launcher does not say."""

    launcher: str
    rank: Optional[int]
    size: Optional[int]
    local_rank: Optional[int]
    local_size: Optional[int]
    store: Optional[str]  # host:port of the rendezvous store, when known before meeting
    host: str = field(default_factory=socket.gethostname)


def _optional_integer(names) -> Optional[int]:
    name = _first(names)
    return None if name is None else _integer(name)


def identify() -> LaunchIdentity:
    kind = launcher()
    if kind == "ringcomm":
        return LaunchIdentity(
            kind,
            _integer("RINGCOMM_RANK"),
            _integer("RINGCOMM_WORLD_SIZE"),
            _optional_integer(["RINGCOMM_LOCAL_RANK"]),
            _optional_integer(["RINGCOMM_LOCAL_WORLD_SIZE"]),
            os.environ.get("RINGCOMM_STORE"),
        )
    store = None
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        store = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    if kind == "env":
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        return LaunchIdentity(
            "torchrun" if agent or "TORCHELASTIC_RUN_ID" in os.environ else "env",
            _integer("RANK"),
            _integer("WORLD_SIZE"),
            _optional_integer(["LOCAL_RANK"]),
            _optional_integer(["LOCAL_WORLD_SIZE"]),
            store,
        )
    if kind == "mpi":
        # With mpi4py, rank 0 picks the store's address when the job starts.
        return LaunchIdentity(
            kind,
            _integer(_first(MPI_RANK_VARIABLES) or MPI_RANK_VARIABLES[0]),
            _optional_integer(MPI_SIZE_VARIABLES),
            _optional_integer(MPI_LOCAL_RANK_VARIABLES),
            _optional_integer(MPI_LOCAL_SIZE_VARIABLES),
            store,
        )
    if kind == "slurm":
        task = _slurm.step()
        return LaunchIdentity(
            kind,
            task.rank,
            task.size,
            task.local_rank,
            task.local_size,
            f"{task.store_host}:{task.store_port}",
        )
    return LaunchIdentity(kind, 0, 1, 0, 1, None)


def detect(timeout: float, secret: bytes = b"") -> LaunchEnvironment:
    """Rank, size, store and the job's secret; ``secret``: the one the caller already has
    (RINGCOMM_SECRET / RINGCOMM_SECRET_FILE, through Config), or empty."""
    keepalive: list = []
    if elastic_worker.active():
        if not secret:
            raise _secret.missing_secret(
                "RINGCOMM_ELASTIC is set but RINGCOMM_SECRET is not: ringcomm-run sets both"
            )
        slot, store, data_secret, generation = elastic_worker.join(timeout, secret)
        return LaunchEnvironment(
            slot.rank,
            slot.size,
            store,
            "ringcomm-elastic",
            data_secret,
            keepalive,
            scope=f"generation-{generation}/",
        )
    kind = launcher()
    if kind == "ringcomm":
        rank, size = _integer("RINGCOMM_RANK"), _integer("RINGCOMM_WORLD_SIZE")
        host, port = _host_port(os.environ.get("RINGCOMM_STORE", ""), "RINGCOMM_STORE")
        if not secret:
            raise _secret.missing_secret(
                "RINGCOMM_STORE is set but RINGCOMM_SECRET is not: ringcomm-run sets both"
            )
        store = _core.TcpStore(host, port, timeout, secret)
        return LaunchEnvironment(rank, size, store, "ringcomm", secret, keepalive)
    if kind == "env":
        return _torchrun(timeout, secret, keepalive)
    if kind == "mpi":
        return _mpi(timeout, secret, keepalive)
    if kind == "slurm":
        return _srun(timeout, secret, keepalive)
    return LaunchEnvironment(
        0, 1, _core.HashStore(), "single", secret or _secret.new_secret(), keepalive
    )
