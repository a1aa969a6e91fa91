"""DistributedOptimizer: Horovod's wrapper that averages gradients across ranks during backward.

How gradients travel. Parameters are assigned, once, to buckets of at most ``fusion_threshold``
bytes, in reverse registration order (the order backward usually produces them), or one bucket per
entry of ``groups``. A post-accumulate-grad hook marks each gradient ready; as soon as a bucket is
complete *and every earlier bucket has been launched*, its gradients are copied into one fusion
buffer and an asynchronous all-reduce starts, while backward goes on. Launching in bucket order on
every rank is what keeps the ranks' collectives in step without a coordinator: a rank whose
gradients arrive in another order, or that never computes some of them (unused parameters), still
issues the same all-reduces in the same order. synchronize() (called by step()) fills gradients
that never arrived with zeros, launches what is left, waits, and copies the averages back.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import Iterable, Optional

import numpy as np
import torch

from ringcomm.torch import ops, state
from ringcomm.torch.compression import Compression

# Bytes of gradients fused into one all-reduce (RINGCOMM_FUSION_THRESHOLD, or Horovod's
# HOROVOD_FUSION_THRESHOLD). Not Horovod's 128 MiB default: Horovod fuses whatever is ready at each
# cycle, so its cap never delays a launch, while these buckets are fixed in advance and a bucket
# waits for all of its gradients. 8 MiB keeps several buckets in flight during backward for models
# of a few million parameters (DDP uses 25 MiB for the same reason).
_DEFAULT_FUSION_BYTES = 8 * 1024 * 1024


def _fusion_threshold() -> int:
    value = os.environ.get("RINGCOMM_FUSION_THRESHOLD", os.environ.get("HOROVOD_FUSION_THRESHOLD"))
    if value is None:
        return _DEFAULT_FUSION_BYTES
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(
            f"RINGCOMM_FUSION_THRESHOLD must be a number of bytes; got {value!r}"
        ) from None


# The most recently created DistributedOptimizer of this process: the one join() drives.
_latest_optimizer: Optional["weakref.ref"] = None


class _Bucket:
    def __init__(self, params: list):
        self.params = params
        self.ready: set = set()
        self.work = None
        self.buffer: Optional[torch.Tensor] = None

    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)


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
        fusion_threshold,
    ):
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        names = {}
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
        self._names = names
        self._compression = compression
        self._op = op
        self._passes = backward_passes_per_step
        if gradient_predivide_factor != 1.0 and op is not ops.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        size = state.comm().size
        self._prescale = 1.0 / gradient_predivide_factor
        self._postscale = gradient_predivide_factor / size if op is ops.Average else 1.0
        self._reduce_op = ops.Sum if op is ops.Average else op
        self._buckets = self._make_buckets(params, groups, fusion_threshold)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._pass_count = {id(p): 0 for p in params}
        self._next_launch = 0
        self._synchronized = False
        self._skip = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._gradient_ready) for p in params]
        self._joined = False
        self._last_active: list = []
        global _latest_optimizer
        _latest_optimizer = weakref.ref(self)

    @staticmethod
    def _make_buckets(params, groups, threshold) -> list:
        if groups is not None:
            if isinstance(groups, int):
                per = max(1, -(-len(params) // groups))
                chunks = [params[i : i + per] for i in range(0, len(params), per)]
            else:
                listed = [[p for p in group if p.requires_grad] for group in groups]
                grouped = {id(p) for group in listed for p in group}
                chunks = listed + [[p] for p in params if id(p) not in grouped]
            return [_Bucket(chunk) for chunk in chunks if chunk]
        buckets, current, current_bytes = [], [], 0
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if current and (current_bytes + nbytes > threshold or p.dtype != current[0].dtype):
                buckets.append(_Bucket(current))
                current, current_bytes = [], 0
            current.append(p)
            current_bytes += nbytes
        if current:
            buckets.append(_Bucket(current))
        return buckets

    # ---- during backward ------------------------------------------------------------------
    def _gradient_ready(self, param: torch.Tensor) -> None:
        key = id(param)
        self._pass_count[key] += 1
        if self._pass_count[key] < self._passes:
            return  # accumulate locally for backward_passes_per_step passes
        bucket = self._bucket_of[key]
        bucket.ready.add(key)
        self._launch_ready_buckets()

    def _launch_ready_buckets(self) -> None:
        while self._next_launch < len(self._buckets):
            bucket = self._buckets[self._next_launch]
            if len(bucket.ready) < len(bucket.params):
                return
            self._launch(bucket)
            self._next_launch += 1

    def _launch(self, bucket: _Bucket) -> None:
        grads = []
        for p in bucket.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad.detach().reshape(-1))
        bucket.buffer = torch.cat(grads) if len(grads) > 1 else grads[0].clone()
        if self._passes > 1:
            bucket.buffer.div_(self._passes)
        wire = self._compression.wire if bucket.buffer.dtype == torch.float32 else None
        bucket.work = state.comm().allreduce(
            bucket.buffer,
            op=self._reduce_op,
            async_op=True,
            compression=wire,
            prescale=self._prescale,
            postscale=self._postscale,
            name=self._bucket_name(bucket),
        )

    def _bucket_name(self, bucket: _Bucket) -> str:
        """Names the gradients fused in a bucket, for error messages."""
        names = [self._names.get(id(p), f"parameter {i}") for i, p in enumerate(bucket.params)]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"gradients of {shown}"

    # ---- after backward -------------------------------------------------------------------
    def synchronize(self) -> None:
        """Waits for every gradient's all-reduce (launching those backward never reached)."""
        self._launch_remaining_and_finish()
        for key in self._pass_count:
            self._pass_count[key] = 0
        self._next_launch = 0
        self._synchronized = True
        self._exchange_activity()

    def _launch_remaining_and_finish(self) -> None:
        """Launches the buckets backward did not complete (missing gradients become zeros),
        waits for every bucket and copies the reduced values back into the gradients."""
        for bucket in self._buckets[self._next_launch :]:
            bucket.ready = {id(p) for p in bucket.params}
        self._launch_ready_buckets()
        for bucket in self._buckets:
            bucket.work.wait()
            offset = 0
            for p in bucket.params:
                n = p.numel()
                p.grad.copy_(bucket.buffer[offset : offset + n].view_as(p.grad))
                offset += n
            bucket.work, bucket.buffer = None, None
            bucket.ready.clear()

    def _exchange_activity(self) -> list:
        """Ends every step: which ranks still have data (join() needs it; a few microseconds)."""
        flags = state.comm().allgather(np.array([0 if self._joined else 1], np.int8))
        active = [r for r, flag in enumerate(flags.tolist()) if flag]
        if active:
            self._last_active = active
        return active

    def _shadow_step(self) -> bool:
        """One step of a rank that joined: zero gradients into the same all-reduces, and the
        optimizer's update with the averaged result, so its replica stays identical. Returns
        False once every rank has joined."""
        for p in self._bucket_of_params():
            p.grad = None
        self._joined = True
        self._launch_remaining_and_finish()
        self._next_launch = 0
        if not self._exchange_activity():
            return False
        super().step()
        return True

    def _bucket_of_params(self):
        return [p for bucket in self._buckets for p in bucket.params]

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
        if any(b.work is not None for b in self._buckets):
            raise RuntimeError(
                "zero_grad() while gradient all-reduces are in flight; call step() "
                "or synchronize() first"
            )
        return super().zero_grad(set_to_none=set_to_none)


