"""A ringcomm rank of the benchmark: ``python -m ringcomm.bench.ringcomm_worker --plan P --out R``.

Started by the CLI through ringcomm.launch.spawn, or run in-process by the CLI itself when the CLI
was started by a launcher (mpirun, torchrun, ringcomm-run).
"""

from __future__ import annotations

import copy
from typing import Optional

import numpy as np

import ringcomm
from ringcomm.bench import device as bench_device
from ringcomm.bench.dtypes import NUMPY_LACKS, numpy_array, shared_array, torch_tensor
from ringcomm.bench.plan import Plan
from ringcomm.bench.worker import finish, progress_path, run_plan, start

_OPS = {
    "sum": ringcomm.SUM,
    "avg": ringcomm.AVG,
    "min": ringcomm.MIN,
    "max": ringcomm.MAX,
    "prod": ringcomm.PROD,
}


class RingcommGroup:
    name = "ringcomm"

    def __init__(
        self,
        comm: "ringcomm.Communicator",
        algorithm: str,
        compression: str = "none",
        device: str = "cpu",
        memory: str = "private",
    ):
        self.comm, self.algorithm = comm, algorithm
        self.compression = None if compression == "none" else compression
        self.rank, self.size = comm.rank, comm.size
        self.cuda = device == "cuda"
        self.shared_memory = memory == "shared"
        if self.cuda:
            bench_device.use_rank_device(comm.local_rank)

    def barrier(self) -> None:
        self.comm.barrier()

    def allgather_float(self, value: float) -> list[float]:
        return self.comm.allgather(np.array([value], dtype=np.float64)).tolist()

    def array(self, count: int, dtype: str):
        if self.cuda:
            return bench_device.tensor(count, dtype)
        if self.shared_memory:
            return shared_array(count, dtype)
        return torch_tensor(count, dtype) if dtype in NUMPY_LACKS else numpy_array(count, dtype)

    def _done(self) -> None:
        if self.cuda:  # a call is timed until its result is on the device
            bench_device.synchronize()

    def allreduce(self, x, op: str) -> None:
        self.comm.allreduce(x, op=_OPS[op], algorithm=self.algorithm, compression=self.compression)
        self._done()

    def allgather(self, x, out) -> None:
        self.comm.allgather(x, out=out)
        self._done()

    def reduce_scatter(self, x, out, op: str) -> None:
        self.comm.reduce_scatter(x, out=out, op=_OPS[op])
        self._done()

    def broadcast(self, x, root: int) -> None:
        self.comm.broadcast(x, root=root)
        self._done()

    def reduce(self, x, op: str, root: int) -> None:
        self.comm.reduce(x, op=_OPS[op], root=root)
        self._done()

    def alltoall(self, x, out) -> None:
        self.comm.alltoall(x, out=out)
        self._done()

    def gather(self, x, out, root: int) -> None:
        self.comm.gather(x, out=out, root=root)
        self._done()

    def scatter(self, x, out, root: int) -> None:
        self.comm.scatter(x, out=out, root=root)
        self._done()

    def unsupported(self, collective: str, dtype: str, op: str) -> Optional[str]:
        if dtype == "bool" and op == "avg":
            return "ringcomm has no avg of bool"
        return None

    def with_algorithm(self, algorithm: str) -> "RingcommGroup":
        """This group (the same communicator) running all-reduce with ``algorithm``."""
        variant = copy.copy(self)
        variant.algorithm = algorithm
        return variant

    def with_compression(self, compression: str) -> "RingcommGroup":
        """This group (the same communicator) running all-reduce through ``compression``."""
        variant = copy.copy(self)
        variant.compression = None if compression == "none" else compression
        return variant

    def details(self, collective: str, nbytes: int) -> dict:
        """Which all-reduce algorithm ran: the forced one, or auto's choice (the tuning file's or
        the cost model's)."""
        if collective != "allreduce":
            return {}
        chosen = self.algorithm if self.algorithm != "auto" else self.comm.choose_algorithm(nbytes)
        if self.compression:
            # The codec travels with the ring, across hosts in the hierarchical schedule.
            carrier = chosen if chosen == "hierarchical" else "ring"
            return {"algorithm": f"{carrier}+{self.compression}"}
        return {"algorithm": chosen}


def connect(plan: Plan) -> "ringcomm.Communicator":
    """Joins the job this process belongs to, with the plan's transport, algorithm and timeout.
    With several algorithms each call names its own, and the communicator's stays auto: what
    auto runs (this host's tuning file, or the cost model) is one of those compared."""
    algorithm = plan.algorithms[0] if len(plan.algorithms) == 1 else "auto"
    return ringcomm.init(timeout=plan.op_timeout, transport=plan.transport, algorithm=algorithm)


def run(
    plan: Plan, comm: "ringcomm.Communicator", progress: Optional[str] = None
) -> Optional[dict]:
    """Runs the plan on ``comm``; the report on rank 0, None on the others."""
    group = RingcommGroup(comm, plan.algorithms[0], plan.compressions[0], plan.device, plan.memory)
    variants = None
    if len(plan.algorithms) > 1:
        variants = {a: group.with_algorithm(a) for a in plan.algorithms}
    elif len(plan.compressions) > 1:
        variants = {c: group.with_compression(c) for c in plan.compressions}
    report = run_plan(plan, group, progress, variants)
    if report is not None and comm.cross_size > 1:
        # The network as the cost model took it (given, or measured at creation).
        config = comm._core.config
        report["link"] = {"latency_s": config.link_latency, "bytes_per_s": config.link_bandwidth}
    return report


def main(argv=None) -> int:
    plan, out = start(argv, __doc__)
    comm = connect(plan)
    try:
        report = run(plan, comm, progress_path(out))
    finally:
        comm.shutdown()
    return finish(report, out)


if __name__ == "__main__":
    raise SystemExit(main())
