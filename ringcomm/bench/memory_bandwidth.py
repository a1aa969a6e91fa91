"""B_mem: the read+write memory bandwidth the benchmark's ranks could draw on, measured in-run.

``processes`` processes each update their own buffer in place (read every element, write it back)
at the same moment, started by a barrier; one repetition's bandwidth is all bytes read and
written (2 x buffer x processes) over the time from the first start to the last finish, and
B_mem is the best repetition. Buffers are touched before timing, so page faults are not measured.

Why in place and not a copy: a copy into another buffer also reads every destination line before
writing it (write-allocate), so it moves 3 bytes for the 2 it is credited with and reports about
half the machine's rate (measured on the 2-core VM: copy 15.6 GB/s, in place 34 GB/s per process,
two at once). An in-place all-reduce reads and rewrites its buffer exactly like the update does,
so the update's rate is the honest bound, and the stricter one.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union, cast

import numpy as np

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

BUFFER_BYTES = 256 << 20
_REPEATS = 5
_TIMEOUT = 120.0
_MEMORY_SHARE = 0.25  # at most this share of available memory for all buffers together


@dataclass
class MemoryBandwidth:
    gbps: float  # read + write GB/s (1e9 bytes)
    processes: int
    buffer_bytes: int  # per process


def _update_loop(nbytes: int, repeats: int, barrier, results) -> None:
    buffer = np.ones(nbytes // 8)
    np.add(buffer, 0.0, out=buffer)
    spans = []
    for _ in range(repeats):
        barrier.wait(_TIMEOUT)
        start = time.monotonic()  # one clock for all processes (CLOCK_MONOTONIC)
        np.add(buffer, 0.0, out=buffer)
        spans.append((start, time.monotonic()))
    results.put(spans)


def _available_bytes() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def buffer_bytes(processes: int, available: Optional[int]) -> int:
    """BUFFER_BYTES, or less if the buffers would take much of the machine's memory."""
    if available is None:
        return BUFFER_BYTES
    fits = int(available * _MEMORY_SHARE / processes)
    return max(1 << 20, min(BUFFER_BYTES, fits)) // 8 * 8


def measure(
    processes: int, repeats: int = _REPEATS, method: Optional[str] = None
) -> MemoryBandwidth:
    """``method``: multiprocessing start method; "spawn" where this process already runs threads
    (a communicator's engine), whose locks a forked child could inherit held. Default: fork."""
    nbytes = buffer_bytes(processes, _available_bytes())
    if method is None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    # A start method's context, which has a Process class (typeshed's get_context(str) says only
    # BaseContext, which has none).
    context = cast(
        "Union[ForkContext, SpawnContext, ForkServerContext]", multiprocessing.get_context(method)
    )
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_update_loop, args=(nbytes, repeats, barrier, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        per_process = [results.get(timeout=_TIMEOUT) for _ in workers]
    finally:
        for worker in workers:
            worker.join(_TIMEOUT)
            if worker.is_alive():
                worker.kill()
    best = 0.0
    for spans in zip(*per_process):  # one repetition: every process's (start, end)
        elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
        best = max(best, 2 * nbytes * processes / elapsed / 1e9)
    return MemoryBandwidth(best, processes, nbytes)
