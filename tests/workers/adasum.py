"""Adasum (op=ringcomm.ADASUM, hvd.Adasum) at one rank count, every case in one launch.

At a power-of-two rank count: the core's all-reduce (whole and fused) and ringcomm.torch's
allreduce forms against adasum_reference.py, bit for bit where the reduction runs alone; the
defining cases (orthogonal vectors sum, equal vectors stay); an op mismatch named; integers
refused; DistributedOptimizer(op=Adasum) against a simulation of every rank's local steps.
Elsewhere: Horovod's error. Each rank reports a digest of every result, which the test compares
across ranks.
"""

import hashlib
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from adasum_reference import adasum, bfloat16_bits  # noqa: E402
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402
import ringcomm.torch as hvd  # noqa: E402

comm = ringcomm.init()
# Beyond Horovod (global set only): Adasum over a process set whose size is a power of two.
SETS = {4: [[1, 3], [0, 1, 2]], 2: [[1]]}.get(comm.size, [])
process_sets = [hvd.ProcessSet(ranks) for ranks in SETS]
hvd.init(comm=comm, process_sets=process_sets)
rank, size = hvd.rank(), hvd.size()
failures = Failures()
check, case = failures.check, failures.case
digests = {}

TORCH = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
COUNTS = [0, 1, 2, 13, 1009]  # empty, one element (one rank of a pair keeps nothing), primes
POWER_OF_TWO = size & (size - 1) == 0
HOROVOD_SIZE_ERROR = "Running Adasum with non-power of 2 ranks is not supported yet."


