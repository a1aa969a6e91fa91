"""Where a process set runs the collectives that do not go through its tensor queue
(reducescatter and alltoall): straight on a communicator, one at a time, on a thread of its own.

The thread makes their ``*_async`` forms asynchronous (in flight when they return, as Horovod's
are) and runs them in call order, which is the same on every rank. A collective that fails on a
communicator closes it (a mismatch or a timeout poisons it, docs/errors.md); the channel then
meets the other ranks on a fresh one before its next collective, so one failed call does not
fail every later one. Every rank of the set saw the failure, so every rank renews once.
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable, Optional

import ringcomm
from ringcomm import _core


class DirectChannel:
    def __init__(self, comm: ringcomm.Communicator, renew: Callable[[int], ringcomm.Communicator]):
        """``comm``: the set's communicator (not owned: the set shuts it down). ``renew(n)``:
        creates the set's n-th replacement communicator, collectively."""
        self._comm = comm
        self._owned: Optional[ringcomm.Communicator] = None  # a replacement, shut down here
        self._renew = renew
        self._renewals = 0
        self._failed = False
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ringcomm-direct"
        )

    def submit(self, job: Callable[[ringcomm.Communicator], object]) -> concurrent.futures.Future:
        """Runs ``job(communicator)`` after the jobs submitted before it; its Future holds what
        the job returned, or the error it raised."""
        return self._thread.submit(self._run, job)

    def _run(self, job):
        if self._failed:
            self._replace_communicator()
        try:
            return job(self._comm)
        except _core.RingcommError:
            self._failed = True
            raise

    def _replace_communicator(self) -> None:
        self._renewals += 1
        fresh = self._renew(self._renewals)
        if self._owned is not None:
            _quietly_shut_down(self._owned)
        self._comm = self._owned = fresh
        self._failed = False

    def shutdown(self) -> None:
        """Waits for the jobs submitted, then closes any replacement communicator."""
        self._thread.shutdown(wait=True)
        if self._owned is not None:
            _quietly_shut_down(self._owned)
            self._owned = None


def _quietly_shut_down(comm: ringcomm.Communicator) -> None:
    try:
        comm.shutdown()
    except _core.RingcommError:
        pass  # it failed before; shutting down is all that is left to do with it
