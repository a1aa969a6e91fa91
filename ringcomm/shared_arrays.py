"""Arrays that the ranks on one host can map: the single-copy all-reduce reads and writes them
with loads and stores instead of the kernel's copies (src/transport/shm/shared_buffers.h).

    grads = ringcomm.empty(25_000_000, np.float32)   # instead of np.empty
    comm.allreduce(grads)
    tensor = torch.from_numpy(grads)                   # the same memory, for torch

It pays where every local rank's buffer comes from here and the all-reduce is large enough for
the single-copy path (RINGCOMM_SHM_CMA_MIN_BYTES); anywhere else such an array behaves as any
other. The memory is freed when the last array viewing it goes.
"""

from __future__ import annotations

import math
from typing import Union

import numpy as np

from ringcomm import _core

Shape = Union[int, tuple[int, ...], list[int]]


def empty(shape: Shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised C-ordered array of ``shape`` and ``dtype`` in memory local peers can map
    (as ``numpy.empty``)."""
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise ValueError(f"shape: expected non-negative integers, got {shape!r}")
    dtype = np.dtype(dtype)
    nbytes = math.prod(dims) * dtype.itemsize
    too_big = MemoryError(
        f"unable to allocate {nbytes} bytes of shared memory for an array of shape {dims} "
        f"and dtype {dtype}: more than this machine's memory and swap"
    )
    if nbytes >= 1 << 63:  # beyond any size_t the allocation could take
        raise too_big
    try:
        raw = _core.shared_buffer(nbytes)
    except MemoryError:
        raise too_big from None
    return raw[:nbytes].view(dtype).reshape(dims)


def zeros(shape: Shape, dtype=np.float32) -> np.ndarray:
    """As ``empty``, filled with zeros (as ``numpy.zeros``): a new memfd reads as zeros, and its
    pages are allocated when first written, as calloc()'s are."""
    return empty(shape, dtype)
