"""A rank of a "ringcomm" process group dies: the others must raise, naming it, not hang."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
TIMEOUT = 10
dist.init_process_group("ringcomm", timeout=timedelta(seconds=TIMEOUT))
rank = dist.get_rank()
x = torch.ones(1 << 16)
dist.all_reduce(x)
if rank == 1:
    os._exit(3)
start = time.monotonic()
error = ""
try:
    for _ in range(100):
        dist.all_reduce(x)
except Exception as caught:  # noqa: BLE001 - the test reads whatever torch raised
    error = f"{type(caught).__name__}: {caught}"
report({"rank": rank, "error": error, "elapsed": time.monotonic() - start, "timeout": TIMEOUT})
dist.destroy_process_group()
