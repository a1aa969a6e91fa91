"""One rank of the DDP benchmark (ringcomm/bench/ddp.py), on one torch.distributed backend.

    MASTER_ADDR=127.0.0.1 MASTER_PORT=... RANK=r WORLD_SIZE=p \
        python -m ringcomm.bench.ddp_worker --backend gloo --out R

Three measurements on the same ranks, so under the same CPU contention:
    step     a DDP training step: forward, backward (DDP all-reduces its gradient buckets as they
             fill), optimizer step
    compute  the same step on a local replica of the model without DDP: no communication
    comm     all-reduce of buffers of DDP's bucket sizes, taken from DDP's reducer once it has
             rebuilt its buckets, launched one after another without waiting (as the reducer
             does) and then waited for; no compute
The phases alternate step by step, so that a change of background load (the machine is
shared) hits all three alike, and every timed step starts after a barrier, on all ranks at once.
A step's time is its slowest rank's; each measurement is the median over its steps.

Barriers, the gathering of times and the final parameter checksum go through a gloo group of
their own: they do not depend on the backend under test, and check it independently.

``--device cuda``: the model, data and buckets on GPU local_rank % count (all ranks on one GPU
where there is one), and each timed step waits for the GPU to finish it.
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import hashlib
import json
import os
import statistics
import time
import traceback
from datetime import timedelta
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

_INPUT_FEATURES = 1024
_CLASSES = 10
_MODEL_SEED = 0  # the same initial model on every rank (DDP also broadcasts rank 0's)
_DATA_SEED = 1000  # + rank: each rank trains on its own batch, as in data-parallel training
# DDP puts every parameter in one bucket at first, and rebuilds its buckets, in the order the
# gradients became ready, at the start of the second step: warm up at least this many steps
# before reading the bucket sizes or timing.
_REBUILD_STEPS = 2


def make_model(hidden: int, layers: int) -> torch.nn.Sequential:
    """An MLP: ``layers`` hidden layers of width ``hidden`` (default 4 x 1024: 4.2M parameters,
    16.8 MB of float32 gradients)."""
    widths = [_INPUT_FEATURES] + [hidden] * layers
    modules: list[torch.nn.Module] = []
    for fan_in, fan_out in zip(widths, widths[1:]):
        modules += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    modules.append(torch.nn.Linear(widths[-1], _CLASSES))
    return torch.nn.Sequential(*modules)


def _register(backend: str) -> Optional[str]:
    """Makes ``backend`` known to torch.distributed; the reason it cannot be, or None.

    torch knows gloo; ringcomm registers its backend when imported. Importing only for the
    backends torch does not know keeps gloo runs independent of ringcomm's build."""
    if backend.lower() in dist.Backend.backend_list:
        return None
    try:
        import ringcomm  # noqa: F401  (registers the "ringcomm" torch.distributed backend)
    except ImportError as error:
        return f"backend {backend!r}: cannot import ringcomm ({error})"
    if backend.lower() not in dist.Backend.backend_list:
        return (
            f"backend {backend!r} is not registered with torch.distributed "
            f"(import ringcomm did not register it)"
        )
    return None


def _training_step(model, optimizer, inputs, labels) -> Callable[[], None]:
    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

    return step


def _optimizer(model) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


