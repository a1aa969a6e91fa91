"""Horovod's integer handles for asynchronous operations: poll() and synchronize().

A handle stands for work in flight: queued requests (requests.Queued), or a job on a process
set's direct channel (a Future). Both answer is_completed() and wait(timeout).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from typing import Any, Callable, Optional

from ringcomm.torch.errors import as_horovod_error

_lock = threading.Lock()
_counter = itertools.count(1)
_pending: dict = {}


class FutureWork:
    """A Future (of a direct-channel job) as the Work a handle waits for."""

    def __init__(self, future: concurrent.futures.Future):
        self.future = future

    def is_completed(self) -> bool:
        return self.future.done()

    def wait(self, timeout: Optional[float] = None) -> None:
        try:
            self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"the operation did not complete within {timeout} s") from None


def register(works: list, finish: Callable[[], Any]) -> int:
    """Records work in flight; ``finish()`` builds the result once all of it completed."""
    with _lock:
        handle = next(_counter)
        _pending[handle] = (works, finish)
    return handle


def poll(handle: int) -> bool:
    """True once the operation behind ``handle`` has completed (synchronize() won't block)."""
    with _lock:
        entry = _pending.get(handle)
    if entry is None:
        raise ValueError(f"Handle {handle} was not created or has been cleared.")
    works, _ = entry
    return all(work.is_completed() for work in works)


def synchronize(handle: int, timeout: Optional[float] = None) -> Any:
    """Waits for the operation behind ``handle`` and returns its result. A handle already
    synchronized (or unknown) returns None, as in Horovod. A failed operation raises a
    HorovodInternalError (errors.py)."""
    with _lock:
        entry = _pending.get(handle)
    if entry is None:
        return None
    works, finish = entry
    try:
        try:
            for work in works:
                work.wait(timeout)
        except ValueError as error:
            # The queue's thread could not run it: a HorovodInternalError, as in Horovod.
            raise as_horovod_error(error, from_queue=True) from error
        result = finish()
    except BaseException as error:
        if not all(work.is_completed() for work in works):
            # The wait timed out (or was interrupted): the operation goes on, its entry keeps
            # alive the tensors the queue's thread still reads and writes, and synchronize()
            # may be called again.
            raise
        _forget(handle)
        converted = as_horovod_error(error)
        if converted is error:
            raise
        raise converted from error
    _forget(handle)
    return result


def _forget(handle: int) -> None:
    with _lock:
        _pending.pop(handle, None)


def forget_all() -> None:
    """Drops every handle (init() and shutdown(), as Horovod's init() does)."""
    with _lock:
        _pending.clear()
