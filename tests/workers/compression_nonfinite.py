"""A NaN or an infinity in an all-reduce through the 8-bit codecs (int8, fp8) spoils only its own
value: one rank's inf, -inf or NaN at one place, or a sum that overflows float32 at some hop.

Per case, reports where the result is not finite and what it holds there (int8 keeps float32's
inf, -inf or NaN; fp8 makes NaN), whether every value more than a block away is the very value
of the same all-reduce without the special one, whether the special value's neighbours are finite
and near the float64 sum, and a digest of the result (the test checks every rank holds the same
bits).
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
BLOCK = 32  # the codecs' block of values
# How far a neighbour of the special value may be from the float64 sum, as a share of the largest
# sum near it: a few roundings of the block's scale (int8: 1/126 of the block's largest, fp8: 1/16
# of a value) over the hops.
NEAR = {"int8": 0.05, "fp8": 0.3}
HUGE = np.float32(3e38)  # two of them overflow float32


def inputs(count: int, r: int) -> np.ndarray:
    return np.random.default_rng(1000 * count + r).standard_normal(count).astype(np.float32)


def kind(value: float) -> str:
    return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")


def allreduce(x: np.ndarray, compression) -> np.ndarray:
    out = x.copy()
    comm.allreduce(out, compression=compression)
    return out


def run_case(compression: str, count: int, special: str, at: int) -> dict:
    holder = (count + at) % size  # the rank with the special value (all of them for overflow)
    mine = inputs(count, rank)
    mine[at] = 0.0
    clean = allreduce(mine, compression)
    if special == "overflow":
        mine[at] = HUGE
    elif rank == holder:
        mine[at] = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan}[special]
    result = allreduce(mine, compression)
    float32 = allreduce(mine, None)

    exact = sum(inputs(count, r).astype(np.float64) for r in range(size))
    exact[at] = 0.0
    near = np.zeros(count, bool)
    near[max(0, at - BLOCK + 1) : at + BLOCK] = True
    near[at] = False
    far = ~near
    far[at] = False
    if special == "overflow":
        # A value of 3e38 in a block makes its neighbours too small for the block's scale: they
        # may round to 0, whatever happens to the sum. Finite is all that is asked of them.
        near_ok = bool(np.isfinite(result[near]).all())
    else:
        largest = float(np.abs(exact[near]).max()) if near.any() else 0.0
        error = np.abs(result[near].astype(np.float64) - exact[near])
        within = (error <= NEAR[compression] * largest).all()
        near_ok = bool(np.isfinite(result[near]).all() and within)
    nonfinite = np.flatnonzero(~np.isfinite(result)).tolist()
    return {
        "nonfinite": nonfinite,
        "kinds": [kind(result[i]) for i in nonfinite],
        "float32": kind(float32[at]) if not np.isfinite(float32[at]) else "finite",
        "far_unchanged": np.array_equal(result[far].view(np.int32), clean[far].view(np.int32)),
        "near_ok": near_ok,
        "digest": hashlib.sha256(result.tobytes()).hexdigest()[:16],
    }


cases = {}
for compression in ("int8", "fp8"):
    for count in (1, 63, 200, 1000, 4099, 100_003):
        # The first, last and middle values, and the first of the second rank's chunk.
        places = sorted({0, count // 2, count - 1, min(count - 1, -(-count // size))})
        for special in ("inf", "-inf", "nan", "overflow"):
            for at in places:
                name = f"{compression}/{count}/{special}/{at}"
                cases[name] = run_case(compression, count, special, at)
comm.shutdown()
report({"rank": rank, "cases": cases})
