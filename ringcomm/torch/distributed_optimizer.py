"""hvd.DistributedOptimizer: wraps an optimizer in place with one of the two mixins, the one that
averages gradients (optimizer.py) or Horovod's Adasum optimizer (adasum_optimizer.py). Apart
from both, so that neither module needs the other."""

from __future__ import annotations

import warnings
from typing import Iterable, Optional

import torch

from ringcomm.torch import state
from ringcomm.torch.adasum_optimizer import AdasumOptimizerMixin
from ringcomm.torch.compression import Compression
from ringcomm.torch.optimizer import DistributedOptimizerMixin
from ringcomm.torch.process_sets import global_process_set
from ringcomm.torch.reduce_ops import Adasum, Average


def DistributedOptimizer(  # noqa: N802 (Horovod's name)
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable] = None,
    compression=Compression.none,
    backward_passes_per_step: int = 1,
    op=Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups=None,
    sparse_as_dense: bool = False,
    process_set=global_process_set,
):
    """Wraps ``optimizer`` so that step() applies gradients reduced with ``op`` (default: the
    average) over the process set's ranks; with ``op=Adasum``, the optimizer's own steps
    combined with Adasum (adasum_optimizer.py)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn(
            "Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
            DeprecationWarning,
            stacklevel=2,
        )
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == Adasum and state.size() > 1:
        # Horovod's _DistributedAdasumOptimizer (at one rank, as in Horovod, the plain one).
        cls = type(optimizer.__class__.__name__, (AdasumOptimizerMixin, optimizer.__class__), {})
        optimizer.__class__ = cls
        optimizer._ringcomm_adasum_setup(
            named_parameters, compression, backward_passes_per_step, process_set
        )
        return optimizer
    cls = type(optimizer.__class__.__name__, (DistributedOptimizerMixin, optimizer.__class__), {})
    optimizer.__class__ = cls
    optimizer._ringcomm_setup(
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        groups,
        sparse_as_dense,
        process_set,
    )
    return optimizer
