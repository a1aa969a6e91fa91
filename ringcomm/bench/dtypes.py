"""Element types by name, and buffers of them in NumPy or torch."""

from __future__ import annotations

import numpy as np

ITEMSIZE = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,  # reduced logically: sum and max are or, prod and min and; no avg
}
DTYPES = tuple(ITEMSIZE)
NUMPY_LACKS = ("bfloat16",)  # NumPy has no bfloat16: such buffers are torch tensors


def numpy_array(count: int, dtype: str) -> np.ndarray:
    return np.empty(count, dtype=dtype)


def torch_tensor(count: int, dtype: str):
    import torch

    return torch.empty(count, dtype=getattr(torch, dtype))


def shared_array(count: int, dtype: str):
    """A buffer in memory the local ranks can map (ringcomm.empty); bfloat16 as a torch view."""
    import ringcomm

    if dtype in NUMPY_LACKS:
        import torch

        return torch.from_numpy(ringcomm.empty(count, np.int16)).view(getattr(torch, dtype))
    return ringcomm.empty(count, dtype)
