"""A few all-reduces of each size class, then shutdown; argv[1] = "die" makes the last rank leave
without shutting down (its part of RINGCOMM_TRACE never comes)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init()
for count in (2, 1000, 300_000):
    x = np.ones(count, dtype=np.float32)
    comm.allreduce(x)
comm.barrier()
if len(sys.argv) > 1 and sys.argv[1] == "die" and comm.rank == comm.size - 1:
    report({"died": True})
    os._exit(0)
comm.shutdown()
report({"died": False})
