"""Error feedback for the 8-bit wire codecs, as 1-bit Adam's worker side does it.

Before a gradient goes to an all-reduce through int8 or fp8, the rounding error this rank's
gradient had at its last step is added to it; the sum is rounded to the wire format here (as one
run, the blocks the codec will make of it) and what that rounding loses is kept for the next
step. So this rank's own contribution loses nothing over the steps. What the partial sums lose
at the all-reduce's later hops (each rounded again to be sent on) is not compensated: 1-bit Adam
keeps a second, server-side residual for that; here it is one more rounding per hop, smaller than
the first because partial sums are fewer than gradients.

A NaN or an infinity in the gradient (a step torch's GradScaler will skip) goes on to the
all-reduce as it is, and leaves a residual of 0 where it was: carried over, it would make every
later step's gradient non-finite, and GradScaler would skip them all.

Shared by the Horovod API's DistributedOptimizer (ringcomm.torch) and the DDP comm hook
(ringcomm.c10d.hooks); neither imports the other.
"""

from __future__ import annotations

from typing import Hashable, MutableMapping, TypeVar

import torch

from ringcomm import _core

Key = TypeVar("Key", bound=Hashable)


def round_to_wire(tensor: torch.Tensor, codec: str) -> None:
    """Rounds a contiguous float32 CPU tensor in place to what ``codec`` carries, as one run."""
    _core.round_to_wire(tensor.detach().numpy(), _core.parse_compression(codec))


def feed_back(
    grad: torch.Tensor,
    residuals: MutableMapping[Key, torch.Tensor],
    key: Key,
    codec: str,
) -> None:
    """Adds ``residuals[key]`` (the last step's rounding error) to ``grad``, rounds ``grad`` in
    place to ``codec``'s format and keeps what the rounding took away in ``residuals[key]``.
    A residual of another shape (the model changed) starts again from zero."""
    residual = residuals.get(key)
    if residual is None or residual.shape != grad.shape:
        residual = torch.zeros_like(grad, memory_format=torch.contiguous_format)
        residuals[key] = residual
    if grad.is_contiguous() and grad.dtype == torch.float32 and grad.device.type == "cpu":
        # One pass over memory in the core (an eighth of the time of the steps below).
        _core.feed_back_error(
            grad.detach().numpy(), residual.numpy(), _core.parse_compression(codec)
        )
        return
    grad.add_(residual)
    rounded = grad.detach().contiguous().clone()
    round_to_wire(rounded, codec)
    lost = grad.detach() - rounded
    # As the core's: a NaN or an infinity leaves no error to carry (it would spoil every later
    # step, and torch's GradScaler would skip them all); the gradient still holds it.
    lost.masked_fill_(~torch.isfinite(lost), 0.0)
    residual.copy_(lost)
    grad.copy_(rounded)
