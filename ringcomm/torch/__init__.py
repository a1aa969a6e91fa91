"""Horovod's training API on ringcomm: ``import ringcomm.torch as hvd`` in place of
``import horovod.torch as hvd``.

Implemented so far: init/shutdown and the rank queries; allreduce (blocking, in place, async,
grouped, differentiable), allgather (first dimensions may differ), broadcast, alltoall (with
splits), reducescatter, barrier; poll/synchronize on async handles; Compression.fp16/.bf16 as wire
codecs; broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object;
DistributedOptimizer (gradient hooks, fusion into buckets, backward_passes_per_step, groups,
gradient_predivide_factor); join (for DistributedOptimizer steps). Not yet: fusion inside the
engine (cycle time), checks by tensor name.
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
