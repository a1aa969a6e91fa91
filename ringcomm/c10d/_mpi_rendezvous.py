"""``init_process_group(...)`` under ``mpirun`` with no RANK, WORLD_SIZE or MASTER_ADDR set.

torch's default ``env://`` rendezvous reads those variables, and MPI launchers set their own
(PMI_RANK, OMPI_COMM_WORLD_RANK...). No backend hook runs before that rendezvous, so ringcomm wraps
the ``env`` handler: when an MPI launcher started this process and torch's variables are missing,
it fills them in — rank and size from the launcher, and a store address that rank 0 picks and
broadcasts through mpi4py (when its MPI is the launcher's) — then hands over to torch's own
handler. Under Slurm's srun it does the same from the step's variables (ringcomm/_slurm.py):
torch's store on the step's first node, on the port after the one ringcomm's own store would take
there. Anywhere else it changes nothing.
"""

from __future__ import annotations

import importlib
import os
import socket
from types import ModuleType
from typing import Optional

from ringcomm import _secret, _slurm
from ringcomm._environment import MPI_RANK_VARIABLES, MPI_SIZE_VARIABLES, mpi4py_of_launcher
from ringcomm._ports import free_port


def _launched_by_mpi() -> bool:
    return any(name in os.environ for name in MPI_RANK_VARIABLES)


def _needs_filling() -> bool:
    wanted = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return _launched_by_mpi() and not all(name in os.environ for name in wanted)


def _fill_from_slurm() -> None:
    task = _slurm.step()
    os.environ.setdefault("RANK", str(task.rank))
    os.environ.setdefault("WORLD_SIZE", str(task.size))
    os.environ.setdefault("LOCAL_RANK", str(task.local_rank))
    if task.local_size is not None:
        os.environ.setdefault("LOCAL_WORLD_SIZE", str(task.local_size))
    os.environ.setdefault("MASTER_ADDR", task.store_host)
    # torch's store is served by rank 0 (on the first node, as srun places it); the next port, so
    # that a script that also calls ringcomm.init() finds that port free for ringcomm's store.
    os.environ.setdefault("MASTER_PORT", str(task.store_port + 1))


def _fill_from_mpi() -> None:
    # None without mpi4py, or with one of another MPI than the launcher's (then MASTER_ADDR and
    # MASTER_PORT are set; without them it raises, naming both MPIs).
    MPI: Optional[ModuleType] = mpi4py_of_launcher()  # noqa: N806 (mpi4py's module name)
    if MPI is None:
        if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            raise RuntimeError(
                "init_process_group under mpirun without mpi4py: install mpi4py "
                "(pip install mpi4py), or set MASTER_ADDR and MASTER_PORT"
            )
        rank = next(os.environ[n] for n in MPI_RANK_VARIABLES if n in os.environ)
        size = next((os.environ[n] for n in MPI_SIZE_VARIABLES if n in os.environ), None)
        if size is None:
            raise RuntimeError(
                f"launched by MPI, but none of {', '.join(MPI_SIZE_VARIABLES)} is set; "
                "install mpi4py or set WORLD_SIZE"
            )
        os.environ.setdefault("RANK", rank)
        os.environ.setdefault("WORLD_SIZE", size)
        return
    world = MPI.COMM_WORLD
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    address = None
    if world.Get_rank() == 0:
        one_host = local.Get_size() == world.Get_size()
        host = "127.0.0.1" if one_host else socket.gethostbyname(socket.gethostname())
        # The job's secret travels through MPI, never through torch's store.
        secret = os.environ.get("RINGCOMM_SECRET") or _secret.new_secret().decode()
        address = (host, free_port("127.0.0.1" if one_host else ""), secret)
    host, port, secret = world.bcast(address, root=0)
    if not os.environ.get("RINGCOMM_SECRET_FILE"):
        os.environ.setdefault("RINGCOMM_SECRET", secret)
    os.environ.setdefault("RANK", str(world.Get_rank()))
    os.environ.setdefault("WORLD_SIZE", str(world.Get_size()))
    os.environ.setdefault("LOCAL_RANK", str(local.Get_rank()))
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(local.Get_size()))
    os.environ.setdefault("MASTER_ADDR", host)
    os.environ.setdefault("MASTER_PORT", str(port))
    local.Free()


def install() -> None:
    """Wraps torch's env:// rendezvous handler once per process."""
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    handlers = rendezvous._rendezvous_handlers  # no public way to wrap a registered handler
    original = handlers.get("env")
    if original is None or getattr(original, "ringcomm_mpi", False):
        return

    def env_or_mpi(url, *args, **kwargs):
        if _needs_filling():
            _fill_from_mpi()
        elif _slurm.is_step() and not all(n in os.environ for n in ("RANK", "WORLD_SIZE")):
            _fill_from_slurm()
        return original(url, *args, **kwargs)

    vars(env_or_mpi)["ringcomm_mpi"] = True  # mypy cannot declare a function attribute
    handlers["env"] = env_or_mpi
