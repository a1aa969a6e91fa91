"""Horovod's training API on ringcomm: ``import ringcomm.torch as hvd`` in place of
``import horovod.torch as hvd``.

allreduce, allgather, broadcast and the DistributedOptimizer's gradients go through a tensor
queue (state.py): named requests that ranks submit in any order, agreed on once per cycle and
fused, as in Horovod. join() lets ranks that ran out of data take part without data of their own.
"""

from ringcomm.torch import state as _state
from ringcomm.torch.compression import Compression
from ringcomm.torch.handles import poll, synchronize
from ringcomm.torch.ops import (
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allgather_object,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    broadcast_object,
    broadcast_parameters,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    reducescatter,
)
from ringcomm.torch.optimizer import DistributedOptimizer, broadcast_optimizer_state, join
from ringcomm.torch.state import init, is_initialized, shutdown


def size() -> int:
    return _state.comm().size


def rank() -> int:
    return _state.comm().rank


def local_size() -> int:
    return _state.comm().local_size


def local_rank() -> int:
    return _state.comm().local_rank


def cross_size() -> int:
    return _state.comm().cross_size


def cross_rank() -> int:
    return _state.comm().cross_rank
