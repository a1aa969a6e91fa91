"""Checks every collective makes of the tensors it is given."""

from __future__ import annotations

import torch

from ringcomm.torch.errors import UnsupportedTensorError

# What the core carries (include/ringcomm/types.h).
CARRIED_DTYPES = (
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
)  # fmt: skip


def _type_name(tensor: torch.Tensor) -> str:
    """Horovod names a tensor's type as torch does (torch.cuda.FloatTensor)."""
    try:
        return tensor.type()
    except (RuntimeError, TypeError):  # a device or dtype torch has no such name for
        return f"{tensor.dtype} on {tensor.device}"


def checked(tensor, argument: str = "tensor") -> torch.Tensor:
    """``tensor``, if it is a CPU or CUDA torch tensor of a type the core carries (CUDA needs a
    ringcomm built with CUDA, which the queue says when it is not). Another device, a sparse
    tensor or another dtype raise an UnsupportedTensorError: Horovod's ValueError ("Tensor type
    ... is not supported.") and the TypeError ringcomm raised before."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor; got {type(tensor).__name__}")
    if tensor.device.type not in ("cpu", "cuda"):
        raise UnsupportedTensorError(
            f"Tensor type {_type_name(tensor)} is not supported: {argument} is on {tensor.device}; "
            "ringcomm.torch takes CPU and CUDA tensors"
        )
    if tensor.is_sparse:
        raise UnsupportedTensorError(
            f"Tensor type {_type_name(tensor)} is not supported: {argument} is a sparse tensor; "
            "use sparse_allreduce_async, or to_dense() it"
        )
    if tensor.dtype not in CARRIED_DTYPES:
        raise UnsupportedTensorError(
            f"Tensor type {_type_name(tensor)} is not supported: ringcomm carries "
            + ", ".join(str(t).replace("torch.", "") for t in CARRIED_DTYPES)
        )
    return tensor


def contiguous_for_in_place(tensor: torch.Tensor, operation: str) -> torch.Tensor:
    """``tensor`` itself, which an in-place operation writes: it must be contiguous (Horovod's
    message)."""
    checked(tensor)
    if not tensor.is_contiguous():
        raise ValueError(f"{operation}: Tensor is required to be contiguous.")
    return tensor


def check_scalable(tensor: torch.Tensor, prescale: float, postscale: float) -> None:
    """prescale_factor / postscale_factor apply to every type the core scales: all but bool
    (Horovod's CPU path refuses bool too, from its background thread)."""
    if tensor.dtype == torch.bool and (prescale != 1.0 or postscale != 1.0):
        raise ValueError("prescale_factor/postscale_factor need a numeric tensor; got torch.bool")
