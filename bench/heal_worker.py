"""A rank of bench/heal.py: DDP on the ringcomm backend that heals, or a replacement joining it.

argv: mode victim kill_step steps log_dir params [survivors]
  heal      train an MLP; the victim kills itself at kill_step; the survivors shrink the default
            group and, after their next step, wait for a replacement (grow_group(expect=1)),
            which bench/heal.py starts on the victim's host; it joins and gets the state
            (broadcast_state), and everyone trains on to `steps`. survivors "train": they do not
            wait, but train on and admit the replacement at the end of the step it knocks in
            (grow_group()), going past `steps` until it is in
  transfer  no training: a newcomer joins at once, and the members send it the model and the
            optimizer's state, to time that transfer across the link
params: the model's size, "1.3M" (bench/heal_model.py's MLP, bench/recovery.py's) or "100M"
(eight 3584x3584 layers).
Every process started with RINGCOMM_JOIN=1 is a replacement ("new"; a member is "r<its first
rank>"). Log lines (log_dir/heal.txt), "<event> <who> <wall time> [...]":
  start, imported, calling, joined    the replacement: its first line of user code, its imports
                                      done, its join_process_group() called and returned
  received <bytes>                    the replacement holds the state (the bytes of it)
  killed                              the victim, just before its SIGKILL
  failed, agreed, shrunk              a survivor: a collective raised, lost_ranks() agreed,
                                      shrink_group() returned
  grown, state, ddp                   grow_group() grew, broadcast_state() returned, DDP built
  step <step> <size>                  a step completed on a group of <size> ranks
  digest <step> <size> <digest>       then the parameters' and the optimizer's state's digest
                                      (heal_model.py), logged apart to leave hashing untimed
  synced <bytes>                      a member's broadcast of the state done (transfer)
"""

import time

started = time.time()  # the replacement's first line of user code

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from heal_model import digest, mlp, sgd  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import ringcomm.c10d  # noqa: E402

imported = time.time()
mode, victim, kill_step, steps, log_dir, params = sys.argv[1:7]
survivors_wait = sys.argv[7:8] != ["train"]
victim, kill_step, steps, log_dir = int(victim), int(kill_step), int(steps), Path(log_dir)
torch.set_num_threads(1)
joining = ringcomm.c10d.joining()
who = "new" if joining else f"r{os.environ['RANK']}"


def log(event: str, *fields, at: float = 0.0) -> None:
    with open(log_dir / "heal.txt", "a") as f:
        f.write(" ".join([event, who, repr(at or time.time()), *map(str, fields)]) + "\n")


def new_module() -> torch.nn.Module:
    if params == "100M":
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(3584, 3584) for _ in range(8)])
    return mlp()


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
optimizer = sgd(module)
step = 0
if joining:
    log("start", at=started)
    log("imported", at=imported)
    log("calling")
    ringcomm.c10d.join_process_group()
    log("joined")
    if mode == "transfer":
        step = ringcomm.c10d.broadcast_state(module, optimizer, step)
        log("received", state_bytes(module, optimizer))
else:
    dist.init_process_group("ringcomm")
if mode == "transfer":
    if not joining:
        one_step(module, optimizer)  # momentum to send
        ringcomm.c10d.grow_group(expect=1, timeout=120)
        log("grown")
        step = ringcomm.c10d.broadcast_state(module, optimizer, step)
        log("synced", state_bytes(module, optimizer))
    dist.destroy_process_group()
    sys.exit(0)

first_rank = dist.get_rank()  # the victim's is its rank at the start, not after a shrink
model, replacements, synced = None, 0, False
while step < steps or replacements:
    if not joining and first_rank == victim and step == kill_step:
        log("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        if model is None:  # at the start, after a shrink or a grow: rank 0's state
            step, steps = ringcomm.c10d.broadcast_state(module, optimizer, (step, steps))
            log("state")
            if joining and not synced:
                log("received", state_bytes(module, optimizer))
                synced = True
            model = DistributedDataParallel(module, init_sync=False)  # in sync already
            log("ddp")
        inputs = torch.randn(32, 256)
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        log("step", step, dist.get_world_size())
        log("digest", step, dist.get_world_size(), digest(module, optimizer))
        expect = replacements if survivors_wait else 0
        if ringcomm.c10d.grow_group(expect=expect, timeout=120):
            log("grown")
            steps = max(steps, step + 3)  # a few at full size, where the survivors trained on
            replacements = 0
            model = None
    except RuntimeError:
        log("failed")
        lost = ringcomm.c10d.lost_ranks()
        log("agreed")
        dist.shrink_group(lost)
        log("shrunk")
        replacements += len(lost)
        model = None
dist.destroy_process_group()
