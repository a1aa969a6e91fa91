"""Started by mpirun with no torch variables set: init_process_group("ringcomm") must still work."""

import json
import os

import torch
import torch.distributed as dist

assert "MASTER_ADDR" not in os.environ and "RANK" not in os.environ
dist.init_process_group("ringcomm")
rank, size = dist.get_rank(), dist.get_world_size()
x = torch.full((5,), float(rank))
dist.all_reduce(x)
ok = torch.equal(x, torch.full((5,), float(sum(range(size)))))
print("RESULT " + json.dumps({"rank": rank, "size": size, "ok": bool(ok)}), flush=True)
dist.destroy_process_group()
