"""Collectives on CUDA arrays (torch tensors or CuPy arrays), checked against NumPy.

Every rank uses device 0: the GPU machines have one GPU, shared by all ranks. Inputs are small
integers (exact in any order of summation); random float32 inputs check that every rank holds the
same bits. The path an all-reduce takes (staged or CUDA IPC) comes from RINGCOMM_CUDA_PATH.

argv: library ("torch" or "cupy"), large_count (elements of the multi-chunk case)
"""

import hashlib
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

LIBRARY = sys.argv[1]
LARGE = int(sys.argv[2])
COUNTS = [0, 1, 1009, LARGE]
OPS = {"sum": ringcomm.SUM, "min": ringcomm.MIN, "max": ringcomm.MAX, "prod": ringcomm.PROD}

comm = ringcomm.init()
rank, size = comm.rank, comm.size
failures: list[str] = []
digests: dict[str, str] = {}

if LIBRARY == "torch":
    import torch

    DEVICE = torch.device("cuda", 0)
    torch.cuda.set_device(DEVICE)
    DTYPES = [
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "bool",
    ]

    def to_device(a: np.ndarray, dtype: str):
        if dtype == "bfloat16":
            return torch.from_numpy(a.astype(np.float32)).to(DEVICE).to(torch.bfloat16)
        return torch.from_numpy(a.astype(dtype)).to(DEVICE)

    def to_numpy(x) -> np.ndarray:
        x = x.detach().cpu()
        return x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()

    def raw_bytes(x) -> bytes:
        x = x.detach().cpu()
        return (
            x.view(torch.int16).numpy().tobytes()
            if x.dtype == torch.bfloat16
            else x.numpy().tobytes()
        )

    def empty(count: int, dtype: str):
        return torch.empty(count, dtype=getattr(torch, dtype), device=DEVICE)

    def synchronize():
        torch.cuda.current_stream().synchronize()

    def side_stream():
        return torch.cuda.Stream()

    def on_stream(stream):
        return torch.cuda.stream(stream)

else:
    import cupy

    cupy.cuda.Device(0).use()
    DTYPES = ["int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64", "bool"]

    def to_device(a: np.ndarray, dtype: str):
        return cupy.asarray(a.astype(dtype))

    def to_numpy(x) -> np.ndarray:
        return cupy.asnumpy(x)

    def raw_bytes(x) -> bytes:
        return cupy.asnumpy(x).tobytes()

    def empty(count: int, dtype: str):
        return cupy.empty(count, dtype=dtype)

    def synchronize():
        cupy.cuda.get_current_stream().synchronize()

    def side_stream():
        return cupy.cuda.Stream(non_blocking=True)

    def on_stream(stream):
        return stream


def values(r: int, count: int, op: str, dtype: str) -> np.ndarray:
    """Rank r's input: small integers, exact in every dtype and order of reduction (bool: 0/1,
    mostly false for the ors, sum and max, and mostly true for the ands, prod and min)."""
    i = np.arange(count, dtype=np.int64)
    if dtype == "bool":
        v = (r * 7 + i * 3) % 11
        return (v != 0 if op in ("prod", "min") else v == 0).astype(np.int64)
    if op == "prod":
        return (r + i) % 2 + 1
    v = (r * 7 + i * 3) % 11
    return v if dtype == "uint8" else v - 5


def reference(op: str, count: int, dtype: str) -> np.ndarray:
    stack = np.stack([values(r, count, op, dtype) for r in range(size)]).astype(np.float64)
    if dtype == "bool":  # or is the maximum of 0/1 values, and the minimum
        return stack.min(axis=0) if op in ("prod", "min") else stack.max(axis=0)
    if op == "sum":
        result = stack.sum(axis=0)
    elif op == "min":
        result = stack.min(axis=0)
    elif op == "max":
        result = stack.max(axis=0)
    else:
        result = stack.prod(axis=0)
    if dtype in ("int8", "uint8", "int16"):  # integer sums and products wrap around
        result = result.astype(np.int64).astype(dtype).astype(np.float64)
    return result


