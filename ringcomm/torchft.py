"""torchft's process group on ringcomm: fault-tolerant training (torchft's Lighthouse, Manager,
DDP, HSDP, LocalSGD, DiLoCo) whose all-reduce across replica groups runs on ringcomm::

    from ringcomm.torchft import ProcessGroupRingcomm
    from torchft import DistributedDataParallel, Manager, Optimizer

    pg = ProcessGroupRingcomm(timeout=timedelta(seconds=10))
    manager = Manager(pg=pg, load_state_dict=..., state_dict=..., min_replica_size=1)
    model = DistributedDataParallel(manager, model)

It stands where torchft's ``ProcessGroupGloo`` stands, on both of torchft's routes: 0.2.0's
``configure()`` and the nightly's ``get_reconfigure_handle()``/``reconfigure()``. On every quorum
change torchft aborts the group and creates the next one on a store of that quorum's own; the
ringcomm group forms there (about 10 ms), and torchft's healing (``PGTransport``) sends the
state over it.

``compression="int8"`` (or ``fp8``, ``fp16``, ``bf16``) sends the gradients of torchft's
all-reduce through ringcomm's wire codec: narrow on the wire, summed in float32 at every hop,
the same bits on every replica. Unlike ``ringcomm.c10d.hooks`` it feeds no rounding error back
(torchft's all-reduce does not say which bucket a tensor is).

torchft is an optional dependency: ``pip install ringcomm[torchft]``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as error:  # the module names what is missing and how to get it
    raise ImportError(
        "ringcomm.torchft needs torchft: pip install 'ringcomm[torchft]' (or torchft-nightly)"
    ) from error

import torch
import torch.distributed as dist

from ringcomm.c10d import hooks

__all__ = ["ProcessGroupRingcomm"]

_BACKEND_TYPE = dist.ProcessGroup.BackendType.CUSTOM


class ProcessGroupRingcomm(ProcessGroupWrapper):
    """A reconfigurable ringcomm process group for torchft's Manager.

    Args:
        timeout: how long the group's forming, and each of its operations, may take before it
            raises (torchft then gives the step up and forms the next quorum).
        compression: a wire codec for the float all-reduces (sum or average) torchft runs
            across replica groups: one of ``ringcomm.c10d.hooks.CODECS``, or None.
    """

    def __init__(
        self, timeout: timedelta = timedelta(seconds=60), compression: Optional[str] = None
    ) -> None:
        if compression is not None and compression not in hooks.CODECS:
            raise ValueError(
                f"ProcessGroupRingcomm: compression must be one of "
                f"{', '.join(hooks.CODECS)} or None; got {compression!r}"
            )
        super().__init__(timeout=timeout)
        self._compression = compression
        self._backend = None

    def _create_pg(self, store: dist.Store, rank: int, world_size: int) -> dist.ProcessGroup:
        from ringcomm.c10d import _new_backend

        self._backend = None
        backend, _ = _new_backend(store, rank, world_size, self._timeout)
        pg = dist.ProcessGroup(store, rank, world_size)
        pg._set_default_backend(_BACKEND_TYPE)
        for device in ("cpu", "cuda") if torch.version.cuda else ("cpu",):
            pg._register_backend(torch.device(device), _BACKEND_TYPE, backend)
        self._backend = backend
        return pg

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "torchft-ringcomm"

    def errored(self) -> Optional[Exception]:
        """The first failure of the current group's operations (a lost peer, a timeout), which
        torchft's Manager checks before it commits a step; None while none failed."""
        backend = self._backend
        message = backend.error if backend is not None else None
        return None if message is None else dist.DistBackendError(message)

    def abort(self, errored: bool = True) -> None:
        """Fails what the group runs at once (its peers learn it too) and drops it; safe from
        another thread, and it never waits for a peer."""
        self._backend = None
        super().abort(errored=errored)

    def shutdown(self) -> None:
        pg, self._pg, self._backend = self._pg, None, None
        if pg is not None:
            pg.shutdown()

    def set_timeout(self, timeout: timedelta) -> None:
        """The timeout of the next groups' forming and of every operation from now on."""
        super().set_timeout(timeout)
        backend = self._backend
        if backend is not None:
            backend.set_timeout(timeout)

    def allreduce(self, tensors, opts):
        if self._compression is not None and self._compresses(tensors, opts):
            op = opts if isinstance(opts, dist.ReduceOp) else opts.reduceOp
            return self._backend.allreduce_compressed(
                tensors[0], self._compression, average=op == dist.ReduceOp.AVG
            )
        return super().allreduce(tensors, opts)

    def _compresses(self, tensors, opts) -> bool:
        op = opts if isinstance(opts, dist.ReduceOp) else getattr(opts, "reduceOp", None)
        return (
            self._backend is not None
            and len(tensors) == 1
            and tensors[0].dtype in (torch.float32, torch.float16, torch.bfloat16)
            # ReduceOp first: a RedOpType (dist.ReduceOp.SUM) compared with torch's ReduceOp
            # object is never equal, so `op in (SUM, AVG)` is always False.
            and (op == dist.ReduceOp.SUM or op == dist.ReduceOp.AVG)
        )
