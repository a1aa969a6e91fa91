"""A task of a simulated `srun -n N python train.py` whose script only calls
init_process_group("ringcomm"): RANK, WORLD_SIZE and MASTER_* come from Slurm's variables."""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

dist.init_process_group("ringcomm")
x = torch.full((1000,), float(dist.get_rank() + 1))
dist.all_reduce(x)
size = dist.get_world_size()
report(
    {
        "rank": dist.get_rank(),
        "size": size,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "ok": bool(torch.all(x == size * (size + 1) / 2)),
    }
)
dist.destroy_process_group()
