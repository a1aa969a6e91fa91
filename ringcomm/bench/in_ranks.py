"""--compare under a launcher (mpirun, srun, torchrun, ringcomm-run): the peers run in the
launcher's own ranks, one after another after ringcomm, through the same plan (the same sizes,
dtype, op and buffers' fill), so that real hosts get the side-by-side table the simulated ones get.

- gloo: torch.distributed in these processes, its store served by rank 0 at an address rank 0
  sends through ringcomm (MASTER_ADDR where the launcher set one, as torchrun does).
- mpi: mpi4py's COMM_WORLD, when the launcher is the MPI mpi4py was built for; anywhere else MPI
  sees one rank a process, and the row says so instead of timing it.
- torch-ringcomm: ringcomm's own torch.distributed backend, as gloo.

A peer that cannot run here gives an Outcome with a note and no rows, as from a shell.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np

from ringcomm.bench.launchers import Outcome
from ringcomm.bench.plan import Plan
from ringcomm.bench.worker import run_plan

if TYPE_CHECKING:
    from torch.distributed import TCPStore

_ADDRESS_BYTES = 256


def run_peer(name: str, plan: Plan, comm) -> Outcome:
    """Runs peer ``name`` over ``comm``'s ranks; the Outcome is rank 0's (others get one too,
    without a report)."""
    if name == "mpi":
        return _run_mpi(plan, comm)
    return _run_torch(name, plan, comm)


def _run_mpi(plan: Plan, comm) -> Outcome:
    try:
        from mpi4py import MPI
    except ImportError:
        return Outcome("mpi", note="mpi4py is not installed (pip install mpi4py mpich)")
    from ringcomm.bench.peers.mpi_worker import MpiGroup

    world = MPI.COMM_WORLD
    # Every rank decides alike: a rank of another launcher's job sees a world of one.
    sizes = comm.allgather(np.array([world.Get_size()], dtype=np.int64))
    if any(int(size) != comm.size for size in sizes.reshape(-1)):
        # srun hands MPI its ranks only through a PMI plugin, which it does not load by default.
        hint = (
            "; under srun add --mpi=pmi2 (MPICH) or --mpi=pmix (Open MPI)"
            if "SLURM_PROCID" in os.environ
            else ""
        )
        return Outcome(
            "mpi",
            note=f"MPI sees {world.Get_size()} rank(s) where the launcher started {comm.size}: "
            "not launched by the mpirun of the MPI mpi4py was built for "
            f"({MPI.Get_library_version().splitlines()[0].strip()}){hint}",
        )
    return Outcome("mpi", run_plan(plan, MpiGroup(world)))


def _run_torch(name: str, plan: Plan, comm) -> Outcome:
    import torch.distributed as dist

    from ringcomm.bench.peers.torch_worker import TorchGroup

    backend = "gloo" if name == "gloo" else "ringcomm"
    store = _torch_store(comm, timedelta(seconds=plan.op_timeout))
    dist.init_process_group(
        backend,
        store=store,
        rank=comm.rank,
        world_size=comm.size,
        timeout=timedelta(seconds=plan.op_timeout),
    )
    try:
        report = run_plan(plan, TorchGroup(name, plan.device))
    finally:
        dist.destroy_process_group()
    return Outcome(name, report)


def _torch_store(comm, timeout: timedelta) -> TCPStore:
    """torch.distributed's store, served by rank 0 at MASTER_ADDR where the launcher set it,
    127.0.0.1 when every rank is on this host, else this host's address. Its port is the one the
    kernel gave the listening store, sent to the other ranks after: a port looked up free and
    bound later could be taken by another process in between."""
    import torch.distributed as dist

    message = np.zeros(_ADDRESS_BYTES, dtype=np.uint8)
    store = None
    if comm.rank == 0:
        if "MASTER_ADDR" in os.environ:
            host = os.environ["MASTER_ADDR"]
        elif comm.local_size == comm.size:
            host = "127.0.0.1"
        else:
            host = socket.gethostbyname(socket.gethostname())
        store = dist.TCPStore(
            host, 0, comm.size, is_master=True, timeout=timeout, wait_for_workers=False
        )
        encoded = f"{host} {store.port}".encode()
        message[: len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    comm.broadcast(message, root=0)
    if store is None:
        address, port_text = bytes(message).rstrip(b"\0").decode().split()
        store = dist.TCPStore(address, int(port_text), comm.size, is_master=False, timeout=timeout)
    return store
