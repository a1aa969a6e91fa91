"""A name one rank never submits: the other rank is warned after the stall time, then every rank
fails at the timeout, naming the rank that never submitted it - and goes on: the failure was
that request's alone."""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402
import ringcomm.torch as hvd  # noqa: E402

hvd.init()
rank = hvd.rank()
errors = []
horovod_kind = False
# The rank's CPU time while the request waits out its timeout: every rank waits and nothing
# moves, so the queue's cycles keep their pace (a waiting caller does not make them spin).
cpu_started = time.process_time()
try:
    if rank == 0:
        hvd.allreduce(torch.ones(3), name="only.on.rank.0")
    else:
        hvd.allreduce(torch.ones(3), name="only.on.rank.1")
except ringcomm.RingcommError as error:
    errors.append(f"{type(error).__name__}: {error}")
    horovod_kind = isinstance(error, hvd.HorovodInternalError)
stalled_cpu = time.process_time() - cpu_started
after = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.timeout")
report(
    {
        "rank": rank,
        "errors": errors,
        "horovod_kind": horovod_kind,
        "after": after.tolist(),
        "stalled_cpu": stalled_cpu,
    }
)
hvd.shutdown()
