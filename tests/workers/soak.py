"""A long mixed run: allreduce, allgather, broadcast, reduce_scatter, alltoall and barrier in a
random order, on random sizes (0, 1, primes, up to a few hundred thousand elements), dtypes and
ops, alternating between a shared-memory and a TCP communicator, every result checked bitwise
against a NumPy reference.

Every rank draws the same sequence of collectives from one seeded RNG, and can compute any rank's
input (seeded by collective and rank): inputs are small integers, exact in every dtype and order
of reduction, so the reference is exact. The run is also watched for leaks: resident memory
(/proc/self/statm), open descriptors (/proc/self/fd) and mapped shared-memory segments
(/proc/self/maps) are sampled every SAMPLE_EVERY collectives.

argv: count seed
Reports: failures, a digest of every result that all ranks hold alike (the test compares them
across ranks), the samples, the seconds per collective kind.
"""

import ctypes
import gc
import hashlib
import os
import sys
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

COUNT = int(sys.argv[1])
SEED = int(sys.argv[2])
SAMPLE_EVERY = max(1, COUNT // 50)
# SOAK_CONTROL=1: the same loop, inputs and references, with no collective run (each "result" is
# its reference): what NumPy, torch and the loop itself add to resident memory, for comparison.
CONTROL = os.environ.get("SOAK_CONTROL") == "1"

INTEGERS = ["int8", "uint8", "int16", "int32", "int64"]
DTYPES = INTEGERS + ["float16", "bfloat16", "float32", "float64", "bool"]
OPS = {
    "sum": ringcomm.SUM,
    "avg": ringcomm.AVG,
    "min": ringcomm.MIN,
    "max": ringcomm.MAX,
    "prod": ringcomm.PROD,
}
LOGICAL_AND = ("prod", "min")  # on bool; sum and max are or
KINDS = ["allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall", "barrier"]
PRIMES = [2, 3, 5, 7, 13, 31, 127, 1009, 4099, 65537]
LARGE = [131071, 262147]  # several ring segments and shared-memory rounds

# One communicator per transport (SOAK_TRANSPORTS, "shm,tcp" by default; "auto" across hosts).
comms = {
    t: ringcomm.init(transport=t) for t in os.environ.get("SOAK_TRANSPORTS", "shm,tcp").split(",")
}
first = next(iter(comms.values()))
rank, size = first.rank, first.size
for transport, comm in comms.items():
    if transport != "auto":
        assert all(comm.transport_to(p) == transport for p in range(size) if p != rank)


def draw_count(rng) -> int:
    pick = rng.random()
    if pick < 0.1:
        return 0
    if pick < 0.2:
        return 1
    if pick < 0.5:
        return int(rng.choice(PRIMES))
    if pick < 0.98:
        return int(rng.integers(2, 20000))
    return int(rng.choice(LARGE))


def values(index: int, r: int, count: int, dtype: str, op: str) -> np.ndarray:
    """Rank r's input to collective `index`, as int64: small, exact in any dtype and order."""
    rng = np.random.default_rng([SEED, index, r])
    if dtype == "bool":
        v = rng.random(count)
        # Mostly true for and, mostly false for or, so that either result varies by element.
        return (v < 0.8 if op in LOGICAL_AND else v < 0.2).astype(np.int64)
    if op == "prod":  # |product| <= 2**size: exact in every type
        low = 0 if dtype == "uint8" else -2
        return rng.integers(low, 3, count)
    return rng.integers(0 if dtype == "uint8" else -20, 21, count)


def as_array(v: np.ndarray, dtype: str):
    """NumPy for every dtype NumPy has; torch (through DLPack) for bfloat16."""
    if dtype == "bfloat16":
        return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
    return v.astype(dtype)


def raw(a) -> bytes:
    """The bits of a result (bfloat16 viewed as int16)."""
    if isinstance(a, torch.Tensor):
        a = a.view(torch.int16).numpy() if a.dtype == torch.bfloat16 else a.numpy()
    return np.ascontiguousarray(a).tobytes()


def reduced(stack: np.ndarray, dtype: str, op: str):
    """The reduction of the ranks' inputs (rows of `stack`, int64) in the element type."""
    if dtype == "bool":
        return as_array(stack.min(axis=0) if op in LOGICAL_AND else stack.max(axis=0), dtype)
    if dtype not in INTEGERS:
        # In floating point: a product with a zero keeps the sign of the others (-0.0), which
        # int64 arithmetic loses. Still exact: the values are small integers.
        stack = stack.astype(np.float64)
    exact = {
        "sum": stack.sum,
        "avg": stack.sum,
        "min": stack.min,
        "max": stack.max,
        "prod": stack.prod,
    }[op](axis=0)
    if op != "avg":
        return as_array(exact, dtype)
    if dtype in INTEGERS:  # truncating division, as C++ divides
        return as_array(np.trunc(exact / size).astype(np.int64), dtype)
    if dtype == "float64":
        return exact.astype(np.float64) / size
    # float32 division, then rounding to the element type, as the core's finishAverage does.
    return as_array(exact.astype(np.float32) / np.float32(size), dtype)


failures: list[str] = []
digest = hashlib.sha256()
samples: list[dict] = []
seconds: dict[str, float] = {}
checked = 0


try:
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _malloc_trim = None


def sample(index: int) -> None:
    """Resident memory split as the kernel counts it: anonymous (heaps: where a leak shows),
    shared (the communicators' segments, resident as their pages are first touched) and file
    pages. Freed heap memory is handed back first (gc, malloc_trim), so that what remains is
    memory still in use, not the allocator's fragmentation from messages of varying sizes."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    status = {}
    with open("/proc/self/status") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssShmem", "RssFile"):
                status[key] = int(value.split()[0]) * 1024
    with open("/proc/self/maps") as maps:
        segments = sum("/dev/shm/ringcomm-" in line for line in maps)
    samples.append(
        {
            "index": index,
            "rss": status["VmRSS"],
            "anon": status["RssAnon"],
            "shmem": status["RssShmem"],
            "fds": len(os.listdir("/proc/self/fd")),
            "shm_maps": segments,
        }
    )


def run_one(index: int, rng) -> None:
    global checked
    transport = list(comms)[int(rng.integers(len(comms)))]
    comm = comms[transport]
    kind = KINDS[int(rng.integers(len(KINDS)))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    op = list(OPS)[int(rng.integers(len(OPS)))]
    if dtype == "bool" and op == "avg":
        op = "sum"  # an average of bools is refused (tested elsewhere)
    count = draw_count(rng)
    root = int(rng.integers(size))
    algorithm = ["auto", "ring", "tree", "direct" if transport == "shm" else "tree"][
        int(rng.integers(4))
    ]
    name = f"#{index} {kind} {transport} {dtype} {op} {count}"
    started = time.perf_counter()
    if kind == "barrier":
        if not CONTROL:
            comm.barrier(name=name)
        seconds[kind] = seconds.get(kind, 0.0) + time.perf_counter() - started
        checked += 1
        return
    if kind in ("reduce_scatter", "alltoall"):
        inputs = [values(index, r, count * size, dtype, op) for r in range(size)]
    else:
        inputs = [values(index, r, count, dtype, op) for r in range(size)]
    x = as_array(inputs[rank], dtype)
    mine = x.clone() if isinstance(x, torch.Tensor) else x.copy()
    shared = True  # the result is the same on every rank
    if kind == "allreduce":
        got = None if CONTROL else comm.allreduce(x, op=OPS[op], algorithm=algorithm, name=name)
        expected = reduced(np.stack(inputs), dtype, op)
    elif kind == "allgather":
        got = None if CONTROL else comm.allgather(x, name=name)
        expected = as_array(np.concatenate(inputs), dtype)
    elif kind == "broadcast":
        got = None if CONTROL else comm.broadcast(x, root=root, name=name)
        expected = as_array(inputs[root], dtype)
    elif kind == "reduce_scatter":
        got = None if CONTROL else comm.reduce_scatter(x, op=OPS[op], name=name)
        expected = reduced(np.stack(inputs), dtype, op)[rank * count : (rank + 1) * count]
        shared = False
    else:  # alltoall: block `rank` of every rank's input, in rank order
        got = None if CONTROL else comm.alltoall(x, name=name)
        expected = as_array(
            np.concatenate([i[rank * count : (rank + 1) * count] for i in inputs]), dtype
        )
        shared = False
    seconds[kind] = seconds.get(kind, 0.0) + time.perf_counter() - started
    if CONTROL:
        got = expected
    if raw(got) != raw(expected):
        a = np.frombuffer(raw(got), np.uint8)
        b = np.frombuffer(raw(expected), np.uint8)
        wrong = int(np.count_nonzero(a != b)) if a.shape == b.shape else -1
        failures.append(f"{name} (algorithm {algorithm}, root {root}): {wrong} bytes differ")
    elif kind in ("reduce_scatter", "alltoall", "allgather") and raw(x) != raw(mine):
        failures.append(f"{name}: the input was modified")
    if shared:
        digest.update(raw(got))
    checked += 1


def warm_up() -> None:
    """Every kind (and schedule) once at the largest size and widest type, on each communicator:
    the schedules keep scratch buffers at their high-water mark for reuse (algorithms::Scratch),
    so resident memory steps up the first time a larger message comes. Measured from here, what
    grows is what leaks."""
    largest = max(LARGE)
    for transport, comm in comms.items():
        if CONTROL:
            continue
        x = np.ones(largest * size, np.float64)
        for algorithm in ["ring", "tree"] + (["direct"] if transport == "shm" else []):
            comm.allreduce(x, algorithm=algorithm)
            comm.allreduce(x, out=np.empty_like(x), algorithm=algorithm)
        comm.allgather(x[:largest])
        comm.broadcast(x, root=0)
        comm.reduce_scatter(x)
        comm.alltoall(x)
        comm.barrier()


warm_up()
rng = np.random.default_rng(SEED)  # the same draws on every rank
start = time.monotonic()
for index in range(COUNT):
    if index % SAMPLE_EVERY == 0:
        sample(index)
    if index == 20 and os.environ.get("SOAK_READY_DIR"):
        # Connected and running: a test may break something now.
        open(os.path.join(os.environ["SOAK_READY_DIR"], str(rank)), "w").close()
    try:
        run_one(index, rng)
    except Exception:
        failures.append(f"#{index}: raised\n{traceback.format_exc()}")
        break
    if len(failures) > 20:
        break
sample(COUNT)
elapsed = time.monotonic() - start
for comm in comms.values():
    comm.shutdown()
mapped_after_shutdown = sum("/dev/shm/ringcomm-" in line for line in open("/proc/self/maps"))
# shutdown() leaves the segments mapped until the communicator itself is released.
del comm, first
comms.clear()
gc.collect()
with open("/proc/self/maps") as maps:
    left_mapped = sum("/dev/shm/ringcomm-" in line for line in maps)
report(
    {
        "rank": rank,
        "failures": failures,
        "checked": checked,
        "digest": digest.hexdigest(),
        "samples": samples,
        "seconds": elapsed,
        "by_kind": seconds,
        "mapped_after_shutdown": mapped_after_shutdown,
        "mapped_after_release": left_mapped,
    }
)
