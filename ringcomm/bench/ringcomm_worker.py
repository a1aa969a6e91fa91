"""A ringcomm rank of the benchmark: ``python -m ringcomm.bench.ringcomm_worker --plan P --out R``.

Started by the CLI through ringcomm.launch.spawn, or run in-process by the CLI itself when the CLI
was started by a launcher (mpirun, torchrun, ringcomm-run).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Optional

import numpy as np

import ringcomm
from ringcomm import _core
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

    def with_communicator(self, comm: "ringcomm.Communicator") -> "RingcommGroup":
        """This group (the same ranks) running every collective through ``comm``: another
        transport's communicator (through_transport)."""
        variant = copy.copy(self)
        variant.comm = comm
        return variant

    def details(self, collective: str, nbytes: int) -> dict:
        """What carried the call: this rank's links ("shm+tcp": auto's across hosts), and for
        all-reduce the algorithm that ran: the forced one, or auto's choice (the tuning file's
        or the cost model's)."""
        found = {}
        links = {self.comm.transport_to(peer) for peer in range(self.size) if peer != self.rank}
        if links:
            found["transport"] = "+".join(sorted(links))
        if collective != "allreduce":
            return found
        chosen = self.algorithm if self.algorithm != "auto" else self.comm.choose_algorithm(nbytes)
        if self.compression:
            # The codec travels with the ring, across hosts in the hierarchical schedule.
            carrier = chosen if chosen == "hierarchical" else "ring"
            chosen = f"{carrier}+{self.compression}"
        return dict(found, algorithm=chosen)


def connect(plan: Plan) -> "ringcomm.Communicator":
    """Joins the job this process belongs to, with the plan's (first) transport, algorithm and
    timeout. With several algorithms each call names its own, and the communicator's stays auto:
    what auto runs (this host's tuning file, or the cost model) is one of those compared."""
    algorithm = plan.algorithms[0] if len(plan.algorithms) == 1 else "auto"
    return ringcomm.init(timeout=plan.op_timeout, transport=plan.transports[0], algorithm=algorithm)


def through_transport(comm: "ringcomm.Communicator", transport: str) -> "ringcomm.Communicator":
    """A communicator of ``comm``'s ranks in these same processes, through ``transport``, to time
    beside ``comm``. Collective: every rank asks for the same transports in the same order.

    It meets the other ranks on the store ``comm`` met them on (ringcomm.init's), in a scope of
    its own, with ``comm``'s configuration but for the transport: the same timeout, algorithm,
    secret and tuning, and across hosts the network's figures ``comm`` measured, so that the
    link is not probed again and auto's choices (the schedule; whether TCP's links between hosts
    stay sealed) rest on the same figures through every transport. The communicator keeps
    init's environment, as ``comm`` does: on the rank that serves the store, the server stays up
    while either is in use."""
    environment = comm._environment
    if environment is None:
        raise ValueError(
            "another transport's communicator meets on the store of ringcomm.init(); this "
            "communicator was made without one"
        )
    config = copy.copy(comm._core.config)
    config.transport = _core.parse_transport(transport)
    scope = f"{environment.scope}bench-transport-{transport}/"
    core = _core.Communicator.create_in_scope(
        environment.store, scope, comm.rank, comm.size, config
    )
    return ringcomm.Communicator(core, environment)


def _variants(plan: Plan, group: RingcommGroup, others: contextlib.ExitStack) -> Optional[dict]:
    """{name: group} for what the plan times in turns (worker.run_plan's variants), or None.
    Another transport's communicator enters ``others``, which shuts it down."""
    varied = plan.varied()
    if varied == "algorithm":
        return {a: group.with_algorithm(a) for a in plan.algorithms}
    if varied == "compression":
        return {c: group.with_compression(c) for c in plan.compressions}
    if varied == "transport":
        first, *rest = plan.transports
        variants = {first: group}
        for transport in rest:
            comm = others.enter_context(through_transport(group.comm, transport))
            variants[transport] = group.with_communicator(comm)
        return variants
    return None


def run(
    plan: Plan, comm: "ringcomm.Communicator", progress: Optional[str] = None
) -> Optional[dict]:
    """Runs the plan on ``comm``; the report on rank 0, None on the others. With several
    transports ``comm`` is the first one's, and each other one's communicator is made here, in
    these processes, and shut down before this returns."""
    group = RingcommGroup(comm, plan.algorithms[0], plan.compressions[0], plan.device, plan.memory)
    with contextlib.ExitStack() as others:
        report = run_plan(plan, group, progress, _variants(plan, group, others))
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
