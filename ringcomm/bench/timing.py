"""Timing one collective at one size, the same way for every implementation.

As nccl-tests does, each rank times a loop of back-to-back calls that starts after a barrier and
takes its average per call; the reported time is the slowest rank's average (a collective is done
when its last rank is). On shared, oversubscribed machines one loop can be hit by noise, so the
iterations are split into up to _MAX_TRIALS loops ("trials") and the median trial is reported.

Iteration counts must agree across ranks (every call is collective), so the adaptive count is
derived from the slowest rank's probe time, which all ranks learn through allgather_float.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol


class Sync(Protocol):
    def barrier(self) -> None: ...
    def allgather_float(self, value: float) -> list[float]: ...


_PROBE_ITERS = 2  # first calls, timed to size the run (and also warmup)
_MIN_ITERS = 3  # timed calls per size, at least
_MAX_ITERS = 1000  # and at most: beyond this small sizes gain nothing but run time
_WARMUP_SHARE = 0.1  # extra warmup, as a share of the time budget
_MAX_WARMUP = 100
_MAX_TRIALS = 5


@dataclass
class Timing:
    time_us: float  # median over trials of the slowest rank's average per call
    trials_us: list[float]  # each trial's slowest-rank average
    iters: int  # timed calls in all
    warmup: int  # untimed calls before them (probe included)


def _slowest(sync: Sync, seconds: float) -> float:
    return max(sync.allgather_float(seconds))


def _timed_loop(run: Callable[[], None], sync: Sync, iters: int) -> float:
    """Slowest rank's average seconds per call over ``iters`` calls started after a barrier."""
    sync.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    return _slowest(sync, (time.perf_counter() - start) / iters)


def plan_iterations(per_call: float, min_time: float) -> tuple[int, int]:
    """(extra warmup, timed iterations) for calls of ``per_call`` seconds, ``min_time`` budget."""
    per_call = max(per_call, 1e-9)
    warmup = min(_MAX_WARMUP, int(_WARMUP_SHARE * min_time / per_call))
    iters = max(_MIN_ITERS, min(_MAX_ITERS, math.ceil(min_time / per_call)))
    return warmup, iters


def split_trials(iters: int) -> tuple[int, int]:
    """(trials, calls per trial): up to _MAX_TRIALS loops of at least _MIN_ITERS calls."""
    trials = max(1, min(_MAX_TRIALS, iters // _MIN_ITERS))
    return trials, math.ceil(iters / trials)


def measure(
    run: Callable[[], None],
    sync: Sync,
    min_time: float,
    iters: Optional[int] = None,
    warmup: Optional[int] = None,
) -> Timing:
    """Times ``run`` (one collective call). ``iters``/``warmup`` fix the counts; None adapts them
    so the timed calls take about ``min_time`` seconds."""
    done = 0
    for _ in range(warmup or 0):
        run()
        done += 1
    if iters is None:
        # The probe warms up too; then the slowest rank's probe time sizes the run.
        per_call = _timed_loop(run, sync, _PROBE_ITERS)
        done += _PROBE_ITERS
        extra, iters = plan_iterations(per_call, min_time)
        if warmup is None:
            for _ in range(extra):
                run()
            done += extra
    elif warmup is None:
        for _ in range(_PROBE_ITERS):
            run()
        done += _PROBE_ITERS
    trials, per_trial = split_trials(iters)
    results = [_timed_loop(run, sync, per_trial) * 1e6 for _ in range(trials)]
    return Timing(statistics.median(results), results, trials * per_trial, done)
