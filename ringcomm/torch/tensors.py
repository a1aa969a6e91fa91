"""Checks every collective makes of the tensors it is given."""

from __future__ import annotations

import torch


def checked(tensor, argument: str = "tensor") -> torch.Tensor:
    """``tensor``, if it is a CPU or CUDA torch tensor (CUDA needs a ringcomm built with CUDA,
    which the queue says when it is not)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor; got {type(tensor).__name__}")
    if tensor.device.type not in ("cpu", "cuda"):
        raise TypeError(
            f"{argument} is on {tensor.device}; ringcomm.torch takes CPU and CUDA tensors"
        )
    if tensor.is_sparse:
        raise TypeError(
            f"{argument} is a sparse tensor; use sparse_allreduce_async, or to_dense() it"
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
