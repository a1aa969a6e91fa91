"""Ranks that disagree about a collective in which every rank only sends, as their last one:
argv: broadcast (every rank names itself the root) | scatter (rank 0 scatters from root 0,
rank 1 gathers to root 0, at 2 ranks). Each rank shuts down and reports; shutdown must warn."""

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
if mode == "broadcast":
    comm.broadcast(np.full(1000, rank, np.float32), root=rank)
elif rank == 0:
    comm.scatter(np.ones(size * 100, np.float32), out=np.empty(100, np.float32), root=0)
else:
    comm.gather(np.ones(100, np.float32), root=0)
# No collective follows (its receives would name the stray message): give the last sends a
# moment to arrive, as the rest of a training script would.
time.sleep(0.3)
comm.shutdown()
report({"rank": rank})
