"""DDP on the ringcomm backend that survives a killed rank: torch.distributed.shrink_group.

argv: victims [steps]
The first victim kills itself (SIGKILL) at step 3. Every survivor catches the failure, asks which
ranks are gone (ringcomm.c10d.lost_ranks), shrinks the default group (dist.shrink_group), wraps
the model in DDP again on it and trains on: the loop of docs/guides/recovery.md. A second victim
dies in the worst moment of that recovery (issue 48): right after lost_ranks() named the first,
before shrink_group(), so that the group torch forms lacks a rank it did not exclude; its first
collective (DDP's broadcast of the parameters) fails, and the loop shrinks again. Reports the
time from the failure to the next completed step, each shrink, the group after, and a hash of the
parameters (every survivor must hold the same).
"""

import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

import ringcomm  # noqa: E402,F401 (registers the backend)
import ringcomm.c10d  # noqa: E402

victims = [int(v) for v in sys.argv[1].split(",")]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
torch.manual_seed(0)
torch.set_num_threads(1)
use_harness_rendezvous()
dist.init_process_group("ringcomm")
rank = dist.get_rank()
module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
model = None
optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(rank)
outcome = {"rank": rank}
failed_at = None
step = 0
while step < steps:
    if rank == victims[0] and step == 3:
        print(f"KILLED_AT {time.time()}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        if model is None:
            # On the (shrunk) default group: rank 0's parameters, optimizer state and step, so
            # that every survivor starts again from the same ones (a failure can strike after
            # one survivor's step completed and before another's).
            step = ringcomm.c10d.broadcast_state(module, optimizer, step)
            model = DistributedDataParallel(module, init_sync=False)  # in sync already
        data = torch.randn(32, 64, generator=generator)
        loss = model(data).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if failed_at is not None and "recovered_in" not in outcome:
            outcome["recovered_in"] = time.monotonic() - failed_at
            outcome["recovered_at"] = time.time()  # wall clock, against the victim's KILLED_AT
    except RuntimeError as error:
        failed_at = time.monotonic()
        outcome["error"] = str(error).splitlines()[0][:300]
        lost = ringcomm.c10d.lost_ranks()
        if rank in victims[1:] and not outcome.get("shrinks"):
            os.kill(os.getpid(), signal.SIGKILL)  # between lost_ranks() and shrink_group()
        dist.shrink_group(lost)
        outcome.setdefault("shrinks", []).append(lost)
        outcome["shrunk_in"] = time.monotonic() - failed_at
        model = None
digest = hashlib.sha256()
for parameter in module.parameters():
    digest.update(parameter.detach().numpy().tobytes())
outcome.update(
    rank_after=dist.get_rank(), size_after=dist.get_world_size(), params=digest.hexdigest()
)
dist.destroy_process_group()
report(outcome)
