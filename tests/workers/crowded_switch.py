"""Crowded ranks switch large all-reduces between the single copy and the staged path as other
processes' use of the cores comes and goes (src/common/cpu_share.h), call by call, and every
result stays exact and the same on every rank.

Every rank runs on one core, so 5 ranks are more than 4 a core. Rank 0 says how much of the cores
other processes use through the file RINGCOMM_SHM_CMA_OTHERS_CORES_FILE names, in place of the
measurement: a core's worth for a phase of all-reduces, then none for another. A busy process
would not do: on a machine that is busy already, the cores never look free again. The test reads
which paths were taken from rank 0's log (RINGCOMM_DEBUG=INFO).

argv: seconds per phase (more than the measurement's window, half a second)
"""

import os
import sys
import time
from pathlib import Path

# Before numpy and ringcomm size anything by the cores they may use.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init(timeout=60)
rank, size = comm.rank, comm.size
seconds = float(sys.argv[1])
standing_in = Path(os.environ["RINGCOMM_SHM_CMA_OTHERS_CORES_FILE"])
failures = Failures()
count = (1 << 20) // 4 + 3  # above the test's single-copy threshold, split unevenly
expected = (np.arange(count) % 7) * size + size * (size - 1) // 2
digests = []


def run_for(phase: str, others_cores: float, seconds: float) -> int:
    """All-reduces with the cores' use by others set to `others_cores`, until one began at least
    `seconds` after the phase did (a broadcast flag: every rank runs as many). That call comes a
    whole window after any earlier reading, so it reads the phase's value however slow calls are."""
    if rank == 0:  # whole, never half written: the rank that reads it may be another
        standing_in.with_suffix(".new").write_text(f"{others_cores}\n")
        standing_in.with_suffix(".new").replace(standing_in)
    began, calls = time.monotonic(), 0
    while True:
        started = time.monotonic()
        x = (np.arange(count) % 7 + rank).astype(np.float32)
        comm.allreduce(x)
        failures.check(f"{phase} call {calls}", np.array_equal(x, expected))
        digests.append(float(x[::4099].sum()))
        calls += 1
        stop = np.array([rank == 0 and started - began >= seconds], dtype=np.uint8)
        comm.broadcast(stop, root=0)
        if stop[0]:
            return calls


with_busy = run_for("busy", 1.0, seconds)
quiet = run_for("quiet", 0.0, seconds)
report({"rank": rank, "failures": failures, "calls": [with_busy, quiet], "digests": digests})
comm.shutdown()
