"""A program that exits without destroying its ringcomm group while a Work with a Python
callback on its Future may still be finishing (issue 49): the process must exit with status 0,
not be terminated. Arguments: how many all-reduces to leave in flight."""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

import ringcomm.c10d  # noqa: E402,F401 (registers the backend)

use_harness_rendezvous()
dist.init_process_group("ringcomm")
seen = []
for _ in range(int(sys.argv[1])):
    work = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    work.get_future().then(lambda future: seen.append(future.value()))
print("RESULT {}", flush=True)
# No destroy_process_group(), no wait: the interpreter exits with the Works in flight.
