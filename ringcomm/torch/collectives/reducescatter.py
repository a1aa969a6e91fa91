"""reducescatter: ``tensor`` reduced over the set's ranks, of which rank r keeps the r-th part of
the first dimension (the first ``rows % size`` ranks one row more, as in Horovod). Asynchronous,
grouped and differentiable forms with Horovod's arguments (``prescale_factor``,
``postscale_factor``; ops Average and Sum, and beyond Horovod Min, Max and Product).

It runs on the process set's direct channel (direct.py), not through the tensor queue: the data
moves in :func:`reduce_rows`, the one function to replace with a queue request.
"""

from __future__ import annotations

from typing import Sequence

import torch

import ringcomm
from ringcomm.torch import autograd, handles
from ringcomm.torch.compression import Compression
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Average
from ringcomm.torch.tensors import checked

_SCALABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def rows_of(rows: int, size: int, rank: int) -> tuple:
    """(first row, row count) that ``rank`` keeps of ``rows``."""
    base, extra = divmod(rows, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def reduce_rows(comm: ringcomm.Communicator, tensor: torch.Tensor, op, prescale, postscale):
    """This rank's rows of the reduction of ``tensor`` over the ranks of ``comm``."""
    if prescale != 1.0:
        tensor = tensor * prescale
    rows, size = tensor.shape[0], comm.size
    if rows % size == 0:
        kept = comm.reduce_scatter(tensor, op=op)
    else:  # uneven parts: the whole reduction, of which this rank keeps its rows
        reduced = comm.allreduce(tensor.clone(), op=op)
        start, count = rows_of(rows, size, comm.rank)
        kept = reduced[start : start + count].clone()
    return kept * postscale if postscale != 1.0 else kept


def _checked_for_reducescatter(tensor, prescale_factor, postscale_factor) -> torch.Tensor:
    tensor = checked(tensor).detach().contiguous()
    if tensor.dim() == 0:
        raise ValueError("Reducescatter does not support scalar inputs")
    if tensor.dtype not in _SCALABLE and (prescale_factor != 1.0 or postscale_factor != 1.0):
        raise ValueError(
            f"prescale_factor/postscale_factor need a floating-point tensor; got {tensor.dtype}"
        )
    return tensor


def _start(process_set, tensors, op, prescale_factor, postscale_factor) -> handles.FutureWork:
    """Queues the reductions of ``tensors`` on the set's direct channel; the Work's future holds
    this rank's rows of each, on each tensor's device."""
    target = member(process_set, "Reducescatter")
    tensors = [_checked_for_reducescatter(t, prescale_factor, postscale_factor) for t in tensors]
    return handles.FutureWork(
        target.direct.submit(
            lambda comm: [
                reduce_rows(comm, t, op, prescale_factor, postscale_factor).to(t.device)
                for t in tensors
            ]
        )
    )


def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name=None,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
) -> int:
    work = _start(process_set, tensors, op, prescale_factor, postscale_factor)
    return handles.register([work], work.future.result)


def reducescatter_async(
    tensor,
    name=None,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
) -> int:
    work = _start(process_set, [tensor], op, prescale_factor, postscale_factor)
    return handles.register([work], lambda: work.future.result()[0])


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
