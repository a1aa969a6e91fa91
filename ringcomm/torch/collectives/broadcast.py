"""broadcast: the root's tensor on every rank of the set (``root_rank`` is a global rank, as in
Horovod). New-tensor, in-place (trailing underscore), asynchronous and differentiable forms.
"""

from __future__ import annotations

import torch

from ringcomm.torch import handles, requests, state
from ringcomm.torch.collectives import allreduce as allreduce_ops
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Average
from ringcomm.torch.tensors import checked, contiguous_for_in_place


def _submit(process_set, tensor, root_rank, name, result) -> int:
    target = member(process_set, "Broadcast")
    request = requests.broadcast(
        tensor, target.root_in_set(root_rank), name or target.default_name("broadcast")
    )
    works = requests.submit(target.queue, [request], (tensor,))
    return handles.register(works, lambda: result)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts overwriting ``tensor`` in place with the root's and returns a handle;
    synchronize() returns ``tensor``."""
    contiguous_for_in_place(tensor, "broadcast_")
    return _submit(process_set, tensor.detach(), root_rank, name, tensor)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts the broadcast of the root's ``tensor`` into a new tensor and returns a handle;
    synchronize() returns that tensor."""
    copy = checked(tensor).detach().clone().contiguous()
    return _submit(process_set, copy, root_rank, name, copy)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor holding the root's ``tensor``; differentiable."""
    return Broadcast.apply(checked(tensor), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites ``tensor`` with the root's, in place."""
    return handles.synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- the gradients (Horovod's torch/mpi_ops.py: see ringcomm/torch/collectives/__init__.py) ----


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return handles.synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        averaged = allreduce_ops.allreduce(grad, op=Average, process_set=ctx.process_set)
        if state.rank() != ctx.root_rank:
            averaged = averaged * 0
        return averaged, None, None, None
