"""DistributedOptimizer: Horovod's wrapper that averages gradients across ranks during backward.

How gradients travel. A post-accumulate-grad hook hands each gradient to the process set's
tensor queue, named after its parameter, as soon as backward has produced it (after
``backward_passes_per_step`` passes, which accumulate locally and are not averaged, as in
Horovod). The queue's thread agrees with the other ranks, once per cycle, on which gradients
every rank has handed over, fuses those into all-reduces of up to the fusion threshold, and runs
them while backward goes on - in whatever order the ranks produced them. synchronize() (called
by step()) hands over the gradients backward never produced (unused parameters, as zeros), so
every rank submits every name and no step can hang, then waits for all of them.

As in Horovod: ``groups`` hands a group's gradients over together once all are ready; sparse
gradients (``nn.Embedding(sparse=True)``) are all-gathered, or densified with
``sparse_as_dense=True``; ``compression`` may be any compressor (compression.py); one rank
alone (or a rank outside ``process_set``) registers no hooks and leaves gradients as they are;
step() after synchronize() without ``skip_synchronize()`` warns and synchronizes again.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from typing import TYPE_CHECKING, Callable, Optional

import torch

from ringcomm._error_feedback import feed_back
from ringcomm.torch import handles, state
from ringcomm.torch.collectives import allreduce
from ringcomm.torch.collectives.sparse import sparse_allreduce_async
from ringcomm.torch.compression import (
    Compression,
    feeds_back,
    is_none,
    wire_codec,
)
from ringcomm.torch.process_sets import member
from ringcomm.torch.reduce_ops import Average

# The most recently created DistributedOptimizer of this process: under the 'contributors' join
# policy, join() makes every replica equal to the last rank to join.
_latest_optimizer: Optional["weakref.ref"] = None

_TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally."
)


if TYPE_CHECKING:
    # For mypy: what the mixin is mixed into (param_groups, and super()'s step and zero_grad).
    from torch.optim import Optimizer as _OptimizerBase
else:
    _OptimizerBase = object


class DistributedOptimizerMixin(_OptimizerBase):
    """Mixed into the wrapped optimizer's class, as Horovod does, so isinstance() still holds."""

    def _ringcomm_setup(
        self,
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        groups,
        sparse_as_dense,
        process_set,
    ):
        self._parameter_names = _names_of_parameters(self.param_groups, named_parameters)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        self._group_of = _make_groups(self._params, groups)
        self._group_ready: dict = {}
        # id(param) -> what waits for its all-reduce and writes the result into p.grad (one
        # function for the gradients submitted together, under each of them).
        self._in_flight: dict = {}
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        # Error feedback (8-bit codecs): parameter name -> the rounding error of its last gradient.
        self._residuals: dict = {}
        self._synchronized = False
        self._should_synchronize = True
        self._hooks = []
        # As in Horovod: one rank alone (or one outside the set) registers no hooks.
        if process_set.included() and state.size() > 1:
            self._hooks = [
                p.register_post_accumulate_grad_hook(self._gradient_ready) for p in self._params
            ]
        global _latest_optimizer
        _latest_optimizer = weakref.ref(self)

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes
        for key in self._delay:
            self._delay[key] = passes

    def load_state_dict(self, *args, **kwargs):
        self._in_flight.clear()
        self._group_ready.clear()
        self._synchronized = False
        self._should_synchronize = True
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        return super().load_state_dict(*args, **kwargs)

    # ---- during backward ------------------------------------------------------------------
    def _gradient_ready(self, param: torch.Tensor) -> None:
        key = id(param)
        if key in self._in_flight and self._delay[key] <= 0:
            # Autograd is adding into a gradient the queue is reducing: as Horovod does, refuse.
            raise AssertionError(_TOO_MANY_PASSES)
        self._delay[key] -= 1
        if self._delay[key] > 0:
            return  # accumulate locally for backward_passes_per_step passes
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
        """Hands these parameters' gradients to the queue, announced together (zeros where
        backward made none); sparse gradients go their own way."""
        dense = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse and not self.sparse_as_dense:
                self._in_flight[id(p)] = self._start_sparse(p)
            else:
                dense.append(p)
        if not dense:
            return
        target = member(self.process_set, "Allreduce")
        started, apply = [], []
        for p in dense:
            s, write_back = self._start_dense(p)
            started.append(s)
            apply.append(write_back)
        handle = allreduce.submit(target, started, lambda finishes: [f() for f in finishes])
        finish = _finisher(handle, apply)
        for p in dense:
            self._in_flight[id(p)] = finish

    def _start_dense(self, p):
        """The all-reduce of p's gradient, and what writes its result back into p.grad."""
        if p.grad.is_sparse:  # sparse_as_dense
            grad = p.grad.to_dense()
            in_place = False
        else:
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            grad = p.grad.detach()
            in_place = True
        scalable = grad.dtype in (torch.float32, torch.float64)
        predivided = self.op == Average and scalable
        builtin = wire_codec(self._compression) is not None or is_none(self._compression)
        if feeds_back(self._compression) and grad.dtype == torch.float32 and not grad.is_cuda:
            self._feed_back(p, grad)
        # Horovod's gradient_predivide_factor (Average): divided by first, multiplied by after.
        prescale = 1.0 / self.gradient_predivide_factor if predivided else 1.0
        postscale = self.gradient_predivide_factor if predivided else 1.0
        name = self._parameter_names[id(p)]
        if builtin:
            compression = self._compression
            s = allreduce.start(grad, in_place, self.op, compression, prescale, postscale, name)
        else:
            # A compressor of the user's: reduce what it made, write back what it restores.
            compressed, context = self._compression.compress(grad)
            compressed = compressed.contiguous() if in_place else compressed.contiguous().clone()
            s = allreduce.start(
                compressed, True, self.op, Compression.none, prescale, postscale, name
            )
            restore = s.finish
            s.finish = lambda: self._compression.decompress(restore(), context)
            in_place = False
        return s, _write_back(p, in_place)

    def _feed_back(self, p, grad) -> None:
        """Error feedback (ringcomm/_error_feedback.py): this rank's rounding error of the
        parameter's last gradient goes into its next one."""
        codec = wire_codec(self._compression)
        if codec is None:  # not reached: only compressors with an 8-bit wire codec feed back
            raise RuntimeError(f"{self._compression} has no wire codec to feed its error back")
        feed_back(grad, self._residuals, self._parameter_names[id(p)], codec)

    def _start_sparse(self, p) -> Callable[[], None]:
        result = sparse_allreduce_async(
            p.grad, self._parameter_names[id(p)], self.op, self.process_set
        )

        def finish():
            p.grad.zero_().add_(result())

        return finish

    # ---- after backward -------------------------------------------------------------------
    def synchronize(self) -> None:
        """Waits for every gradient's all-reduce, handing over those backward never produced."""
        if not self._hooks:
            # Outside the process set, or one rank alone: as in Horovod, gradients stay as
            # backward left them (the average over one rank is the gradient itself).
            self._synchronized = True
            return
        missing = [p for p in self._params if id(p) not in self._in_flight]
        groups_left = {self._group_of[id(p)] for p in missing if id(p) in self._group_of}
        self._group_ready.clear()
        for group in groups_left:
            self._submit([p for p in group if id(p) not in self._in_flight])
        alone = [p for p in missing if id(p) not in self._group_of]
        if alone:
            self._submit(alone)
        try:
            finished = set()
            for finish in self._in_flight.values():
                if id(finish) not in finished:
                    finished.add(id(finish))
                    finish()
        finally:
            self._in_flight.clear()
            self.set_backward_passes_per_step(self.backward_passes_per_step)
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize(), e.g. to clip the averaged gradients."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def _ringcomm_local_step(self) -> None:
        """The wrapped optimizer's own step, without any all-reduce (optimizer_state.py)."""
        super().step()

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training slowdown. You may want to "
                    "consider using optimizer.skip_synchronize() context if you use "
                    "optimizer.synchronize() in your code.",
                    stacklevel=2,
                )
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none: bool = True):
        if self._in_flight:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                "cause a race condition."
            )
        return super().zero_grad(set_to_none=set_to_none)

    def _adopt_replica_of(self, root: int) -> None:
        """Makes this replica (parameters and optimizer state) the one on rank ``root``."""
        from ringcomm.torch.collectives import broadcast
        from ringcomm.torch.optimizer_state import broadcast_optimizer_state

        pending = [
            broadcast.broadcast_async_(
                p.data, root, f"join.{self._parameter_names[id(p)]}", self.process_set
            )
            for p in self._params
        ]
        for handle in pending:
            handles.synchronize(handle)
        broadcast_optimizer_state(self, root_rank=root, process_set=self.process_set)


