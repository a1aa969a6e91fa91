"""Started by Open MPI's mpirun (tests/test_open_mpi.py), torch-free: what ringcomm reads of Open
MPI's launch (rank, size and local rank from OMPI_COMM_WORLD_*, PMIx's rank), the way it met the
other ranks (through mpi4py, or at MASTER_ADDR:MASTER_PORT), and two collectives over it."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402
from ringcomm._environment import identify  # noqa: E402

failures = Failures()
launched = identify()  # what the environment says, before meeting anyone (ringcomm info)
comm = ringcomm.init(timeout=60)
env = os.environ


def launch() -> None:
    says = (
        int(env["OMPI_COMM_WORLD_RANK"]),
        int(env["OMPI_COMM_WORLD_SIZE"]),
        int(env["OMPI_COMM_WORLD_LOCAL_RANK"]),
        int(env["OMPI_COMM_WORLD_LOCAL_SIZE"]),
    )
    # What ringcomm info shows: the launcher's own numbers, its local rank included.
    identified = (launched.rank, launched.size, launched.local_rank, launched.local_size)
    failures.check("identify()", identified == says, f"{identified} != {says}")
    # The communicator numbers a host's ranks in rank order, where Open MPI, oversubscribed, may
    # not (local ranks 0 2 1 3 for ranks 0 1 2 3 on 2 cores): the same set, the same count.
    got = (comm.rank, comm.size, comm.local_size)
    failures.check("ranks as Open MPI numbers them", got == says[:2] + says[3:], f"{got} {says}")
    failures.check("PMIx rank", int(env["PMIX_RANK"]) == comm.rank, env["PMIX_RANK"])


def allreduce() -> None:
    x = np.full(1009, comm.rank + 1, np.float32)
    comm.allreduce(x)
    expected = comm.size * (comm.size + 1) / 2
    failures.check("allreduce", bool(np.all(x == expected)), f"{x[:4]} != {expected}")


def broadcast() -> None:
    root = comm.size - 1
    x = np.arange(257, dtype=np.int64) * (comm.rank + 1)
    comm.broadcast(x, root=root)
    expected = np.arange(257, dtype=np.int64) * (root + 1)
    failures.check("broadcast", bool(np.array_equal(x, expected)), f"{x[:4]}")


for name, body in (("launch", launch), ("allreduce", allreduce), ("broadcast", broadcast)):
    failures.case(name, body)

mpi = sys.modules.get("mpi4py.MPI")
report(
    {
        "rank": comm.rank,
        "size": comm.size,
        "local_rank": comm.local_rank,
        "launcher": launched.launcher,
        "met_through": comm._environment.launcher,  # "mpi4py" or "mpi" (MASTER_ADDR:MASTER_PORT)
        "mpi_library": mpi.Get_library_version() if mpi is not None else None,
        "failures": list(failures),
    }
)
comm.shutdown()
