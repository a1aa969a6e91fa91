"""Horovod's process sets: groups of ranks that run collectives among themselves.

Every collective takes ``process_set=`` (default ``global_process_set``, every rank). A set is
declared at ``init(process_sets=[...])`` or added later with ``add_process_set`` (which needs
``init(process_sets="dynamic")`` or HOROVOD_DYNAMIC_PROCESS_SETS=1, as in Horovod); every rank
adds and removes sets in the same order, members or not.

Each set negotiates on its own: its members create a communicator of their own (meeting in the
job's store under a scope no other set uses) and a tensor queue on a duplicate of it, so one set's
collectives never wait for another's. Ranks outside a set create nothing for it, and get
Horovod's error if they call a collective on it. Roots (``root_rank``) are global ranks, as in
Horovod; results come in the order of the set's ranks.
"""

from __future__ import annotations

import collections
import copy
import itertools
import os
from dataclasses import dataclass, field
from typing import Optional

import ringcomm
from ringcomm import _core, _tuning


class ProcessSet:
    """Ranks that run collectives together: pass one to ``init(process_sets=...)`` or to
    ``add_process_set``, then as ``process_set=`` to collectives. ``process_set_id`` is set once
    it has been registered."""

    #: The set's id once registered (0: the global set), else None.
    process_set_id: Optional[int] = None
    #: The global ranks of the set, sorted (the global set: every rank, once initialized).
    ranks: Optional[list[int]] = None
    #: Always None: Horovod's mpi4py communicator of the set (ringcomm does not use MPI).
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = list(ranks_or_comm)
        except TypeError:
            # Horovod builds sets from an mpi4py communicator only when it was built with MPI,
            # which ringcomm is not (build_info.mpi_built()).
            raise ValueError(
                "Apparently you tried to build a ProcessSet from an MPI communicator, but "
                "ringcomm does not use MPI to communicate; build the ProcessSet from a list "
                "of ranks"
            ) from None
        if any(not isinstance(r, int) for r in ranks):
            raise ValueError(
                "ProcessSet should be initialized with a list of process ranks or an mpi4py "
                "Comm object"
            )
        self.ranks = sorted(ranks)

    def _invalidate(self) -> None:
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """The number of ranks in the set, or None if it is not registered."""
        if self.process_set_id is None:
            return None
        return len(_registered(self.process_set_id).ranks)

    def rank(self) -> Optional[int]:
        """This process's rank within the set, or None if it is not registered. (Collectives'
        ``root_rank`` is still a global rank.)"""
        if self.process_set_id is None:
            return None
        ranks = _registered(self.process_set_id).ranks
        me = _global_rank()
        if me not in ranks:
            raise ValueError("Process is not part of provided process set.")
        return ranks.index(me)

    def included(self) -> Optional[bool]:
        """Whether this process is in the set, or None if the set has no ranks yet."""
        if self.ranks is None:
            return None
        return _global_rank() in self.ranks

    def __str__(self) -> str:
        return (
            f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, "
            f"mpi_comm={self.mpi_comm})"
        )

    __repr__ = __str__


#: The process set of every rank in the job (id 0): the collectives' default ``process_set``.
global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


@dataclass
class Member:
    """This rank's part in a process set it belongs to."""

    ranks: list  # the set's global ranks, in order
    rank: int  # this rank's index among them
    queue: "_core.TensorQueue"  # every collective (named, negotiated)
    comm: Optional[ringcomm.Communicator] = None  # owned: None for the global set's
    unnamed: dict = field(default_factory=lambda: collections.defaultdict(itertools.count))

    @property
    def size(self) -> int:
        return len(self.ranks)

    def root_in_set(self, root_rank: int) -> int:
        """The set's index of a global ``root_rank`` (Horovod's error if it is not a member)."""
        if root_rank not in self.ranks:
            raise ValueError(
                f"broadcast received invalid root rank {root_rank} for provided process set"
            )
        return self.ranks.index(root_rank)

    def default_name(self, kind: str) -> str:
        """Horovod's name for an unnamed tensor ("allreduce.noname.3"). Each set counts its own
        calls: ranks that make the same calls on a set in the same order agree on the names,
        whatever else they do on other sets."""
        return f"{kind}.noname.{next(self.unnamed[kind])}"

    def forget_default_names(self) -> None:
        self.unnamed.clear()

    def shutdown(self) -> None:
        """Closes this rank's queue and communicators for the set (its failures are ignored:
        shutting down is all that is left to do with them)."""
        try:
            self.queue.shutdown()
        except _core.RingcommError:
            pass
        if self.comm is not None:
            try:
                self.comm.shutdown()
            except _core.RingcommError:
                pass


