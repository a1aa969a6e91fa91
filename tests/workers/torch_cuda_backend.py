"""torch.distributed on backend "ringcomm" with CUDA tensors, every rank on GPU 0: the core's
device path under torch's current stream, and DDP on a CUDA model. Results are checked against
values each rank computes alone, and DDP's parameters must be bitwise equal on every rank.
"""

import hashlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
torch.cuda.set_device(0)
dist.init_process_group("ringcomm", timeout=timedelta(seconds=120))
rank, size = dist.get_rank(), dist.get_world_size()
DEVICE = torch.device("cuda", 0)
failures = Failures()
check, case = failures.check, failures.case
digests = {}


def collectives():
    for count in (0, 1, 1009, 3_000_017):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int16):
            x = torch.full((count,), float(rank + 1), dtype=dtype, device=DEVICE)
            dist.all_reduce(x)
            expected = float(size * (size + 1) // 2)
            check(f"all_reduce/{dtype}/{count}", bool((x == expected).all()), str(x[:4]))
    # On a side stream: the collective must follow the kernel that wrote x, and precede y.
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.arange(1 << 20, dtype=torch.float32, device=DEVICE) * (rank + 1)
        dist.all_reduce(x)
        y = x * 2
    stream.synchronize()
    expected = torch.arange(1 << 20, dtype=torch.float32, device=DEVICE) * size * (size + 1)
    check("all_reduce/side-stream", bool(torch.equal(y, expected)))
    work = dist.all_reduce(torch.ones(4096, device=DEVICE), async_op=True)
    result = work.get_future().wait()[0]
    check("all_reduce/future", bool((result == size).all()))
    x = torch.full((1009,), float(rank), device=DEVICE)
    dist.broadcast(x, src=size - 1)
    check("broadcast", bool((x == size - 1).all()))
    out = torch.empty(size * 5, device=DEVICE)
    dist.all_gather_into_tensor(out, torch.full((5,), float(rank), device=DEVICE))
    expected = torch.arange(size, device=DEVICE, dtype=torch.float32).repeat_interleave(5)
    check("all_gather_into_tensor", bool(torch.equal(out, expected)))
    outs = [torch.empty(3, device=DEVICE) for _ in range(size)]
    dist.all_gather(outs, torch.full((3,), float(rank), device=DEVICE))
    check("all_gather", all(bool((o == r).all()) for r, o in enumerate(outs)))
    out = torch.empty(7, device=DEVICE)
    dist.reduce_scatter_tensor(out, torch.ones(7 * size, device=DEVICE))
    check("reduce_scatter_tensor", bool((out == size).all()))


def point_to_point():
    # What pipeline parallelism sends between stages: CUDA tensors, one each way around a ring,
    # as torch's batch_isend_irecv posts them; then a blocking send and receive, and a receive
    # from any source.
    right, left = (rank + 1) % size, (rank - 1) % size
    for count in (0, 1, 1009, 3_000_017):
        sent = torch.arange(count, dtype=torch.float32, device=DEVICE) + rank
        got = torch.empty(count, dtype=torch.float32, device=DEVICE)
        ops = [dist.P2POp(dist.isend, sent, right), dist.P2POp(dist.irecv, got, left)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        expected = torch.arange(count, dtype=torch.float32, device=DEVICE) + left
        check(f"batch_isend_irecv/{count}", bool(torch.equal(got, expected)))
    x = torch.full((4099,), float(rank), dtype=torch.bfloat16, device=DEVICE)
    if rank == 0:
        dist.send(x, dst=1)
    elif rank == 1:
        dist.recv(x, src=0)
        check("send/recv", bool((x == 0).all()))
    if rank == 1:
        dist.send(torch.full((17,), 5.0, device=DEVICE), dst=0)
    elif rank == 0:
        y = torch.empty(17, device=DEVICE)
        source = dist.recv(y)
        check("recv from any source", source == 1 and bool((y == 5).all()), str(source))


def ddp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).to(DEVICE)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(5):
        data = torch.randn(32, 64, generator=generator).to(DEVICE)
        target = torch.randint(0, 10, (32,), generator=generator).to(DEVICE)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(ddp_model(data), target).backward()
        optimizer.step()
    torch.cuda.synchronize()
    state = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    digests["ddp"] = hashlib.sha256(state).hexdigest()[:16]


case("collectives", collectives)
case("point to point", point_to_point)
case("ddp", ddp)
dist.destroy_process_group()
report({"failures": failures, "digests": digests})
