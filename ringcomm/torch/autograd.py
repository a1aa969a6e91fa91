"""The gradients of the collectives, as Horovod's torch/mpi_ops.py defines them.

- allreduce: the same all-reduce (op, scaling, process set) of the incoming gradient.
- allgather: the incoming gradient averaged over the ranks, of which each rank keeps its own
  rows.
- broadcast: the incoming gradient averaged over the ranks, on the root; zeros elsewhere.
- alltoall: the incoming gradient sent back where it came from (an all-to-all with the splits
  this rank received).
- reducescatter: the incoming gradient all-gathered, times the set's size for Sum and times the
  scale factors. (Horovod's convention, kept so gradients match its own.)

Every forward runs the asynchronous form and waits, so the blocking collectives are these
functions' apply(); torch skips the graph when no input needs a gradient.
"""

from __future__ import annotations

import torch

from ringcomm.torch import handles, state
from ringcomm.torch.collectives import allgather as allgather_ops
from ringcomm.torch.collectives import allreduce as allreduce_ops
from ringcomm.torch.collectives import alltoall as alltoall_ops
from ringcomm.torch.collectives import broadcast as broadcast_ops
from ringcomm.torch.collectives import reducescatter as reducescatter_ops
from ringcomm.torch.reduce_ops import Average, Sum


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, compression, prescale_factor, postscale_factor, name, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return handles.synchronize(
            allreduce_ops.allreduce_async(
                tensor,
                None,
                name,
                op,
                prescale_factor,
                postscale_factor,
                process_set,
                compression,
            )
        )

    @staticmethod
    def backward(ctx, grad):
        op, prescale_factor, postscale_factor, process_set = ctx.args
        reduced = allreduce_ops.allreduce(
            grad,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
        return reduced, None, None, None, None, None, None


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, op, compression, prescale_factor, postscale_factor, name, process_set, *tensors
    ):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(
            handles.synchronize(
                allreduce_ops.grouped_allreduce_async(
                    list(tensors),
                    None,
                    name,
                    op,
                    prescale_factor,
                    postscale_factor,
                    process_set,
                    compression,
                )
            )
        )

    @staticmethod
    def backward(ctx, *grads):
        op, prescale_factor, postscale_factor, process_set = ctx.args
        reduced = allreduce_ops.grouped_allreduce(
            list(grads),
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
        return (None,) * 6 + tuple(reduced)


def _own_rows(gathered_grad: torch.Tensor, rows: int, process_set) -> torch.Tensor:
    """This rank's rows of a gradient of every rank's rows, found by gathering the row counts."""
    mine = torch.tensor([rows], dtype=torch.int32)
    counts = allgather_ops.allgather(mine, process_set=process_set)
    offset = int(counts[: process_set.rank()].sum())
    return gathered_grad.narrow(0, offset, rows)


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 0  # a 0-d tensor fails in the queue
        ctx.process_set = process_set
        return handles.synchronize(allgather_ops.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        averaged = allreduce_ops.allreduce(grad, op=Average, process_set=ctx.process_set)
        return _own_rows(averaged, ctx.rows, ctx.process_set), None, None


class GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(
            handles.synchronize(
                allgather_ops.grouped_allgather_async(list(tensors), name, process_set)
            )
        )

    @staticmethod
    def backward(ctx, *grads):
        averaged = allreduce_ops.grouped_allreduce(
            list(grads), op=Average, process_set=ctx.process_set
        )
        own = [_own_rows(g, rows, ctx.process_set) for g, rows in zip(averaged, ctx.rows)]
        return (None, None, *own)


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return handles.synchronize(
            broadcast_ops.broadcast_async(tensor, root_rank, name, process_set)
        )

    @staticmethod
    def backward(ctx, grad):
        averaged = allreduce_ops.allreduce(grad, op=Average, process_set=ctx.process_set)
        if state.rank() != ctx.root_rank:
            averaged = averaged * 0
        return averaged, None, None, None


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = handles.synchronize(
            alltoall_ops.alltoall_async(tensor, splits, name, process_set)
        )
        ctx.process_set = process_set
        ctx.received = received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, *unused):
        returned, _ = alltoall_ops.alltoall(
            grad.contiguous(), splits=ctx.received, process_set=ctx.process_set
        )
        return returned, None, None, None


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
            reducescatter_ops.reducescatter_async(
                tensor, name, op, process_set, prescale_factor, postscale_factor
            )
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
                reducescatter_ops.grouped_reducescatter_async(
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
