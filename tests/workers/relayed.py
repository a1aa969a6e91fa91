"""A rank of tests/test_multihost.py's relay test: 2 ranks on two hosts, rank 1's connections
through tests/workers/relay.py. Rank 1 broadcasts 4 MiB of ones, then every rank all-reduces
4 MiB of ones; reports whether each result was exact, or the error that ended the job."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init(timeout=20.0)
outcome = {"rank": comm.rank, "error": None, "message": "", "exact": []}
try:
    for _ in range(3):
        x = np.ones(1 << 20, np.float32)
        comm.broadcast(x, root=1)
        outcome["exact"].append(bool(np.all(x == 1.0)))
        y = np.ones(1 << 20, np.float32)
        comm.allreduce(y)
        outcome["exact"].append(bool(np.all(y == comm.size)))
except ringcomm.RingcommError as error:
    outcome["error"] = type(error).__name__
    outcome["message"] = str(error)
report(outcome)