@dataclass
class _Registration:
    ranks: list
    member: Optional[Member]  # None on ranks outside the set
    scope: str  # where the set's communicators meet in the job's store


class _Job:
    """What init() set up: how to create communicators, and the sets registered so far."""

    def __init__(self, main: ringcomm.Communicator, queue, join_policy, session, dynamic):
        self.main = main
        self.join_policy = join_policy
        self.session = session
        self.dynamic = dynamic
        self.sets: dict = {}
        self.free_ids: collections.deque = collections.deque()  # Horovod reuses removed ids
        self.next_id = 1
        self.scopes = itertools.count(1)
        scope = f"ringcomm.torch/{session}/set-0/"
        self.sets[0] = _Registration(
            list(range(main.size)), Member(list(range(main.size)), main.rank, queue), scope
        )

    def _communicator(self, scope: str, set_id: int) -> ringcomm.Communicator:
        """A communicator over the members of set ``set_id``, meeting under ``scope``."""
        environment = getattr(self.main, "_environment", None)
        if environment is None:
            raise RuntimeError(
                "ringcomm.torch was initialized with a Communicator that has no store "
                "(ringcomm.init() keeps one): process sets need the job's store to meet"
            )
        ranks = self.sets[set_id].ranks if set_id in self.sets else None
        ranks = ranks if ranks is not None else list(range(self.main.size))
        # The job's configuration, with this host's tuning rules for the set's size.
        config = copy.copy(self.main._core.config)
        _tuning.apply(config, len(ranks))
        core = _core.Communicator.create_in_scope(
            environment.store, scope, ranks.index(self.main.rank), len(ranks), config
        )
        return ringcomm.Communicator(core, None)

    def register(self, ranks: list) -> int:
        """Adds a set (collective: every rank, in the same order); returns its id."""
        for r in ranks:
            if not 0 <= r < self.main.size:
                raise ValueError(f"Tried to register process set with invalid rank: {r}")
        if len(set(ranks)) != len(ranks):
            raise ValueError(
                f"Tried to register process set with duplicate rank: "
                f"{next(r for r in ranks if ranks.count(r) > 1)}"
            )
        set_id = self.free_ids.popleft() if self.free_ids else self._next()
        scope = f"ringcomm.torch/{self.session}/set-{next(self.scopes)}/"
        self.sets[set_id] = _Registration(list(ranks), None, scope)
        if self.main.rank in ranks:
            try:
                self.sets[set_id].member = self._join_set(set_id, scope)
            except BaseException:
                del self.sets[set_id]
                self.free_ids.appendleft(set_id)
                raise
        return set_id

    def _next(self) -> int:
        set_id = self.next_id
        self.next_id += 1
        return set_id

    def _join_set(self, set_id: int, scope: str) -> Member:
        comm = self._communicator(scope, set_id)
        try:
            queue = _core.TensorQueue.create(comm._core.duplicate(), self.join_policy)
        except BaseException:
            comm.shutdown()
            raise
        ranks = self.sets[set_id].ranks
        return Member(ranks, ranks.index(self.main.rank), queue, comm)

    def deregister(self, set_id: int) -> None:
        registration = self.sets.pop(set_id)
        self.free_ids.append(set_id)
        if registration.member is not None:
            registration.member.shutdown()

    def find(self, ranks: list) -> Optional[int]:
        for set_id, registration in self.sets.items():
            if registration.ranks == ranks:
                return set_id
        return None


