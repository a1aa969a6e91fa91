"""init_process_group("ringcomm") on a host with a tuning file (RINGCOMM_TUNING_DIR): what "auto"
runs at 8 B and 1 MiB in the default group and in a subgroup of two, and that an all-reduce is
right."""

import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
    pair = dist.new_group([0, 1])
rank, size = dist.get_rank(), dist.get_world_size()
x = torch.full((300_000,), rank + 1.0)
dist.all_reduce(x)


def chosen(group):
    backend = group._get_backend(torch.device("cpu"))
    return [backend.choose_allreduce_algorithm(8), backend.choose_allreduce_algorithm(1 << 20)]


report(
    {
        "rank": rank,
        "chosen": chosen(dist.group.WORLD),
        "pair_chosen": chosen(pair) if rank < 2 else None,
        "warnings": [str(w.message) for w in caught],
        "ok": bool(torch.all(x == size * (size + 1) / 2)),
    }
)
dist.destroy_process_group()
