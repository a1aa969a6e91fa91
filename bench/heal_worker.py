"""A rank of bench/heal.py: DDP on the ringcomm backend that heals, or a replacement joining it.

argv: mode victim kill_step steps log_dir params
  heal      train an MLP; the victim kills itself at kill_step; the survivors shrink the default
            group and wait at the end of the next step for a replacement (grow_group), which
            bench/heal.py starts on the victim's host; it joins and gets the state
            (broadcast_state), and everyone trains on to `steps`
  transfer  no training: a newcomer joins at once, and the members send it the model and the
            optimizer's state, to time that transfer across the link
params: the model's size, "1.3M" (bench/recovery.py's MLP) or "100M" (eight 3584x3584 layers).
Every process started with RINGCOMM_JOIN=1 is a replacement. Log lines (log_dir/heal.txt):
"start|imported|calling|joined|received <wall time> [bytes]" from the replacement, "killed <t>"
from the victim, "<rank> <step> <t>" for every completed step, "grown <rank> <t>" and
"synced <rank> <t> <bytes>" from the members.
"""

import time

started = time.time()  # the replacement's first line of user code

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import ringcomm.c10d  # noqa: E402

imported = time.time()
mode, victim, kill_step, steps, log_dir, params = sys.argv[1:7]
victim, kill_step, steps, log_dir = int(victim), int(kill_step), int(steps), Path(log_dir)
torch.set_num_threads(1)
joining = ringcomm.c10d.joining()


def log(line: str) -> None:
    with open(log_dir / "heal.txt", "a") as f:
        f.write(line + "\n")


def new_module() -> torch.nn.Module:
    torch.manual_seed(0)
    if params == "100M":
        return torch.nn.Sequential(*[torch.nn.Linear(3584, 3584) for _ in range(8)])
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 10),
    )  # fmt: skip


def state_bytes(module, optimizer) -> int:
    tensors = list(module.state_dict().values())
    tensors += [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def one_step(module, optimizer) -> None:
    inputs = module[0].in_features
    loss = module(torch.randn(16, inputs)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


module = new_module()
optimizer = torch.optim.SGD(module.parameters(), lr=0.001, momentum=0.9)
step = 0
if joining:
    log(f"start {started}")
    log(f"imported {imported}")
    log(f"calling {time.time()}")
    ringcomm.c10d.join_process_group()
    log(f"joined {time.time()}")
    if mode == "transfer":
        step = ringcomm.c10d.broadcast_state(module, optimizer, step)
        log(f"received {time.time()} {state_bytes(module, optimizer)}")
else:
    dist.init_process_group("ringcomm")
if mode == "transfer":
    if not joining:
        one_step(module, optimizer)  # momentum to send
        ringcomm.c10d.grow_group(expect=1, timeout=120)
        log(f"grown {dist.get_rank()} {time.time()}")
        step = ringcomm.c10d.broadcast_state(module, optimizer, step)
        log(f"synced {dist.get_rank()} {time.time()} {state_bytes(module, optimizer)}")
    dist.destroy_process_group()
    sys.exit(0)

rank = dist.get_rank()
model, replacements, synced = None, 0, False
while step < steps:
    if not joining and rank == victim and step == kill_step:
        log(f"killed {time.time()}")
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        if model is None:  # at the start, after a shrink or a grow: rank 0's state
            step = ringcomm.c10d.broadcast_state(module, optimizer, step)
            if joining and not synced:
                log(f"received {time.time()} {state_bytes(module, optimizer)}")
                synced = True
            model = DistributedDataParallel(module)
        inputs = torch.randn(32, 256)
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        log(f"{dist.get_rank()} {step} {time.time()}")
        if replacements:
            log(f"growing {dist.get_rank()} {time.time()}")
        if ringcomm.c10d.grow_group(expect=replacements, timeout=120):
            log(f"grown {dist.get_rank()} {time.time()}")
            replacements = 0
            model = None
    except RuntimeError:
        lost = ringcomm.c10d.lost_ranks()
        dist.shrink_group(lost)
        replacements += len(lost)
        model = None
dist.destroy_process_group()