_job: Optional[_Job] = None
# Every ProcessSet this module gave an id (and the global one): shutdown() invalidates them.
_handed_out: list = []


def _require_job() -> _Job:
    if _job is None:
        from ringcomm.torch.errors import NotInitializedError

        raise NotInitializedError()
    return _job


def _registered(set_id: Optional[int]) -> _Registration:
    """The registration of ``set_id``, or Horovod's error (None: a set never registered)."""
    registration = _require_job().sets.get(set_id)
    if registration is None:
        raise ValueError("Process set does not exist or has not been registered.")
    return registration


def _global_rank() -> int:
    return _require_job().main.rank


def setup(main: ringcomm.Communicator, queue, join_policy, session, process_sets) -> None:
    """Called by init(): registers the global set and ``process_sets`` (a list of ProcessSet,
    or "dynamic")."""
    global _job
    dynamic = False
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError(
                f"process_sets must be a list of ProcessSet or 'dynamic'; got {process_sets!r}"
            )
        process_sets, dynamic = [], True
    _job = _Job(main, queue, join_policy, session, dynamic or _dynamic_from_environment())
    global_process_set.ranks = list(range(main.size))
    global_process_set.process_set_id = 0
    for index, process_set in enumerate(process_sets or []):
        if _job.find(process_set.ranks) is not None:
            raise ValueError(
                "Horovod could not be initialized because process_sets entry number "
                f"{index} is a duplicate: {process_set}"
            )
        process_set.process_set_id = _job.register(process_set.ranks)
        _handed_out.append(process_set)


def _dynamic_from_environment() -> bool:
    # Horovod's switch for add_process_set / remove_process_set after init().
    value = os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS", "")
    return value.lower() == "true" or (value.isdigit() and int(value) > 0)


def teardown() -> None:
    """Called by shutdown(): closes every set but the global one (init() made that one's queue
    and the state module closes it), and invalidates the ProcessSet objects handed out."""
    global _job
    if _job is None:
        return
    for set_id in [s for s in _job.sets if s != 0]:
        _job.deregister(set_id)
    for process_set in _handed_out:
        process_set._invalidate()
    _handed_out.clear()
    _job = None


def add_process_set(process_set) -> ProcessSet:
    """Registers a new process set after init() and returns it (every rank calls it, in the same
    order). Needs init(process_sets="dynamic") or HOROVOD_DYNAMIC_PROCESS_SETS=1."""
    job = _require_job()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if not job.dynamic:
        raise ValueError(
            "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after Horovod "
            "initialization."
        )
    if job.find(process_set.ranks) is not None:
        raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
    process_set.process_set_id = job.register(process_set.ranks)
    _handed_out.append(process_set)
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a process set registered earlier (every rank calls it, in the same order);
    whether it was removed. The global set is never removed, and a set never registered is not
    (False even before init(), as in Horovod)."""
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    job = _require_job()
    if not job.dynamic:
        raise ValueError(
            "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow removing process sets after Horovod "
            "initialization."
        )
    process_set._invalidate()
    if set_id not in job.sets:
        return False
    job.deregister(set_id)
    return True


def member(process_set: ProcessSet, operation: str) -> Member:
    """This rank's part in ``process_set``, for a collective called ``operation`` ("Allreduce"),
    or Horovod's error: a set that is not registered, or one this rank is not in."""
    job = _require_job()
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"process_set must be a ProcessSet; got {type(process_set).__name__}")
    registration = job.sets.get(process_set.process_set_id)
    if registration is None:
        raise ValueError(
            f"{operation}: Process set provided does not exist, or has not been registered."
        )
    if registration.member is None:
        raise ValueError(
            f"{operation}: Rank {job.main.rank} is not a member of the provided process set."
        )
    return registration.member


def global_member() -> Member:
    return member(global_process_set, "join")


def members() -> list:
    """This rank's part in every set it belongs to."""
    job = _require_job()
    return [r.member for r in job.sets.values() if r.member is not None]
