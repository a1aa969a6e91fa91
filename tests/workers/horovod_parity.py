"""horovod.torch 0.28.1's API beyond the basics, the way Horovod defines it: grouped and
asynchronous forms, gradients through every collective, sparse all-reduce, SyncBatchNorm,
compressor classes, errors and build information, 0-d tensors, join policies, and going on
after failures. Every check reports a failure; each case runs in this one launch."""

import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402
import ringcomm.torch as hvd  # noqa: E402
from ringcomm import _devices  # noqa: E402
from ringcomm.torch.compression import Compressor  # noqa: E402

evens_set = hvd.ProcessSet([r for r in range(int(os.environ["RINGCOMM_WORLD_SIZE"])) if r % 2 == 0])
hvd.init(process_sets=[evens_set] if int(os.environ["RINGCOMM_WORLD_SIZE"]) > 1 else [])
rank, size = hvd.rank(), hvd.size()
failures = Failures()
check, case = failures.check, failures.case


def raises(name, error_type, body, message=""):
    """Checks that body() raises error_type whose text holds ``message``; returns the error."""
    try:
        body()
    except error_type as error:
        check(f"{name}/message", message in str(error), str(error))
        return error
    except Exception as error:  # noqa: BLE001 (reported)
        check(name, False, f"raised {type(error).__name__}: {error}")
        return None
    check(name, False, f"no {error_type.__name__}")
    return None


def grouped_and_async_forms():
    mine = [torch.full((rank + 1, 2), float(rank)), torch.arange(3.0) + rank]
    gathered = hvd.grouped_allgather(mine, name="grouped.gather")
    check(
        "grouped_allgather/rows",
        torch.equal(gathered[0], torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]))
        and torch.equal(gathered[1], torch.cat([torch.arange(3.0) + r for r in range(size)])),
        gathered,
    )
    handle = hvd.grouped_allgather_async(mine)
    check("grouped_allgather_async", torch.equal(hvd.synchronize(handle)[0], gathered[0]))

    rows = 2 * size + 1
    x = torch.ones(rows, 3) * (rank + 1)
    first, count = (
        divmod(rows, size)[0] * rank + min(rank, rows % size),
        rows // size + (1 if rank < rows % size else 0),
    )
    total = size * (size + 1) / 2
    part = hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum))
    check("reducescatter_async", part.shape == (count, 3) and bool((part == total).all()), part)
    scaled = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    check("reducescatter/scaled", torch.allclose(scaled, torch.full((count, 3), total / 2)))
    parts = hvd.grouped_reducescatter([x, torch.ones(size * 2) * rank], op=hvd.Average)
    check(
        "grouped_reducescatter",
        torch.allclose(parts[0], torch.full((count, 3), total / size))
        and torch.allclose(parts[1], torch.full((2,), (size - 1) / 2)),
        parts,
    )
    parts = hvd.synchronize(hvd.grouped_reducescatter_async([x], op=hvd.Sum))
    check("grouped_reducescatter_async", torch.allclose(parts[0], torch.full((count, 3), total)))
    del first

    # alltoall: equal splits of each rank's own first dimension, which differs between ranks.
    mine = torch.arange(size * (rank + 1), dtype=torch.float32) + 100 * rank
    out = hvd.alltoall(mine)
    expected = torch.cat(
        [torch.arange(rank * (r + 1), (rank + 1) * (r + 1)) + 100.0 * r for r in range(size)]
    )
    check("alltoall/first dimensions differ", torch.equal(out, expected), out)
    output, received = hvd.synchronize(hvd.alltoall_async(mine))
    check("alltoall_async", torch.equal(output, expected) and received.dtype == torch.int32)
    check("alltoall_async/received", received.tolist() == [r + 1 for r in range(size)], received)
    # Splits may leave trailing rows unsent (their sum may be less than the first dimension).
    output, received = hvd.alltoall(torch.arange(size + 2.0), splits=[1] * size)
    check("alltoall/trailing rows", output.shape == (size,) and received.tolist() == [1] * size)


