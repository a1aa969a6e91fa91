"""A communicator met through a store written in Python, dropped while the thread that records
its failure in that store still runs: the last reference must not hold the GIL that thread needs
(bindings/calls.h, heldByPython). Rank 1 leaves; rank 0's all-reduce fails, which starts the
recording thread, whose store call sleeps, and rank 0 drops the communicator at once.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402
from ringcomm import _core  # noqa: E402

RECORD_DELAY_S = 2.0  # the failure record's set waits this long (the GIL released meanwhile):
# longer than the chain of reasons is followed (1 s), so the thread still runs at the drop

first = ringcomm.init()
rank, size = first.rank, first.size
inner = first._environment.store


class SlowRecordStore(_core.Store):
    def __init__(self) -> None:
        super().__init__()

    def set(self, key, value):
        if "abort" in key:
            time.sleep(RECORD_DELAY_S)
        inner.set(key, value)

    def get(self, key, timeout):
        return inner.get(key, timeout)

    def add(self, key, delta):
        return inner.add(key, delta)


store = SlowRecordStore()
comm = ringcomm.Communicator(
    _core.Communicator.create(store, rank, size, first._core.config), first._environment
)
error = None
if rank == 1:
    comm.shutdown()
else:
    try:
        comm.allreduce(np.ones(16, np.float32))
    except ringcomm.PeerError as failed:
        error = type(failed).__name__
started = time.monotonic()
del comm  # the last reference: its destructor joins the recording thread
dropped_s = time.monotonic() - started
first.barrier()
report({"rank": rank, "error": error, "dropped_s": dropped_s})
first.shutdown()
