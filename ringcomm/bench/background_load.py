"""Busy processes competing for the cores while the benchmark runs (--background-load N).

A shared machine, a laptop with a browser, a VM whose neighbours are busy: the ranks do not have
the cores to themselves. N processes that never sleep reproduce that in one invocation, for every
implementation alike: they start before the first implementation's ranks and stop after the last.
"""

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

# A pure-Python spin: no memory traffic to speak of, so it takes cores and not bandwidth.
_SPIN = "while True: pass"


@contextlib.contextmanager
def running(count: int) -> Iterator[list[int]]:
    """Runs `count` busy processes for the duration of the block; yields their pids."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _SPIN],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the bench does not reach them; we stop them
        )
        for _ in range(count)
    ]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        for process in processes:
            process.wait()