def gradients():
    ranks = torch.arange(size, dtype=torch.float32)
    # allgather: the averaged gradient, this rank's rows of it.
    x = torch.full((rank + 1, 2), 1.0, requires_grad=True)
    weights = torch.arange(size * (size + 1) // 2 * 2, dtype=torch.float32).reshape(-1, 2)
    (hvd.allgather(x) * weights * (rank + 1)).sum().backward()
    offset = rank * (rank + 1) // 2
    expected = weights[offset : offset + rank + 1] * (size + 1) / 2
    check("grad/allgather", torch.allclose(x.grad, expected), x.grad)

    # broadcast: the averaged gradient on the root, zeros elsewhere.
    x = torch.ones(3, requires_grad=True)
    (hvd.broadcast(x, root_rank=size - 1) * (rank + 1)).sum().backward()
    expected = torch.full((3,), (size + 1) / 2 if rank == size - 1 else 0.0)
    check("grad/broadcast", torch.allclose(x.grad, expected), x.grad)

    # alltoall: the gradient goes back where the rows came from.
    x = torch.zeros(2 * size, requires_grad=True)
    (hvd.alltoall(x) * (torch.arange(2.0 * size) + 100 * rank)).sum().backward()
    expected = torch.cat(
        [torch.tensor([2.0 * rank, 2.0 * rank + 1]) + 100 * k for k in range(size)]
    )
    check("grad/alltoall", torch.equal(x.grad, expected), x.grad)
    x = torch.zeros(sum(range(1, size + 1)), requires_grad=True)
    out, received = hvd.alltoall(x, splits=list(range(1, size + 1)))
    check("alltoall/splits received", received.tolist() == [rank + 1] * size, received)
    (out * (rank + 1)).sum().backward()
    expected = torch.cat([torch.full((k + 1,), float(k + 1)) for k in range(size)])
    check("grad/alltoall splits", torch.equal(x.grad, expected), x.grad)

    # reducescatter: the gradient all-gathered, times the size for Sum (Horovod's convention).
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        x = torch.zeros(size * 2, requires_grad=True)
        (hvd.reducescatter(x, op=op) * (rank + 1)).sum().backward()
        expected = (ranks + 1).repeat_interleave(2) * factor
        check(f"grad/reducescatter/{op}", torch.equal(x.grad, expected), x.grad)

    # grouped forms
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(rank + 1, requires_grad=True)
    gathered = hvd.grouped_allgather([a.unsqueeze(0), b])
    (gathered[0].sum() + gathered[1].sum() * 2).backward()
    check("grad/grouped_allgather", torch.equal(a.grad, torch.ones(2)), a.grad)
    check("grad/grouped_allgather/2", torch.equal(b.grad, torch.full((rank + 1,), 2.0)), b.grad)
    c = torch.zeros(size, requires_grad=True)
    (hvd.grouped_reducescatter([c], op=hvd.Sum)[0] * (rank + 1)).sum().backward()
    check("grad/grouped_reducescatter", torch.equal(c.grad, (ranks + 1) * size), c.grad)
    d = torch.ones(2, requires_grad=True)
    (hvd.grouped_allreduce([d * (rank + 1)], op=hvd.Sum)[0]).sum().backward()
    check("grad/grouped_allreduce", torch.equal(d.grad, torch.full((2,), float(size * (rank + 1)))))


def sparse():
    # Rank r holds 1 at (r, 0) and r + 1 at (0, 1): the reduction adds them up.
    indices = torch.tensor([[rank, 0], [0, 1]])
    values = torch.tensor([1.0, rank + 1.0])
    mine = torch.sparse_coo_tensor(indices, values, (size, 2))
    dense = torch.zeros(size, 2)
    dense[:, 0] = 1.0
    dense[0, 1] += size * (size + 1) / 2
    summed = hvd.sparse_allreduce_async(mine, name="sparse.sum", op=hvd.Sum)()
    check("sparse_allreduce/sum", summed.is_sparse and torch.equal(summed.to_dense(), dense))
    averaged = hvd.sparse_allreduce_async(mine, name=None, op=hvd.Average)()
    check("sparse_allreduce/average", torch.allclose(averaged.to_dense(), dense / size))


def sync_batch_norm():
    torch.manual_seed(3)
    full = torch.randn(4 * size, 3, 5, dtype=torch.float64)
    weight = torch.randn(4 * size, 3, 5, dtype=torch.float64)
    reference = torch.nn.BatchNorm1d(3).double()
    synced = hvd.SyncBatchNorm(3).double()
    with torch.no_grad():
        reference.weight.uniform_()
        synced.weight.copy_(reference.weight)
    expected_x = full.clone().requires_grad_()
    expected = reference(expected_x)
    (expected * weight).sum().backward()
    x = full[4 * rank : 4 * rank + 4].clone().requires_grad_()
    out = synced(x)
    (out * weight[4 * rank : 4 * rank + 4]).sum().backward()
    check(
        "SyncBatchNorm/output",
        torch.allclose(out, expected[4 * rank : 4 * rank + 4].detach(), atol=1e-9),
    )
    check(
        "SyncBatchNorm/input gradient",
        torch.allclose(x.grad, expected_x.grad[4 * rank : 4 * rank + 4], atol=1e-9),
        (x.grad - expected_x.grad[4 * rank : 4 * rank + 4]).abs().max(),
    )
    summed = hvd.allreduce(synced.weight.grad, op=hvd.Sum)
    check("SyncBatchNorm/weight gradient", torch.allclose(summed, reference.weight.grad))
    check(
        "SyncBatchNorm/running stats",
        torch.allclose(synced.running_mean, reference.running_mean)
        and torch.allclose(synced.running_var, reference.running_var),
    )
    synced.eval()
    reference.eval()
    check("SyncBatchNorm/eval", torch.allclose(synced(x).detach(), reference(x).detach()))
    raises("SyncBatchNorm/1-d input", ValueError, lambda: synced(torch.ones(3)), "2D input")


class Quartered(Compressor):
    """A compressor of the user's: float64 times four on the wire, back on the way out."""

    @staticmethod
    def compress(tensor):
        return tensor.double() * 4, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return (tensor / 4).to(ctx)


def compression():
    none, fp16 = hvd.Compression.none, hvd.Compression.fp16
    x = torch.arange(6.0)
    check("Compression.none/compress", none.compress(x)[0] is x and none.decompress(x, None) is x)
    compressed, ctx = fp16.compress(x)
    check("Compression.fp16/compress", compressed.dtype == torch.float16 and ctx == torch.float32)
    check("Compression.fp16/decompress", fp16.decompress(compressed, ctx).dtype == torch.float32)
    ints = torch.arange(3)
    check("Compression.fp16/ints untouched", fp16.compress(ints)[0].dtype == torch.int64)
    total = torch.arange(6.0) * size
    got = hvd.allreduce(x, op=hvd.Sum, compression=Quartered)
    check("custom compressor/allreduce", got.dtype == torch.float32 and torch.equal(got, total))
    got = hvd.grouped_allreduce([x, x + 1], op=hvd.Sum, compression=Quartered)
    check("custom compressor/grouped", torch.equal(got[1], total + size), got)
    got = hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, compression=Quartered))
    check("custom compressor/async", torch.equal(got, total), got)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, compression=Quartered)
    check("custom compressor/in place", torch.equal(y, total), y)
    got = hvd.reducescatter(torch.ones(size, 2), op=hvd.Sum, compression=Quartered)
    check("custom compressor/reducescatter", torch.equal(got, torch.full((1, 2), float(size))))
    got = hvd.allreduce(x, op=hvd.Sum, compression=fp16)
    check("fp16/allreduce", got.dtype == torch.float32 and torch.allclose(got, total))
    got = hvd.reducescatter(torch.ones(size, 2), op=hvd.Sum, compression=fp16)
    check("fp16/reducescatter", got.dtype == torch.float32 and bool((got == size).all()))


