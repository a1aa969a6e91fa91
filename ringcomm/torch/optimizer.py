"""DistributedOptimizer: Horovod's wrapper that averages gradients across ranks during backward.

How gradients travel. A post-accumulate-grad hook hands each gradient to the tensor queue, named
after its parameter, as soon as backward has produced it (after ``backward_passes_per_step``
passes). The queue's thread agrees with the other ranks, once per cycle, on which gradients every
rank has handed over, fuses those into all-reduces of up to the fusion threshold, and runs them
while backward goes on - in whatever order the ranks produced them. synchronize() (called by
step()) hands over the gradients backward never produced (unused parameters, as zeros), so every
rank submits every name and no step can hang, then waits for all of them.

``groups`` gives Horovod's grouped all-reduce: a group's gradients are handed over together once
all of them are ready.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Iterable, Optional

import torch

from ringcomm.torch import handles, ops, requests, state
from ringcomm.torch.compression import Compression

# The most recently created DistributedOptimizer of this process: join() makes every replica
# equal to the last rank to join.
_latest_optimizer: Optional["weakref.ref"] = None


class _DistributedOptimizer:
    """Mixed into the wrapped optimizer's class, as Horovod does, so isinstance() still holds."""

    def _ringcomm_setup(
        self,
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        groups,
    ):
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if named_parameters is not None:
            named = list(named_parameters)
            if len({n for n, _ in named}) != len(named):
                raise ValueError("named_parameters holds duplicate names")
            names = {id(p): n for n, p in named}
            missing = [p for p in params if id(p) not in names]
            if missing:
                raise ValueError(
                    f"named_parameters does not cover {len(missing)} parameters of the optimizer"
                )
        else:
            # Not ops' "allreduce.noname.N", which unnamed hvd.allreduce calls use.
            names = {id(p): f"DistributedOptimizer.noname.{i}" for i, p in enumerate(params)}
        if gradient_predivide_factor != 1.0 and op is not ops.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        self._names = names
        self._compression = compression
        self._op = op
        self._passes = backward_passes_per_step
        # Horovod's predivide: 1/f before the sum, f/size after (the average divides by size).
        self._prescale = 1.0 / gradient_predivide_factor
        self._postscale = gradient_predivide_factor
        self._params = params
        self._group_of = self._make_groups(params, groups)
        self._group_ready: dict = {}
        self._in_flight: dict = {}  # id(param) -> its queued all-reduce
        self._pass_count = {id(p): 0 for p in params}
        self._synchronized = False
        self._skip = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._gradient_ready) for p in params]
        global _latest_optimizer
        _latest_optimizer = weakref.ref(self)

    @staticmethod
    def _make_groups(params, groups) -> dict:
        """id(param) -> the tuple of parameters handed over with it (one each without groups)."""
        if groups is None:
            return {}
        if isinstance(groups, int):
            per = max(1, -(-len(params) // groups))
            chunks = [params[i : i + per] for i in range(0, len(params), per)]
        else:
            chunks = [[p for p in group if p.requires_grad] for group in groups]
        return {id(p): tuple(chunk) for chunk in chunks if chunk for p in chunk}

    # ---- during backward ------------------------------------------------------------------
    def _gradient_ready(self, param: torch.Tensor) -> None:
        key = id(param)
        self._pass_count[key] += 1
        if self._pass_count[key] < self._passes:
            return  # accumulate locally for backward_passes_per_step passes
        if key in self._in_flight:
            # Autograd is adding into a gradient the queue is reducing: as Horovod does, refuse.
            raise RuntimeError(
                f"the gradient of {self._names[key]} was computed more than "
                f"backward_passes_per_step={self._passes} times before step() or synchronize(); "
                "raise backward_passes_per_step, or call synchronize() between the passes"
            )
        group = self._group_of.get(key)
        if group is None:
            self._submit([param])
            return
        ready = self._group_ready.setdefault(group, set())
        ready.add(key)
        if len(ready) == len(group):
            del self._group_ready[group]
            self._submit(list(group))

    def _submit(self, params: list) -> None:
        """Hands these parameters' gradients to the queue (zeros where backward made none)."""
        started = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            grad = p.grad.detach()
            if self._passes > 1:
                grad.div_(self._passes)
            summed = self._op in (ops.Sum, ops.Average)  # the codecs carry sums only
            wire = self._compression.wire if grad.dtype == torch.float32 and summed else None
            scalable = grad.dtype in (torch.float32, torch.float64)
            started.append(
                requests.allreduce(
                    grad,
                    None,
                    self._op,
                    wire,
                    self._prescale if scalable else 1.0,
                    self._postscale if scalable else 1.0,
                    self._names[id(p)],
                )
            )
        works = requests.submit(started, tuple(p.grad for p in params))
        for p, work in zip(params, works):
            self._in_flight[id(p)] = work

    # ---- after backward -------------------------------------------------------------------
    def synchronize(self) -> None:
        """Waits for every gradient's all-reduce, handing over those backward never produced."""
        missing = [p for p in self._params if id(p) not in self._in_flight]
        groups_left = {self._group_of[id(p)] for p in missing if id(p) in self._group_of}
        self._group_ready.clear()
        for group in groups_left:
            self._submit([p for p in group if id(p) not in self._in_flight])
        alone = [p for p in missing if id(p) not in self._group_of]
        if alone:
            self._submit(alone)
        try:
            for work in self._in_flight.values():
                work.wait()
        finally:
            self._in_flight.clear()
            for key in self._pass_count:
                self._pass_count[key] = 0
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize(), e.g. to clip the averaged gradients."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        if not self._skip and not self._synchronized:
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none: bool = True):
        if self._in_flight:
            raise RuntimeError(
                "zero_grad() while gradient all-reduces are in flight; call step() "
                "or synchronize() first"
            )
        return super().zero_grad(set_to_none=set_to_none)

    def _adopt_replica_of(self, root: int) -> None:
        """Makes this replica (parameters and optimizer state) the one on rank ``root``."""
        pending = [
            ops.broadcast_async_(p.data, root, f"join.{self._names[id(p)]}") for p in self._params
        ]
        for handle in pending:
            handles.synchronize(handle)
        broadcast_optimizer_state(self, root_rank=root)


def DistributedOptimizer(  # noqa: N802 (Horovod's name)
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable] = None,
    compression=Compression.none,
    backward_passes_per_step: int = 1,
    op=ops.Average,
    gradient_predivide_factor: float = 1.0,
    groups=None,
):
    """Wraps ``optimizer`` so that step() applies gradients averaged (op) over all ranks."""
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1; got {backward_passes_per_step}")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    optimizer.__class__ = cls
    optimizer._ringcomm_setup(
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        groups,
    )
    return optimizer


