"""The tensor queue's reducescatter and alltoall (include/ringcomm/tensor_queue.h), through the
core's own bindings: results against NumPy, and disagreements named on every rank at once.

argv: none. Every check adds to the failures reported.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402
from ringcomm import _core  # noqa: E402

comm = ringcomm.init()
queue = _core.TensorQueue.create(comm._core.duplicate())
rank, size = comm.rank, comm.size
failures = Failures()
check, case = failures.check, failures.case


def run(op, name, x, **kwargs):
    work = queue.submit(_core.TensorRequest(op, name, x, shape=list(x.shape), **kwargs))
    work.wait(60.0)
    return work


def result(work, dtype, row_shape) -> np.ndarray:
    return np.frombuffer(bytes(work.gathered), dtype=dtype).reshape((-1,) + tuple(row_shape))


def reducescatter_cases():
    for rows in (size * 3, size * 3 + 1, 1, 0):  # even, uneven, fewer rows than ranks, none
        for dtype in (np.float32, np.float64, np.int32, np.int64):
            x = (np.arange(rows * 5, dtype=np.int64).reshape(rows, 5) % 7 + rank).astype(dtype)
            total = sum(
                (np.arange(rows * 5, dtype=np.int64).reshape(rows, 5) % 7 + r).astype(dtype)
                for r in range(size)
            )
            work = run(_core.TensorOp.reducescatter, f"rs/{rows}/{np.dtype(dtype).name}", x)
            parts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
            first = sum(parts[:rank])
            got = result(work, dtype, (5,))
            check(
                f"reducescatter {rows} rows {np.dtype(dtype).name}/rows", list(work.rows) == parts
            )
            check(
                f"reducescatter {rows} rows {np.dtype(dtype).name}",
                np.array_equal(got, total[first : first + parts[rank]]),
                (got, total[first : first + parts[rank]]),
            )
    x = np.full((size * 2, 3), float(rank + 1), np.float32)
    work = run(
        _core.TensorOp.reducescatter,
        "rs/avg/scaled",
        x,
        reduce_op=ringcomm.AVG,
        prescale=2.0,
        postscale=0.5,
    )
    mean = (size + 1) / 2
    check("reducescatter avg scaled", np.allclose(result(work, np.float32, (3,)), mean))
    work = run(_core.TensorOp.reducescatter, "rs/max/uneven", x[:1] + rank, reduce_op=ringcomm.MAX)
    if rank == 0:
        check("reducescatter max uneven", np.allclose(result(work, np.float32, (3,)), 2 * size - 1))


def alltoall_cases():
    # rank r sends (r + j) % 3 rows to rank j, each row filled with 100 r + j.
    splits = [(rank + j) % 3 for j in range(size)]
    x = np.concatenate([np.full((n, 2), 100 * rank + j, np.int64) for j, n in enumerate(splits)])
    x = x.reshape(-1, 2)
    work = run(_core.TensorOp.alltoall, "a2a/splits", x, splits=splits)
    got = result(work, np.int64, (2,))
    received = [(r + rank) % 3 for r in range(size)]
    expected = np.concatenate(
        [np.full((n, 2), 100 * r + rank, np.int64) for r, n in enumerate(received)]
    ).reshape(-1, 2)
    check("alltoall splits/rows", list(work.rows) == received, list(work.rows))
    check("alltoall splits", np.array_equal(got, expected), (got, expected))
    # Equal splits of each rank's own first dimension, which differ between ranks.
    own = np.full(((rank + 1) * size, 4), float(rank), np.float32)
    work = run(_core.TensorOp.alltoall, "a2a/equal", own)
    got = result(work, np.float32, (4,))
    expected = np.concatenate([np.full((r + 1, 4), float(r), np.float32) for r in range(size)])
    check("alltoall equal splits", np.array_equal(got, expected), (got.shape, expected.shape))


def refusals():
    bad_splits = [1] * (size + 1)
    for name, request in (
        ("0-d", lambda: run(_core.TensorOp.reducescatter, "rs/0d", np.float32(1.0))),
        (
            "splits",
            lambda: run(_core.TensorOp.alltoall, "a2a/bad", np.ones((3, 2)), splits=bad_splits),
        ),
    ):
        try:
            request()
            failures.append(f"{name}: not refused")
        except ValueError as error:
            check(f"{name} message", "alltoall" in str(error) or "dimension" in str(error), error)


def mismatches():
    if size == 1:
        return
    # Rank 0 has one row more: every rank learns at once, naming both ranks, and goes on.
    x = np.ones((size * 2 + (1 if rank == 0 else 0), 3), np.float32)
    started = time.monotonic()
    try:
        run(_core.TensorOp.reducescatter, "rs/mismatch", x)
        failures.append("reducescatter mismatch: not detected")
    except ringcomm.MismatchError as error:
        text = str(error)
        check("mismatch names both", "rank 0" in text and "rank 1" in text, text)
        check("mismatch names the tensor", "rs/mismatch" in text, text)
    check("mismatch at once", time.monotonic() - started < 10, time.monotonic() - started)
    y = np.ones((size, 2 + (1 if rank == size - 1 else 0)), np.float32)
    try:
        run(_core.TensorOp.alltoall, "a2a/mismatch", y)
        failures.append("alltoall mismatch: not detected")
    except ringcomm.MismatchError as error:
        check("alltoall mismatch text", "a2a/mismatch" in str(error), str(error))
    z = np.ones((size, 2), np.float32)
    work = run(_core.TensorOp.reducescatter, "rs/after", z)
    check("queue goes on", np.allclose(result(work, np.float32, (2,)), size))


for body in (reducescatter_cases, alltoall_cases, refusals, mismatches):
    case(body.__name__, body)
queue.shutdown()
comm.shutdown()
report({"failures": failures})
