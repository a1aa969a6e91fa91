"""Timing one collective at one size, the same way for every implementation.

As nccl-tests does, each rank times a loop of back-to-back calls that starts after a barrier and
takes its average per call; the reported time is the slowest rank's average (a collective is done
when its last rank is). On shared, oversubscribed machines one loop can be hit by noise, so the
iterations are split into up to _MAX_TRIALS loops ("trials") and the median trial is reported.

Several variants of one call (all-reduce schedules) are compared by measure_interleaved(): in one
set of ranks, in turns, round after round, so that the machine's slow and fast phases fall on
every variant alike; each variant's time comes from its ratio to the fastest one, round by round.

Iteration counts must agree across ranks (every call is collective), so the adaptive count is
derived from the slowest rank's probe time, which all ranks learn through allgather_float.
"""

from __future__ import annotations

import math
import random
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
# measure_interleaved(): rounds in which every variant runs one short loop (the order changing
# from round to round), each loop taking about 1/ROUNDS of the variant's --min-time. Unlike
# measure(), no _MAX_ITERS: a loop's fixed costs must weigh alike on variants of like speed.
ROUNDS = 15
_MAX_PROBE_ITERS = 1 << 16  # calls in measure_interleaved()'s longest probe loop
# settle(): how long ranks that were just launched run calls before anything is timed. On the
# 2-core VM, 16 ranks' all-reduces of 8 B took 250-300 us for their first 1,000-1,500 calls
# (0.3-0.5 s) and 180-190 us after, also when the ranks slept 1.5 s after starting: the
# scheduler spreads newly busy processes over the cores over that long. Without it, the first
# size of a sweep was timed in that phase.
SETTLE_SECONDS = 1.0


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


def settle(run: Callable[[], None], sync: Sync, seconds: float = SETTLE_SECONDS) -> int:
    """Runs ``run`` untimed for about ``seconds`` (a count sized from the slowest rank's probe,
    so the same on every rank); returns the calls made."""
    per_call = max(_timed_loop(run, sync, _PROBE_ITERS), 1e-9)
    calls = min(_MAX_PROBE_ITERS, math.ceil(seconds / per_call))
    for _ in range(calls):
        run()
    return _PROBE_ITERS + calls


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


def measure_interleaved(
    runs: dict[str, Callable[[], None]],
    sync: Sync,
    min_time: float,
    iters: Optional[int] = None,
    warmup: Optional[int] = None,
) -> dict[str, Timing]:
    """Times each of ``runs`` (name -> one collective call) in turns: ROUNDS rounds in which
    every one runs, after one untimed call, a loop of its share of ``iters`` (or about
    min_time / ROUNDS seconds of calls). The order changes from round to round (a fixed
    shuffle, the same on every rank), so that no variant always follows the same other one: a
    variant running the same schedule as the one before it would find it warm.

    A variant's time is paired_times()' of its rounds' slowest-rank averages: compared round by
    round with the fastest variant, so that a slow phase of the machine spanning several rounds
    weighs on every variant alike (a plain median would take it for one variant and not
    another, whose rounds it spared in a different order).

    Every variant is warm before any is sized, and each is sized by a probe loop grown until it
    lasts a quarter of a round's loop: a loop's time includes the ranks' skew leaving the barrier
    before it (tens of microseconds on a busy machine), which a two-call probe takes for the
    calls' own time, and loops of fewer calls than a like variant's would carry more of it."""
    names = list(runs)
    done = {}
    for name in names:
        count = _PROBE_ITERS if warmup is None else warmup
        for _ in range(count):
            runs[name]()
        done[name] = count
    per_round = {}
    for name in names:
        if iters is not None:
            per_round[name] = math.ceil(iters / ROUNDS)
            continue
        loop_seconds = min_time / ROUNDS
        calls = _PROBE_ITERS
        while True:
            per_call = max(_timed_loop(runs[name], sync, calls), 1e-9)
            done[name] += calls
            if per_call * calls >= loop_seconds / 4 or calls >= _MAX_PROBE_ITERS:
                break
            calls *= 4
        per_round[name] = math.ceil(loop_seconds / per_call)
    results: dict[str, list[float]] = {name: [] for name in names}
    order = list(names)
    shuffler = random.Random(len(names))  # the same order on every rank
    for _ in range(ROUNDS):
        shuffler.shuffle(order)
        for name in order:
            runs[name]()  # its own state back in the caches, after another variant's loop
            done[name] += 1
            results[name].append(_timed_loop(runs[name], sync, per_round[name]) * 1e6)
    times = paired_times(results)
    return {
        name: Timing(times[name], results[name], ROUNDS * per_round[name], done[name])
        for name in names
    }


def paired_times(trials: dict[str, list[float]]) -> dict[str, float]:
    """{variant: a time} from times of the same rounds ({variant: [one per round]}): the fastest
    variant's median (by median), and for each other, that times the median over rounds of its
    ratio to the fastest one in the same round."""
    medians = {name: statistics.median(times) for name, times in trials.items()}
    fastest = min(medians, key=medians.__getitem__)
    return {
        name: medians[fastest]
        * statistics.median(mine / theirs for mine, theirs in zip(times, trials[fastest]))
        for name, times in trials.items()
    }
