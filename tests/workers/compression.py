"""Compressed all-reduce (fp16/bf16, and int8/fp8 with a scale per block of 32, on the wire; float32
accumulation), checked against float64.

Reports, per case, the relative error against the float64 sum and a digest of the result (the
test checks that every rank holds the same bits).
"""

import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init()
rank, size = comm.rank, comm.size
count = 300_007
cases = {}
errors = []


def inputs(r: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(100 + r).standard_normal(count) * scale).astype(np.float32)


def record(name: str, result: np.ndarray, reference: np.ndarray) -> None:
    error = float(np.linalg.norm(result.astype(np.float64) - reference) / np.linalg.norm(reference))
    cases[name] = {
        "error": error if np.isfinite(error) else None,
        "digest": hashlib.sha256(result.tobytes()).hexdigest()[:16],
    }


exact = sum(inputs(r).astype(np.float64) for r in range(size))
for compression in ("fp16", "bf16", "int8", "fp8"):
    x = inputs(rank)
    comm.allreduce(x, compression=compression)
    record(f"{compression}/sum", x, exact)

    out = np.empty(count, np.float32)
    comm.allreduce(inputs(rank), out=out, op=ringcomm.AVG, compression=compression)
    record(f"{compression}/avg", out, exact / size)

# Values that fit float16 (|x| < 60000) but whose sums do not: the wire overflows unless the inputs
# are pre-scaled by 1/size (the sum is then the average, post-scaled back).
big = sum(inputs(r, 12000.0).astype(np.float64) for r in range(size))
x = inputs(rank, 12000.0)
comm.allreduce(x, compression="fp16")
record("fp16/sum-overflowing", x, big)
x = inputs(rank, 12000.0)
comm.allreduce(x, compression="fp16", prescale=1.0 / size, postscale=float(size))
record("fp16/sum-prescaled", x, big)

for bad, call in {
    "int32": lambda: comm.allreduce(np.ones(8, np.int32), compression="fp16"),
    "max": lambda: comm.allreduce(np.ones(8, np.float32), op=ringcomm.MAX, compression="fp16"),
    "tree": lambda: comm.allreduce(np.ones(8, np.float32), algorithm="tree", compression="bf16"),
    "name": lambda: comm.allreduce(np.ones(8, np.float32), compression="fp4"),
}.items():
    try:
        call()
        errors.append(f"{bad}: no error")
    except ValueError as error:
        errors.append(f"{bad}: ValueError: {error}")
comm.shutdown()
report({"rank": rank, "cases": cases, "errors": errors})
