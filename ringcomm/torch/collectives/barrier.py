"""barrier(): returns once every rank of the process set has called it. It is a named request
in the set's tensor queue (a one-element all-reduce), so ranks in join() take part without
calling it, as in Horovod, and a rank that never calls it fails the others at the timeout
without closing anything.
"""

from __future__ import annotations

import torch

from ringcomm.torch import handles
from ringcomm.torch.collectives import allreduce
from ringcomm.torch.compression import Compression
from ringcomm.torch.process_sets import global_process_set, member
from ringcomm.torch.reduce_ops import Sum


def barrier(process_set=global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called it (ranks in join() take part
    without calling it, as in Horovod)."""
    target = member(process_set, "Barrier")
    token = torch.zeros(1, dtype=torch.int32)
    started = allreduce.start(
        token, True, Sum, Compression.none, 1.0, 1.0, target.default_name("barrier")
    )
    handles.synchronize(allreduce.submit(target, [started], lambda finishes: None))