def _finisher(handle: int, write_backs: list) -> Callable[[], None]:
    def finish():
        for result, write_back in zip(handles.synchronize(handle), write_backs):
            write_back(result)

    return finish


def _write_back(p: torch.Tensor, in_place: bool) -> Callable[[torch.Tensor], None]:
    """What puts an all-reduced gradient into p.grad (nothing when it was reduced in place)."""

    def write_back(result: torch.Tensor) -> None:
        if in_place:
            return
        if p.grad.is_sparse:
            p.grad.zero_().add_(result.to_sparse())  # sparse_as_dense: back to sparse
        else:
            p.grad.set_(result.to(p.grad.dtype))

    return write_back


def _names_of_parameters(param_groups, named_parameters) -> dict:
    """id(param) -> its name, with Horovod's checks and its names for unnamed parameters."""
    if named_parameters is None:
        return {
            id(v): f"allreduce.noname.{i}.{j}"
            for i, group in enumerate(param_groups)
            for j, v in enumerate(group["params"])
        }
    named = list(named_parameters)
    if any(not isinstance(p, tuple) for p in named):
        raise ValueError(
            "named_parameters should be a sequence of tuples (name, parameter), usually "
            "produced by model.named_parameters()."
        )
    seen: set[str] = set()
    duplicates: set[str] = set()
    for name, _ in named:
        (duplicates if name in seen else seen).add(name)
    if duplicates:
        raise ValueError(
            "Parameter names in named_parameters must be unique. Found duplicates: "
            + ", ".join(sorted(duplicates))
        )
    names = {id(v): k for k, v in named}
    unnamed = [id(v) for group in param_groups for v in group["params"] if id(v) not in names]
    if unnamed:
        raise ValueError(
            "named_parameters was specified, but one or more model parameters were not named. "
            "Python object ids: " + ", ".join(str(i) for i in unnamed)
        )
    return names


def _make_groups(params: list, groups) -> dict:
    """id(param) -> the tuple of parameters handed over with it (none without groups), as
    Horovod splits them."""
    if groups is None or groups == 0:
        return {}
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))
        wanted = {id(p) for p in params}
        chunks = [[p for p in group if id(p) in wanted] for group in groups]
    elif isinstance(groups, int) and groups > 0:
        d, r = divmod(len(params), groups)
        chunks = [params[i * d + min(i, r) : (i + 1) * d + min(i + 1, r)] for i in range(groups)]
    else:
        raise ValueError(
            "groups should be a non-negative integer or a list of list of torch.Tensor."
        )
    return {id(p): tuple(chunk) for chunk in chunks if len(chunk) > 1 for p in chunk}
