"""Debug log, trace and Horovod timeline: one job does a bit of everything they record.

Phases (the test reads the files they leave in argv[1]):
  before: named requests under HOROVOD_TIMELINE (set by the test), fused and not, every kind;
  mid:    start_timeline(mid.json, mark_cycles=True) replaces it; requests named "mid.*";
  after:  stop_timeline(); requests named "after.*" appear in no Horovod file;
and all along, plain all-reduces on the main communicator with each schedule.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402
from ringcomm import _log  # noqa: E402
from ringcomm.torch import state  # noqa: E402

folder = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
failures = Failures()
check = failures.check

_log.info("INIT", "observability worker started")  # the Python side, through the same logger


def requests(prefix):
    # Fused: a grouped all-reduce announced together; then one of each other kind.
    tensors = [torch.full((3, 4), float(rank + i)) for i in range(3)]
    results = hvd.grouped_allreduce(tensors, op=hvd.Sum, name=f"{prefix}.grads")
    check(f"{prefix}/grouped", torch.equal(results[0], torch.full((3, 4), float(sum(range(size))))))
    big = hvd.allreduce(torch.ones(1 << 16), op=hvd.Sum, name=f"{prefix}.big")
    check(f"{prefix}/big", torch.equal(big, torch.full((1 << 16,), float(size))))
    gathered = hvd.allgather(torch.full((2,), float(rank)), name=f"{prefix}.gather")
    check(f"{prefix}/allgather", gathered.shape == (2 * size,))
    hvd.broadcast(torch.ones(5), root_rank=0, name=f"{prefix}.bcast")
    hvd.reducescatter(torch.ones(size * 2, 3), op=hvd.Sum, name=f"{prefix}.rs")
    hvd.alltoall(torch.ones(size * 2), name=f"{prefix}.a2a")


def plain():
    comm = state.comm()
    for algorithm in ("auto", "ring", "tree"):
        x = np.ones(4096, dtype=np.float32)
        comm.allreduce(x, algorithm=algorithm)
        check(f"plain/{algorithm}", float(x[0]) == size, x[0])
    y = np.ones(1 << 18, dtype=np.float32)
    comm.allreduce(y, algorithm="ring", compression="fp16")


requests("before")
plain()
hvd.start_timeline(os.path.join(folder, "mid.json"), mark_cycles=True)
requests("mid")
hvd.stop_timeline()
requests("after")
hvd.shutdown()
report({"failures": failures})
