"""A DDP training rank for bench/recovery.py: trains a small MLP, one victim kills itself, and the
job recovers one of two ways.

    inplace   (under ringcomm-run --keep-survivors) the survivors shrink the default group
              (ringcomm.c10d.lost_ranks + dist.shrink_group), wrap the model again and go on;
    restart   (under torchrun --max-restarts 1) every step is checkpointed by rank 0; torchrun
              starts a new group of processes, which load the checkpoint and go on.

argv: mode backend victim kill_step steps log_dir
Every rank appends "<attempt> <rank> <step> <wall time>" to log_dir/steps.txt for each completed
step; the victim writes "killed <wall time>" before it kills itself (first attempt only). Victim
-1: nobody kills itself; bench/recovery.py cuts a host's link while the ranks train, and the ranks
that lost their quorum write "stopped <rank> <wall time> <why>" and exit.
A rank that shrank writes "recovered <rank> <wall time>" at its next completed step.
"""

import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

mode, backend, victim, kill_step, steps, log_dir = sys.argv[1:7]
victim, kill_step, steps, log_dir = int(victim), int(kill_step), int(steps), Path(log_dir)
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if backend == "ringcomm":
    import ringcomm.c10d  # registers the backend

torch.set_num_threads(1)
dist.init_process_group(backend)
rank = dist.get_rank()
torch.manual_seed(0)
module = torch.nn.Sequential(
    torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10),
)  # fmt: skip
optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
checkpoint = log_dir / "checkpoint.pt"
step = 0
shrunk = False
if mode == "restart" and checkpoint.exists():
    state = torch.load(checkpoint)
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = state["step"]
model = DistributedDataParallel(module)
generator = torch.Generator().manual_seed(rank)


def log(line: str) -> None:
    with open(log_dir / "steps.txt", "a") as f:
        f.write(line + "\n")


while step < steps:
    if rank == victim and step == kill_step and attempt == 0:
        log(f"killed {time.time()}")
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        loss = model(torch.randn(64, 256, generator=generator)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    except RuntimeError:
        if mode != "inplace":
            raise
        try:
            dist.shrink_group(ringcomm.c10d.lost_ranks())
        except RuntimeError as error:  # the minority of a partition: it must not go on
            log(f"stopped {rank} {time.time()} {str(error).splitlines()[0][:200]}")
            sys.exit(3)
        model = DistributedDataParallel(module)
        shrunk = True
        continue
    step += 1
    log(f"{attempt} {rank} {step} {time.time()}")
    if shrunk:
        log(f"recovered {rank} {time.time()}")
        shrunk = False
    if mode == "restart" and dist.get_rank() == 0:  # written whole, then renamed
        state = {"model": module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state, log_dir / "checkpoint.tmp")
        os.replace(log_dir / "checkpoint.tmp", checkpoint)
dist.destroy_process_group()