def check(name: str, got, expected: np.ndarray) -> None:
    synchronize()
    got64 = to_numpy(got).astype(np.float64).reshape(-1)
    if got64.shape != expected.shape or not np.array_equal(got64, expected):
        bad = np.flatnonzero(got64 != expected) if got64.shape == expected.shape else []
        failures.append(f"{name}: {len(bad)} wrong of {expected.size}, first {bad[:3].tolist()}")


def digest(x) -> str:
    synchronize()
    return hashlib.sha256(raw_bytes(x)).hexdigest()[:16]


def guarded(name: str, body) -> None:
    try:
        body()
    except Exception:
        failures.append(f"{name}: raised\n{traceback.format_exc()}")


def allreduce_cases() -> None:
    for dtype in DTYPES:
        for op in OPS:
            for count in COUNTS:
                if op == "prod" and count == LARGE and dtype != "float64":
                    continue  # one large product per run is enough
                expected = reference(op, count, dtype)
                x = to_device(values(rank, count, op, dtype), dtype)
                comm.allreduce(x, op=OPS[op])
                check(f"allreduce/{dtype}/{op}/{count}/in-place", x, expected)
                x = to_device(values(rank, count, op, dtype), dtype)
                out = empty(count, dtype)
                comm.allreduce(x, out=out, op=OPS[op])
                check(f"allreduce/{dtype}/{op}/{count}/out", out, expected)
                check(
                    f"allreduce/{dtype}/{op}/{count}/input-untouched",
                    x,
                    values(rank, count, op, dtype).astype(np.float64),
                )
    # Average: float32 division of the exact sum, rounded once to the type.
    for dtype in ("float32", "float64"):
        x = to_device(values(rank, LARGE, "sum", dtype), dtype)
        comm.allreduce(x, op=ringcomm.AVG)
        check(
            f"allreduce/{dtype}/avg/{LARGE}",
            x,
            (reference("sum", LARGE, dtype) / size).astype(dtype).astype(np.float64),
        )


def bitwise_cases() -> None:
    # Random floats: every rank must hold the very same bits (the digests are compared).
    generator = np.random.default_rng(1234 + rank)
    for count in (1009, LARGE):
        x = to_device(generator.standard_normal(count).astype(np.float32), "float32")
        comm.allreduce(x)
        digests[f"allreduce/random/{count}"] = digest(x)


def stream_cases() -> None:
    # The input is produced on a side stream; the collective must run after it and before what
    # the caller queues there next, with nothing synchronised by hand in between.
    stream = side_stream()
    expected = reference("sum", LARGE, "float32")
    with on_stream(stream):
        x = to_device(values(rank, LARGE, "sum", "float32"), "float32")
        x = x * 1 + 0  # a kernel on the side stream, just before the collective
        comm.allreduce(x)  # takes the current stream: the side stream
        y = x * 2  # queued after the collective on the same stream
    stream.synchronize()
    check("stream/current", y, expected * 2)
    # The same with stream= given explicitly, outside the stream's context.
    with on_stream(stream):
        x = to_device(values(rank, LARGE, "sum", "float32"), "float32")
    comm.allreduce(x, stream=stream)
    with on_stream(stream):
        y = x + 0
    stream.synchronize()
    check("stream/explicit", y, expected)
    # Asynchronous: wait() returns with the result ordered on the caller's stream.
    x = to_device(values(rank, LARGE, "sum", "float32"), "float32")
    work = comm.allreduce(x, async_op=True)
    work.wait()
    check("stream/async", x, expected)


