"""ringcomm.torch used the way Horovod scripts use horovod.torch; every check reports a failure."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402
import ringcomm.torch as hvd  # noqa: E402
from ringcomm.torch import requests, state  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
failures = Failures()
check, case = failures.check, failures.case


def allreduce_forms():
    x = torch.arange(10, dtype=torch.float32) + rank
    mean = torch.arange(10, dtype=torch.float32) + (size - 1) / 2
    check("allreduce/average", torch.allclose(hvd.allreduce(x), mean))
    check("allreduce/input untouched", torch.equal(x, torch.arange(10, dtype=torch.float32) + rank))
    total = hvd.allreduce(x, op=hvd.Sum)
    check("allreduce/sum", torch.equal(total, torch.arange(10.0) * size + size * (size - 1) / 2))
    check("allreduce/average=False", torch.equal(hvd.allreduce(x, average=False), total))
    y = x.clone()
    check(
        "allreduce_/in place",
        hvd.allreduce_(y, op=hvd.Max) is y and torch.equal(y, torch.arange(10.0) + size - 1),
    )
    ints = torch.full((5,), rank + 1, dtype=torch.int64)
    check(
        "allreduce/int product",
        torch.equal(
            hvd.allreduce(ints, op=hvd.Product),
            torch.full((5,), float(torch.arange(1, size + 1).prod()), dtype=torch.float64).long(),
        ),
    )
    scaled = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    check("allreduce/prescale", torch.allclose(scaled, total))
    for compression in (hvd.Compression.int8, hvd.Compression.fp8):
        z = hvd.allreduce(x, op=hvd.Sum, compression=compression)
        check(f"allreduce/{compression}", torch.allclose(z, total, rtol=0.1, atol=0.1), z)
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
        z = hvd.allreduce(x, op=hvd.Sum, compression=compression)
        check(f"allreduce/{compression}", torch.allclose(z, total, rtol=1e-2), z)
        z64 = hvd.allreduce(x.double(), op=hvd.Sum, compression=compression)
        check(
            f"allreduce/{compression}/float64",
            z64.dtype == torch.float64 and torch.allclose(z64, total.double(), rtol=1e-2),
        )


def cast_compression():
    # The path CUDA tensors take with a built-in 16-bit compressor (cast, reduce the 16-bit
    # tensor, cast back, scaling on the wide side), driven here with CPU tensors.
    from ringcomm.torch.collectives import allreduce as allreduce_module

    takes_codec = allreduce_module._casts_for_codec
    allreduce_module._casts_for_codec = lambda tensor: True
    reduces = requests.allreduce
    reduced_types = set()

    def spy(tensor, *args):
        reduced_types.add(tensor.dtype)
        return reduces(tensor, *args)

    requests.allreduce = spy
    try:
        x = torch.arange(10, dtype=torch.float32) + rank
        total = torch.arange(10.0) * size + size * (size - 1) / 2
        for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
            z = hvd.allreduce(x, op=hvd.Sum, compression=compression)
            check(f"cast/{compression}", z.dtype == torch.float32 and torch.equal(z, total), z)
            check(f"cast/{compression}/input untouched", torch.equal(x, torch.arange(10.0) + rank))
            scaled = hvd.allreduce(
                x.double(), op=hvd.Sum, compression=compression, prescale_factor=2.0,
                postscale_factor=0.25,
            )  # fmt: skip
            check(
                f"cast/{compression}/scaled float64",
                scaled.dtype == torch.float64 and torch.equal(scaled, total.double() / 2),
                scaled,
            )
            y = x.clone()
            got = hvd.allreduce_(y, op=hvd.Average, compression=compression)
            mean = torch.arange(10.0) + (size - 1) / 2
            check(f"cast/{compression}/in place", got is y and torch.equal(y, mean), y)
        # The 16-bit tensors themselves were reduced (not the codec's float32 ones).
        check("cast/reduced types", reduced_types == {torch.float16, torch.bfloat16}, reduced_types)
    finally:
        allreduce_module._casts_for_codec = takes_codec
        requests.allreduce = reduces


def async_forms():
    big = torch.ones(4 << 20)  # 16 MiB: long enough to be seen in flight
    handle = hvd.allreduce_async(big, op=hvd.Sum)
    seen_pending = not hvd.poll(handle)
    result = hvd.synchronize(handle)
    check("allreduce_async", torch.equal(result, torch.full_like(big, size)))
    failures.extend([] if seen_pending or size == 1 else [])  # recorded below, not a failure
    async_forms.seen_pending = seen_pending
    tensors = [torch.full((n,), float(rank)) for n in (1, 7, 1000)]
    grouped = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    check(
        "grouped_allreduce",
        all(
            torch.equal(g, torch.full_like(t, size * (size - 1) / 2))
            for g, t in zip(grouped, tensors)
        ),
    )
    hvd.grouped_allreduce_(tensors, op=hvd.Max)
    check("grouped_allreduce_", all(torch.equal(t, torch.full_like(t, size - 1)) for t in tensors))
    # As in Horovod: a handle already synchronized gives None; poll() refuses it.
    check("synchronize twice", hvd.synchronize(handle) is None)
    try:
        hvd.poll(handle)
        check("poll after synchronize", False, "no error")
    except ValueError as error:
        check("poll after synchronize/message", "was not created or has been cleared" in str(error))


def autograd():
    w = torch.ones(3, requires_grad=True)
    (hvd.allreduce(w * (rank + 1), op=hvd.Sum) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    # d/dw of sum_i c_i * allreduce(w * (r+1))_i: the all-reduce of the incoming gradient, scaled.
    expected = torch.tensor([1.0, 2.0, 3.0]) * size * (rank + 1)
    check("autograd", torch.allclose(w.grad, expected), w.grad)


def gathers():
    rows = rank + 1  # a different first dimension on every rank
    x = torch.full((rows, 2), float(rank))
    gathered = hvd.allgather(x)
    expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)])
    check("allgather/uneven", torch.equal(gathered, expected), gathered.shape)
    check("allgather/even", torch.equal(hvd.allgather(torch.tensor([rank])), torch.arange(size)))
    check(
        "allgather_object",
        hvd.allgather_object({"rank": rank}) == [{"rank": r} for r in range(size)],
    )
    check(
        "broadcast_object",
        hvd.broadcast_object({"from": rank} if rank == 1 % size else None, root_rank=1 % size)
        == {"from": 1 % size},
    )


def broadcasts():
    x = torch.full((6,), float(rank))
    check("broadcast", torch.equal(hvd.broadcast(x, root_rank=0), torch.zeros(6)))
    check("broadcast/input untouched", torch.equal(x, torch.full((6,), float(rank))))
    hvd.broadcast_(x, root_rank=size - 1)
    check("broadcast_", torch.equal(x, torch.full((6,), float(size - 1))))
    model = torch.nn.Linear(4, 2)
    torch.nn.init.constant_(model.weight, float(rank))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    check("broadcast_parameters", torch.equal(model.weight, torch.zeros(2, 4)))


def alltoalls():
    x = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    out = hvd.alltoall(x)
    expected = torch.cat(
        [torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r for r in range(size)]
    )
    check("alltoall/equal", torch.equal(out, expected), out)
    splits = [peer + 1 for peer in range(size)]  # rank r sends peer+1 rows to each peer
    rows = torch.full((sum(splits), 3), float(rank))
    output, received = hvd.alltoall(rows, splits=splits)
    check("alltoall/splits received", received.tolist() == [rank + 1] * size, received)
    check(
        "alltoall/splits data",
        torch.equal(output, torch.cat([torch.full((rank + 1, 3), float(r)) for r in range(size)])),
    )


def reductions():
    x = torch.ones(size * 2 + 1, 2) * (rank + 1)  # rows do not divide by size
    part = hvd.reducescatter(x, op=hvd.Sum)
    base, extra = divmod(size * 2 + 1, size)
    rows = base + (1 if rank < extra else 0)
    check(
        "reducescatter/uneven",
        part.shape == (rows, 2) and torch.all(part == size * (size + 1) / 2).item(),
        part,
    )
    even = hvd.reducescatter(torch.ones(size * 3) * (rank + 1))
    check("reducescatter/average", torch.allclose(even, torch.full((3,), (size + 1) / 2)))
    hvd.barrier()


def negotiated_order():
    # Every rank submits the same names in its own order; they pair up by name.
    names = [f"negotiated.{i}" for i in range(12)]
    order = names if rank % 2 == 0 else names[::-1]
    tensors = {n: torch.full((10 + i,), float(rank + i)) for i, n in enumerate(names)}
    started = {n: hvd.allreduce_async(tensors[n], name=n, op=hvd.Sum) for n in order}
    for i, n in enumerate(names):
        expected = torch.full((10 + i,), float(size * i + size * (size - 1) / 2))
        check(f"negotiated/{n}", torch.equal(hvd.synchronize(started[n]), expected))
    # Announced in one cycle on every rank (still in opposite orders), they are ready in the same
    # cycle, and travel in one fused all-reduce.
    before = state.queue().stats().fused_tensors
    batch = [
        requests.allreduce(tensors[n], None, hvd.Sum, None, 1.0, 1.0, f"batch.{n}") for n in order
    ]
    for work in requests.submit(state.queue(), batch, tuple(tensors.values())):
        work.wait()
    for i, n in enumerate(names):
        expected = torch.full((10 + i,), float(size * i + size * (size - 1) / 2))
        check(f"fused/{n}", torch.equal(tensors[n], expected), tensors[n])
    fused = state.queue().stats().fused_tensors - before
    check("fused/count", fused == len(names), fused)


def mismatched_names():
    if size == 1:
        return
    try:
        hvd.allreduce(torch.zeros(3 + rank), name="mismatched")
        check("mismatch", False, "no error")
    except ringcomm.MismatchError as error:
        text = str(error)
        check("mismatch/message", "'mismatched'" in text and "rank 0" in text and "rank 1" in text)
        check("mismatch/shapes", "[3]" in text and "[4]" in text, text)
    after = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.mismatch")
    check("mismatch/queue goes on", torch.equal(after, torch.full((2,), float(size))))


def duplicate_names():
    twice = [requests.allreduce(torch.ones(2), None, hvd.Sum, None, 1.0, 1.0, "pair")] * 2
    try:
        requests.submit(state.queue(), twice, ())
        check("duplicate in one batch", False, "no error")
    except ValueError as error:
        check("duplicate in one batch/message", "appears twice" in str(error), error)
    if size == 1:
        return  # one rank runs a request at once: it is never in flight
    # Rank 0 submits "twice" before the others do: they wait in "twice.go", which rank 0 joins
    # only after its duplicate, so "twice" is certainly still in flight there (requests pair up
    # by name, not by order).
    if rank == 0:
        handle = hvd.allreduce_async(torch.ones(3), name="twice")
        try:
            hvd.allreduce_async(torch.ones(3), name="twice")
            check("duplicate name", False, "no error")
        except ValueError as error:
            check("duplicate name/message", "already in flight" in str(error), error)
        hvd.allreduce(torch.ones(1), name="twice.go")
    else:
        hvd.allreduce(torch.ones(1), name="twice.go")
        handle = hvd.allreduce_async(torch.ones(3), name="twice")
    hvd.synchronize(handle)


def asynchronous_allgather():
    handle = hvd.allgather_async(torch.full((rank + 1, 2), float(rank)), name="gather.async")
    gathered = hvd.synchronize(handle)
    expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)])
    check("allgather_async", torch.equal(gathered, expected), gathered)


def general_join():
    # Rank 0 goes on alone; the others have joined and contribute zeros, as in Horovod (the
    # 'contributors' policy is tested in horovod_parity.py).
    if rank == 0:
        average = hvd.allreduce(torch.full((4,), 3.0), name="joined.average")
        check("join/average over every rank", torch.equal(average, torch.full((4,), 3.0 / size)))
        total = hvd.allreduce(torch.full((4,), 3), op=hvd.Sum, name="joined.sum")
        check("join/int sum", torch.equal(total, torch.full((4,), 3)), total)
        low = hvd.allreduce(torch.full((4,), -5.0), op=hvd.Max, name="joined.max")
        expected = -5.0 if size == 1 else 0.0  # the joined ranks' zeros count
        check("join/max", torch.equal(low, torch.full((4,), expected)), low)
    last = hvd.join()
    check("join/last", last == 0, last)
    together = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.join")
    check("join/after", torch.equal(together, torch.full((2,), float(size))))


DTYPES = [
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]


def every_dtype():
    # Small integers: exact in every dtype, so every op's result is known bit for bit.
    base = torch.arange(7) % 3
    every = torch.stack([base + r for r in range(size)]).double()
    expected = {
        hvd.Sum: every.sum(0),
        hvd.Min: every.min(0).values,
        hvd.Max: every.max(0).values,
        hvd.Product: every.prod(0),
    }
    for dtype in DTYPES:
        x = (base + rank).to(dtype)
        for op, reference in expected.items():
            got = hvd.allreduce(x, op=op)
            check(f"allreduce/{dtype}/{op}", torch.equal(got, reference.to(dtype)), got)
        got = hvd.allreduce(x, op=hvd.Average)
        mean = every.mean(0) if dtype.is_floating_point else every.sum(0).div(size).trunc()
        check(f"allreduce/{dtype}/average", torch.equal(got, mean.to(dtype)), got)
        gathered = hvd.allgather(x.reshape(7, 1)[: rank + 1])
        reference = torch.cat([(base + r).to(dtype).reshape(7, 1)[: r + 1] for r in range(size)])
        check(f"allgather/{dtype}", torch.equal(gathered, reference), gathered)
        sent = hvd.broadcast(x, root_rank=size - 1)
        check(f"broadcast/{dtype}", torch.equal(sent, (base + size - 1).to(dtype)), sent)


def bools():
    # Logical, as torch.distributed's gloo: Sum and Max are or, Product and Min and. Horovod's own
    # torch API takes no bools; Average (the default op) is refused.
    flags = torch.arange(7) % (size + 1) == rank
    everyone = torch.stack([torch.arange(7) % (size + 1) == r for r in range(size)])
    for op, want in (
        (hvd.Sum, everyone.any(0)),
        (hvd.Max, everyone.any(0)),
        (hvd.Product, (~everyone).all(0)),
        (hvd.Min, (~everyone).all(0)),
    ):
        got = hvd.allreduce(flags if op in (hvd.Sum, hvd.Max) else ~flags, op=op)
        check(f"allreduce/bool/{op}", got.dtype == torch.bool and torch.equal(got, want), got)
    try:
        hvd.allreduce(flags)
        check("allreduce/bool/average", False, "no error")
    except ValueError as error:
        check("allreduce/bool/average", "avg is not defined for bool" in str(error), error)
    gathered = hvd.allgather(flags.reshape(7, 1)[: rank + 1])
    reference = torch.cat([everyone[r].reshape(7, 1)[: r + 1] for r in range(size)])
    check("allgather/bool", torch.equal(gathered, reference), gathered)
    sent = hvd.broadcast(flags, root_rank=size - 1)
    check("broadcast/bool", torch.equal(sent, everyone[size - 1]), sent)


for name, body in [
    ("dtypes", every_dtype),
    ("bools", bools),
    ("negotiated", negotiated_order),
    ("mismatch", mismatched_names),
    ("duplicate", duplicate_names),
    ("allgather_async", asynchronous_allgather),
    ("join", general_join),
    ("allreduce", allreduce_forms),
    ("cast compression", cast_compression),
    ("async", async_forms),
    ("autograd", autograd),
    ("gathers", gathers),
    ("broadcasts", broadcasts),
    ("alltoall", alltoalls),
    ("reductions", reductions),
]:
    case(name, body)
report(
    {
        "rank": rank,
        "failures": failures,
        "seen_pending": getattr(async_forms, "seen_pending", None),
        "identity": [
            hvd.size(),
            hvd.local_size(),
            hvd.cross_size(),
            hvd.cross_rank(),
            hvd.is_initialized(),
        ],
    }
)
hvd.shutdown()
