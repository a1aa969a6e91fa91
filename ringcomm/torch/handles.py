"""Horovod's integer handles for asynchronous operations: poll() and synchronize()."""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Optional

_lock = threading.Lock()
_counter = itertools.count(1)
_pending: dict[int, tuple] = {}


def register(works: list, finish: Callable[[], Any]) -> int:
    """Records in-flight ringcomm Works; ``finish`` builds the result once they completed."""
    with _lock:
        handle = next(_counter)
        _pending[handle] = (works, finish)
    return handle


def poll(handle: int) -> bool:
    """True once the operation behind ``handle`` has completed (synchronize() won't block)."""
    works, _ = _entry(handle)
    return all(work.is_completed() for work in works)


def synchronize(handle: int, timeout: Optional[float] = None) -> Any:
    """Waits for the operation behind ``handle`` and returns its result."""
    works, finish = _entry(handle)
    try:
        for work in works:
            work.wait(timeout)
        return finish()
    finally:
        # A wait that timed out leaves the operation running: its entry keeps the tensors the
        # queue's thread still reads and writes alive, and synchronize() may be called again.
        if all(work.is_completed() for work in works):
            with _lock:
                _pending.pop(handle, None)


def _entry(handle: int) -> tuple:
    with _lock:
        entry = _pending.get(handle)
    if entry is None:
        raise ValueError(f"unknown or already synchronized handle {handle!r}")
    return entry
