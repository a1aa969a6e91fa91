"""Under torchrun with restarts (tests/test_elastic.py): the first attempt's rank 1 dies after
the collectives, torchrun's agent restarts the worker group, and the second attempt must meet
afresh through both init_process_group("ringcomm") and ringcomm.torch."""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("ringcomm")
rank, size = dist.get_rank(), dist.get_world_size()
total = torch.full((3,), float(rank + 1))
dist.all_reduce(total)
hvd.init()
summed = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
if attempt == 0 and rank == 1:
    os._exit(1)  # the agent restarts every worker
if attempt == 0:
    dist.barrier()  # fails, or is ended by the agent: rank 1 is gone
report(
    {
        "rank": rank,
        "size": size,
        "attempt": attempt,
        "backend": total.tolist(),
        "hvd": [hvd.rank(), hvd.size(), summed.item()],
    }
)
hvd.shutdown()
dist.destroy_process_group()
