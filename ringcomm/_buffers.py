"""Shapes and new arrays for collectives that allocate their output.

Decoding an array into (address, count, dtype) happens in the bindings (bindings/arrays.cc):
the buffer protocol for host memory, DLPack or ``__cuda_array_interface__`` otherwise. Here: only
what needs the array's shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_KDLCPU = 1


def _as_numpy(obj: Any) -> np.ndarray:
    """A NumPy view of a host array that has no shape of its own: through DLPack when it speaks
    it (a library other than NumPy, torch and CuPy), else the buffer protocol."""
    if (
        hasattr(obj, "__dlpack__")
        and getattr(obj, "__dlpack_device__", lambda: (_KDLCPU,))()[0] == _KDLCPU
    ):
        return np.from_dlpack(obj)
    return np.asarray(memoryview(obj))


def shape_of(obj: Any) -> tuple:
    shape = getattr(obj, "shape", None)
    if shape is None:
        try:
            shape = _as_numpy(obj).shape
        except TypeError:
            raise TypeError(
                f"x must be an array (NumPy, torch, anything with __dlpack__ or the "
                f"buffer protocol); got {type(obj).__name__}"
            ) from None
    return tuple(shape) or (1,)


def empty_like(obj: Any, shape: tuple) -> Any:
    """A new array of the same kind, dtype and device as ``obj`` (torch for torch, CuPy for CuPy,
    NumPy otherwise)."""
    if hasattr(obj, "new_empty"):
        return obj.new_empty(shape)
    if isinstance(obj, np.ndarray):
        return np.empty(shape, dtype=obj.dtype)
    if type(obj).__module__.startswith("cupy"):
        import cupy

        with cupy.cuda.Device(obj.device.id):
            return cupy.empty(shape, dtype=obj.dtype)
    if hasattr(obj, "__cuda_array_interface__"):
        raise TypeError(
            f"cannot allocate a result like a {type(obj).__name__} (CUDA memory); pass out="
        )
    return np.empty(shape, dtype=_as_numpy(obj).dtype)


def stacked_shape(obj: Any, parts: int) -> tuple:
    """``parts`` copies of ``obj`` concatenated along the first axis."""
    shape = shape_of(obj)
    return (shape[0] * parts,) + shape[1:]


def split_shape(obj: Any, parts: int, name: str) -> tuple:
    """One of ``parts`` equal pieces of ``obj`` along its first axis."""
    shape = shape_of(obj)
    if shape[0] % parts != 0:
        raise ValueError(
            f"{name} has {shape[0]} rows along its first axis, which does not split "
            f"evenly across {parts} ranks"
        )
    return (shape[0] // parts,) + shape[1:]
