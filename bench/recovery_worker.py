"""A training rank for bench/recovery.py: trains a small MLP, one victim kills itself, and the
job recovers one of three ways.

    inplace ringcomm  (no launcher that ends the job: ringcomm-run --keep-survivors, or ranks
                      started on their own) DDP; the survivors shrink the default group
                      (ringcomm.c10d.lost_ranks + dist.shrink_group), wrap the model again, go on;
    inplace horovod   the same job through the Horovod API: hvd.DistributedOptimizer under
                      hvd.elastic.run, committing every step; the survivors restore the last
                      commit, shrink the communicator in place and go on;
    restart <backend> (under torchrun --max-restarts 1) DDP, every step checkpointed by rank 0;
                      torchrun starts a new group of processes, which load the checkpoint.

argv: mode backend victim kill_step steps log_dir
Every rank appends "<attempt> <rank> <step> <wall time>" to log_dir/steps.txt for each completed
step; the victim writes "killed <wall time>" before it kills itself (first attempt only). Victim
-1: nobody kills itself; bench/recovery.py cuts a host's link while the ranks train, and the ranks
that lost their quorum write "stopped <rank> <wall time> <why>" and exit. A rank that shrank
writes "recovered <rank> <wall time>" at its next completed step.
"""

import os
import signal
import sys
import time
from pathlib import Path

import torch

mode, backend, victim, kill_step, steps, log_dir = sys.argv[1:7]
victim, kill_step, steps, log_dir = int(victim), int(kill_step), int(steps), Path(log_dir)
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.set_num_threads(1)


def new_module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 10),
    )  # fmt: skip


def log(line: str) -> None:
    with open(log_dir / "steps.txt", "a") as f:
        f.write(line + "\n")


def die_if_victim(rank: int, step: int) -> None:
    if rank == victim and step == kill_step and attempt == 0:
        log(f"killed {time.time()}")
        os.kill(os.getpid(), signal.SIGKILL)


def train_ddp() -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if backend == "ringcomm":
        import ringcomm.c10d  # registers the backend

    dist.init_process_group(backend)
    rank = dist.get_rank()
    module = new_module()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    checkpoint = log_dir / "checkpoint.pt"
    step = 0
    if mode == "restart" and checkpoint.exists():
        state = torch.load(checkpoint)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    model = DistributedDataParallel(module)
    generator = torch.Generator().manual_seed(rank)
    shrunk = False
    while step < steps:
        die_if_victim(rank, step)
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
            state = {
                "model": module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step,
            }
            torch.save(state, log_dir / "checkpoint.tmp")
            os.replace(log_dir / "checkpoint.tmp", checkpoint)
    dist.destroy_process_group()


def train_horovod() -> None:
    import ringcomm.torch as hvd

    hvd.init()
    rank = hvd.rank()  # the first numbering: what the log names
    module = new_module()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(module.parameters(), lr=0.01), named_parameters=module.named_parameters()
    )
    state = hvd.elastic.TorchState(module, optimizer, step=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    generator = torch.Generator().manual_seed(rank)

    @hvd.elastic.run
    def train(state):
        while state.step < steps:
            die_if_victim(rank, state.step)
            optimizer.zero_grad()
            module(torch.randn(64, 256, generator=generator)).square().mean().backward()
            optimizer.step()
            state.step += 1
            log(f"{attempt} {rank} {state.step} {time.time()}")
            if resets:
                log(f"recovered {rank} {time.time()}")
                resets.clear()
            state.commit()

    train(state)
    hvd.shutdown()


if backend == "horovod":
    train_horovod()
else:
    train_ddp()
