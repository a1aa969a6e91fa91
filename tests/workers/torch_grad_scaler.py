"""torch's GradScaler over DDP with ringcomm's 8-bit comm hook (int8, fp8; error feedback on): one
rank's gradient holds an infinity at one place at one step.

Every rank must see the all-reduced gradient non-finite there and only there, GradScaler must
skip that step on every rank (the parameters unchanged, the scale halved), and the steps after it
must go ahead: the error fed back keeps nothing non-finite from the skipped step.
"""

import math
import os
import sys
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

from ringcomm.c10d import hooks  # noqa: E402

use_harness_rendezvous()
torch.set_num_threads(1)
dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
failures = Failures()
STEPS, OVERFLOWING_STEP, SCALE = 4, 1, 2.0**10
WHERE = (3, 17)  # the weight that gets the infinity, on the last rank


def digest(net) -> int:
    return zlib.crc32(torch.cat([p.detach().flatten() for p in net.parameters()]).numpy().tobytes())


def same_on_every_rank(value: int) -> bool:
    values = [None] * size
    dist.all_gather_object(values, value)
    return all(v == values[0] for v in values)


def with_an_infinity(grad: torch.Tensor) -> torch.Tensor:
    grad = grad.clone()
    grad[WHERE] = float("inf")
    return grad


def train(codec: str) -> None:
    torch.manual_seed(0)
    net = DistributedDataParallel(torch.nn.Linear(40, 8))
    state = hooks.CompressionState(codec=codec)
    net.register_comm_hook(state, hooks.compress_hook)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    weight = net.module.weight
    for step in range(STEPS):
        handle = None
        if step == OVERFLOWING_STEP and rank == size - 1:
            # Before DDP's all-reduce sees the gradient (a tensor hook runs before accumulation).
            handle = weight.register_hook(with_an_infinity)
        optimizer.zero_grad()
        x = torch.randn(16, 40, generator=torch.Generator().manual_seed(100 * step + rank))
        scaler.scale(net(x).square().mean()).backward()
        if handle is not None:
            handle.remove()
        bad = (~torch.isfinite(weight.grad)).nonzero().tolist()
        expected = [list(WHERE)] if step == OVERFLOWING_STEP else []
        failures.check(f"{codec} step {step}: non-finite gradients", bad == expected, str(bad))
        if step == OVERFLOWING_STEP:
            # int8 keeps the infinity; fp8 (e4m3 has none) makes it NaN.
            value = weight.grad[WHERE].item()
            kept = value == float("inf") if codec == "int8" else math.isnan(value)
            failures.check(f"{codec} step {step}: the gradient's kind", kept, str(value))
        before = digest(net)
        scaler.step(optimizer)
        scaler.update()
        skipped = digest(net) == before
        expected_scale = SCALE / 2 if step >= OVERFLOWING_STEP else SCALE
        failures.check(
            f"{codec} step {step}: skipped", skipped == (step == OVERFLOWING_STEP), str(skipped)
        )
        failures.check(
            f"{codec} step {step}: scale", scaler.get_scale() == expected_scale, scaler.get_scale()
        )
        failures.check(f"{codec} step {step}: same on every rank", same_on_every_rank(digest(net)))


for codec in ("int8", "fp8"):
    failures.case(codec, lambda codec=codec: train(codec))
report({"failures": failures})
dist.destroy_process_group()
