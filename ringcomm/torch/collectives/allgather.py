"""allgather: every rank's tensor concatenated along the first dimension, which may differ by
rank (the ranks' first dimensions travel with the queue's announcements). Asynchronous, grouped
and differentiable forms, with Horovod's arguments.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ringcomm.torch import handles, requests
from ringcomm.torch.collectives import allreduce as allreduce_ops
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Average
from ringcomm.torch.tensors import checked


def allgather_async(tensor, name=None, process_set=global_process_set) -> int:
    """Starts the all-gather of ``tensor`` and returns a handle; synchronize() returns the
    concatenated tensor, as allgather() does."""
    target = member(process_set, "Allgather")
    tensor = checked(tensor).detach().contiguous()
    request = requests.allgather(tensor, name or target.default_name("allgather"))
    (queued,) = requests.submit(target.queue, [request], (tensor,))
    return handles.register([queued], lambda: requests.gathered_tensor(queued, tensor))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's ``tensor`` along the first dimension, in the set's rank order.
    A 0-d tensor has no first dimension: Horovod's error, on every rank."""
    return Allgather.apply(checked(tensor), name, process_set)


def grouped_allgather_async(
    tensors: Sequence[torch.Tensor], name=None, process_set=global_process_set
) -> int:
    """Gathers every tensor; they are announced together, in one cycle."""
    target = member(process_set, "Allgather")
    base = name or target.default_name("grouped_allgather")
    tensors = [checked(t, "tensors[i]").detach().contiguous() for t in tensors]
    queued = requests.submit(
        target.queue,
        [requests.allgather(t, f"{base}.{i}") for i, t in enumerate(tensors)],
        tuple(tensors),
    )
    return handles.register(
        queued, lambda: [requests.gathered_tensor(q, t) for q, t in zip(queued, tensors)]
    )


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A list of new tensors: every rank's tensors of ``tensors``, each concatenated along the
    first dimension as allgather() does. They are announced together; differentiable."""
    return list(GroupedAllgather.apply(name, process_set, *tensors))


# ---- the gradients (Horovod's torch/mpi_ops.py: see ringcomm/torch/collectives/__init__.py) ----


def _own_rows(gathered_grad: torch.Tensor, rows: int, process_set) -> torch.Tensor:
    """This rank's rows of a gradient of every rank's rows, found by gathering the row counts."""
    mine = torch.tensor([rows], dtype=torch.int32)
    counts = allgather(mine, process_set=process_set)
    offset = int(counts[: process_set.rank()].sum())
    return gathered_grad.narrow(0, offset, rows)


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 0  # a 0-d tensor fails in the queue
        ctx.process_set = process_set
        return handles.synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        averaged = allreduce_ops.allreduce(grad, op=Average, process_set=ctx.process_set)
        return _own_rows(averaged, ctx.rows, ctx.process_set), None, None


class GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(handles.synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        averaged = allreduce_ops.grouped_allreduce(
            list(grads), op=Average, process_set=ctx.process_set
        )
        own = [_own_rows(g, rows, ctx.process_set) for g, rows in zip(averaged, ctx.rows)]
        return (None, None, *own)
