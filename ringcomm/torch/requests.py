"""Torch tensors into a process set's tensor queue: requests, submission, and results."""

from __future__ import annotations

from typing import Optional

import torch

from ringcomm import _core
from ringcomm.ops import as_op
from ringcomm.torch.errors import UnsupportedRequestError, horovod_errors


def reduction(op) -> "_core.ReduceOp":
    """``op`` as the core takes it; an unknown one is a request Horovod refuses with a
    HorovodInternalError (its background thread: "Reduction op type not supported.")."""
    try:
        return as_op(op)
    except ValueError as error:
        raise UnsupportedRequestError(str(error)) from None


def allreduce(tensor, output, op, wire, prescale, postscale, name) -> "_core.TensorRequest":
    """``output`` is None (in place) or a tensor like ``tensor``; ``wire`` a codec name or None."""
    return _core.TensorRequest(
        _core.TensorOp.allreduce,
        name,
        tensor,
        out=output,
        shape=list(tensor.shape),
        reduce_op=reduction(op),
        compression=_core.parse_compression(wire or "none"),
        prescale=float(prescale),
        postscale=float(postscale),
    )


def allgather(tensor, name) -> "_core.TensorRequest":
    return _core.TensorRequest(_core.TensorOp.allgather, name, tensor, shape=list(tensor.shape))


def broadcast(tensor, root, name) -> "_core.TensorRequest":
    """``root``: the root's index in the process set."""
    return _core.TensorRequest(
        _core.TensorOp.broadcast, name, tensor, shape=list(tensor.shape), root=int(root)
    )


def reducescatter(tensor, op, prescale, postscale, name) -> "_core.TensorRequest":
    return _core.TensorRequest(
        _core.TensorOp.reducescatter,
        name,
        tensor,
        shape=list(tensor.shape),
        reduce_op=reduction(op),
        prescale=float(prescale),
        postscale=float(postscale),
    )


def alltoall(tensor, send: list, name) -> "_core.TensorRequest":
    """``send[j]``: the rows of ``tensor`` (from the top, summing to its first dimension) that
    go to the set's j-th rank."""
    return _core.TensorRequest(
        _core.TensorOp.alltoall, name, tensor, shape=list(tensor.shape), splits=list(send)
    )


class Queued:
    """A submitted request, as handles.poll() / synchronize() see it: it holds the tensors the
    queue reads and writes until the request has completed.

    CUDA tensors: the request runs after the work their streams had queued at submission, and
    wait() returns with the results ordered on the current stream of their device (the queue's
    stream made it wait), as NCCL orders its results; the host does not wait for the GPU.
    """

    def __init__(self, work: "_core.TensorWork", keepalive: tuple, device: torch.device):
        self.work = work
        self._keepalive = keepalive
        self._device = device

    def is_completed(self) -> bool:
        return self.work.is_completed()

    def wait(self, timeout: Optional[float] = None) -> None:
        self.work.wait(0.0 if timeout is None else timeout)
        if self._device.type == "cuda":
            self.work.order_on(torch.cuda.current_stream(self._device).cuda_stream)
        self._keepalive = ()


def submit(queue, requests: list, keepalive: tuple) -> list:
    """Queues the requests on ``queue``, announced in the same cycle (so they tend to fuse).
    A queue closed by an earlier failure raises a HorovodInternalError."""
    devices = [t.device for t in keepalive if isinstance(t, torch.Tensor)]
    device = devices[0] if devices else torch.device("cpu")
    # A queue that an earlier failure closed says so with CommunicatorClosed; a ValueError here
    # is this call's (a name already in flight), a ValueError in Horovod too.
    with horovod_errors():
        works = queue.submit_all(list(requests))
    return [Queued(work, keepalive, device) for work in works]


def gathered_tensor(queued: Queued, like: torch.Tensor) -> torch.Tensor:
    """An all-gather's result: every rank's rows of ``like``, in rank order, on its device (the
    rows were gathered in host memory)."""
    return rows_tensor(queued, like, sum(queued.work.rows))


def rows_tensor(queued: Queued, like: torch.Tensor, rows: int) -> torch.Tensor:
    """A Work's result (its ``gathered`` bytes) as ``rows`` rows shaped like ``like``'s, on its
    device: an all-gather's, a reduce-scatter's or an all-to-all's, all in host memory."""
    flat = torch.from_numpy(queued.work.gathered)  # the Work's memory, which it keeps alive
    result = flat.view(like.dtype).reshape((rows,) + tuple(like.shape[1:]))
    return result.to(like.device) if like.device.type != "cpu" else result
