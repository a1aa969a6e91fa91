"""Started by a real launcher (mpirun, torchrun, ringcomm-run): init() with only a timeout
(LAUNCHED_TIMEOUT seconds, 60 unless a test that expects a rank to be missing sets less)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init(timeout=float(os.environ.get("LAUNCHED_TIMEOUT", "60")))
x = np.full(100_003, comm.rank + 1, np.float64)
comm.allreduce(x)
expected = comm.size * (comm.size + 1) / 2
report(
    {
        "rank": comm.rank,
        "size": comm.size,
        "local_size": comm.local_size,
        "ok": bool(np.all(x == expected)),
    }
)
comm.shutdown()
