"""init_process_group("ringcomm") and ringcomm.torch on a host with tuning files
(RINGCOMM_TUNING_DIR): what "auto" runs at 8 B and 1 MiB in the default group, in a subgroup of
two, in ringcomm.torch's job and in its process set of two; and that an all-reduce is right."""

import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402
from ringcomm.torch import process_sets, state  # noqa: E402

SIZES = (8, 1 << 20)

use_harness_rendezvous()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
    pair = dist.new_group([0, 1])
    pair_set = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[pair_set])
rank, size = dist.get_rank(), dist.get_world_size()
x = torch.full((300_000,), rank + 1.0)
dist.all_reduce(x)


def chosen(group):
    backend = group._get_backend(torch.device("cpu"))
    return [backend.choose_allreduce_algorithm(n) for n in SIZES]


def chosen_in(comm):
    return [comm.choose_algorithm(n) for n in SIZES]


member = process_sets._registered(pair_set.process_set_id).member
report(
    {
        "rank": rank,
        "chosen": chosen(dist.group.WORLD),
        "pair_chosen": chosen(pair) if rank < 2 else None,
        "hvd_chosen": chosen_in(state._comm),
        "hvd_pair_chosen": chosen_in(member.comm) if member is not None else None,
        "warnings": [str(w.message) for w in caught],
        "ok": bool(torch.all(x == size * (size + 1) / 2)),
    }
)
hvd.shutdown()
dist.destroy_process_group()
