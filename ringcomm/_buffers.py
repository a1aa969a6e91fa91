"""Turning user arrays into (address, element count, dtype) for the core.

Accepted: NumPy arrays, anything with ``__dlpack__`` (torch CPU tensors, CuPy on the host...),
and anything that speaks the buffer protocol (bytearray, array.array, memoryview). Arrays must be
contiguous; the caller keeps them alive while a collective runs (``Work`` holds a reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ringcomm import _core

_NUMPY_TYPES = {
    "int8": _core.DataType.int8,
    "uint8": _core.DataType.uint8,
    "int32": _core.DataType.int32,
    "int64": _core.DataType.int64,
    "float16": _core.DataType.float16,
    "bfloat16": _core.DataType.bfloat16,  # ml_dtypes.bfloat16, if the user has it
    "float32": _core.DataType.float32,
    "float64": _core.DataType.float64,
}

# DLPack (type code, bits) -> DataType. Codes: 0 int, 1 uint, 2 float, 4 bfloat.
_DLPACK_TYPES = {
    (0, 8): _core.DataType.int8,
    (1, 8): _core.DataType.uint8,
    (0, 32): _core.DataType.int32,
    (0, 64): _core.DataType.int64,
    (2, 16): _core.DataType.float16,
    (4, 16): _core.DataType.bfloat16,
    (2, 32): _core.DataType.float32,
    (2, 64): _core.DataType.float64,
}

_ITEM_SIZES = {
    _core.DataType.int8: 1, _core.DataType.uint8: 1, _core.DataType.int32: 4,
    _core.DataType.int64: 8, _core.DataType.float16: 2, _core.DataType.bfloat16: 2,
    _core.DataType.float32: 4, _core.DataType.float64: 8,
}

SUPPORTED = "int8, uint8, int32, int64, float16, bfloat16, float32, float64"
_CPU_DEVICES = (1, 3)  # kDLCPU, kDLCUDAHost


@dataclass
class Buffer:
    """A contiguous run of elements in host memory."""

    address: int
    count: int
    dtype: Any  # _core.DataType
    shape: tuple
    keepalive: Any  # the objects that own the memory

    @property
    def nbytes(self) -> int:
        return self.count * _ITEM_SIZES[self.dtype]


def item_size(dtype) -> int:
    return _ITEM_SIZES[dtype]


def _from_numpy(array: np.ndarray, name: str, writable: bool) -> Buffer:
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (got strides {array.strides}); "
                         "pass np.ascontiguousarray(...)")
    if writable and not array.flags.writeable:
        raise ValueError(f"{name} is read-only, but this collective writes into it")
    dtype = _NUMPY_TYPES.get(array.dtype.name)
    if dtype is None or array.dtype.byteorder == ">":
        raise TypeError(f"{name} has dtype {array.dtype}; ringcomm supports {SUPPORTED}")
    address = array.__array_interface__["data"][0]
    return Buffer(address, array.size, dtype, array.shape, array)


def _contiguous(shape, strides) -> bool:
    if not strides or 0 in shape:  # an empty array's strides mean nothing
        return True
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _from_dlpack(obj: Any, name: str) -> Buffer:
    if getattr(obj, "requires_grad", False):
        obj = obj.detach()  # same memory; torch refuses to export tensors that require grad
    device = getattr(obj, "__dlpack_device__", None)
    if device is not None and device()[0] not in _CPU_DEVICES:
        raise TypeError(f"{name} is on a device (DLPack device {device()}); ringcomm collectives "
                        "take host memory for now")
    capsule = obj.__dlpack__()
    view = _core.read_dlpack(capsule)
    if view["device_type"] not in _CPU_DEVICES:
        raise TypeError(f"{name} is not in host memory (DLPack device type {view['device_type']})")
    dtype = _DLPACK_TYPES.get((view["code"], view["bits"]))
    if dtype is None or view["lanes"] != 1:
        raise TypeError(f"{name} has an unsupported element type (DLPack code {view['code']}, "
                        f"{view['bits']} bits); ringcomm supports {SUPPORTED}")
    shape = tuple(view["shape"])
    if not _contiguous(shape, view["strides"]):
        raise ValueError(f"{name} must be contiguous (got strides {tuple(view['strides'])}); "
                         "call .contiguous() first")
    count = int(np.prod(shape)) if shape else 1
    return Buffer(view["data"], count, dtype, shape, (obj, capsule))


def as_buffer(obj: Any, name: str, writable: bool = False) -> Buffer:
    """Describes ``obj``'s memory; raises TypeError/ValueError naming ``name`` when it can't."""
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, name, writable)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{name} must be an array (NumPy, torch, anything with __dlpack__ or the "
                        f"buffer protocol); got {type(obj).__name__}") from None
    if writable and view.readonly:
        raise ValueError(f"{name} is read-only, but this collective writes into it")
    return _from_numpy(np.asarray(view), name, writable)


def empty_like(obj: Any, shape: tuple) -> Any:
    """A new array of the same kind and dtype as ``obj`` (torch for torch, NumPy otherwise)."""
    if hasattr(obj, "new_empty"):
        return obj.new_empty(shape)
    if isinstance(obj, np.ndarray):
        return np.empty(shape, dtype=obj.dtype)
    return np.empty(shape, dtype=np.asarray(memoryview(obj)).dtype)