def inputs(dtype: str, count: int, seed: int) -> list:
    """Every rank's input (each rank makes all of them, for the reference): normal values of
    different scales, stored as ``dtype`` (bfloat16 as its bits)."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((size, count)) * rng.uniform(0.1, 10.0, (size, 1))
    if dtype == "bfloat16":
        return list(bfloat16_bits(values.astype(np.float32)))
    return list(values.astype(dtype))


def to_torch(array: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def to_numpy(tensor: torch.Tensor, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def record(name: str, array: np.ndarray) -> None:
    digests[name] = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def same_bits(name: str, got: np.ndarray, want: np.ndarray) -> None:
    record(name, got)
    equal = got.shape == want.shape and got.tobytes() == want.tobytes()
    detail = "" if equal else f"got {got[:6]}, want {want[:6]}"
    check(name, equal, detail)


def close(name: str, got: np.ndarray, want: np.ndarray, dtype: str, ulps: float = 4) -> None:
    """Within a few units in the last place of ``dtype``: a fused reduction splits the vector
    elsewhere, so its float64 partial sums round differently."""
    record(name, got)
    g = got if dtype != "bfloat16" else (got.astype(np.uint32) << 16).view(np.float32)
    w = want if dtype != "bfloat16" else (want.astype(np.uint32) << 16).view(np.float32)
    g, w = g.astype(np.float64), w.astype(np.float64)
    ulp = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
    scale = max(float(np.abs(w).max()), 1e-30) if w.size else 1.0
    error = float(np.abs(g - w).max()) if w.size else 0.0
    check(name, error <= ulps * ulp[dtype] * scale, f"max error {error} at scale {scale}")


# ---- the core: Communicator.allreduce(op=ADASUM) ---------------------------------------------
def core_whole():
    for d, dtype in enumerate(TORCH):
        for count in COUNTS:
            xs = inputs(dtype, count, seed=100 * d + count)
            x = to_torch(xs[rank], dtype)
            comm.allreduce(x, op=ringcomm.ADASUM)
            same_bits(f"core/{dtype}/{count}", to_numpy(x, dtype), adasum(xs, dtype))
            out = torch.empty_like(x)
            comm.allreduce(to_torch(xs[rank], dtype), out=out, op="adasum")
            same_bits(f"core/{dtype}/{count}/out", to_numpy(out, dtype), adasum(xs, dtype))


def core_fused():
    counts = [13, 0, 1, 1009, 2, 7]
    for d, dtype in enumerate(TORCH):
        xs = inputs(dtype, sum(counts), seed=7 + d)
        x = to_torch(xs[rank], dtype)
        comm.allreduce(x, op=ringcomm.ADASUM, tensor_counts=counts)
        same_bits(f"core/fused/{dtype}", to_numpy(x, dtype), adasum(xs, dtype, counts))
        # Each tensor combines as if alone: only the rounding of the partial sums differs.
        at = 0
        for i, n in enumerate(counts):
            alone = adasum([v[at : at + n] for v in xs], dtype)
            close(f"core/fused/{dtype}/tensor {i}", to_numpy(x, dtype)[at : at + n], alone, dtype)
            at += n


def core_scaled():
    xs = inputs("float64", 101, seed=3)
    x = to_torch(xs[rank], "float64")
    comm.allreduce(x, op=ringcomm.ADASUM, prescale=0.5, postscale=3.0)
    want = adasum([v * 0.5 for v in xs], "float64") * 3.0
    close("core/prescale+postscale", x.numpy(), want, "float64")


def core_meaning():
    # Orthogonal vectors (disjoint supports): their sum, exactly.
    x = torch.zeros(4 * size, dtype=torch.float64)
    x[4 * rank : 4 * rank + 4] = torch.arange(1.0, 5.0) * (rank + 1)
    want = torch.cat([torch.arange(1.0, 5.0) * (r + 1) for r in range(size)])
    comm.allreduce(x, op=ringcomm.ADASUM)
    check("core/orthogonal is the sum", torch.equal(x, want), x)
    # The same vector everywhere: itself (the average).
    y = torch.linspace(-3, 5, 11, dtype=torch.float32)
    z = y.clone()
    comm.allreduce(z, op=ringcomm.ADASUM)
    check("core/equal vectors stay", torch.equal(z, y), z)
    # Zeros (a joined rank's contribution) change nothing.
    w = torch.zeros(5) if rank == 0 else torch.arange(5.0) + rank
    comm.allreduce(w, op=ringcomm.ADASUM)
    xs = [np.zeros(5, np.float32)] + [np.arange(5, dtype=np.float32) + r for r in range(1, size)]
    same_bits("core/zeros are neutral", w.numpy(), adasum(xs, "float32"))


def core_refusals():
    for bad in (torch.arange(4, dtype=torch.int32), torch.ones(3, dtype=torch.bool)):
        try:
            comm.allreduce(bad, op=ringcomm.ADASUM)
            check(f"core/refuses {bad.dtype}", False, "no error")
        except ValueError as error:
            check(f"core/refuses {bad.dtype}/message", "floating-point" in str(error), error)
    try:
        comm.reduce_scatter(torch.ones(2 * size), torch.empty(2), op=ringcomm.ADASUM)
        check("core/reduce_scatter refuses adasum", False, "no error")
    except ValueError as error:
        check("core/reduce_scatter refuses adasum/message", "all-reduce only" in str(error), error)


# ---- ringcomm.torch: hvd.allreduce(op=hvd.Adasum) ----------------------------------------------
def horovod_forms():
    for d, dtype in enumerate(TORCH):
        xs = inputs(dtype, 1009, seed=500 + d)
        want = adasum(xs, dtype)
        # Alone in the queue (every rank waits for it): the same bits as the reference.
        t = to_torch(xs[rank], dtype)
        result = hvd.allreduce(t, op=hvd.Adasum, name=f"adasum.{dtype}")
        same_bits(f"hvd/allreduce/{dtype}", to_numpy(result, dtype), want)
        check(f"hvd/allreduce/{dtype}/input untouched", torch.equal(t, to_torch(xs[rank], dtype)))
        hvd.allreduce_(t, op=hvd.Adasum)
        same_bits(f"hvd/allreduce_/{dtype}", to_numpy(t, dtype), want)
        # Several in flight at once: they may fuse, each still combines alone.
        many = [inputs(dtype, n, seed=900 + 10 * d + n) for n in COUNTS]
        handles = [
            hvd.allreduce_async(to_torch(v[rank], dtype), op=hvd.Adasum, name=f"async.{dtype}.{i}")
            for i, v in enumerate(many)
        ]
        for handle, v in zip(handles, many):
            got = to_numpy(hvd.synchronize(handle), dtype)
            close(f"hvd/allreduce_async/{dtype}/{len(v[0])}", got, adasum(v, dtype), dtype)
        grouped = hvd.grouped_allreduce([to_torch(v[rank], dtype) for v in many], op=hvd.Adasum)
        for g, v in zip(grouped, many):
            close(
                f"hvd/grouped_allreduce/{dtype}/{len(v[0])}",
                to_numpy(g, dtype),
                adasum(v, dtype),
                dtype,
            )
        in_place = [to_torch(v[rank], dtype) for v in many]
        hvd.grouped_allreduce_(in_place, op=hvd.Adasum)
        for g, v in zip(in_place, many):
            close(
                f"hvd/grouped_allreduce_/{dtype}/{len(v[0])}",
                to_numpy(g, dtype),
                adasum(v, dtype),
                dtype,
            )
    # Compression.fp16: Adasum of the float16 casts, as Horovod does.
    xs = inputs("float32", 257, seed=11)
    got = hvd.allreduce(
        to_torch(xs[rank], "float32"), op=hvd.Adasum, compression=hvd.Compression.fp16
    )
    want = adasum([v.astype(np.float16) for v in xs], "float16").astype(np.float32)
    same_bits("hvd/allreduce/compression fp16", got.numpy(), want)
    # Differentiable: the gradient is the Adasum of the incoming gradients.
    leaf = torch.ones(6, requires_grad=True)
    hvd.allreduce(leaf * (rank + 1), op=hvd.Adasum).sum().backward()
    check(
        "hvd/allreduce/backward",
        torch.allclose(leaf.grad, torch.full((6,), float(rank + 1))),
        leaf.grad,
    )


def horovod_process_sets():
    for i, ps in enumerate(process_sets):
        if not ps.included():
            continue
        xs = inputs("float32", 101, seed=40 + i)
        t = to_torch(xs[rank], "float32")
        if len(ps.ranks) & (len(ps.ranks) - 1) == 0:
            got = hvd.allreduce(t, op=hvd.Adasum, process_set=ps)
            want = adasum([xs[r] for r in ps.ranks], "float32")
            same_bits(f"hvd/process set {ps.ranks}", got.numpy(), want)
            continue
        try:
            hvd.allreduce(t, op=hvd.Adasum, process_set=ps)
            check(f"hvd/process set {ps.ranks} refused", False, "no error")
        except NotImplementedError as error:
            check(f"hvd/process set {ps.ranks}/message", str(error) == HOROVOD_SIZE_ERROR, error)


def horovod_refusals():
    try:
        hvd.allreduce(torch.arange(4), op=hvd.Adasum)
        check("hvd/refuses int64", False, "no error")
    except ValueError as error:
        check("hvd/refuses int64/message", "floating-point" in str(error), error)
    if size > 1:
        # One rank asks for a sum, the others for Adasum, under one name: all fail, named.
        op = hvd.Sum if rank == 0 else hvd.Adasum
        try:
            hvd.allreduce(torch.ones(3), op=op, name="mixed ops")
            check("hvd/op mismatch", False, "no error")
        except ringcomm.MismatchError as error:
            text = str(error)
            check("hvd/op mismatch/message", "adasum" in text and "sum" in text, text)
        # The queue goes on.
        again = hvd.allreduce(torch.ones(3), op=hvd.Adasum, name="after the mismatch")
        check("hvd/after a mismatch", torch.equal(again, torch.ones(3)), again)


# ---- DistributedOptimizer(op=Adasum) ------------------------------------------------------------
def make_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def batches(steps, passes):
    """batches[step][r][k]: rank r's k-th micro-batch of a step (every rank makes all of them)."""
    g = torch.Generator().manual_seed(99)
    return [
        [
            [
                (torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g))
                for _ in range(passes)
            ]
            for _ in range(size)
        ]
        for _ in range(steps)
    ]


