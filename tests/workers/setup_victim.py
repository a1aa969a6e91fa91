"""Rank argv[1] kills itself (SIGKILL, nothing cleaned up) argv[2] seconds after it starts, at
some point of the job's setup; the others report how they learned of it.

argv: victim rank, seconds until the kill.
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

victim, delay = int(sys.argv[1]), float(sys.argv[2])
rank = int(os.environ["RINGCOMM_RANK"])
if rank == victim:
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()

import numpy as np  # noqa: E402

import ringcomm  # noqa: E402

started = time.monotonic()
result = {"rank": rank, "error": None, "message": "", "waited": 0.0}
try:
    comm = ringcomm.init()
    for _ in range(200):  # long enough for the kill to land inside or after setup
        comm.allreduce(np.ones(1 << 16, np.float32))
    comm.shutdown()
except Exception as error:  # noqa: BLE001 - the report says what it was
    result.update(error=type(error).__name__, message=str(error))
result["waited"] = time.monotonic() - started
report(result)
