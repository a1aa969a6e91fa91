"""A NumPy model of Horovod's Adasum all-reduce, rank by rank, with ringcomm's rounding
(src/algorithms/adasum.h): it must give the core's bits exactly.

Horovod's recursion (horovod/common/ops/adasum/adasum.h, FusedAllreduce): at distance
d = 1, 2, ..., p/2, rank r pairs with r ^ d; the rank with r & d == 0 keeps the first half
(n >> 1 elements) of the range it holds, its peer the rest, and each receives the other's copy of
the half it keeps. Each tensor's dot product and squared norms over the half kept are summed over
the group of 2d ranks that share r // 2d; both ranks then combine their half as
a' = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, a being the lower group's vector.

Rounding, as the core does it: partial sums in float64 in element order (np.cumsum is sequential);
the group's sums by recursive doubling (partners at distance 1, 2, ..., d); float32 and float64
combined in float64, float16 and bfloat16 in float32 with float32 coefficients, each product
rounded (no fused multiply-add).

bfloat16 arrays are uint16 arrays of bfloat16 bits (NumPy has no bfloat16).
"""

from __future__ import annotations

import math
import sys

import numpy as np

SMALLEST_NORM = math.sqrt(sys.float_info.min)  # Horovod's sqrt(DBL_MIN)


def widen(x: np.ndarray, dtype: str) -> np.ndarray:
    """The values as float64 (exact for every type here)."""
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def to_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (finite values)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def sequential_sum(values: np.ndarray) -> float:
    return float(np.cumsum(values)[-1]) if values.size else 0.0


def coefficient(dot: float, norm_sq: float) -> float:
    return 1.0 - dot / norm_sq * 0.5 if norm_sq >= SMALLEST_NORM else 1.0


def combine(a: np.ndarray, b: np.ndarray, ca: float, cb: float, dtype: str) -> np.ndarray:
    if dtype in ("float32", "float64"):
        return (ca * a.astype(np.float64) + cb * b.astype(np.float64)).astype(dtype)
    scaled = np.float32(ca) * to_float32(a, dtype) + np.float32(cb) * to_float32(b, dtype)
    return bfloat16_bits(scaled) if dtype == "bfloat16" else scaled.astype(np.float16)


def counts_in(tensor_counts, offset: int, count: int) -> list:
    inside, start = [], 0
    for n in tensor_counts:
        lo, hi = max(start, offset), min(start + n, offset + count)
        inside.append(max(0, hi - lo))
        start += n
    return inside


def adasum(inputs: list, dtype: str, tensor_counts=None) -> np.ndarray:
    """The result every rank holds, for ``inputs[r]`` the input of rank r (1-d arrays of one
    length; a power-of-two number of them)."""
    size = len(inputs)
    assert size & (size - 1) == 0
    count = len(inputs[0])
    tensors = list(tensor_counts) if tensor_counts else [count]
    buffers = [np.array(x, copy=True) for x in inputs]
    ranges = [(0, count)] * size
    distance = 1
    while distance < size:
        keeps, lefts = [], []
        for r in range(size):
            offset, n = ranges[r]
            half = n >> 1
            left = (r & distance) == 0
            keeps.append((offset, half) if left else (offset + half, n - half))
            lefts.append(left)
        # Each rank's part of (dot, |left|^2, |right|^2) per tensor, over the half it keeps.
        partials = []
        for r in range(size):
            offset, n = keeps[r]
            mine = widen(buffers[r][offset : offset + n], dtype)
            theirs = widen(buffers[r ^ distance][offset : offset + n], dtype)
            sums, at = [], 0
            for k in counts_in(tensors, offset, n):
                a, b = mine[at : at + k], theirs[at : at + k]
                an, bn = sequential_sum(a * a), sequential_sum(b * b)
                sums += [sequential_sum(a * b)] + ([an, bn] if lefts[r] else [bn, an])
                at += k
            partials.append(np.array(sums, dtype=np.float64))
        j = 1
        while j <= distance:
            partials = [partials[r] + partials[r ^ j] for r in range(size)]
            j <<= 1
        combined = []
        for r in range(size):
            offset, n = keeps[r]
            mine = buffers[r][offset : offset + n]
            theirs = buffers[r ^ distance][offset : offset + n]
            pieces, at = [], 0
            for i, k in enumerate(counts_in(tensors, offset, n)):
                dot, left_sq, right_sq = partials[r][3 * i : 3 * i + 3]
                cl, cr = coefficient(dot, left_sq), coefficient(dot, right_sq)
                ca, cb = (cl, cr) if lefts[r] else (cr, cl)
                pieces.append(combine(mine[at : at + k], theirs[at : at + k], ca, cb, dtype))
                at += k
            combined.append(np.concatenate(pieces) if pieces else mine[:0])
        for r in range(size):
            offset, n = keeps[r]
            buffers[r][offset : offset + n] = combined[r]
        ranges = keeps
        distance <<= 1
    result = np.empty_like(buffers[0])
    for r in range(size):
        offset, n = ranges[r]
        result[offset : offset + n] = buffers[r][offset : offset + n]
    return result


def adasum_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The textbook combination in float64, for checks that need no exact bits."""
    dot = float(a @ b)
    return coefficient(dot, float(a @ a)) * a + coefficient(dot, float(b @ b)) * b
