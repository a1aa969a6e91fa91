"""A rank of a job that strangers attack (tests/test_attacks.py): all-reduces and broadcasts whose
results are checked exactly, reporting any wrong result or error.

argv: iterations.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

iterations = int(sys.argv[1])
# A late rank keeps the others in setup, their ports open to the attacker, for that long.
time.sleep(float(os.environ.get("TEST_DELAY_INIT", "0")))
comm = ringcomm.init()
rank, size = comm.rank, comm.size
wrong, error = 0, None
try:
    for i in range(iterations):
        x = np.full(1 << 14, float(rank + 1 + i), np.float32)
        comm.allreduce(x)
        wrong += int(np.count_nonzero(x != size * (i + 1) + size * (size - 1) / 2))
        y = np.full(257, float(i) if rank == 0 else -1.0, np.float64)
        comm.broadcast(y, root=0)
        wrong += int(np.count_nonzero(y != i))
        time.sleep(0.005)  # spread the job over the attack
except Exception as caught:  # noqa: BLE001 - the report says what it was
    error = f"{type(caught).__name__}: {caught}"
comm.shutdown()
report({"rank": rank, "wrong": wrong, "error": error})
