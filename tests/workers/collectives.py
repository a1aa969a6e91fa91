"""Every collective x dtype x op x algorithm x count, in one launch, checked against NumPy.

Inputs are small integers (exact in any summation order, even in float16/bfloat16), so every
result is compared exactly; random float32 inputs additionally check that all ranks hold the same
bits. bool inputs are 0/1, reduced logically (sum and max: or; prod and min: and; avg refused).
Each rank reports its failures and a digest of each result; the test compares digests across
ranks.

argv: [large_count]  (elements in the "a few MiB" case; 0 skips it)
env: PIN_TO_ONE_CORE=1 runs every rank on the first core this process may use (ranks crowded
onto few cores, as the direct schedule counts them at init); SHARED_ARRAYS=1 allocates every
input and output through ringcomm.empty (memory local peers map)
"""

import hashlib
import os
import sys
import traceback

# Before torch sizes its thread pool by the cores it may use.
if os.environ.get("PIN_TO_ONE_CORE") == "1":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, __import__("os").path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

INTEGERS = ["int8", "uint8", "int16", "int32", "int64"]
DTYPES = INTEGERS + ["float16", "bfloat16", "float32", "float64", "bool"]
LOGICAL_AND = ("prod", "min")  # on bool; sum and max (and avg, which is refused) are or
OPS = {
    "sum": ringcomm.SUM,
    "avg": ringcomm.AVG,
    "min": ringcomm.MIN,
    "max": ringcomm.MAX,
    "prod": ringcomm.PROD,
}
# Every op on two types, or and and on bool, sum on the others.
REDUCE_SCATTER_OPS = {"float32": list(OPS), "int32": list(OPS), "bool": ["sum", "prod"]}
SMALL_COUNTS = [0, 1, 1009]  # empty, single element, a prime that splits unevenly everywhere

comm = ringcomm.init()
rank, size = comm.rank, comm.size
large = int(sys.argv[1]) if len(sys.argv) > 1 else 0
failures: list[str] = []
digests: dict[str, str] = {}
ALGORITHMS = (
    ["ring", "tree"]
    + (["direct"] if comm.choose_algorithm(1 << 20) == "direct" else [])
    + (["hierarchical"] if comm.cross_size > 1 else [])
)


def values(r: int, count: int, dtype: str, op: str) -> np.ndarray:
    """Rank r's input as int64: small, exact in every dtype and order of reduction."""
    i = np.arange(count, dtype=np.int64)
    if dtype == "bool":
        # Mostly false for or, mostly true for and, so that either result varies by element.
        v = (r * 7 + i * 3) % 11
        return (v != 0 if op in LOGICAL_AND else v == 0).astype(np.int64)
    if op == "prod":
        magnitude = (r + i) % 2 + 1
        sign = np.where((r + 2 * i) % 3 == 0, -1, 1) if dtype != "uint8" else 1
        return magnitude * sign
    v = (r * 7 + i * 3) % 11
    return v if dtype == "uint8" else v - 5


SHARED_ARRAYS = os.environ.get("SHARED_ARRAYS") == "1"


def as_array(v: np.ndarray, dtype: str):
    """NumPy for every dtype NumPy has; torch (through DLPack) for bfloat16. With SHARED_ARRAYS,
    in memory from ringcomm.empty."""
    if dtype == "bfloat16":
        t = torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
        if SHARED_ARRAYS:
            shared = torch.from_numpy(ringcomm.empty(len(v), np.int16)).view(torch.bfloat16)
            shared.copy_(t)
            return shared
        return t
    if SHARED_ARRAYS:
        shared = ringcomm.empty(len(v), dtype)
        shared[:] = v.astype(dtype)
        return shared
    return v.astype(dtype)


def full_like(x: np.ndarray, value) -> np.ndarray:
    """np.full_like, in memory from ringcomm.empty with SHARED_ARRAYS."""
    if not SHARED_ARRAYS:
        return np.full_like(x, value)
    out = ringcomm.empty(x.shape, x.dtype)
    out.fill(value)
    return out


