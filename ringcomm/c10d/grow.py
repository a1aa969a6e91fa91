"""Growing torch's default group in place: replacements for lost ranks, or new ones, join a
running job and get the model's state from a member instead of a checkpoint.

torch 2.13 can shrink a group (``shrink_group``) but has no way to grow one. Here the members
call :func:`grow_group` (cheap when nobody waits: one small all-reduce), a new process calls
:func:`join_process_group` instead of ``init_process_group``, and both end with the same new
default group, filed in torch's registry as ``shrink_group`` files a shrunk one (the other groups
are destroyed, as a shrink of the default group destroys them). :func:`broadcast_state` then
gives everyone rank 0's model and optimizer::

    if ringcomm.c10d.joining():          # started to replace a lost rank
        ringcomm.c10d.join_process_group()
    else:
        dist.init_process_group("ringcomm")
    model = None
    while step < steps:
        if model is None:                # rank 0's state, the newcomers' too
            step = ringcomm.c10d.broadcast_state(module, optimizer, step)
            model = DistributedDataParallel(module, init_sync=False)  # in sync already
        ...                              # a step
        if ringcomm.c10d.grow_group():   # every member, at the end of each step
            model = None                 # DDP again, on the grown group

(docs/guides/recovery.md has the whole loop, shrinking after a failure.)

A newcomer finds the members on the launcher's store (``RINGCOMM_STORE``, under ``ringcomm-run
--replace``), in a directory every host sees where they keep their addresses
(``RINGCOMM_DOOR_DIR``, set for the whole job: under mpirun and srun), or at a member's address
(``RINGCOMM_JOIN=host:port``, :func:`address`). It needs the job's secret (``RINGCOMM_SECRET``).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Optional

from ringcomm import _arguments
from ringcomm.c10d import state

# Where the default group's members keep their addresses on the launcher's store.
DOOR_KEY = "ringcomm/torch-door"


def joining() -> bool:
    """Whether this process was started to join a running job (``RINGCOMM_JOIN`` is set, as
    ``ringcomm-run --replace`` sets it for a replacement)."""
    return bool(os.environ.get("RINGCOMM_JOIN"))


def address(group=None) -> str:
    """Where a new process finds this rank to join (``"host:port"``): give any member's to
    :func:`join_process_group` (or as ``RINGCOMM_JOIN``)."""
    return _backend_of(group).address


def grow_group(expect: int = 0, timeout: Optional[float] = None) -> bool:
    """Every member of the default group: admits the processes waiting to join
    (:func:`join_process_group`) into a new default group (the members keep their ranks, the
    newcomers follow). Returns False, changing nothing, where nobody waits; True where the
    group grew: then give the newcomers the state (:func:`broadcast_state`) and wrap the model
    in DDP again. ``expect``: wait, by ``timeout`` seconds, until that many have asked (a
    replacement the launcher is starting). Raises what a collective raises where a member is
    lost (shrink first: :func:`ringcomm.c10d.lost_ranks`)."""
    expect = _arguments.whole_number(expect, "expect", 0, meaning=" (a count of newcomers)")
    within = _timedelta(timeout)
    grown = _backend_of(None).grow(expect, within)
    if grown is None:
        return False
    _install_default_group(grown)
    state.newcomers_joined()
    return True


def join_process_group(address: Optional[str] = None, timeout: Optional[float] = None) -> None:
    """In a new process, instead of ``init_process_group``: joins the running job's default
    group, waiting until its members call :func:`grow_group`; this process then has the
    grown default group (``dist.get_rank()`` after the members'). ``address``: a member's
    (:func:`address`), else ``RINGCOMM_JOIN``'s, else the members are found in
    ``RINGCOMM_DOOR_DIR`` or on the launcher's store (``RINGCOMM_STORE``)."""
    import torch.distributed as dist

    from ringcomm import _core
    from ringcomm.c10d._build import extension

    if dist.is_initialized():
        raise RuntimeError(
            "join_process_group: this process already has a default group; a member grows it "
            "with grow_group()"
        )
    # The backend registered, and torch's shrunk groups filed as ours (ringcomm.c10d.register):
    # through the package, which imports this module (an import here would make a circle).
    sys.modules["ringcomm.c10d"].register()
    given = address or os.environ.get("RINGCOMM_JOIN", "")
    addresses = [a for a in given.split(",") if a and a != "1"]
    board = os.environ.get("RINGCOMM_DOOR_DIR") or os.environ.get("RINGCOMM_STORE", "")
    if not addresses and not board:
        raise ValueError(
            "join_process_group: no way to find the members: pass address= (a member's "
            "ringcomm.c10d.address()), or set RINGCOMM_JOIN=host:port, or RINGCOMM_DOOR_DIR to "
            "the members' (under mpirun and srun), or RINGCOMM_STORE to the launcher's store"
        )
    secret = _core.Config.from_environment().secret
    if not secret:
        raise RuntimeError(
            "join_process_group: no job secret: set RINGCOMM_SECRET to the members' (ringcomm-run "
            "passes it to the processes it starts)"
        )
    backend = extension().RingcommBackend.join(
        addresses, board, DOOR_KEY, _timedelta(timeout), secret
    )
    _install_default_group(backend)
    state.newcomers_joined()


def _timedelta(seconds: Optional[float]) -> timedelta:
    if seconds is None:
        return timedelta(0)
    return timedelta(seconds=_arguments.seconds(seconds))


def _backend_of(group):
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu"))


def _install_default_group(backend) -> None:
    """Makes a group of `backend` torch's default group, as shrink_group does for a shrunk one
    (torch/distributed/distributed_c10d.py: _finalize_shrunk_group): every other group is
    destroyed, the old default group with them, and the new one is registered under a name of
    its own with the identity as its rank mapping (its ranks are the global ranks now)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    old = c10d._world.default_pg
    if old is not None:
        metadata = c10d._extract_group_metadata(old)
        c10d._destroy_all_other_groups(exclude_group=old)
        c10d._cleanup_original_group(old, True)
    else:  # a newcomer: torch's registry holds nothing yet
        metadata = {
            "backend_name": "ringcomm",
            "store": dist.HashStore(),
            "backend_config": "cpu:ringcomm",
            "original_group_name": "",
            "bound_device_id": None,
        }
    ranks = list(range(backend.size()))
    metadata["new_group_name"] = c10d._process_group_name(ranks, use_hashed_name=True)
    group = c10d._create_shrunk_process_group(backend, ranks, metadata, True)
    c10d._update_default_pg(group)
    c10d._register_pg_in_world(
        pg=group,
        backend_name=metadata["backend_name"],
        store=metadata["store"],
        group_name=metadata["new_group_name"],
        backend_config=metadata["backend_config"],
        rank_mapping={r: r for r in ranks},
    )