def join(device: int = -1) -> int:
    """This rank has run out of data. Until every rank has called join(), it takes part in the
    other ranks' allreduce / allgather / broadcast calls without data of its own: it adds
    nothing to sums (an average divides by the ranks that did contribute) and no rows to
    gathers. Returns the rank that joined last. ``device``: the CUDA device this rank lends to
    the other ranks' collectives on CUDA tensors (default: the current one, if CUDA is in use).

    Unlike Horovod, the replica of the DistributedOptimizer created last is then made equal, on
    every rank, to the last rank's (parameters and optimizer state): the ranks that joined
    early missed the later steps.
    """
    if device < 0 and torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
    work = state.queue().join(device=device)
    work.wait()
    last = work.last_joined
    # A rank that joined early made fewer unnamed calls: count them afresh on every rank.
    requests.forget_default_names()
    optimizer = _latest_optimizer() if _latest_optimizer is not None else None
    if optimizer is not None and state.comm().size > 1:
        optimizer._adopt_replica_of(last)
    return last


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    """Makes every rank's optimizer state (and hyperparameters) the root's."""
    state_dict = ops.broadcast_object(
        optimizer.state_dict() if state.comm().rank == root_rank else None, root_rank=root_rank
    )
    optimizer.load_state_dict(state_dict)
