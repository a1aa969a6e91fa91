"""Ranks that disagree about a collective in which ranks only send.
argv: broadcast N (every rank names itself the root of a broadcast of N floats) | scatter (rank 0
scatters from root 0, rank 1 gathers to root 0, at 2 ranks) | unreceived (rank 0 sends a message
that rank 1 never receives: only shutdown() can tell). Each rank reports what it raised and how
long it waited."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

mode = sys.argv[1]
comm = ringcomm.init()
rank, size = comm.rank, comm.size
comm.allreduce(np.ones(16, np.float32))  # connected, in step
outcome = {"rank": rank, "error": None, "message": ""}
started = time.monotonic()
try:
    if mode == "broadcast":
        comm.broadcast(np.full(int(sys.argv[2]), rank, np.float32), root=rank)
    elif mode == "unreceived":
        if rank == 0:
            comm.send(np.ones(100, np.float32), dest=1)
    elif rank == 0:
        comm.scatter(np.ones(size * 100, np.float32), out=np.empty(100, np.float32), root=0)
    else:
        comm.gather(np.ones(100, np.float32), root=0)
except ringcomm.RingcommError as error:
    outcome.update(error=type(error).__name__, message=str(error))
outcome["waited"] = time.monotonic() - started
# Give a last send a moment to arrive, as the rest of a training script would.
time.sleep(0.3)
comm.shutdown()
report(outcome)
