"""ringcomm as a torch.distributed backend: ``dist.init_process_group("ringcomm")``.

The backend registers itself with torch.distributed in two ways: on ``import ringcomm`` and,
without any import in the user's script, through torch's ``torch.backends`` entry point (torch
calls :func:`autoload` while it imports). Registration is cheap; the C++ backend is compiled
against the installed torch the first time a process group is created (see ``_build``), and
linked to the same ``libringcomm`` as ``ringcomm._core``.

Under ``mpirun``, ``init_process_group("ringcomm")`` needs no RANK or MASTER_ADDR: see
``_mpi_rendezvous``.
"""

from __future__ import annotations

import atexit
import os
from datetime import timedelta

from ringcomm import _secret

__all__ = [
    "BACKEND_NAME",
    "register",
    "autoload",
    "lost_ranks",
    "joining",
    "join_process_group",
    "grow_group",
    "broadcast_state",
    "address",
]

#: The backend's name, as ``init_process_group`` and ``new_group`` take it.
BACKEND_NAME = "ringcomm"


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    backend, secret = _new_backend(store, rank, size, timeout)
    _publish_door(backend, size, secret)
    return backend


def _new_backend(store, rank: int, size: int, timeout: timedelta):
    """(a ringcomm backend of `size` ranks meeting on torch's `store`, the job's secret)."""
    from ringcomm import _core, _tuning
    from ringcomm.c10d._build import extension

    store = _per_attempt(store, rank, size)
    secret, path = _job_secret(store, rank, size, timeout)
    # algorithm="auto" follows this host's tuning and link files, as under ringcomm.init().
    rules = _tuning.rules_for(_core.Config.from_environment(), size)
    latency, bandwidth = _tuning.load_link() or (0.0, 0.0)
    backend = extension().RingcommBackend(
        store,
        rank,
        size,
        timeout,
        secret,
        rules["shm"],
        rules["tcp"],
        latency,
        bandwidth,
        listen_address=_address_towards(store),
    )
    if path is not None:  # every rank of the group has met: the file has served its purpose
        _secret.remove_host_secret(path)
    return backend, secret


def _publish_door(backend, size: int, secret: bytes) -> None:
    """The default group's members keep their addresses where a replacement finds them
    (ringcomm.c10d.join_process_group): in RINGCOMM_DOOR_DIR, or on the launcher's store. torch
    creates the default group's backend first, before it files any group as the default."""
    import torch.distributed.distributed_c10d as c10d

    from ringcomm.c10d.grow import DOOR_KEY

    board = os.environ.get("RINGCOMM_DOOR_DIR") or os.environ.get("RINGCOMM_STORE")
    if board and size > 1 and c10d._world.default_pg is None:
        backend.publish_door(board, DOOR_KEY, secret)


def _address_towards(store) -> str:
    """This host's address on the way to torch's store (MASTER_ADDR, torchrun's rendezvous
    host): where the ranks of a job across hosts reach each other, as ringcomm.init() listens
    where its store connection comes from. "" where the store is on this host (loopback: every
    rank is local, or the store says nothing), or RINGCOMM_SOCKET_IFNAME or
    RINGCOMM_LISTEN_ADDRESS chooses (the backend keeps those)."""
    import socket

    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    host, port = getattr(store, "host", ""), getattr(store, "port", 0)
    if not host:
        return ""
    try:
        address = socket.gethostbyname(host)
        if address.startswith("127."):
            return ""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, port or 9))  # a UDP "connect" sends nothing: it routes
            return probe.getsockname()[0]
    except OSError:
        return ""