def to_float64(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.to(torch.float64).numpy()
    return np.asarray(a, dtype=np.float64)


def reference(count: int, dtype: str, op: str) -> np.ndarray:
    """The expected result in float64 (exact: see the module docstring), rounded like ringcomm."""
    stack = (
        np.stack([values(r, count, dtype, op) for r in range(size)])
        if count
        else np.zeros((size, 0), np.int64)
    )
    if dtype == "bool":  # 0/1 values: or is the maximum, and the minimum
        return (stack.min(axis=0) if op in LOGICAL_AND else stack.max(axis=0)).astype(np.float64)
    if op in ("sum", "avg"):
        exact = stack.sum(axis=0)
    elif op == "min":
        exact = stack.min(axis=0)
    elif op == "max":
        exact = stack.max(axis=0)
    else:
        exact = stack.prod(axis=0)
    if dtype in INTEGERS:
        wrapped = exact.astype(dtype)  # wraps like the core's integer arithmetic
        if op == "avg":
            wrapped = (np.trunc(wrapped.astype(np.float64) / size)).astype(dtype)
        return wrapped.astype(np.float64)
    if op == "avg":
        if dtype == "float64":
            return exact.astype(np.float64) / size
        # float32 division, then rounding to the element type, as finishAverage does
        quotient = exact.astype(np.float32) / np.float32(size)
        return (
            to_float64(as_array(quotient, dtype))
            if dtype != "float32"
            else quotient.astype(np.float64)
        )
    return exact.astype(np.float64)


def digest(a) -> str:
    if isinstance(a, torch.Tensor):
        a = a.view(torch.int16).numpy() if a.dtype == torch.bfloat16 else a.numpy()
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def check(name: str, got, expected: np.ndarray) -> None:
    got64 = to_float64(got).reshape(-1)
    if got64.shape != expected.shape or not np.array_equal(got64, expected):
        bad = np.flatnonzero(got64 != expected) if got64.shape == expected.shape else []
        failures.append(
            f"{name}: {len(bad)} wrong, first {bad[:3].tolist()}: "
            f"got {got64[bad[:3]].tolist()} expected {expected[bad[:3]].tolist()}"
        )
    digests[name] = digest(got)


def case(name: str, body) -> None:
    try:
        body()
    except Exception:  # a failing case must not hide the others
        failures.append(f"{name}: raised\n{traceback.format_exc()}")


def allreduce_cases() -> None:
    for algorithm in ALGORITHMS:
        for dtype in DTYPES:
            for op in OPS:
                counts = SMALL_COUNTS + ([large] if large and op in ("sum", "max") else [])
                for count in counts:
                    name = f"allreduce/{algorithm}/{dtype}/{op}/{count}"

                    def body(count=count, dtype=dtype, op=op, algorithm=algorithm, name=name):
                        x = as_array(values(rank, count, dtype, op), dtype)
                        if dtype == "bool" and op == "avg":
                            try:
                                comm.allreduce(x, op=OPS[op], algorithm=algorithm)
                            except ValueError as error:
                                if "avg is not defined for bool" not in str(error):
                                    failures.append(f"{name}: {error}")
                            else:
                                failures.append(f"{name}: an average of bools was not refused")
                            return
                        comm.allreduce(x, op=OPS[op], algorithm=algorithm)
                        check(name, x, reference(count, dtype, op))

                    case(name, body)
        # Out of place, and asynchronous.
        name = f"allreduce/{algorithm}/out-of-place"

        def out_of_place(algorithm=algorithm, name=name):
            x = as_array(values(rank, 1009, "float32", "sum"), "float32")
            keep = x.copy()
            out = full_like(x, np.nan)
            comm.allreduce(x, out=out, algorithm=algorithm)
            check(name, out, reference(1009, "float32", "sum"))
            if not np.array_equal(x, keep):
                failures.append(f"{name}: input was modified")

        case(name, out_of_place)

        def asynchronous(algorithm=algorithm):
            xs = [as_array(values(rank, 4099, "int32", "sum"), "int32") for _ in range(3)]
            works = [comm.allreduce(x, algorithm=algorithm, async_op=True) for x in xs]
            for k, work in enumerate(works):
                check(
                    f"allreduce/{algorithm}/async/{k}", work.wait(), reference(4099, "int32", "sum")
                )

        case(f"allreduce/{algorithm}/async", asynchronous)

        def random_floats(algorithm=algorithm):
            # Not exact: every rank must still hold the same bits, close to the float64 sum.
            count = max(large, 100003)
            rng = np.random.default_rng(1234 + rank)
            x = rng.standard_normal(count).astype(np.float32)
            everyone = np.stack(
                [
                    np.random.default_rng(1234 + r).standard_normal(count).astype(np.float32)
                    for r in range(size)
                ]
            ).astype(np.float64)
            again = x.copy()
            comm.allreduce(x, algorithm=algorithm)
            comm.allreduce(again, algorithm=algorithm)  # same input, same schedule: same bits
            if not np.array_equal(x.view(np.uint32), again.view(np.uint32)):
                failures.append(f"allreduce/{algorithm}/random: not deterministic run to run")
            error = np.abs(x - everyone.sum(axis=0)).max()
            if error > 1e-4 * size:
                failures.append(f"allreduce/{algorithm}/random: error {error} vs float64")
            digests[f"allreduce/{algorithm}/random"] = digest(x)

        case(f"allreduce/{algorithm}/random", random_floats)


def reduce_scatter_cases() -> None:
    for dtype in DTYPES:
        for op in REDUCE_SCATTER_OPS.get(dtype, ["sum"]):
            # Large for float32: several of the single-copy path's chunks and the ring's segments.
            bigger = [large] if large and dtype == "float32" else []
            for count in SMALL_COUNTS + bigger:
                name = f"reduce_scatter/{dtype}/{op}/{count}"

                def body(count=count, dtype=dtype, op=op, name=name):
                    x = as_array(values(rank, count * size, dtype, op), dtype)
                    out = comm.reduce_scatter(x, op=OPS[op])
                    expected = reference(count * size, dtype, op)[rank * count : (rank + 1) * count]
                    check(name, out, expected)

                case(name, body)


def allgather_cases() -> None:
    for dtype in DTYPES:
        for count in SMALL_COUNTS + ([large] if large else []):
            name = f"allgather/{dtype}/{count}"

            def body(count=count, dtype=dtype, name=name):
                x = as_array(values(rank, count, dtype, "sum"), dtype)
                out = comm.allgather(x)
                expected = np.concatenate([values(r, count, dtype, "sum") for r in range(size)])
                check(name, out, expected.astype(np.float64))

            case(name, body)


def broadcast_reduce_cases() -> None:
    for root in range(size):
        for count in [0, 1, 1009, 300_000]:  # 300k float32 = 1.2 MB: the pipelined chain
            for dtype in ["float32"] + (["int16", "bool"] if count == 1009 else []):
                name = f"broadcast/root{root}/{dtype}/{count}"

                def bcast(root=root, count=count, dtype=dtype, name=name):
                    x = as_array(values(rank, count, dtype, "sum"), dtype)
                    comm.broadcast(x, root=root)
                    check(name, x, values(root, count, dtype, "sum").astype(np.float64))

                case(name, bcast)
        for op in OPS:
            name = f"reduce/root{root}/{op}"

            def red(root=root, op=op, name=name):
                x = as_array(values(rank, 1009, "int64", op), "int64")
                result = comm.reduce(x, op=OPS[op], root=root)
                if rank == root:
                    check(name, result, reference(1009, "int64", op))
                elif result is not None:
                    failures.append(f"{name}: non-root got {type(result)}")

            case(name, red)


def personalised_cases() -> None:
    for count in [0, 1, 1009]:

        def a2a(count=count):
            x = np.array([rank * 1000 + j for j in range(size) for _ in range(count)], np.int32)
            out = comm.alltoall(x)
            expected = np.array(
                [j * 1000 + rank for j in range(size) for _ in range(count)], np.float64
            )
            check(f"alltoall/{count}", out, expected)

        case(f"alltoall/{count}", a2a)
        for root in sorted({0, size - 1}):

            def gat(count=count, root=root):
                x = np.full(count, rank, np.float64)
                out = comm.gather(x, root=root)
                if rank == root:
                    check(
                        f"gather/root{root}/{count}",
                        out,
                        np.repeat(np.arange(size, dtype=np.float64), count),
                    )

            case(f"gather/root{root}/{count}", gat)

            def sca(count=count, root=root):
                x = np.repeat(np.arange(size, dtype=np.int64), count) if rank == root else None
                out = comm.scatter(x, out=np.empty(count, np.int64), root=root)
                check(f"scatter/root{root}/{count}", out, np.full(count, rank, np.float64))

            case(f"scatter/root{root}/{count}", sca)


def point_to_point_cases() -> None:
    def ring_exchange():
        if size == 1:
            return
        right, left = (rank + 1) % size, (rank - 1) % size
        outgoing = np.arange(1009, dtype=np.float64) + rank
        incoming = np.empty_like(outgoing)
        send = comm.send(outgoing, right, tag=7, async_op=True)
        comm.recv(incoming, left, tag=7)
        send.wait()
        check("send_recv", incoming, np.arange(1009, dtype=np.float64) + left)

    case("send_recv", ring_exchange)
    case("barrier", lambda: [comm.barrier() for _ in range(5)])


def torch_cases() -> None:
    def tensor_allreduce():
        t = torch.arange(1009, dtype=torch.float32) + rank
        comm.allreduce(t, op=ringcomm.MAX)
        check("torch/allreduce/max", t, np.arange(1009, dtype=np.float64) + size - 1)

    case("torch/allreduce/max", tensor_allreduce)


transports = [comm.transport_to(peer) for peer in range(size)]
allreduce_cases()
reduce_scatter_cases()
allgather_cases()
broadcast_reduce_cases()
personalised_cases()
point_to_point_cases()
torch_cases()
comm.shutdown()
report(
    {
        "rank": rank,
        "failures": failures,
        "digests": digests,
        "algorithms": ALGORITHMS,
        "transports": transports,
    }
)
