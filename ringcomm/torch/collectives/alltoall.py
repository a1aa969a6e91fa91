"""alltoall: rank i sends ``splits[j]`` rows (first dimension) of its tensor to rank j, and
receives, in rank order, what every rank sends it. Without ``splits`` each rank divides its own
first dimension evenly (ranks' first dimensions may differ, as in Horovod). Horovod's arguments,
checks and errors; asynchronous and differentiable forms.

A named request of the set's tensor queue, as in Horovod: every rank's splits travel with its
announcement, so the ranks know what each receives without another message, and ranks whose rows
differ in shape all get a MismatchError at once, naming both.
"""

from __future__ import annotations

import concurrent.futures

import torch

from ringcomm.torch import handles, requests
from ringcomm.torch.errors import HorovodInternalError
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.tensors import checked


def _rows_to_send(tensor: torch.Tensor, splits, size: int) -> list:
    """Horovod's checks of ``splits``, and the rows for each rank."""
    rows = tensor.shape[0]
    if splits is None:
        if rows % size != 0:
            raise ValueError(
                "splits not provided, but first dimension of tensor is not an even multiple "
                "of the number of workers."
            )
        return [rows // size] * size
    if splits.dim() > 1:
        raise ValueError("alltoall expects a 1D splits tensor")
    if splits.dtype != torch.int32:
        raise ValueError("alltoall expects splits to contain 32-bit integer elements.")
    send = [int(s) for s in splits.cpu()]
    if len(send) != size:
        raise ValueError("Number of entries in splits does not equal number of workers.")
    if any(s < 0 for s in send):
        raise ValueError(f"alltoall: splits must not be negative; got {send}")
    if sum(send) > rows:
        raise ValueError("Sum of splits entries is greater than the first dimension of tensor.")
    return send


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set) -> int:
    """Starts the all-to-all; synchronize() returns ``(output, received_splits)``, as in
    Horovod."""
    target = member(process_set, "Alltoall")
    tensor = checked(tensor).detach().contiguous()
    if splits is not None and not isinstance(splits, torch.Tensor):
        splits = torch.tensor(splits, dtype=torch.int32)
    if tensor.dim() == 0:
        # As in Horovod, where the ranks' negotiation fails it: synchronize() raises.
        failed: concurrent.futures.Future[tuple[torch.Tensor, torch.Tensor]]
        failed = concurrent.futures.Future()
        failed.set_exception(
            HorovodInternalError(
                f"alltoall '{name or 'alltoall'}': rank {process_set.rank()} tried to alltoall "
                "a rank-zero tensor (a 0-d tensor has no first dimension to split)"
            )
        )
        return handles.register([handles.FutureWork(failed)], lambda: failed.result())
    send = _rows_to_send(tensor, splits, target.size)
    # Horovod sends the first sum(splits) rows; any after them stay home.
    sent = tensor[: sum(send)]
    request = requests.alltoall(sent, send, name or target.default_name("alltoall"))
    (queued,) = requests.submit(target.queue, [request], (sent,))
    splits_device = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")

    def result():
        received = list(queued.work.rows)
        output = requests.rows_tensor(queued, sent, sum(received))
        return output, torch.tensor(received, dtype=torch.int32, device=splits_device)

    return handles.register([queued], result)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Without ``splits``, the rows received; with them, ``(output, received_splits)``.
    Differentiable."""
    return Alltoall.apply(checked(tensor), splits, name, process_set)


# ---- the gradients (Horovod's torch/mpi_ops.py: see ringcomm/torch/collectives/__init__.py) ----


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = handles.synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.received = received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, *unused):
        returned, _ = alltoall(grad.contiguous(), splits=ctx.received, process_set=ctx.process_set)
        return returned, None, None, None