def _per_attempt(store, rank: int, size: int):
    """Under torchrun's shared store, a store of this attempt's own
    (ringcomm._environment.torchrun_attempt_prefix). Otherwise (TORCH_DISABLE_SHARE_RDZV_TCP_STORE
    =1, the static rendezvous, no torchrun) every attempt has a store of its own: a prefix
    numbered by TORCHELASTIC_RESTART_COUNT, which differs across hosts, hung the restarted group."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return store
    import torch.distributed as dist

    from ringcomm._environment import torchrun_attempt_prefix

    return dist.PrefixStore(torchrun_attempt_prefix(store, rank, size), store)


def _job_secret(store, rank: int, size: int, timeout: timedelta):
    """(the secret the group's data links prove, the file rank 0 wrote or None).

    RINGCOMM_SECRET / RINGCOMM_SECRET_FILE when given (under mpirun the MPI rendezvous sets the
    former). Otherwise torch's store, which proves nothing, carries only the name of a file on
    this host that only this user can read; rank 0 writes a fresh secret there."""
    from ringcomm import _core

    given = _core.Config.from_environment().secret
    if given or size == 1:
        return given or _secret.new_secret(), None
    if rank == 0:
        name = f"c10d-{os.getpid()}-{_secret.new_secret()[:16].decode()}"
        path = _secret.host_file(name)
        secret = _secret.write_host_secret(path)
        store.set("ringcomm/secret-file", name)
        return secret, path
    name = store.get("ringcomm/secret-file").decode()
    return _secret.read_host_secret(_secret.host_file(name), timeout.total_seconds()), None


def _devices() -> list:
    """The devices to register for: CUDA too when this torch was built with it. A compile-time
    fact: asking the driver here (torch.cuda.is_available()) would initialise CUDA while torch
    imports, and a process that later forks could no longer use it."""
    import torch

    return ["cpu", "cuda"] if torch.version.cuda is not None else ["cpu"]


def register() -> None:
    """Makes "ringcomm" a torch.distributed backend for CPU tensors, and for CUDA tensors when
    torch has CUDA (idempotent). CUDA tensors need a ringcomm built with CUDA."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=_devices())
        _label_shrunk_groups()
        atexit.register(_shut_down_groups_left_open)
    from ringcomm.c10d import _mpi_rendezvous

    _mpi_rendezvous.install()


def _shut_down_groups_left_open() -> None:
    """At exit, the ringcomm groups a program did not destroy are shut down while Python still
    runs: their engine threads may be finishing Works whose Future callbacks, or whose tensors'
    last references, need the GIL, and an engine thread that asks for it while the interpreter
    finalizes is ended by Python, which terminates the process ("terminate called without an
    active exception"; 4 of 6 such exits in issue 49's tests)."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    for group in list(getattr(c10d._world, "pg_map", {})):
        try:
            backend = group._get_backend(torch.device("cpu"))
        except (RuntimeError, ValueError):
            continue
        if getattr(backend, "name", lambda: "")() == BACKEND_NAME:
            try:
                backend.shutdown()
            except RuntimeError:
                pass  # it failed before; its error was raised where it happened


def _label_shrunk_groups() -> None:
    """Two things torch's shrink_group (torch 2.13) gets wrong for a backend like ours, put right
    for ringcomm's:

    - it files the new group's backend as NCCL's (CUDA) or gloo's (CPU), whatever it is; DDP's
      logger then takes a backend filed as gloo's for a ProcessGroupGloo and crashes on ours. The
      group is filed as a custom backend's again, as dist.new_group files it;
    - it gives the new group a clone of the old group's store, which connects anew: where the
      lost rank served that store (rank 0 under env://), the clone waits for it until torch's
      store timeout (30 minutes), and even asking whether the store still answers can hang
      there. ringcomm's new group needs no store (its ranks met through their own mailboxes):
      it gets an in-process one. New groups made from the shrunk default group meet in the
      job's store as before, which must then be alive."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    create = getattr(c10d, "_create_shrunk_process_group", None)
    if create is None or getattr(create, "_ringcomm_labels", False):
        return

    def create_and_label(new_backend, remaining_ranks, metadata, is_default_group):
        if new_backend.name() != BACKEND_NAME:
            return create(new_backend, remaining_ranks, metadata, is_default_group)
        metadata = dict(metadata, store=dist.HashStore())
        group = create(new_backend, remaining_ranks, metadata, is_default_group)
        device = metadata.get("bound_device_id") or torch.device("cpu")
        group._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, new_backend)
        group._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        return group

    vars(create_and_label)["_ringcomm_labels"] = True  # mypy cannot declare a function attribute
    c10d._create_shrunk_process_group = create_and_label


def autoload() -> None:
    """torch's ``torch.backends`` entry point: runs while ``import torch`` finishes."""
    register()


def lost_ranks(group=None) -> list:
    """The ranks of ``group`` (default: the default group), in its numbering, that are gone, as
    every survivor agrees: what ``torch.distributed.shrink_group`` needs to be told. Every
    survivor calls it, then ``shrink_group`` with what it returns::

        try:
            loss.backward()
        except RuntimeError:
            dist.shrink_group(ringcomm.c10d.lost_ranks())
            model = DistributedDataParallel(model.module)  # on the shrunk default group

    Raises ringcomm.MembershipError on a side of a partition that may not go on."""
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return [int(r) for r in pg._get_backend(torch.device("cpu")).lost_ranks()]


from ringcomm.c10d.grow import (  # noqa: E402 (after what they import lazily)
    address,
    grow_group,
    join_process_group,
    joining,
)
from ringcomm.c10d.state import broadcast_state  # noqa: E402
