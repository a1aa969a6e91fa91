"""Horovod's collective functions on torch tensors, with Horovod's names and semantics.

Each has a blocking form returning a new tensor, an in-place form (trailing underscore) where
Horovod has one, and ``*_async`` forms returning an integer handle for poll() / synchronize().
"""

from __future__ import annotations

import pickle
from typing import Any, Optional, Sequence

import numpy as np
import torch

import ringcomm
from ringcomm.torch import handles, state
from ringcomm.torch.compression import Compression, Compressor

Average = ringcomm.AVG
Sum = ringcomm.SUM
Min = ringcomm.MIN
Max = ringcomm.MAX
Product = ringcomm.PROD

_SCALABLE = (torch.float32, torch.float64)


def _resolve_op(op, average: Optional[bool]):
    if average is not None:
        if op is not None:
            raise ValueError("pass either op or the deprecated average argument, not both")
        return Average if average else Sum
    return Average if op is None else op


def _host(tensor: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise TypeError(f"{name} is on {tensor.device}; ringcomm.torch takes CPU tensors for now")
    return tensor


# ---- allreduce ----------------------------------------------------------------------------


def _start_allreduce(
    tensor: torch.Tensor,
    output: torch.Tensor,
    op,
    compression: Compressor,
    prescale_factor: float,
    postscale_factor: float,
    name: Optional[str] = None,
):
    """Starts an all-reduce of ``tensor`` into ``output``; returns (works, finish)."""
    comm = state.comm()
    scalable = output.dtype in _SCALABLE
    if not scalable and (prescale_factor != 1.0 or postscale_factor != 1.0):
        raise ValueError(
            f"prescale_factor/postscale_factor need a float32 or float64 tensor; got {output.dtype}"
        )
    wire = compression.wire if output.dtype in _SCALABLE else None
    if wire is not None and op not in (Sum, Average):
        wire = None  # Horovod compresses only what it can sum; min/max/product travel as they are
    if wire is not None and output.dtype == torch.float64:
        narrowed = tensor.to(torch.float32)
        work = comm.allreduce(
            narrowed,
            op=op,
            async_op=True,
            compression=wire,
            prescale=prescale_factor,
            postscale=postscale_factor,
            name=name,
        )
        return [work], lambda: output.copy_(narrowed)
    work = comm.allreduce(
        tensor,
        out=None if tensor is output else output,
        op=op,
        async_op=True,
        compression=wire,
        prescale=prescale_factor,
        postscale=postscale_factor,
        name=name,
    )
    return [work], lambda: output


def allreduce_async(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    tensor = _host(tensor, "tensor").detach().contiguous()
    output = torch.empty_like(tensor)
    works, finish = _start_allreduce(
        tensor,
        output,
        _resolve_op(op, average),
        compression,
        prescale_factor,
        postscale_factor,
        name,
    )
    return handles.register(works, finish)


def allreduce_async_(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    _host(tensor, "tensor")
    if not tensor.is_contiguous():
        raise ValueError("allreduce_: tensor must be contiguous to be reduced in place")
    target = tensor.detach()
    works, finish = _start_allreduce(
        target,
        target,
        _resolve_op(op, average),
        compression,
        prescale_factor,
        postscale_factor,
        name,
    )
    return handles.register(works, lambda: (finish(), tensor)[1])


def allreduce(
    tensor,
    average=None,
    name=None,
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    """A new tensor holding the reduction of ``tensor`` over all ranks (default op: Average).

    Differentiable: the gradient of an all-reduce is the all-reduce of the gradient.
    """
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
        return _AllreduceFunction.apply(
            tensor, _resolve_op(op, average), compression, prescale_factor, postscale_factor
        )
    return handles.synchronize(
        allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, compression)
    )


def allreduce_(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
):
    """Reduces ``tensor`` in place over all ranks and returns it."""
    return handles.synchronize(
        allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, compression)
    )


class _AllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, compression, prescale_factor, postscale_factor):
        ctx.args = (op, compression, prescale_factor, postscale_factor)
        return handles.synchronize(
            allreduce_async(tensor, None, None, op, prescale_factor, postscale_factor, compression)
        )

    @staticmethod
    def backward(ctx, grad):
        op, compression, prescale_factor, postscale_factor = ctx.args
        reduced = handles.synchronize(
            allreduce_async(grad, None, None, op, prescale_factor, postscale_factor, compression)
        )
        return reduced, None, None, None, None


def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    started = [
        _start_allreduce(
            *pair, _resolve_op(op, average), compression, prescale_factor, postscale_factor
        )
        for pair in (
            (t.detach().contiguous(), torch.empty_like(t))
            for t in (_host(t, "tensors[i]") for t in tensors)
        )
    ]
    works = [work for ws, _ in started for work in ws]
    return handles.register(works, lambda: [finish() for _, finish in started])


def grouped_allreduce_async_(
    tensors: Sequence[torch.Tensor],
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    for t in tensors:
        if not _host(t, "tensors[i]").is_contiguous():
            raise ValueError("grouped_allreduce_: every tensor must be contiguous")
    started = [
        _start_allreduce(
            t.detach(),
            t.detach(),
            _resolve_op(op, average),
            compression,
            prescale_factor,
            postscale_factor,
        )
        for t in tensors
    ]
    works = [work for ws, _ in started for work in ws]
    return handles.register(works, lambda: ([finish() for _, finish in started], list(tensors))[1])


def grouped_allreduce(
    tensors,
    average=None,
    name=None,
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    return handles.synchronize(
        grouped_allreduce_async(
            tensors, average, name, op, prescale_factor, postscale_factor, compression
        )
    )


def grouped_allreduce_(
    tensors,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
):
    return handles.synchronize(
        grouped_allreduce_async_(
            tensors, average, name, op, prescale_factor, postscale_factor, compression
        )
    )


# ---- allgather, broadcast, alltoall, reducescatter ----------------------------------------


def _first_dims(tensor: torch.Tensor) -> list[int]:
    """Every rank's first dimension, in rank order."""
    rows = tensor.shape[0] if tensor.dim() > 0 else 1
    return state.comm().allgather(np.array([rows], np.int64)).tolist()


def allgather(tensor, name=None):
    """Concatenates every rank's ``tensor`` along the first dimension, which may differ by rank."""
    comm = state.comm()
    tensor = _host(tensor, "tensor").detach().contiguous()
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    rows = _first_dims(tensor)
    if len(set(rows)) == 1:
        return comm.allgather(tensor)
    # Different first dimensions: gather equal-size padded blocks, then drop the padding.
    longest = max(rows)
    padded = tensor.new_zeros((longest,) + tuple(tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    gathered = comm.allgather(padded)
    return torch.cat([gathered[r * longest : r * longest + n] for r, n in enumerate(rows)])


def allgather_async(tensor, name=None) -> int:
    result = allgather(tensor, name)  # the size exchange needs a round trip first
    return handles.register([], lambda: result)


def broadcast_async_(tensor, root_rank, name=None) -> int:
    _host(tensor, "tensor")
    if not tensor.is_contiguous():
        raise ValueError("broadcast_: tensor must be contiguous")
    work = state.comm().broadcast(tensor.detach(), root=root_rank, async_op=True, name=name)
    return handles.register([work], lambda: tensor)


def broadcast_async(tensor, root_rank, name=None) -> int:
    copy = _host(tensor, "tensor").detach().clone().contiguous()
    work = state.comm().broadcast(copy, root=root_rank, async_op=True, name=name)
    return handles.register([work], lambda: copy)


def broadcast(tensor, root_rank, name=None):
    """A new tensor holding the root's ``tensor``."""
    return handles.synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor, root_rank, name=None):
    """Overwrites ``tensor`` with the root's, in place."""
    return handles.synchronize(broadcast_async_(tensor, root_rank, name))


def alltoall(tensor, splits=None, name=None):
    """Sends ``splits[j]`` rows (first dimension) of ``tensor`` to rank j, in order.

    Without ``splits`` the rows are divided equally and the result tensor is returned; with
    ``splits``, ``(output, received_splits)`` as in Horovod.
    """
    comm = state.comm()
    tensor = _host(tensor, "tensor").detach().contiguous()
    size = comm.size
    if splits is None:
        if tensor.shape[0] % size != 0:
            raise ValueError(
                f"alltoall: the first dimension ({tensor.shape[0]}) must divide by "
                f"the number of ranks ({size}) when no splits are given"
            )
        return comm.alltoall(tensor)
    splits = torch.as_tensor(splits, dtype=torch.int64).reshape(-1)
    if splits.numel() != size or int(splits.sum()) != tensor.shape[0] or bool((splits < 0).any()):
        raise ValueError(
            f"alltoall: splits must hold {size} non-negative counts summing to the "
            f"first dimension ({tensor.shape[0]}); got {splits.tolist()}"
        )
    received = comm.alltoall(splits.clone())
    longest = int(comm.allreduce(np.array([int(splits.max())], np.int64), op=ringcomm.MAX)[0])
    rest = tuple(tensor.shape[1:])
    padded = tensor.new_zeros((size * longest,) + rest)
    offsets = torch.cumsum(splits, 0) - splits
    for peer in range(size):
        n = int(splits[peer])
        padded[peer * longest : peer * longest + n] = tensor[
            int(offsets[peer]) : int(offsets[peer]) + n
        ]
    exchanged = comm.alltoall(padded)
    output = torch.cat(
        [exchanged[peer * longest : peer * longest + int(received[peer])] for peer in range(size)]
    )
    return output, received


def reducescatter(tensor, name=None, compression=Compression.none, op=Average):
    """Reduces ``tensor`` over all ranks; rank r keeps the r-th part of the first dimension (the
    first ``rows % size`` ranks get one row more)."""
    comm = state.comm()
    tensor = _host(tensor, "tensor").detach().contiguous()
    rows, size = tensor.shape[0], comm.size
    if rows % size == 0:
        return comm.reduce_scatter(tensor, op=op)
    reduced = allreduce(tensor, op=op, compression=compression)
    base, extra = divmod(rows, size)
    start = comm.rank * base + min(comm.rank, extra)
    return reduced[start : start + base + (1 if comm.rank < extra else 0)].clone()


def barrier():
    state.comm().barrier()


# ---- objects and parameters ---------------------------------------------------------------


def broadcast_object(obj: Any, root_rank: int = 0, name=None) -> Any:
    """The root's ``obj`` (anything picklable), on every rank."""
    comm = state.comm()
    payload = pickle.dumps(obj) if comm.rank == root_rank else b""
    length = comm.broadcast(np.array([len(payload)], np.int64), root=root_rank)
    buffer = (
        np.frombuffer(payload, np.uint8).copy()
        if comm.rank == root_rank
        else np.empty(int(length[0]), np.uint8)
    )
    comm.broadcast(buffer, root=root_rank)
    return obj if comm.rank == root_rank else pickle.loads(buffer.tobytes())


def allgather_object(obj: Any, name=None) -> list:
    """Every rank's ``obj``, in rank order."""
    comm = state.comm()
    payload = np.frombuffer(pickle.dumps(obj), np.uint8)
    lengths = comm.allgather(np.array([payload.size], np.int64))
    longest = int(lengths.max())
    padded = np.zeros(longest, np.uint8)
    padded[: payload.size] = payload
    gathered = comm.allgather(padded)
    return [
        pickle.loads(gathered[r * longest : r * longest + int(n)].tobytes())
        for r, n in enumerate(lengths)
    ]


def broadcast_parameters(params, root_rank: int) -> None:
    """Overwrites parameters (a state_dict, or named_parameters()) with the root's, in place."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    pending = []
    for name, value in items:
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"broadcast_parameters: {name} is a {type(value).__name__}, not a tensor"
            )
        pending.append(
            broadcast_async_(value.data if value.requires_grad else value, root_rank, name)
        )
    for handle in pending:
        handles.synchronize(handle)
