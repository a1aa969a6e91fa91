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
from ringcomm.torch import handles, requests, state
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


def _checked(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """``tensor``, if it is a CPU or CUDA tensor (CUDA needs a ringcomm built with CUDA, which
    the queue says when it is not)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}")
    if tensor.device.type not in ("cpu", "cuda"):
        raise TypeError(f"{name} is on {tensor.device}; ringcomm.torch takes CPU and CUDA tensors")
    return tensor


# ---- allreduce ----------------------------------------------------------------------------


def _allreduce_request(
    tensor: torch.Tensor,
    output: Optional[torch.Tensor],
    op,
    compression: Compressor,
    prescale_factor: float,
    postscale_factor: float,
    name: str,
):
    """The queue request reducing ``tensor`` into ``output`` (None: in place), and what to run
    once it completed: (request, keepalive, finish)."""
    target = tensor if output is None else output
    if target.dtype not in _SCALABLE and (prescale_factor != 1.0 or postscale_factor != 1.0):
        raise ValueError(
            f"prescale_factor/postscale_factor need a float32 or float64 tensor; got {target.dtype}"
        )
    wire = compression.wire if target.dtype in _SCALABLE else None
    if wire is not None and op not in (Sum, Average):
        wire = None  # Horovod compresses only what it can sum; min/max/product travel as they are
    if wire is not None and target.dtype == torch.float64:
        # The wire codec narrows float32; float64 is narrowed here first, as Horovod's cast does.
        narrowed = tensor.to(torch.float32)
        request = requests.allreduce(
            narrowed, None, op, wire, prescale_factor, postscale_factor, name
        )
        return request, (narrowed,), lambda: target.copy_(narrowed)
    request = requests.allreduce(tensor, output, op, wire, prescale_factor, postscale_factor, name)
    return request, (tensor, output), lambda: target


def _submit_allreduces(started: list, results) -> int:
    """Submits [(request, keepalive, finish)] in one cycle; the handle's result is
    ``results(finishes)``."""
    keepalive = tuple(t for (_, kept, _) in started for t in kept)
    works = requests.submit([request for (request, _, _) in started], keepalive)
    finishes = [finish for (_, _, finish) in started]
    return handles.register(works, lambda: results(finishes))


def allreduce_async(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    tensor = _checked(tensor, "tensor").detach().contiguous()
    started = _allreduce_request(
        tensor,
        torch.empty_like(tensor),
        _resolve_op(op, average),
        compression,
        prescale_factor,
        postscale_factor,
        requests.name_or_default(name, "allreduce"),
    )
    return _submit_allreduces([started], lambda finishes: finishes[0]())


def allreduce_async_(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    _checked(tensor, "tensor")
    if not tensor.is_contiguous():
        raise ValueError("allreduce_: tensor must be contiguous to be reduced in place")
    started = _allreduce_request(
        tensor.detach(),
        None,
        _resolve_op(op, average),
        compression,
        prescale_factor,
        postscale_factor,
        requests.name_or_default(name, "allreduce"),
    )
    return _submit_allreduces([started], lambda finishes: (finishes[0](), tensor)[1])


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
            tensor, _resolve_op(op, average), compression, prescale_factor, postscale_factor, name
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
    def forward(ctx, tensor, op, compression, prescale_factor, postscale_factor, name):
        ctx.args = (op, compression, prescale_factor, postscale_factor)
        ctx.name = name
        return handles.synchronize(
            allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor, compression)
        )

    @staticmethod
    def backward(ctx, grad):
        op, compression, prescale_factor, postscale_factor = ctx.args
        name = f"{ctx.name}.grad" if ctx.name else None
        reduced = handles.synchronize(
            allreduce_async(grad, None, name, op, prescale_factor, postscale_factor, compression)
        )
        return reduced, None, None, None, None, None


def _grouped_names(name: Optional[str], count: int) -> list:
    base = requests.name_or_default(name, "grouped_allreduce")
    return [f"{base}.{i}" for i in range(count)]


def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    compression=Compression.none,
) -> int:
    """Reduces every tensor; they are announced together, so they travel fused."""
    op = _resolve_op(op, average)
    started = []
    for t, tensor_name in zip(tensors, _grouped_names(name, len(tensors))):
        t = _checked(t, "tensors[i]").detach().contiguous()
        started.append(
            _allreduce_request(
                t,
                torch.empty_like(t),
                op,
                compression,
                prescale_factor,
                postscale_factor,
                tensor_name,
            )
        )
    return _submit_allreduces(started, lambda finishes: [finish() for finish in finishes])


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
        if not _checked(t, "tensors[i]").is_contiguous():
            raise ValueError("grouped_allreduce_: every tensor must be contiguous")
    op = _resolve_op(op, average)
    started = [
        _allreduce_request(
            t.detach(), None, op, compression, prescale_factor, postscale_factor, tensor_name
        )
        for t, tensor_name in zip(tensors, _grouped_names(name, len(tensors)))
    ]
    return _submit_allreduces(
        started, lambda finishes: ([finish() for finish in finishes], list(tensors))[1]
    )


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


def allgather_async(tensor, name=None) -> int:
    """Starts concatenating every rank's ``tensor`` along the first dimension, which may differ
    by rank (the ranks' first dimensions travel with the cycle's announcements)."""
    tensor = _checked(tensor, "tensor").detach().contiguous()
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    request = requests.allgather(tensor, requests.name_or_default(name, "allgather"))
    (queued,) = requests.submit([request], (tensor,))
    return handles.register([queued], lambda: requests.gathered_tensor(queued, tensor))


def allgather(tensor, name=None):
    """Concatenates every rank's ``tensor`` along the first dimension, which may differ by rank."""
    return handles.synchronize(allgather_async(tensor, name))


def _submit_broadcast(tensor, root_rank, name, result) -> int:
    request = requests.broadcast(tensor, root_rank, requests.name_or_default(name, "broadcast"))
    works = requests.submit([request], (tensor,))
    return handles.register(works, lambda: result)


def broadcast_async_(tensor, root_rank, name=None) -> int:
    _checked(tensor, "tensor")
    if not tensor.is_contiguous():
        raise ValueError("broadcast_: tensor must be contiguous")
    return _submit_broadcast(tensor.detach(), root_rank, name, tensor)


def broadcast_async(tensor, root_rank, name=None) -> int:
    copy = _checked(tensor, "tensor").detach().clone().contiguous()
    return _submit_broadcast(copy, root_rank, name, copy)


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
    tensor = _checked(tensor, "tensor").detach().contiguous()
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
    tensor = _checked(tensor, "tensor").detach().contiguous()
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
