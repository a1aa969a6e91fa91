"""Backends dropped while their work runs: the teardown must not hang.

Each cycle makes a backend as torch does (with the creator ringcomm.c10d registers, which
dist.new_group calls), starts two all-reduces on it and drops Python's reference to the backend,
its last, while they run. Python still holds the first all-reduce's Work, its tensor and a Future
chained on it with a Python callback; nothing but its Work holds the second one's tensor. The
backend's destructor shuts the communicator down, which lets queued work finish and joins the
engine's threads, and those need the GIL to run the callback and to free the second tensor. Then
the first all-reduce must have its result.

Arguments: cycles, and the seconds after which a rank still running prints where it is and exits.
"""

import faulthandler
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

from ringcomm.c10d import _create_backend  # noqa: E402

CYCLES, HANG_REPORT_AFTER = int(sys.argv[1]), float(sys.argv[2])
faulthandler.dump_traceback_later(HANG_REPORT_AFTER, exit=True)
use_harness_rendezvous()
dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()
failures = Failures()
want = float(sum(range(1, size + 1)))

for cycle in range(CYCLES):
    prefix = dist.PrefixStore(f"teardown/{cycle}/", store)
    backend = _create_backend(prefix, rank, size, timedelta(seconds=60))
    only_its_work_holds_me = torch.ones(1 << 12)
    backend.allreduce([only_its_work_holds_me])
    del only_its_work_holds_me
    x = torch.full((1 << 10,), float(rank + 1))
    work = backend.allreduce([x])
    chained = work.get_future().then(lambda done: float(done.value()[0][0]))
    del backend  # the last reference: the destructor shuts the communicator down
    work.wait()
    failures.check(f"{cycle}/result", torch.equal(x, torch.full_like(x, want)), x[:4])
    failures.check(f"{cycle}/callback", chained.wait() == want, chained.wait())

faulthandler.cancel_dump_traceback_later()
report({"rank": rank, "failures": failures[:20]})
dist.destroy_process_group()