def errors_and_build_information():
    check("nccl_built", hvd.nccl_built() == 0)
    check("cuda_built", hvd.cuda_built() == _devices.built_with_cuda())
    for name in ("gloo_built", "gloo_enabled", "mpi_built", "mpi_enabled", "ddl_built"):
        check(name, getattr(hvd, name)() is False)
    check("ccl_built", hvd.ccl_built() is False and hvd.rocm_built() is False)
    raises("mpi_threads_supported", ValueError, hvd.mpi_threads_supported, "MPI is not enabled")
    check("is_initialized", hvd.is_initialized())
    check(
        "HorovodInternalError is a RuntimeError", issubclass(hvd.HorovodInternalError, RuntimeError)
    )

    # 0-d tensors where a dimension is needed: Horovod's errors, never IndexError.
    error = raises(
        "allgather/0-d", hvd.HorovodInternalError, lambda: hvd.allgather(torch.tensor(1.0))
    )
    check("allgather/0-d/text", error is not None and "rank-zero tensor" in str(error), error)
    raises(
        "reducescatter/0-d",
        ValueError,
        lambda: hvd.reducescatter(torch.tensor(1.0)),
        "Reducescatter does not support scalar inputs",
    )
    raises(
        "alltoall/0-d",
        hvd.HorovodInternalError,
        lambda: hvd.alltoall(torch.tensor(1.0)),
        "rank-zero tensor",
    )
    x = torch.ones(size * 2)
    if size > 1:
        raises(
            "alltoall/uneven",
            ValueError,
            lambda: hvd.alltoall(torch.ones(size * 2 + 1)),
            "not an even multiple",
        )
    raises(
        "alltoall/splits dtype",
        ValueError,
        lambda: hvd.alltoall(x, splits=torch.ones(size, dtype=torch.int64)),
        "32-bit integer",
    )
    raises("alltoall/splits 2-d", ValueError, lambda: hvd.alltoall(x, splits=[[1] * size]), "1D")
    raises(
        "alltoall/splits count",
        ValueError,
        lambda: hvd.alltoall(x, splits=[1] * (size + 1)),
        "does not equal number of workers",
    )
    raises(
        "alltoall/splits sum",
        ValueError,
        lambda: hvd.alltoall(x, splits=[2 * size + 1] + [0] * (size - 1)),
        "greater than the first dimension",
    )
    raises("op and average", ValueError, lambda: hvd.allreduce(x, average=True, op=hvd.Sum))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hvd.allreduce(x, average=False)
    check("average= is deprecated", any(w.category is DeprecationWarning for w in caught))
    raises(
        "allreduce_/not contiguous",
        ValueError,
        lambda: hvd.allreduce_(torch.ones(4, 2).t()),
        "contiguous",
    )

    # Requests Horovod refuses: the type Horovod code catches, and the one ringcomm raised
    # before (issue 26, docs/errors.md).
    refused = [
        (
            "reducescatter/adasum",
            (hvd.HorovodInternalError, ValueError),
            lambda: hvd.reducescatter(torch.ones(size, 2), op=hvd.Adasum),
            "only supports AVERAGE and SUM",
        ),
        (
            "allreduce/adasum of int32",
            (hvd.HorovodInternalError, ValueError),
            lambda: hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum),
            "floating-point",
        ),
        (
            "allreduce/unknown op",
            (hvd.HorovodInternalError, ValueError),
            lambda: hvd.allreduce(torch.ones(2), op="median"),
            "op must be one of",
        ),
        (
            "allreduce/sparse",
            (ValueError, TypeError),
            lambda: hvd.allreduce(torch.ones(3).to_sparse()),
            "is not supported",
        ),
        (
            "allreduce/complex",
            (ValueError, TypeError),
            lambda: hvd.allreduce(torch.ones(3, dtype=torch.complex64)),
            "is not supported",
        ),
        (
            "allgather/meta device",
            (ValueError, TypeError),
            lambda: hvd.allgather(torch.ones(3, device="meta")),
            "is not supported",
        ),
    ]
    if size & (size - 1):  # Adasum needs a power of two before it looks at the dtype
        refused = [r for r in refused if r[0] != "allreduce/adasum of int32"]
    for label, kinds, body, text in refused:
        error = raises(label, kinds[0], body, text)
        check(f"{label}/also {kinds[1].__name__}", isinstance(error, kinds[1]), type(error))

    if size > 1:
        # Ranks that disagree: an error of both kinds, with ringcomm's fields.
        caught_as = []
        for kind in (hvd.HorovodInternalError, ringcomm.MismatchError):
            try:
                hvd.allreduce(torch.ones(2 + rank), name=f"disagree.{kind.__name__}")
            except kind as error:
                caught_as.append(kind.__name__)
                check("mismatch/fields", hasattr(error, "peer") or "rank" in str(error))
        check("mismatch/caught as both", len(caught_as) == 2, caught_as)

    # Before init and after shutdown: Horovod's errors.
    hvd.shutdown()
    check("is_initialized after shutdown", not hvd.is_initialized())
    raises("rank() before init", ValueError, hvd.rank, "not been initialized")
    # Horovod returns False for a set it never registered, initialized or not.
    check("remove_process_set before init", hvd.remove_process_set(hvd.ProcessSet([0])) is False)
    raises(
        "allreduce before init",
        hvd.HorovodInternalError,
        lambda: hvd.allreduce(torch.ones(1)),
        "not been initialized",
    )
    hvd.init()


