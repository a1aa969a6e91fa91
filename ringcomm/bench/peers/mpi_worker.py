"""An MPI rank of the benchmark, through mpi4py on NumPy buffers.

mpirun -np p python -m ringcomm.bench.peers.mpi_worker --plan P --out R
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from mpi4py import MPI

from ringcomm.bench.dtypes import NUMPY_LACKS, numpy_array
from ringcomm.bench.worker import finish, progress_path, run_plan, start

_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}
# MPI reduces C bools with its logical operations only (MPICH refuses MPI_SUM on MPI_C_BOOL): the
# ones that compute what bool's sum, max, min and prod are elsewhere.
_BOOL_OPS = {"sum": MPI.LOR, "max": MPI.LOR, "min": MPI.LAND, "prod": MPI.LAND}


def _op_for(x: np.ndarray, op: str) -> "MPI.Op":
    return (_BOOL_OPS if x.dtype == np.bool_ else _OPS)[op]


class MpiGroup:
    name = "mpi"

    def __init__(self, comm: "MPI.Comm"):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def allgather_float(self, value: float) -> list[float]:
        out = np.empty(self.size, dtype=np.float64)
        self.comm.Allgather(np.array([value], dtype=np.float64), out)
        return out.tolist()

    def array(self, count: int, dtype: str):
        return numpy_array(count, dtype)

    def allreduce(self, x, op: str) -> None:
        self.comm.Allreduce(MPI.IN_PLACE, x, op=_op_for(x, op))

    def allgather(self, x, out) -> None:
        self.comm.Allgather(x, out)

    def reduce_scatter(self, x, out, op: str) -> None:
        self.comm.Reduce_scatter_block(x, out, op=_op_for(x, op))

    def broadcast(self, x, root: int) -> None:
        self.comm.Bcast(x, root=root)

    def reduce(self, x, op: str, root: int) -> None:
        if self.rank == root:
            self.comm.Reduce(MPI.IN_PLACE, x, op=_op_for(x, op), root=root)
        else:
            self.comm.Reduce(x, None, op=_op_for(x, op), root=root)

    def alltoall(self, x, out) -> None:
        self.comm.Alltoall(x, out)

    def gather(self, x, out, root: int) -> None:
        self.comm.Gather(x, out, root=root)

    def scatter(self, x, out, root: int) -> None:
        self.comm.Scatter(x, out, root=root)

    def unsupported(self, collective: str, dtype: str, op: str) -> Optional[str]:
        if dtype in NUMPY_LACKS:
            return f"mpi4py has no {dtype} buffers"
        if op not in _OPS:
            return f"MPI has no {op} reduction"
        return None

    def details(self, collective: str, nbytes: int) -> dict:
        return {}


def main(argv=None) -> int:
    plan, out = start(argv, __doc__)
    report = run_plan(plan, MpiGroup(MPI.COMM_WORLD), progress_path(out))
    return finish(report, out)


if __name__ == "__main__":
    raise SystemExit(main())
