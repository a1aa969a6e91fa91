"""Inputs whose reduction is exact in any order, and counting the elements a result got wrong.

Every value is a small integer, so sums, minima, maxima and products are exact in every dtype
(float16 and bfloat16 included) whatever order an algorithm adds them in; the expected result can
then be compared element for element, with no tolerance:
  sum, min, max:  rank r holds (r + i) % 7 at index i
  avg:            the same, except that the last rank holds what makes the sum a multiple of p
                  (at most p - 1), so the average is an integer too and int8 does not overflow
  prod:           1 + (r + i) % 2, so products are powers of two
bool holds the values' truth (non-zero). They are never negative, so the truth of an expected sum
or max is the or of the inputs' truths, and that of a min or product their and: what bool
reductions compute (bool has no avg). In bool a broadcast's sentinel is just true, so an element
the broadcast failed to write shows only where the root's is false.

The values repeat every _PERIOD elements, which lets fill() and count_wrong() work through a
buffer of any size (1 GiB included) in chunks, with one precomputed block and no full-size copy.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Values = Callable[[np.ndarray], np.ndarray]  # global element index -> float64 values

_PERIOD = 14  # a multiple of 7 (sum, min, max, avg) and of 2 (prod)
_CHUNK = _PERIOD * 65536
_SENTINEL = 9.0  # never produced by the patterns: marks a buffer a broadcast must overwrite


def input_values(op: str, rank: int, nranks: int) -> Values:
    if op == "prod":
        return lambda i: 1.0 + (rank + i) % 2
    if op == "avg" and rank == nranks - 1 and nranks > 1:
        others = [input_values("sum", r, nranks) for r in range(nranks - 1)]
        return lambda i: np.mod(-sum(values(i) for values in others), nranks)
    return lambda i: 1.0 * ((rank + i) % 7)


def reduced_values(op: str, nranks: int) -> Values:
    """What a reduction of input_values over all ranks gives, computed exactly in float64."""
    combine = {
        "sum": np.add,
        "avg": np.add,
        "min": np.minimum,
        "max": np.maximum,
        "prod": np.multiply,
    }[op]
    inputs = [input_values(op, r, nranks) for r in range(nranks)]

    def values(i: np.ndarray) -> np.ndarray:
        result = inputs[0](i)
        for rank_values in inputs[1:]:
            result = combine(result, rank_values(i))
        return result / nranks if op == "avg" else result

    return values


def sentinel_values() -> Values:
    return lambda i: np.full(i.shape, _SENTINEL)


def _block(values: Values, like):
    """values at indices 0 .. _CHUNK + _PERIOD, in the dtype, library (NumPy/torch) and device
    of like."""
    block = values(np.arange(_CHUNK + _PERIOD, dtype=np.int64))
    if isinstance(like, np.ndarray):
        return block.astype(like.dtype)
    import torch

    return torch.from_numpy(block).to(device=like.device, dtype=like.dtype)


def _chunks(count: int, offset: int):
    """(start, stop, phase): slice [start, stop) of a buffer whose first element has global index
    ``offset`` matches block[phase : phase + stop - start]."""
    for start in range(0, count, _CHUNK):
        stop = min(start + _CHUNK, count)
        yield start, stop, (offset + start) % _PERIOD


def fill(x, values: Values, offset: int = 0) -> None:
    """x[j] = values(offset + j) for a 1-D NumPy array or torch tensor."""
    block = _block(values, x)
    for start, stop, phase in _chunks(len(x), offset):
        x[start:stop] = block[phase : phase + stop - start]


def count_wrong(x, values: Values, offset: int = 0) -> int:
    """How many x[j] differ from values(offset + j) (NaN counts as wrong)."""
    block = _block(values, x)
    wrong = 0
    for start, stop, phase in _chunks(len(x), offset):
        wrong += int((x[start:stop] != block[phase : phase + stop - start]).sum())
    return wrong