def join_policies():
    if size == 1:
        return
    # Horovod's (the default): a joined rank adds zeros, gathers and broadcasts fail.
    if rank == 0:
        got = hvd.allreduce(torch.full((2,), 6), op=hvd.Average, name="zeros.int.average")
        check("join/zeros/int average", torch.equal(got, torch.full((2,), 6 // size)), got)
        raises(
            "join/zeros/allgather",
            hvd.HorovodInternalError,
            lambda: hvd.allgather(torch.ones(1, 2), name="zeros.gather"),
            "while some ranks have joined",
        )
        raises(
            "join/zeros/broadcast",
            hvd.HorovodInternalError,
            lambda: hvd.broadcast(torch.ones(2), 0, name="zeros.broadcast"),
            "while some ranks have joined",
        )
        raises(
            "join/zeros/broadcast_object",
            hvd.HorovodInternalError,
            lambda: hvd.broadcast_object({"a": 1}, 0),
        )
    check("join/zeros/last", hvd.join() == 0)

    # ringcomm's, opted into: a joined rank contributes nothing.
    hvd.shutdown()
    hvd.init(join_policy="contributors")
    if rank == 0:
        got = hvd.allreduce(torch.full((2,), 6.0), name="contributors.average")
        check("join/contributors/average", torch.equal(got, torch.full((2,), 6.0)), got)
        got = hvd.allreduce(torch.full((2,), -5.0), op=hvd.Max, name="contributors.max")
        check("join/contributors/max", torch.equal(got, torch.full((2,), -5.0)), got)
        got = hvd.allgather(torch.ones(2, 3), name="contributors.gather")
        check("join/contributors/allgather", got.shape == (2, 3), got.shape)
        got = hvd.broadcast(torch.full((3,), 7.0), 0, name="contributors.broadcast")
        check("join/contributors/broadcast", torch.equal(got, torch.full((3,), 7.0)))
        # Joined ranks contribute each op's identity, for int16 and bool too.
        shorts = torch.tensor([-7, 32767, -32768], dtype=torch.int16)
        flags = torch.tensor([True, False])
        for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product):
            got = hvd.allreduce(shorts, op=op, name=f"contributors.int16.{op}")
            check(f"join/contributors/int16/{op}", torch.equal(got, shorts), got)
            got = hvd.allreduce(flags, op=op, name=f"contributors.bool.{op}")
            check(f"join/contributors/bool/{op}", torch.equal(got, flags), got)
        raises(
            "join/contributors/int average",
            hvd.HorovodInternalError,
            lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), name="contributors.int"),
            "float32 or float64",
        )
    check("join/contributors/last", hvd.join() == 0)
    hvd.shutdown()

    # Ranks that disagree about the policy fail init() alike, and can init again.
    raises(
        "join policy/disagreement",
        ValueError,
        lambda: hvd.init(join_policy="contributors" if rank == 0 else "zeros"),
        "different join policies",
    )
    raises("join policy/unknown", ValueError, lambda: hvd.init(join_policy="nothing"), "zeros")
    hvd.init()


