"""Zero elements on one rank, some on the others, for every collective: each case on a fresh
communicator of its own (an error poisons the one it happened on), all in one launch.

Rank 0 calls each collective with 0 elements per rank and the others with 1 (with 0 on every
rank: a valid no-op). Every rank reports, per case, the error it raised (or none) and how long
it took.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402
from ringcomm import _core  # noqa: E402

first = ringcomm.init()
rank, size = first.rank, first.size
environment = first._environment


def fresh() -> ringcomm.Communicator:
    config = first._core.config
    return ringcomm.Communicator(
        _core.Communicator.create(environment.store, rank, size, config), environment
    )


def call(comm, collective: str, n: int) -> None:
    x = np.ones(n, np.float32)
    if collective == "allreduce":
        comm.allreduce(x)
    elif collective == "allgather":
        comm.allgather(x)
    elif collective == "reduce_scatter":
        comm.reduce_scatter(np.ones(n * size, np.float32))
    elif collective == "reduce":
        comm.reduce(x, root=size - 1)
    elif collective == "alltoall":
        comm.alltoall(np.ones(n * size, np.float32))
    elif collective == "gather":
        comm.gather(x, root=size - 1)
    elif collective == "scatter":
        comm.scatter(
            np.ones(n * size, np.float32) if rank == size - 1 else None,
            out=np.empty(n, np.float32),
            root=size - 1,
        )
    elif collective == "broadcast":
        comm.broadcast(x, root=size - 1)


COLLECTIVES = ["allreduce", "allgather", "reduce_scatter", "reduce", "alltoall", "gather",
               "scatter", "broadcast"]  # fmt: skip
results = {}
for collective in COLLECTIVES:
    for agreeing in (False, True):
        comm = fresh()
        n = 0 if rank == 0 or agreeing else 1
        started = time.monotonic()
        outcome = {"error": None}
        try:
            call(comm, collective, n)
            comm.barrier()  # every rank got through, or this raises too
        except Exception as error:  # the test judges it
            outcome = {"error": type(error).__name__, "message": str(error)}
        outcome["seconds"] = time.monotonic() - started
        results[f"{collective}/{'all zero' if agreeing else 'one zero'}"] = outcome
        comm.shutdown()
report({"rank": rank, "results": results})
first.shutdown()
