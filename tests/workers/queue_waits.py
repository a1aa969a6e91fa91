"""A caller waiting for a request keeps the queue's cycles coming (tensor_queue.h): with a cycle
time of RINGCOMM_CYCLE_TIME (long, set by the test), synchronous all-reduces still take about as
long as the slowest rank takes to submit, not a cycle each. Rank 1 submits late every time, so
rank 0 waits first, and its queue's cycle that finds rank 1 with nothing moves nothing.

argv: rounds, how late rank 1 submits (seconds)"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402

rounds, late = int(sys.argv[1]), float(sys.argv[2])
hvd.init()
hvd.allreduce(torch.ones(4), name="warm")  # the queue and its links set up
took = []
for i in range(rounds):
    hvd.barrier()
    started = time.monotonic()
    if hvd.rank() == 1:
        time.sleep(late)
    total = hvd.allreduce(torch.full((1000,), float(hvd.rank())), op=hvd.Sum, name=f"round.{i}")
    took.append(time.monotonic() - started)
    assert total[0].item() == sum(range(hvd.size())), total[0].item()
report({"rank": hvd.rank(), "took": took})
hvd.shutdown()