def going_on_after_failures():
    # A duplicate name is refused at once and fails nothing else. Rank 0 tries it while "twice"
    # cannot have completed: the others submit it only after "twice.go", which rank 0 joins after.
    # (One rank runs a request at once: it need not be in flight.)
    if rank == 0 and size > 1:
        handle = hvd.allreduce_async(torch.ones(3), name="twice")
        raises(
            "duplicate/refused",
            ValueError,
            lambda: hvd.allreduce_async(torch.ones(3), name="twice"),
            "already in flight",
        )
        hvd.allreduce(torch.ones(1), name="twice.go")
        hvd.synchronize(handle)
    elif size > 1:
        hvd.allreduce(torch.ones(1), name="twice.go")
        hvd.synchronize(hvd.allreduce_async(torch.ones(3), name="twice"))
    if size > 1:
        # Mismatches of an all-gather and of a reducescatter: named at once, on every rank,
        # naming both ranks; each fails its own request only.
        raises(
            "queue mismatch",
            ringcomm.MismatchError,
            lambda: hvd.allgather(torch.ones(1, 1 + rank), name="mismatch.gather"),
        )
        started = time.monotonic()
        raises(
            "reducescatter mismatch",
            hvd.HorovodInternalError,
            lambda: hvd.reducescatter(torch.ones(size, 1 + rank), op=hvd.Sum, name="rs.mismatch"),
            "rank 1",
        )
        check("reducescatter mismatch at once", time.monotonic() - started < 10)
    got = hvd.reducescatter(torch.ones(size, 2), op=hvd.Sum)
    check("reducescatter goes on", torch.equal(got, torch.full((1, 2), float(size))), got)
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.failures")
    check("queue goes on", torch.equal(got, torch.full((2,), float(size))), got)
    # shutdown(); init() always gives a working state.
    for _ in range(2):
        hvd.shutdown()
        hvd.init()
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum)
        check("shutdown/init", torch.equal(got, torch.full((2,), float(size))), got)
        got = hvd.alltoall(torch.ones(size))
        check("shutdown/init/alltoall", torch.equal(got, torch.ones(size)))