def local_pass(model, micro):
    for x, y in micro:
        torch.nn.functional.mse_loss(model(x), y).backward()


def optimizer_case(make_optimizer, passes, label, steps=3):
    data = batches(steps, passes)
    model = make_model()
    opt = hvd.DistributedOptimizer(
        make_optimizer(model.parameters()),
        named_parameters=model.named_parameters(),
        op=hvd.Adasum,
        backward_passes_per_step=passes,
    )
    for step in range(steps):
        opt.zero_grad()
        local_pass(model, data[step][rank])
        opt.step()

    # Every rank's local steps (each with its own optimizer state), their deltas combined.
    models = [make_model() for _ in range(size)]
    opts = [make_optimizer(m.parameters()) for m in models]
    shared = [p.detach().clone() for p in models[0].parameters()]
    for step in range(steps):
        deltas = []
        for r in range(size):
            with torch.no_grad():
                for p, s in zip(models[r].parameters(), shared):
                    p.copy_(s)
            opts[r].zero_grad()
            local_pass(models[r], data[step][r])
            opts[r].step()
            deltas.append(
                [(p.detach() - s).numpy() for p, s in zip(models[r].parameters(), shared)]
            )
        for i, s in enumerate(shared):
            flat = [d[i].ravel() for d in deltas]
            s += torch.from_numpy(adasum(flat, "float32").reshape(s.shape))
    for i, (p, s) in enumerate(zip(model.parameters(), shared)):
        # Fused deltas round differently, and the optimizer carries that into later steps.
        close(f"optimizer/{label}/parameter {i}", p.detach().numpy(), s.numpy(), "float32", 100)
    moved = any(
        not torch.equal(p, q) for p, q in zip(model.parameters(), make_model().parameters())
    )
    check(f"optimizer/{label}/trained", moved)


