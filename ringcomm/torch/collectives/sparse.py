"""Horovod's all-reduce of sparse COO tensors (the gradients of ``nn.Embedding(sparse=True)``):
every rank's indices and values are all-gathered, and the result holds them all, duplicates
included - they add up when the tensor is coalesced or applied. An average divides the values by
the set's size.
"""

from __future__ import annotations

from typing import Callable

import torch

from ringcomm.torch import handles
from ringcomm.torch.collectives import allgather
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Average


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set) -> Callable:
    """Starts the all-reduce of a sparse tensor; returns a function that waits for it and
    returns the result (Horovod's handle for sparse tensors is a callable, not an int)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise TypeError("sparse_allreduce_async takes a sparse COO torch.Tensor")
    base = (
        name
        if name is not None
        else member(process_set, "Allgather").default_name("sparse_allreduce")
    )
    indices = allgather.allgather_async(
        tensor._indices().transpose(0, 1).contiguous(), f"{base}.indices", process_set
    )
    values = allgather.allgather_async(tensor._values(), f"{base}.values", process_set)

    def result() -> torch.Tensor:
        gathered_values = handles.synchronize(values)
        gathered_indices = handles.synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / process_set.size()
        return torch.sparse_coo_tensor(
            gathered_indices.transpose(0, 1), gathered_values, tensor.size()
        )

    return result
