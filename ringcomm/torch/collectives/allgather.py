"""allgather: every rank's tensor concatenated along the first dimension, which may differ by
rank (the ranks' first dimensions travel with the queue's announcements). Asynchronous, grouped
and differentiable forms, with Horovod's arguments.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ringcomm.torch import autograd, handles, requests
from ringcomm.torch.process_sets import global_process_set, member
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
    return autograd.Allgather.apply(checked(tensor), name, process_set)


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
    return list(autograd.GroupedAllgather.apply(name, process_set, *tensors))
