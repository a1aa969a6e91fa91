"""torchft's process group on ringcomm: fault-tolerant training (torchft's Lighthouse, Manager,
DDP, HSDP, LocalSGD, DiLoCo) whose all-reduce across replica groups runs on ringcomm::

    from ringcomm.torchft import ProcessGroupRingcomm
    from torchft import DistributedDataParallel, Manager, Optimizer

    pg = ProcessGroupRingcomm(timeout=timedelta(seconds=10))
    manager = Manager(pg=pg, load_state_dict=..., state_dict=..., min_replica_size=1)
    model = DistributedDataParallel(manager, model)

It stands where torchft's ``ProcessGroupGloo`` stands, on both of torchft's routes: 0.2.0's
``configure()`` and the nightly's ``get_reconfigure_handle()``/``reconfigure()``. On every quorum
change torchft aborts the group and forms the next one, which torchft's healing
(``PGTransport``) then sends the state over. On 0.2.0's route, and on the nightly's without a
shared secret, its ranks meet on a torch store of that quorum; on the nightly's with
``RINGCOMM_SECRET`` set alike in every replica group, each rank's handle carries the address of
a ringcomm mailbox it serves, and the ranks meet in the first one's, which proves the secret:
no torch store on the way.

``compression="int8"`` (or ``fp8``, ``fp16``, ``bf16``) sends the gradients of torchft's
all-reduce through ringcomm's wire codec: narrow on the wire, summed in float32 at every hop,
the same bits on every replica. Unlike ``ringcomm.c10d.hooks`` it feeds no rounding error back
(torchft's all-reduce does not say which bucket a tensor is).

torchft is an optional dependency: ``pip install ringcomm[torchft]``.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from typing import Any, Optional

try:
    from torchft.process_group import ProcessGroupWrapper, _DummyWork
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
        # A ringcomm TcpStoreServer: the nightly's route with a job secret (get_reconfigure_handle).
        self._mailbox: Optional[Any] = None
        self._handle: Optional[str] = None

    def get_reconfigure_handle(self) -> str:
        """torchft's handle (the nightly's route), and beside it, where the job has a secret every
        replica group shares (RINGCOMM_SECRET), the address of a ringcomm mailbox this rank
        serves: the next group's ranks meet in the first rank's mailbox, which proves the
        secret, instead of on torch's store (whose connections here stalled 5 s now and then,
        looking up the client's name). torchft asks for it every step: made once."""
        if self._handle is None:
            handle = json.loads(super().get_reconfigure_handle())
            secret = _job_secret()
            if secret:
                from ringcomm import _core

                address = _reachable_address()
                self._mailbox = _core.TcpStoreServer(address, 0, secret)
                handle["ringcomm"] = f"{address}:{self._mailbox.port}"
            self._handle = json.dumps(handle)
        return self._handle

    def reconfigure(self, opts):
        """The next group, of the ranks whose handles ``opts`` orders (this rank's place among
        them is its rank): met in the first one's ringcomm mailbox where every handle names one,
        on torchft's store otherwise."""
        handles = opts.handles
        peers = [json.loads(h) for h in handles] if isinstance(handles, list) else []
        if not peers or any("ringcomm" not in peer for peer in peers):
            return super().reconfigure(opts)
        from ringcomm import _tuning
        from ringcomm.c10d._build import extension

        rank, size = [peer["id"] for peer in peers].index(self._handle_id()), len(peers)
        ranks = [peer.get("global_rank") for peer in peers]
        self._rank, self._uuid = rank, opts.uuid
        self._global_ranks = None if None in ranks else ranks
        self.abort(errored=False)
        host, _, port = peers[0]["ringcomm"].rpartition(":")
        rules = _tuning.rules_for(_core_config(), size)
        latency, bandwidth = _tuning.load_link() or (0.0, 0.0)
        backend = extension().RingcommBackend.meet(
            host, int(port), f"torchft/{opts.uuid}/", rank, size,
            opts.timeout or self._timeout, _job_secret(), rules["shm"], rules["tcp"],
            latency, bandwidth, listen_address=_reachable_address(),
        )  # fmt: skip
        # torch's ProcessGroup asks for a store it never uses here: the ranks met in the mailbox.
        self._pg = self._group_of(backend, dist.HashStore(), rank, size)
        return _DummyWork(None)

    def _create_pg(self, store: dist.Store, rank: int, world_size: int) -> dist.ProcessGroup:
        from ringcomm.c10d import _new_backend

        self._backend = None
        backend, _ = _new_backend(store, rank, world_size, self._timeout)
        return self._group_of(backend, store, rank, world_size)

    def _group_of(self, backend, store, rank: int, size: int) -> dist.ProcessGroup:
        pg = dist.ProcessGroup(store, rank, size)
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
        mailbox, self._mailbox, self._handle = self._mailbox, None, None
        if mailbox is not None:
            mailbox.stop()

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


def _core_config():
    from ringcomm import _core

    return _core.Config.from_environment()


def _job_secret() -> bytes:
    """The secret every replica group was given (RINGCOMM_SECRET, RINGCOMM_SECRET_FILE), or b""."""
    return _core_config().secret


def _reachable_address() -> str:
    """Where other replica groups reach this rank: RINGCOMM_LISTEN_ADDRESS, or
    RINGCOMM_SOCKET_IFNAME's address, or the route towards torchft's Lighthouse
    (TORCHFT_LIGHTHOUSE), or what this host's name resolves to."""
    from ringcomm._host import address_towards

    config = _core_config()
    if config.listen_address:
        return config.listen_address
    if config.socket_interface:
        from ringcomm._info import _interfaces

        named = config.socket_interface.split(",")
        for interface in _interfaces():
            if interface["name"] in named and interface["address"]:
                return interface["address"]
    lighthouse = os.environ.get("TORCHFT_LIGHTHOUSE", "")
    host = lighthouse.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    if host:
        try:
            return address_towards(host)
        except ValueError:
            pass
    return socket.gethostbyname(socket.gethostname())
