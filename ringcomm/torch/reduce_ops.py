"""Horovod's reduction operators (``hvd.Average`` ...), its deprecated ``average=`` flag, and
its checks of an Adasum request."""

from __future__ import annotations

import warnings

import torch

import ringcomm
from ringcomm.torch.errors import UnsupportedRequestError

#: The sum divided by the number of ranks: the default op of the collectives that reduce.
Average = ringcomm.AVG
#: The sum over the ranks.
Sum = ringcomm.SUM
#: The element-wise minimum over the ranks.
Min = ringcomm.MIN
#: The element-wise maximum over the ranks.
Max = ringcomm.MAX
#: The element-wise product over the ranks.
Product = ringcomm.PROD
# The core's schedule: src/algorithms/adasum.h.
#: Adaptive summation, for all-reduces of floating-point tensors over a power-of-two rank count.
Adasum = ringcomm.ADASUM


def resolve_op(op, average):
    """The operator a call asked for: ``op``, else the old ``average`` flag (with Horovod's
    deprecation warning), else Average; both at once is an error, as in Horovod."""
    if op is not None:
        if average is not None:
            raise ValueError(
                "The op parameter supersedes average. Please provide only one of them."
            )
        return op
    if average is not None:
        warnings.warn(
            "Parameter `average` has been replaced with `op` and will be removed in v1.0",
            DeprecationWarning,
            stacklevel=3,
        )
        return Average if average else Sum
    return Average


_ADASUM_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_adasum(set_size: int, tensors) -> None:
    """Horovod's refusal of an Adasum all-reduce over a rank count that is not a power of two
    (the process set's; Horovod takes the global set only), and of integer and bool tensors
    (Horovod fails those later, in its background thread, with a HorovodInternalError: here an
    UnsupportedRequestError, which is one, at the call)."""
    if set_size & (set_size - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")
    for tensor in tensors:
        if tensor.dtype not in _ADASUM_TYPES:
            # Horovod fails integer tensors in its background thread (a HorovodInternalError).
            raise UnsupportedRequestError(
                "Adasum reduces floating-point tensors (float16, bfloat16, float32, float64); "
                f"got {tensor.dtype}"
            )