class _Control:
    """The ranks' side channel (a gloo group): barriers and gathers outside the backend."""

    def __init__(self):
        self.group = dist.new_group(backend="gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's ``values``, stacked: shape (ranks, *values.shape)."""
        every = [torch.empty_like(values) for _ in range(self.size)]
        dist.all_gather(every, values, group=self.group)
        return torch.stack(every)


def _slowest_per_step(control: _Control, seconds: list[float]) -> list[float]:
    """Milliseconds of each step on its slowest rank."""
    every = control.gather(torch.tensor(seconds, dtype=torch.float64))
    return (every.max(dim=0).values * 1e3).tolist()


def _mean_per_step(control: _Control, seconds: list[float]) -> list[float]:
    """Milliseconds of each step, averaged over the ranks."""
    every = control.gather(torch.tensor(seconds, dtype=torch.float64))
    return (every.mean(dim=0) * 1e3).tolist()


def _checksum(module: torch.nn.Module) -> int:
    """A hash of the parameters' bytes: equal on two ranks only if every bit is."""
    digest = hashlib.blake2b(digest_size=8)
    for parameter in module.parameters():
        digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
    return int.from_bytes(digest.digest(), "little", signed=True)


def _device(name: str) -> torch.device:
    if name == "cpu":
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def _finished(device: torch.device) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """A phase that returns once its work is done: on a GPU, once the GPU has run it."""

    def wrap(phase: Callable[[], None]) -> Callable[[], None]:
        if device.type != "cuda":
            return phase

        def run() -> None:
            phase()
            torch.cuda.synchronize(device)

        return run

    return wrap


def _run(args) -> Optional[dict]:
    rank, size = dist.get_rank(), dist.get_world_size()
    control = _Control()
    device = _device(args.device)

    torch.manual_seed(_MODEL_SEED)
    model = make_model(args.hidden, args.layers).to(device)
    replica = copy.deepcopy(model)  # compute-only: the same model, never communicating
    # Only an explicit --bucket-cap-mb is passed: DDP's default differs from passing 25 (torch
    # 2.13 caps its first bucket at 1 MiB only when bucket_cap_mb is left out).
    caps = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
    device_ids = [device] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=device_ids, **caps)

    data = torch.Generator().manual_seed(_DATA_SEED + rank)
    inputs = torch.randn(args.batch_size, _INPUT_FEATURES, generator=data).to(device)
    labels = torch.randint(0, _CLASSES, (args.batch_size,), generator=data).to(device)
    finished = _finished(device)
    train = finished(_training_step(ddp, _optimizer(ddp), inputs, labels))
    compute = finished(_training_step(replica, _optimizer(replica), inputs, labels))

    for _ in range(max(args.warmup, _REBUILD_STEPS)):
        train()
    buckets = [b.buffer().clone() for b in ddp.reducer._get_zeros_like_grad_buckets()]

    def fill() -> None:  # untimed: inputs whose sum is exact, checked after the last comm step
        for bucket in buckets:
            bucket.fill_(rank + 1)

    @finished
    def communicate() -> None:
        works = [dist.all_reduce(bucket, async_op=True) for bucket in buckets]
        for work in works:
            work.wait()

    for _ in range(args.warmup):
        compute()
        fill()
        communicate()

    # One step of each phase in turn, each after a barrier (and, for comm, refilled inputs), so
    # that the three see the same background load and each starts on every rank at once.
    phases = {"step": train, "compute": compute, "comm": communicate}
    # Besides wall time, each step's CPU time (all of the process's threads): it does not count
    # time spent waiting for a core, so unlike wall time it hardly moves with background load,
    # and in compute-only steps it shows a backend whose threads burn CPU while idle.
    seconds: dict[str, list[float]] = {name: [] for name in phases}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in phases}
    for _ in range(args.steps):
        for name, run in phases.items():
            if name == "comm":
                fill()
            control.barrier()
            cpu_started, started = time.process_time(), time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - started)
            cpu_seconds[name].append(time.process_time() - cpu_started)

    expected = size * (size + 1) // 2
    wrong = sum(int((bucket != expected).sum()) for bucket in buckets)
    wrong = int(control.gather(torch.tensor([wrong], dtype=torch.int64)).sum())
    checksums = control.gather(torch.tensor([_checksum(ddp.module)], dtype=torch.int64))
    checksums = checksums.flatten().tolist()
    per_step = {name: _slowest_per_step(control, times) for name, times in seconds.items()}
    cpu_per_step = {name: _mean_per_step(control, times) for name, times in cpu_seconds.items()}
    control.barrier()
    if rank != 0:
        return None
    parameters = sum(p.numel() for p in model.parameters())
    return {
        "backend": args.backend,
        "ranks": size,
        "model": f"MLP {_INPUT_FEATURES}-{'-'.join([str(args.hidden)] * args.layers)}-{_CLASSES}",
        "parameters": parameters,
        "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "bucket_bytes": [b.numel() * b.element_size() for b in buckets],
        "batch_size": args.batch_size,
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "threads_per_rank": torch.get_num_threads(),
        "timed_steps": args.steps,
        **{f"{name}_ms": statistics.median(times) for name, times in per_step.items()},
        "per_step_ms": per_step,
        "cpu_ms": {name: statistics.median(times) for name, times in cpu_per_step.items()},
        "allreduce_wrong": wrong,
        "checksums": checksums,
        "parameters_identical": len(set(checksums)) == 1,
    }


def _write(path: str, document: dict) -> None:
    with open(path, "w") as f:
        json.dump(document, f)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--bucket-cap-mb", type=float, default=None, help="default: DDP's")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each phase")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--op-timeout", type=float, default=120.0, help="seconds per collective")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole run")
    parser.add_argument("--out", required=True, help="where rank 0 writes its report")
    args = parser.parse_args(argv)
    # No rank may hang the benchmark: past the deadline, print the stacks and exit.
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    # Ranks share the cores: one compute thread each, as many ranks as cores or more.
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    problem = _register(args.backend)
    if problem is not None:  # expected until the backend exists: a message, no traceback
        _write(f"{args.out}.rank{rank}.error", {"rank": rank, "error": problem})
        return 2
    try:
        dist.init_process_group(args.backend, timeout=timedelta(seconds=args.op_timeout))
        try:
            report = _run(args)
        finally:
            dist.destroy_process_group()
    except Exception as error:
        # Each rank says what failed on it; the parent shows the lowest rank's message.
        _write(f"{args.out}.rank{rank}.error", {"rank": rank, "error": f"{error}"})
        traceback.print_exc()
        return 1
    if report is not None:
        _write(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