def optimizer_rules():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
    if size > 1:
        try:
            with opt.skip_synchronize():
                pass
            check("optimizer/skip_synchronize refused", False, "no error")
        except AssertionError as error:
            check("optimizer/skip_synchronize/message", "Adasum optimizer" in str(error), error)
        torch.nn.functional.mse_loss(model(torch.ones(2, 6)), torch.zeros(2, 3)).backward()
        try:
            opt.zero_grad()
            check("optimizer/zero_grad in flight refused", False, "no error")
        except AssertionError as error:
            check("optimizer/zero_grad in flight/message", "before optimizer.step()" in str(error))
        opt.step()


def non_power_of_two():
    try:
        hvd.allreduce(torch.ones(4), op=hvd.Adasum)
        check("hvd/non-power-of-two refused", False, "no error")
    except NotImplementedError as error:
        check("hvd/non-power-of-two/message", str(error) == HOROVOD_SIZE_ERROR, error)
    try:
        hvd.grouped_allreduce_async([torch.ones(4)], op=hvd.Adasum)
        check("hvd/grouped non-power-of-two refused", False, "no error")
    except NotImplementedError as error:
        check("hvd/grouped non-power-of-two/message", str(error) == HOROVOD_SIZE_ERROR, error)
    try:
        comm.allreduce(torch.ones(4), op=ringcomm.ADASUM)
        check("core/non-power-of-two refused", False, "no error")
    except ValueError as error:
        check("core/non-power-of-two/message", "power-of-two" in str(error), error)
    model = make_model()
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
        check("optimizer/non-power-of-two refused", False, "no error")
    except NotImplementedError as error:
        check("optimizer/non-power-of-two/message", str(error) == HOROVOD_SIZE_ERROR, error)
    # The job goes on.
    check(
        "after the refusals",
        torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size))),
    )


if POWER_OF_TWO:
    case("core whole", core_whole)
    case("core fused", core_fused)
    case("core scaled", core_scaled)
    case("core meaning", core_meaning)
    case("core refusals", core_refusals)
    case("horovod forms", horovod_forms)
    case("horovod process sets", horovod_process_sets)
    case("horovod refusals", horovod_refusals)
    case(
        "optimizer sgd",
        lambda: optimizer_case(
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1, "sgd momentum"
        ),
    )
    case(
        "optimizer adam",
        lambda: optimizer_case(
            lambda ps: torch.optim.Adam(ps, lr=0.01), 2, "adam, 2 passes per step"
        ),
    )
    case("optimizer rules", optimizer_rules)
else:
    case("non-power-of-two", non_power_of_two)

hvd.shutdown()
report({"rank": rank, "size": size, "failures": failures, "digests": digests})
