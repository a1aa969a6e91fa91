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

from ringcomm.torch import handles, requests
from ringcomm.torch.collectives import allgather as allgather_ops
from ringcomm.torch.compression import Compression
from ringcomm.torch.errors import UnsupportedRequestError
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Adasum, Average, Sum
from ringcomm.torch.tensors import check_scalable, checked


def _checked_for_reducescatter(tensor, prescale_factor, postscale_factor) -> torch.Tensor:
    tensor = checked(tensor).detach().contiguous()
    if tensor.dim() == 0:
        raise ValueError("Reducescatter does not support scalar inputs")
    check_scalable(tensor, prescale_factor, postscale_factor)
    return tensor


def _start(process_set, tensors, names, op, prescale_factor, postscale_factor) -> tuple:
    """Submits the reductions of ``tensors`` to the set's queue, in one cycle. Returns the queued
    requests and what gives, once they completed, this rank's rows of each, on its device."""
    target = member(process_set, "Reducescatter")
    if op == Adasum:
        # Horovod: a HorovodInternalError at the call (its enqueue refuses it).
        raise UnsupportedRequestError(
            "Reducescatter currently only supports AVERAGE and SUM (ringcomm: also MIN, MAX and "
            "PRODUCT); Adasum is an all-reduce"
        )
    tensors = [_checked_for_reducescatter(t, prescale_factor, postscale_factor) for t in tensors]
    # The core scales (as Horovod does, every type: src/codec/codec.h), so that ranks agree on
    # the factors too.
    queued = requests.submit(
        target.queue,
        [
            requests.reducescatter(t, op, prescale_factor, postscale_factor, n)
            for t, n in zip(tensors, names)
        ],
        tuple(tensors),
    )

    def results() -> list:
        return [
            requests.rows_tensor(q, t, q.work.rows[target.rank]) for q, t in zip(queued, tensors)
        ]

    return queued, results


def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name=None,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
) -> int:
    """Starts the reduce-scatter of every tensor, announced together, and returns a handle;
    synchronize() returns this rank's part of each, in a list."""
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
    """Starts the reduce-scatter of ``tensor`` and returns a handle; synchronize() returns this
    rank's part of the reduction."""
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
    reduced = Reducescatter.apply(
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
    """This rank's part of the reduction of each tensor, in a list; the tensors are announced
    together. Differentiable, with ``compression`` around each, as in reducescatter()."""
    compressed, contexts = [], []
    for tensor in tensors:
        c, context = compression.compress(checked(tensor))
        compressed.append(c)
        contexts.append(context)
    reduced = GroupedReducescatter.apply(
        name, op, process_set, prescale_factor, postscale_factor, *compressed
    )
    return [compression.decompress(r, c) for r, c in zip(reduced, contexts)]


# ---- the gradients (Horovod's torch/mpi_ops.py: see ringcomm/torch/collectives/__init__.py) ----


def _scaled_for_reducescatter(grad, op, prescale_factor, postscale_factor, process_set):
    if op == Sum:
        grad = grad * process_set.size()
    if prescale_factor != 1.0:
        grad = grad * prescale_factor
    if postscale_factor != 1.0:
        grad = grad * postscale_factor
    return grad


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return handles.synchronize(
            reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)
        )

    @staticmethod
    def backward(ctx, grad):
        op, prescale_factor, postscale_factor, process_set = ctx.args
        scaled = _scaled_for_reducescatter(grad, op, prescale_factor, postscale_factor, process_set)
        gathered = allgather_ops.allgather(scaled.contiguous(), process_set=process_set)
        return gathered, None, None, None, None, None


class GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(
            handles.synchronize(
                grouped_reducescatter_async(
                    list(tensors), name, op, process_set, prescale_factor, postscale_factor
                )
            )
        )

    @staticmethod
    def backward(ctx, *grads):
        op, prescale_factor, postscale_factor, process_set = ctx.args
        scaled = [
            _scaled_for_reducescatter(
                g, op, prescale_factor, postscale_factor, process_set
            ).contiguous()
            for g in grads
        ]
        gathered = allgather_ops.grouped_allgather(scaled, process_set=process_set)
        return (None,) * 5 + tuple(gathered)