def asynchronous_at_every_size():
    # Every *_async returns before its operation completed: poll() says so (even at one rank).
    big = torch.ones(4 << 20)
    rows = torch.ones(size * 1024, 1024)
    seen = {}
    for name, start in (
        ("allreduce", lambda: hvd.allreduce_async(big, op=hvd.Sum)),
        ("allgather", lambda: hvd.allgather_async(big.view(-1, 1024))),
        ("broadcast", lambda: hvd.broadcast_async(big, 0)),
        ("alltoall", lambda: hvd.alltoall_async(rows)),
        ("reducescatter", lambda: hvd.reducescatter_async(rows)),
    ):
        # A fast operation may finish before poll() looks (a broadcast at one rank moves
        # nothing, and on a busy machine the caller can lose its core in between; five tries
        # once all missed): it counts as seen in flight if poll() ever finds it so. Run inline
        # in the caller, as one rank's requests once were, it never would be.
        seen[name] = False
        for _ in range(50):
            handle = start()
            seen[name] = not hvd.poll(handle)
            hvd.synchronize(handle)
            check(f"{name}_async/done", hvd.synchronize(handle) is None)
            if seen[name]:
                break
    asynchronous_at_every_size.seen = seen


def step_after_synchronize_warns():
    model = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    model(torch.ones(2, 3)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    check(
        "step after synchronize warns",
        any("skip_synchronize" in str(w.message) for w in caught),
        [str(w.message) for w in caught],
    )
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
    check("skip_synchronize: no warning", not caught, [str(w.message) for w in caught])


# Every type Horovod scales, as it scales them: integers in float64 truncated toward zero, float16
# (and bfloat16) in float32, the others in their own precision (issue 26).
SCALED_TYPES = [
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]  # fmt: skip


def horovod_scaled(tensor, factor):
    """What Horovod's ScaleBuffer makes of ``tensor``, computed with torch."""
    if not tensor.dtype.is_floating_point:
        return (tensor.double() * factor).to(tensor.dtype)
    if tensor.dtype in (torch.float16, torch.bfloat16):
        return (tensor.float() * torch.tensor(factor, dtype=torch.float32)).to(tensor.dtype)
    return tensor * torch.tensor(factor, dtype=tensor.dtype)


def scaled_reference(inputs, pre, post, dtype, ranks):
    """The float64 sum over ``ranks`` of each rank's prescaled input, postscaled, in ``dtype``.
    The inputs are chosen so that every partial sum is exact in ``dtype``: the reference holds
    whatever order the schedule adds in."""
    total = sum(horovod_scaled(inputs(r).to(dtype), pre).double() for r in ranks)
    return horovod_scaled(total.to(dtype), post)


def same(got, want) -> bool:
    return got.dtype == want.dtype and torch.equal(got, want)


def integer_and_narrow_scaling():
    def inputs(r):
        # Small integers, signed where the type is: their scaled values truncate (3 * 0.75 =
        # 2.25 -> 2, -3 * 0.75 -> -2) and their sums stay exact in every type.
        values = torch.arange(12, dtype=torch.float64) % 7 - 3 + r
        return values.abs() if r % 2 else values

    pre, post = 0.75, 0.5
    everyone = list(range(size))
    for dtype in SCALED_TYPES:
        # uint8 has no negative values to truncate toward zero.
        source = (lambda r: inputs(r).abs()) if dtype == torch.uint8 else inputs
        mine = source(rank).to(dtype)
        want = scaled_reference(source, pre, post, dtype, everyone)
        name = str(dtype).replace("torch.", "")
        got = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
        check(f"scaling/{name}/allreduce", same(got, want), (got, want))
        handle = hvd.allreduce_async(mine, op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
        got = hvd.synchronize(handle)
        check(f"scaling/{name}/allreduce_async", same(got, want), (got, want))
        # Fused with other tensors of its type: the fusion buffer is scaled as one.
        got = hvd.grouped_allreduce(
            [mine, mine + 1], op=hvd.Sum, prescale_factor=pre, postscale_factor=post
        )
        shifted = scaled_reference(lambda r, f=source: f(r) + 1, pre, post, dtype, everyone)
        check(f"scaling/{name}/grouped", same(got[0], want) and same(got[1], shifted), (got, want))
        inplace = mine.clone()
        hvd.allreduce_(inplace, op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
        check(f"scaling/{name}/allreduce_", same(inplace, want), (inplace, want))
        # fp16 compression casts floating-point tensors only, as Horovod's compressor does.
        got = hvd.allreduce(
            mine,
            op=hvd.Sum,
            prescale_factor=pre,
            postscale_factor=post,
            compression=hvd.Compression.fp16,
        )
        if not dtype.is_floating_point:
            check(f"scaling/{name}/compressed", same(got, want), (got, want))
        # reducescatter: this rank's rows of the same sum.
        rows = torch.stack([mine] * size)
        part = hvd.reducescatter(rows, op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
        check(f"scaling/{name}/reducescatter", same(part, want.unsqueeze(0)), (part, want))
        parts = hvd.grouped_reducescatter(
            [rows], op=hvd.Sum, prescale_factor=pre, postscale_factor=post
        )
        check(f"scaling/{name}/grouped_reducescatter", same(parts[0], want.unsqueeze(0)), parts)
        # A process set of the even ranks.
        if size > 1 and rank % 2 == 0:
            evens = [r for r in range(size) if r % 2 == 0]
            got = hvd.allreduce(
                mine, op=hvd.Sum, prescale_factor=pre, postscale_factor=post, process_set=evens_set
            )
            want_evens = scaled_reference(source, pre, post, dtype, evens)
            check(f"scaling/{name}/process set", same(got, want_evens), (got, want_evens))

    # Rounding: one rank contributes, so the sum is its scaled value, rounded once as Horovod
    # rounds it (float16 and bfloat16 in float32; float32 with the factor rounded to float32).
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.int64):
        values = torch.tensor([1.0, 3.0, -7.0, 100.0, 1234.0, -999.0]).to(dtype)
        mine = values if rank == 0 else torch.zeros_like(values)
        got = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.1, postscale_factor=1 / 3)
        want = horovod_scaled(horovod_scaled(values, 0.1), 1 / 3)
        name = str(dtype).replace("torch.", "")
        check(f"scaling/{name}/rounding", torch.equal(got, want), (got, want))
    raises(
        "scaling/bool",
        ValueError,
        lambda: hvd.allreduce(torch.ones(3, dtype=torch.bool), prescale_factor=2.0),
        "torch.bool",
    )


for name, body in [
    ("integer and 16-bit scaling", integer_and_narrow_scaling),
    ("grouped and async", grouped_and_async_forms),
    ("gradients", gradients),
    ("sparse", sparse),
    ("SyncBatchNorm", sync_batch_norm),
    ("compression", compression),
    ("errors", errors_and_build_information),
    ("join policies", join_policies),
    ("after failures", going_on_after_failures),
    ("async", asynchronous_at_every_size),
    ("step warns", step_after_synchronize_warns),
]:
    case(name, body)
report(
    {
        "rank": rank,
        "failures": failures,
        "seen_pending": getattr(asynchronous_at_every_size, "seen", {}),
    }
)
hvd.shutdown()
