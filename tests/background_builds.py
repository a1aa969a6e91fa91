"""The compile-heavy tests' builds, started when the session begins and run only on CPU time the
other tests leave idle.

Five modules compile the C++ core again (test_compilers, test_cpp_units, test_sanitizers,
test_fuzz, test_cuda): about ten minutes of both cores in CI. Most other tests leave a core idle
much of the time (ranks waiting out a timeout, a link limited by tc, a launcher starting), so
those builds run beside them under SCHED_IDLE (`chrt --idle`; nice 19 without chrt): the kernel
gives their compilers a core only when no test process wants it, so they hardly slow the tests
they run beside. The modules that need them run last (conftest.py), by when their builds are mostly
done; a test whose build is still running waits for it, and then it has the machine to itself.

That idle time is only there on a quiet machine: beside a busy one (another job, a user's browser)
SCHED_IDLE compilers get no core at all, and a test waiting on them would wait out its timeout. So
a test that waits raises its build's processes back to normal priority, and every build started
after that runs at normal priority from the start.

A module declares its builds as BACKGROUND_BUILDS = {"name": function}; conftest.py starts
those of every module with a selected test, one build at a time, in the order the modules run.
A test takes a build's result with `result(name, function)`: the function's return value or its
exception (a build that is not started yet starts then).
"""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Dict, List, Optional

_futures: Dict[str, Future] = {}
_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None
# Set once a test has waited on a build: the rest of the session is those tests.
_waited = threading.Event()


def idle_priority(command: List[str]) -> List[str]:
    """The command, to run only on idle CPU time, and every process it starts (cmake's compilers
    inherit it). The priority is the command's, not the thread's that starts it: a Python thread
    starved of CPU while it held the GIL would stall the tests beside it."""
    if _waited.is_set():
        return command
    if shutil.which("chrt"):
        return ["chrt", "--idle", "0", *command]
    if shutil.which("nice"):
        return ["nice", "-n", "19", *command]
    return command  # then at normal priority: slower tests, the same results


def start(name: str, build: Callable[[], Any]) -> None:
    """Queues a build, once; builds run one at a time, in the order they were started."""
    global _pool
    with _lock:
        if name in _futures:
            return
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-build")
        _futures[name] = _pool.submit(build)


def result(name: str, build: Callable[[], Any]) -> Any:
    """The build's return value (or its exception, raised here), waiting for it to finish; while
    it waits, the build runs at normal priority."""
    start(name, build)
    future = _futures[name]
    if not future.done():
        _waited.set()
        while True:
            _raise_idle_descendants()
            try:
                # A compiler the build starts while we wait inherits normal priority from its
                # raised parent; the loop also catches one forked just before the parent was raised.
                return future.result(timeout=1.0)
            except FutureTimeout:
                continue
    return future.result()


def _raise_idle_descendants() -> None:
    """Every process this one started (at any depth) that runs at idle priority goes back to
    normal priority. Errors are ignored: a process may exit as we look, and without the right to
    lower a nice value the build only stays slower."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # The fields after the command's closing parenthesis are state, then parent pid.
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    pending = list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            if os.sched_getscheduler(pid) == os.SCHED_IDLE:
                os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
            if os.getpriority(os.PRIO_PROCESS, pid) == 19:
                os.setpriority(os.PRIO_PROCESS, pid, 0)
        except OSError:
            continue


def cancel_pending() -> None:
    """At the end of the session: builds not started yet never start (one running finishes)."""
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
