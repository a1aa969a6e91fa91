"""The job ringcomm.torch runs in: init() and shutdown(), and who this rank is.

init() creates the main communicator and the global process set's tensor queue. Named
operations (allreduce, allgather, broadcast, join, the optimizer's gradients) go through a
queue: ranks may submit them in any order, and the queue's thread agrees with the other ranks
once per cycle on what is ready and fuses it (include/ringcomm/tensor_queue.h). The queue runs on
a communicator of its own, a duplicate of the main one. Process sets (process_sets.py) add a
communicator and a queue of their own each.

``shutdown(); init()`` always gives a working state, whatever failed before: shutting down
ignores the failures of what it closes, and each init() meets the other ranks afresh.
"""

from __future__ import annotations

import atexit
from typing import Optional

import ringcomm
from ringcomm import _core
from ringcomm.torch import handles
from ringcomm.torch import process_sets as sets
from ringcomm.torch.errors import NotInitializedError

_comm: Optional[ringcomm.Communicator] = None
_queue: Optional["_core.TensorQueue"] = None
_join_policy = _core.JoinPolicy.zeros
_sessions = 0  # init() calls that succeeded in this process: each session's store keys differ
_exit_hook_installed = False
_last_arguments: dict = {}


def init(comm=None, process_sets=None, *, join_policy: str = "zeros", **kwargs) -> None:
    """Joins the job (``ringcomm.init(**kwargs)``), unless already initialized.

    ``comm``: None (every rank of the job); a ``ringcomm.Communicator`` to use; or, as in
    Horovod, a list of ranks or an mpi4py communicator, when it covers every rank (ringcomm runs
    a job on all its ranks: use process sets for subsets). ``process_sets``: a list of
    :class:`ProcessSet` to register, or ``"dynamic"`` to allow ``add_process_set`` later.
    ``join_policy``: what a rank that called join() contributes to the others' collectives:
    ``"zeros"`` (Horovod's) or ``"contributors"`` (ringcomm's; docs/guides/horovod.md).
    """
    global _comm, _queue, _join_policy, _sessions, _exit_hook_installed, _last_arguments
    if _comm is not None:
        return
    # What reinit() passes again after an elastic reset: static sets name ranks of the old job.
    _last_arguments = dict(
        kwargs,
        join_policy=join_policy,
        process_sets="dynamic" if process_sets == "dynamic" else None,
    )
    policy = _core.parse_join_policy(join_policy)
    created = comm if isinstance(comm, ringcomm.Communicator) else ringcomm.init(**kwargs)
    try:
        if comm is not None and created is not comm:
            _check_covers_every_rank(comm, created.size)
        queue = _core.TensorQueue.create(created._core.duplicate(), policy)
    except BaseException:
        if created is not comm:
            created.shutdown()
        raise
    _sessions += 1
    _comm, _queue, _join_policy = created, queue, policy
    handles.forget_all()
    # Where the sets' communicators meet: apart from earlier sessions' in the same store; in a
    # store of its own (an elastic generation's), the same on every rank, new or old.
    environment = getattr(created, "_environment", None)
    session = getattr(environment, "scope", "") or _sessions
    _start_timeline_from_environment(_core.Config.from_environment())
    try:
        sets.setup(created, queue, policy, session, process_sets or [])
    except BaseException:
        shutdown()
        raise
    if not _exit_hook_installed:
        # Every rank's queue thread takes part in every cycle: one that exits without saying so
        # would leave the others to find out from a closed connection.
        atexit.register(shutdown)
        _exit_hook_installed = True


def last_arguments() -> dict:
    """The arguments of the last init(), without static process sets (see reinit())."""
    return dict(_last_arguments)


def reinit() -> None:
    """init() again with the arguments of the last one, but no static process sets (elastic
    resets: the job's ranks may have changed)."""
    init(**_last_arguments)


def _check_covers_every_rank(comm, size: int) -> None:
    if isinstance(comm, (list, tuple, range)):
        covered = sorted(comm) == list(range(size))
    else:  # an mpi4py communicator
        covered = getattr(comm, "Get_size", lambda: -1)() == size
    if not covered:
        raise NotImplementedError(
            "ringcomm.torch runs on every rank of the job; init(comm=...) with a subset of the "
            "ranks is not supported. Use init(process_sets=[hvd.ProcessSet(ranks)]) and pass "
            "process_set= to the collectives instead"
        )


# HOROVOD_TIMELINE=DYNAMIC is how Horovod allows start_timeline() without a file at init;
# ringcomm always allows it, and reads DYNAMIC as "no file at init".
_TIMELINE_DYNAMIC = "DYNAMIC"


def _start_timeline_from_environment(config: "_core.Config") -> None:
    """At init(): HOROVOD_TIMELINE (and HOROVOD_TIMELINE_MARK_CYCLES), read by the core's
    Config; the timeline itself is ringcomm/torch/timeline.py's."""
    path = config.horovod_timeline
    if path and path != _TIMELINE_DYNAMIC:
        _core.start_horovod_timeline(path, config.horovod_timeline_mark_cycles)


def shutdown() -> None:
    """Closes every queue and communicator of this rank (tells the other ranks' queues too).
    Never raises for what failed before."""
    global _comm, _queue
    if _comm is not None:
        # Rank 0 writes the timeline while the queue's events are all in.
        if _core.horovod_timeline_active():
            _core.stop_horovod_timeline()
    sets.teardown()
    if _queue is not None:
        try:
            _queue.shutdown()
        except _core.RingcommError:
            pass
        _queue = None
    if _comm is not None:
        try:
            _comm.shutdown()
        except _core.RingcommError:
            pass
        _comm = None
    handles.forget_all()


def is_initialized() -> bool:
    """Whether init() has run and shutdown() has not since."""
    return _comm is not None


def join_policy() -> "_core.JoinPolicy":
    return _join_policy


def comm() -> ringcomm.Communicator:
    if _comm is None:
        raise NotInitializedError()
    return _comm


def queue() -> "_core.TensorQueue":
    """The global process set's tensor queue."""
    if _queue is None:
        raise NotInitializedError()
    return _queue


def size() -> int:
    """The number of ranks in the job. Before init(), this and the other rank and size functions
    raise Horovod's ValueError (a NotInitializedError, errors.py)."""
    return comm().size


def rank() -> int:
    """This process's rank in the job, from 0 to ``size() - 1``."""
    return comm().rank


def local_size() -> int:
    """The number of ranks on this host."""
    return comm().local_size


def local_rank() -> int:
    """This process's rank among the ranks on this host, from 0 to ``local_size() - 1``."""
    return comm().local_rank


def cross_size() -> int:
    """The number of hosts in the job (ringcomm tells hosts apart by their identity)."""
    return comm().cross_size


def cross_rank() -> int:
    """The index of this rank's host among the job's hosts, from 0 to ``cross_size() - 1``."""
    return comm().cross_rank
