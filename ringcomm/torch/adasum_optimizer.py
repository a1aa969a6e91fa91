"""DistributedOptimizer(op=hvd.Adasum): Horovod's _DistributedAdasumOptimizer.

Adasum combines what the ranks would each do to the model, not their gradients: Adasum is not
linear, and an optimizer's step (momentum, Adam's normalisation) changes a gradient's direction
and size. So, per parameter, as soon as backward has produced its gradient (after
``backward_passes_per_step`` passes): remember the parameter, run the wrapped optimizer's step on
that parameter alone, turn the parameter into the step's delta (new - old), and hand the delta to
the tensor queue for an Adasum all-reduce. step() hands over the parameters whose gradient never
came (stepping them too), waits, and sets every parameter to old + the combined delta.

As in Horovod: no scaling of the deltas (Horovod scales only on its NCCL GPU path, which sums
within a host first and divides by the local size after; ringcomm reduces every tensor as
Horovod's CPU path does, CUDA tensors staged through host memory); gradients start as zeros;
``compression`` compresses the deltas; ``synchronize()`` does nothing and ``skip_synchronize()``
raises; ``groups`` and ``sparse_as_dense`` are not used. Beyond Horovod: any process set whose
size is a power of two (Horovod: the global set only); a rank outside the set steps alone.
"""

from __future__ import annotations

import weakref

import torch

from ringcomm.torch import handles, optimizer
from ringcomm.torch.collectives import allreduce
from ringcomm.torch.optimizer import (
    _TOO_MANY_PASSES,
    DistributedOptimizerMixin,
    _names_of_parameters,
)
from ringcomm.torch.process_sets import member
from ringcomm.torch.reduce_ops import Adasum, check_adasum


class AdasumOptimizerMixin(DistributedOptimizerMixin):
    """Mixed into the wrapped optimizer's class in place of DistributedOptimizerMixin (whose
    backward_passes_per_step setter, load_state_dict and join support it keeps)."""

    def _ringcomm_adasum_setup(
        self, named_parameters, compression, backward_passes_per_step, process_set
    ):
        self._parameter_names = _names_of_parameters(self.param_groups, named_parameters)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = Adasum
        self.process_set = process_set
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        self._group_ready = {}
        # id(param) -> the handle of its delta's all-reduce.
        self._in_flight = {}
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        # Each parameter's value before its local step, plus the combined delta after.
        self._starts = {id(p): torch.zeros_like(p, requires_grad=False) for p in self._params}
        self._synchronized = False
        self._should_synchronize = True
        self._hooks = []
        if process_set.included():
            check_adasum(member(process_set, "Allreduce").size, [p for p in self._params])
            for p in self._params:
                p.grad = torch.zeros_like(p)  # as Horovod: a step never finds a gradient missing
                self._hooks.append(p.register_post_accumulate_grad_hook(self._gradient_ready))
        optimizer._latest_optimizer = weakref.ref(self)

    # ---- during backward ------------------------------------------------------------------
    def _gradient_ready(self, param: torch.Tensor) -> None:
        key = id(param)
        if key in self._in_flight and self._delay[key] <= 0:
            raise AssertionError(_TOO_MANY_PASSES)
        self._delay[key] -= 1
        if self._delay[key] == 0:
            self._in_flight[key] = self._start_delta(param)

    def _start_delta(self, p: torch.Tensor) -> int:
        """Steps the wrapped optimizer on ``p`` alone, leaves the step's delta in ``p`` and
        submits its Adasum all-reduce; returns the handle."""
        start = self._starts[id(p)]
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(p is v for v in group["params"]) else []
            start.copy_(p.detach())
            super(DistributedOptimizerMixin, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        delta = p.data
        delta.sub_(start)
        started = allreduce.start(
            delta, True, Adasum, self._compression, 1.0, 1.0, self._parameter_names[id(p)]
        )
        target = member(self.process_set, "Allreduce")
        return allreduce.submit(target, [started], lambda finishes: finishes[0]())

    # ---- after backward -------------------------------------------------------------------
    def synchronize(self) -> None:
        """Nothing to do, as in Horovod: step() waits for the deltas."""

    def skip_synchronize(self):
        raise AssertionError(
            "Skipping synchronization is not supported when using Adasum optimizer."
        )

    def step(self, closure=None):
        if not self._hooks:
            # Outside the process set: the wrapped optimizer alone.
            return super(DistributedOptimizerMixin, self).step(closure)
        loss = closure() if closure is not None else None
        for p in self._params:
            if id(p) not in self._in_flight:
                # No gradient yet (an unused parameter, or fewer backward passes than
                # backward_passes_per_step): step on what p.grad holds, as Horovod does.
                self._in_flight[id(p)] = self._start_delta(p)
        try:
            for p in self._params:
                delta = handles.synchronize(self._in_flight[id(p)])
                start = self._starts[id(p)]
                start.add_(delta.to(start.dtype))
                p.data.copy_(start)
        finally:
            self._in_flight.clear()
            self.set_backward_passes_per_step(self.backward_passes_per_step)
        return loss
