"""Crowded ranks switch large all-reduces between the single copy and the staged path as another
process comes and goes (src/common/cpu_share.h), call by call, and every result stays exact and
the same on every rank.

Every rank runs on one core, so 5 ranks are more than 4 a core. Rank 0 starts a busy process on
that core, in a session of its own as other people's programs run, for a few seconds of
all-reduces, then stops it and goes on as long again. The test reads which paths were taken from
rank 0's log (RINGCOMM_DEBUG=INFO).

argv: seconds per phase
"""

import os
import subprocess
import sys
import time

# Before numpy and ringcomm size anything by the cores they may use.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init(timeout=60)
rank, size = comm.rank, comm.size
seconds = float(sys.argv[1])
failures = Failures()
count = (1 << 20) // 4 + 3  # above the test's single-copy threshold, split unevenly
expected = (np.arange(count) % 7) * size + size * (size - 1) // 2
digests = []


def run_for(phase: str, seconds: float) -> int:
    """All-reduces until rank 0's clock says stop (a broadcast flag: every rank runs as many)."""
    end, calls = time.monotonic() + seconds, 0
    while True:
        x = (np.arange(count) % 7 + rank).astype(np.float32)
        comm.allreduce(x)
        failures.check(f"{phase} call {calls}", np.array_equal(x, expected))
        digests.append(float(x[::4099].sum()))
        calls += 1
        stop = np.array([rank == 0 and time.monotonic() >= end], dtype=np.uint8)
        comm.broadcast(stop, root=0)
        if stop[0]:
            return calls


busy = None
if rank == 0:
    busy = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
try:
    with_busy = run_for("busy", seconds)
finally:
    if busy is not None:
        busy.kill()
        busy.wait()
quiet = run_for("quiet", seconds)
report({"rank": rank, "failures": failures, "calls": [with_busy, quiet], "digests": digests})
comm.shutdown()
