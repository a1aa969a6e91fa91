"""Horovod's training API on ringcomm: ``import ringcomm.torch as hvd`` in place of
``import horovod.torch as hvd``, with horovod.torch 0.28.1's names, arguments and errors (the
docs/guides/horovod.md lists every name, and where ringcomm differs).

allreduce, allgather, broadcast and the DistributedOptimizer's gradients go through a tensor
queue per process set (state.py, process_sets.py): named requests that ranks submit in any
order, agreed on once per cycle and fused, as in Horovod. join() lets ranks that ran out of data
take part without data of their own.
"""

from ringcomm.torch import elastic  # Horovod: hvd.elastic
from ringcomm.torch.build_info import (
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
)
from ringcomm.torch.collectives.allgather import (
    allgather,
    allgather_async,
    grouped_allgather,
    grouped_allgather_async,
)
from ringcomm.torch.collectives.allreduce import (
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
)
from ringcomm.torch.collectives.alltoall import alltoall, alltoall_async
from ringcomm.torch.collectives.barrier import barrier
from ringcomm.torch.collectives.broadcast import (
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
)
from ringcomm.torch.collectives.join import join
from ringcomm.torch.collectives.reducescatter import (
    grouped_reducescatter,
    grouped_reducescatter_async,
    reducescatter,
    reducescatter_async,
)
from ringcomm.torch.collectives.sparse import sparse_allreduce_async
from ringcomm.torch.compression import Compression
from ringcomm.torch.distributed_optimizer import DistributedOptimizer
from ringcomm.torch.errors import HorovodInternalError
from ringcomm.torch.handles import poll, synchronize
from ringcomm.torch.objects import allgather_object, broadcast_object, broadcast_parameters
from ringcomm.torch.optimizer_state import broadcast_optimizer_state
from ringcomm.torch.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from ringcomm.torch.reduce_ops import Adasum, Average, Max, Min, Product, Sum
from ringcomm.torch.state import (
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)
from ringcomm.torch.sync_batch_norm import SyncBatchNorm
from ringcomm.torch.timeline import start_timeline, stop_timeline
