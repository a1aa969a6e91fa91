"""DDP on backend "ringcomm": each rank trains on its slice of a batch; the result must match one
process training on the whole batch, and every rank must hold the same bits. Then the same with
each of DDP's built-in comm hooks and a user hook.
"""

import io
import os
import sys
import traceback
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
torch.set_num_threads(1)
dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
failures = []
STEPS, PER_RANK = 6, 8


def check(name, condition, detail=""):
    if not condition:
        failures.append(f"{name}: {detail}")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(20, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 10),
    ).double()


def batches():
    """The same batch every step: the loss must fall as the model fits it."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(PER_RANK * size, 20, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 10, (PER_RANK * size,), generator=generator)
    for _ in range(STEPS):
        yield x, y


def train(net, slice_of_batch):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
    losses = []
    for x, y in batches():
        x, y = slice_of_batch(x, y)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def parameters(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def same_on_every_rank(vector):
    digest = torch.tensor([zlib.crc32(vector.numpy().tobytes())], dtype=torch.int64)
    everyone = [torch.empty(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(everyone, digest)
    return all(torch.equal(e, everyone[0]) for e in everyone)


reference = model()
train(reference, lambda x, y: (x, y))
expected = parameters(reference)
mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)


def bf16_compress(state, bucket):
    """torch's bf16_compress_hook. DDP refuses that function by name unless torch was built with
    CUDA and NCCL; the hook itself is a plain bf16 all-reduce, which this backend handles."""
    return default_hooks.bf16_compress_hook(state, bucket)


HOOKS = {
    "none": (None, None, 1e-10),
    "user": ("user", None, 1e-10),
    "fp16": (default_hooks.fp16_compress_hook, None, 5e-3),
    "bf16": (bf16_compress, None, 5e-2),
    "powersgd": (powerSGD_hook.powerSGD_hook, "powersgd", None),
}


def user_hook(state, bucket):
    """What a user writes: all-reduce the bucket, then divide in a chained callback."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda f: f.value()[0].div_(size))


for name, (hook, state_kind, tolerance) in HOOKS.items():
    try:
        # Several buckets, so all-reduces overlap backward; PowerSGD gets one: its callbacks
        # start collectives of their own, and with several buckets in flight the order in which
        # those and later buckets' all-reduces are queued differs between ranks (on any CPU
        # backend: gloo numbers its collectives in call order too).
        net = DistributedDataParallel(model(), bucket_cap_mb=None if name == "powersgd" else 0.01)
        if hook == "user":
            net.register_comm_hook(None, user_hook)
        elif state_kind == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2
            )
            net.register_comm_hook(state, hook)
        elif hook is not None:
            net.register_comm_hook(None, hook)
        losses = train(net, lambda x, y: (x[mine], y[mine]))
        got = parameters(net.module)
        check(f"{name}/identical on every rank", same_on_every_rank(got))
        if tolerance is not None:
            error = (got - expected).abs().max().item()
            check(f"{name}/matches one process", error <= tolerance, f"max error {error:.3g}")
        check(f"{name}/loss went down", losses[-1] < losses[0], str(losses))
    except Exception:
        failures.append(f"{name}: raised\n{traceback.format_exc()}")

# ringcomm's own hooks (ringcomm/c10d/hooks.py): its codecs on the wire, float32 gradients,
# error feedback for the 8-bit ones; tolerances against one process in float32.
from ringcomm.c10d import hooks as ringcomm_hooks  # noqa: E402

reference32 = model().float()
train(reference32, lambda x, y: (x.float(), y))
expected32 = parameters(reference32)
for codec, tolerance in (("fp16", 5e-3), ("int8", 5e-2), ("fp8", 2e-1)):
    try:
        net = DistributedDataParallel(model().float(), bucket_cap_mb=0.01)
        state = ringcomm_hooks.CompressionState(codec=codec)
        net.register_comm_hook(state, ringcomm_hooks.compress_hook)
        losses = train(net, lambda x, y: (x[mine].float(), y[mine]))
        got = parameters(net.module)
        check(f"ringcomm {codec}/identical on every rank", same_on_every_rank(got))
        error = (got - expected32).abs().max().item()
        check(f"ringcomm {codec}/matches one process", error <= tolerance, f"max error {error:.3g}")
        check(f"ringcomm {codec}/loss went down", losses[-1] < losses[0], str(losses))
        fed_back = codec in ("int8", "fp8")
        check(f"ringcomm {codec}/residuals kept", bool(state.residuals) == fed_back)
        # The residuals survive a checkpoint (torch.save pickles the state, as PowerSGD's).
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        restored = torch.load(buffer, weights_only=False)
        check(
            f"ringcomm {codec}/state round trip",
            restored.codec == codec
            and restored.residuals.keys() == state.residuals.keys()
            and all(torch.equal(restored.residuals[k], v) for k, v in state.residuals.items()),
        )
    except Exception:
        failures.append(f"ringcomm {codec}: raised\n{traceback.format_exc()}")
try:
    ringcomm_hooks.CompressionState(codec="int4")
    failures.append("an unknown codec was taken")
except ValueError as error:
    check("unknown codec named", "int4" in str(error) and "fp8" in str(error), str(error))

report({"failures": failures})
dist.destroy_process_group()