def other_collectives() -> None:
    count = 1009
    mine = np.arange(count, dtype=np.int64) + 1000 * rank
    everyone = np.concatenate([np.arange(count, dtype=np.int64) + 1000 * r for r in range(size)])
    for length in (count, LARGE):  # broadcast: a single chunk and several
        x = to_device(np.arange(length) % 97 + rank, "float32")
        comm.broadcast(x, root=size - 1)
        check(f"broadcast/{length}", x, (np.arange(length) % 97 + size - 1).astype(np.float64))
    gathered = comm.allgather(to_device(mine, "int64"))
    check("allgather", gathered, everyone.astype(np.float64))
    scattered = comm.reduce_scatter(to_device(np.tile(np.arange(count), size), "int64"))
    check("reduce_scatter", scattered, (np.arange(count) * size).astype(np.float64))
    x = to_device(mine, "int64")
    result = comm.reduce(x, root=0)
    if rank == 0:
        expected = sum(np.arange(count, dtype=np.int64) + 1000 * r for r in range(size))
        check("reduce", result, expected.astype(np.float64))
    blocks = np.concatenate([np.full(count, 100 * rank + j) for j in range(size)])
    received = comm.alltoall(to_device(blocks, "int64"))
    check(
        "alltoall",
        received,
        np.concatenate([np.full(count, 100 * j + rank) for j in range(size)]).astype(np.float64),
    )
    gathered = comm.gather(to_device(mine, "int64"), root=0)
    if rank == 0:
        check("gather", gathered, everyone.astype(np.float64))
    out = empty(count, "int64")
    source = to_device(everyone, "int64") if rank == 0 else None
    comm.scatter(source, out=out, root=0)
    check("scatter", out, mine.astype(np.float64))


def point_to_point() -> None:
    # A ring: every rank sends to the next and receives from the previous, at every size (empty,
    # one element, prime, several staging chunks), device to device, then device to host and host
    # to device. The path (a pinned copy, or the device buffer itself where the link takes device
    # memory) depends on the transport: tests/test_cuda_collectives.py runs both.
    right, left = (rank + 1) % size, (rank - 1) % size

    def payload(r: int, count: int) -> np.ndarray:
        return (np.arange(count, dtype=np.int64) * 3 + r) % 101

    for dtype in ("float32", "int64", "uint8"):
        for count in COUNTS:
            name = f"send/recv/{dtype}/{count}"
            out = empty(count, dtype)
            sent = to_device(payload(rank, count), dtype)
            receiving = comm.recv(out, left, tag=7, async_op=True)
            comm.send(sent, right, tag=7, async_op=True).wait()
            receiving.wait()
            check(name, out, payload(left, count).astype(np.float64))
    count = 1009
    host_out = np.empty(count, dtype=np.float32)
    receiving = comm.recv(host_out, left, tag=8, async_op=True)
    comm.send(to_device(payload(rank, count), "float32"), right, tag=8)
    receiving.wait()
    if not np.array_equal(host_out, payload(left, count).astype(np.float32)):
        failures.append("send/recv/device to host: wrong values")
    device_out = empty(count, "float32")
    receiving = comm.recv(device_out, left, tag=9, async_op=True)
    comm.send(payload(rank, count).astype(np.float32), right, tag=9)
    receiving.wait()
    check("send/recv/host to device", device_out, payload(left, count).astype(np.float64))
    # Streams: what is sent was made by a kernel on a side stream just before; what is queued on
    # that stream after the receive's wait() sees the received values.
    stream = side_stream()
    with on_stream(stream):
        sent = to_device(payload(rank, LARGE), "float32")
        sent = sent * 1 + 0
        out = empty(LARGE, "float32")
        receiving = comm.recv(out, left, tag=10, async_op=True)
        comm.send(sent, right, tag=10, async_op=True).wait()
        receiving.wait()
        doubled = out * 2
    stream.synchronize()
    check("send/recv/streams", doubled, payload(left, LARGE).astype(np.float64) * 2)


guarded("allreduce", allreduce_cases)
guarded("bitwise", bitwise_cases)
guarded("streams", stream_cases)
guarded("other collectives", other_collectives)
guarded("send and receive", point_to_point)
comm.shutdown()
report({"failures": failures, "digests": digests})
