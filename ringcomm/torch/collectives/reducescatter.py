"""reducescatter: ``tensor`` reduced over the set's ranks, of which rank r keeps the r-th part of
the first dimension (the first ``rows % size`` ranks one row more, as in Horovod). Asynchronous,
grouped and differentiable forms with Horovod's arguments (``prescale_factor``,
``postscale_factor``; ops Average and Sum, and beyond Horovod Min, Max and Product).

Named requests of the set's tensor queue, as in Horovod: the ranks agree on the shapes before
any data moves, so ranks whose tensors differ all get a MismatchError at once, naming both.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ringcomm.torch import autograd, handles, requests
from ringcomm.torch.compression import Compression
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Average
from ringcomm.torch.tensors import checked

_SCALABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_CORE_SCALABLE = (torch.float32, torch.float64)


def _checked_for_reducescatter(tensor, prescale_factor, postscale_factor) -> torch.Tensor:
    tensor = checked(tensor).detach().contiguous()
    if tensor.dim() == 0:
        raise ValueError("Reducescatter does not support scalar inputs")
    if tensor.dtype not in _SCALABLE and (prescale_factor != 1.0 or postscale_factor != 1.0):
        raise ValueError(
            f"prescale_factor/postscale_factor need a floating-point tensor; got {tensor.dtype}"
        )
    return tensor


def _start(process_set, tensors, names, op, prescale_factor, postscale_factor) -> tuple:
    """Submits the reductions of ``tensors`` to the set's queue, in one cycle. Returns the queued
    requests and what gives, once they completed, this rank's rows of each, on its device."""
    target = member(process_set, "Reducescatter")
    tensors = [_checked_for_reducescatter(t, prescale_factor, postscale_factor) for t in tensors]
    # The core scales float32 and float64 (so that ranks agree on the factors too); 16-bit
    # floats are scaled here, as Horovod does, in their own precision.
    in_core = all(t.dtype in _CORE_SCALABLE for t in tensors)
    if not in_core and prescale_factor != 1.0:
        tensors = [t * prescale_factor for t in tensors]
    pre, post = (prescale_factor, postscale_factor) if in_core else (1.0, 1.0)
    queued = requests.submit(
        target.queue,
        [requests.reducescatter(t, op, pre, post, n) for t, n in zip(tensors, names)],
        tuple(tensors),
    )

    def results() -> list:
        kept = []
        for q, t in zip(queued, tensors):
            rows = requests.rows_tensor(q, t, q.work.rows[target.rank])
            kept.append(rows if in_core or postscale_factor == 1.0 else rows * postscale_factor)
        return kept

    return queued, results


def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name=None,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
) -> int:
    base = name or member(process_set, "Reducescatter").default_name("grouped_reducescatter")
    names = [f"{base}.{i}" for i in range(len(tensors))]
    queued, results = _start(process_set, tensors, names, op, prescale_factor, postscale_factor)
    return handles.register(queued, results)


def reducescatter_async(
    tensor,
    name=None,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
) -> int:
    name = name or member(process_set, "Reducescatter").default_name("reducescatter")
    queued, results = _start(process_set, [tensor], [name], op, prescale_factor, postscale_factor)
    return handles.register(queued, lambda: results()[0])


def reducescatter(
    tensor,
    name=None,
    compression=Compression.none,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    """This rank's part of the reduction; differentiable. ``compression`` runs around it, as
    in Horovod (the 16-bit ones cast)."""
    compressed, context = compression.compress(checked(tensor))
    reduced = autograd.Reducescatter.apply(
        compressed, name, op, process_set, prescale_factor, postscale_factor
    )
    return compression.decompress(reduced, context)


def grouped_reducescatter(
    tensors,
    name=None,
    compression=Compression.none,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    compressed, contexts = [], []
    for tensor in tensors:
        c, context = compression.compress(checked(tensor))
        compressed.append(c)
        contexts.append(context)
    reduced = autograd.GroupedReducescatter.apply(
        name, op, process_set, prescale_factor, postscale_factor, *compressed
    )
    return [compression.decompress(r, c) for r, c in zip(reduced, contexts)]
