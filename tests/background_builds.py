"""The compile-heavy tests' builds, started when the session begins and run only on CPU time the
other tests leave idle.

Five modules compile the C++ core again (test_compilers, test_cpp_units, test_sanitizers,
test_fuzz, test_cuda): about ten minutes of both cores in CI. Most other tests leave a core idle
much of the time (ranks waiting out a timeout, a link limited by tc, a launcher starting), so
those builds run beside them under SCHED_IDLE (`chrt --idle`; nice 19 without chrt): the kernel
gives their compilers a core only when no test process wants it, so they hardly slow the tests
they run beside. The modules that need them run last (conftest.py), by when their builds are mostly
done; a test whose build is still running waits for it, and then it has the machine to itself.

A module declares its builds as BACKGROUND_BUILDS = {"name": function}; conftest.py starts
those of every module with a selected test, one build at a time, in the order the modules run.
A test takes a build's result with `result(name, function)`: the function's return value or its
exception (a build that is not started yet starts then).
"""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional

_futures: Dict[str, Future] = {}
_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None


def idle_priority(command: List[str]) -> List[str]:
    """The command, to run only on idle CPU time, and every process it starts (cmake's compilers
    inherit it). The priority is the command's, not the thread's that starts it: a Python thread
    starved of CPU while it held the GIL would stall the tests beside it."""
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
    """The build's return value (or its exception, raised here), waiting for it to finish."""
    start(name, build)
    return _futures[name].result()


def cancel_pending() -> None:
    """At the end of the session: builds not started yet never start (one running finishes)."""
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