def DistributedOptimizer(  # noqa: N802 (Horovod's name)
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable] = None,
    compression=Compression.none,
    backward_passes_per_step: int = 1,
    op=ops.Average,
    gradient_predivide_factor: float = 1.0,
    groups=None,
    fusion_threshold: Optional[int] = None,
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
        _fusion_threshold() if fusion_threshold is None else fusion_threshold,
    )
    return optimizer


def join(optimizer=None) -> int:
    """This rank has run out of data: until every rank has called join(), keep taking part in
    the others' DistributedOptimizer steps with zero gradients (applying the averaged updates,
    so every replica stays identical). Returns the rank that joined last.

    ``optimizer``: the DistributedOptimizer being trained (default: the one created last). Only
    its gradient all-reduces are mirrored: other collectives called by ranks still training while
    some have joined are not (they fail with an error).
    """
    if optimizer is None:
        optimizer = _latest_optimizer() if _latest_optimizer is not None else None
    if optimizer is None:
        state.comm().barrier()
        return state.comm().rank
    if not isinstance(optimizer, _DistributedOptimizer):
        raise TypeError("join(optimizer): optimizer must be a DistributedOptimizer")
    optimizer._joined = True
    while optimizer._shadow_step():
        pass
    last = optimizer._last_active
    optimizer._joined = False
    return max(last) if last else state.comm().rank


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    """Makes every rank's optimizer state (and hyperparameters) the root's."""
    state_dict = ops.broadcast_object(
        optimizer.state_dict() if state.comm().rank == root_rank else None, root_rank=root_rank
    )
    optimizer.load_state_dict(state_dict)
