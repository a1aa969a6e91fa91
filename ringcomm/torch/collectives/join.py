"""join(): a rank that has run out of data keeps taking part in the other ranks' collectives,
without data of its own, until every rank has joined.

What it contributes meanwhile is the job's join policy (``init(join_policy=...)``, the queue's
JoinPolicy): Horovod's by default - zeros to every all-reduce (an average still divides by every
rank), and an error for all-gathers and broadcasts; or ``"contributors"`` - nothing, so an
average divides by the ranks that contributed, all-gathers get no rows from it and broadcasts
are relayed, and when every rank has joined, the DistributedOptimizer created last is made
equal on every rank to the last rank's (parameters and state), since the ranks that joined early
missed its last steps.
"""

from __future__ import annotations

import torch

from ringcomm import _core
from ringcomm.torch import optimizer, process_sets, state
from ringcomm.torch.errors import horovod_errors


def join(device: int = -1) -> int:
    """Blocks until every rank has joined; returns the rank that joined last. ``device``: the
    CUDA device this rank lends to the other ranks' collectives on CUDA tensors (default: the
    current one, if CUDA is in use)."""
    if device < 0 and torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
    target = process_sets.global_member()
    with horovod_errors():
        work = target.queue.join(device=device)
        work.wait()
    last = work.last_joined
    # A rank that joined early made fewer unnamed calls: every rank counts them afresh.
    target.forget_default_names()
    latest = optimizer._latest_optimizer() if optimizer._latest_optimizer is not None else None
    if (
        state.join_policy() == _core.JoinPolicy.contributors
        and latest is not None
        and state.size() > 1
    ):
        latest._adopt_replica_of(last)
    return last
