"""The procedure every implementation's ranks run, size by size; only the library calls differ.

For each size: allocate the buffers (only those the collective needs: in place where it can be),
fill them with exact-sum inputs, time the collective (timing.py), then, with --check, refill, run
it once more and count the elements that differ from the expected result, summed over ranks.
Variants of the collective (ringcomm's all-reduce schedules, wire formats or transports) share
the buffers, are timed in turns, and are checked one after another.
Rank 0 returns the report; the launcher writes it where the parent reads it.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
from typing import Any, Callable, Optional, Protocol

import numpy as np

from ringcomm.bench import patterns
from ringcomm.bench.collectives import REDUCING, ElementCounts, bandwidths, element_counts
from ringcomm.bench.dtypes import ITEMSIZE
from ringcomm.bench.plan import Plan
from ringcomm.bench.timing import Timing, measure, measure_interleaved, settle

_ROOT = 0  # the root of broadcast, reduce, gather and scatter
# The elements an all-reduce's error through a wire codec is measured over (a prefix of the
# vector: every rank regenerates every rank's inputs for the float64 reference).
_ERROR_ELEMENTS = 1 << 20


class Group(Protocol):
    """One implementation's view of the ranks, as the procedure needs it."""

    name: str
    rank: int
    size: int

    def barrier(self) -> None: ...
    def allgather_float(self, value: float) -> list[float]: ...
    def array(self, count: int, dtype: str) -> Any: ...
    def allreduce(self, x, op: str) -> None: ...
    def allgather(self, x, out) -> None: ...
    def reduce_scatter(self, x, out, op: str) -> None: ...
    def broadcast(self, x, root: int) -> None: ...
    def reduce(self, x, op: str, root: int) -> None: ...  # in place: the root's x gets the result
    def alltoall(self, x, out) -> None: ...
    def gather(self, x, out, root: int) -> None: ...  # out: None on ranks other than the root
    def scatter(self, x, out, root: int) -> None: ...  # x: None on ranks other than the root
    def unsupported(self, collective: str, dtype: str, op: str) -> Optional[str]: ...
    def details(self, collective: str, nbytes: int) -> dict: ...


class _Case:
    """One collective at one size: its buffers, the call, its inputs and its expected output."""

    def __init__(self, plan: Plan, group: Group, counts: ElementCounts):
        self.plan, self.group, self.counts = plan, group, counts
        self.op = plan.op if plan.collective in REDUCING else "sum"
        collective, root = plan.collective, group.rank == _ROOT
        # Only the buffers a rank passes: a scatter's input and a gather's output are the root's.
        wants_x = collective != "scatter" or root
        self.x = group.array(counts.in_count, plan.dtype) if wants_x else None
        if collective in ("allreduce", "broadcast", "reduce"):
            self.out = self.x  # in place
        elif collective == "gather" and not root:
            self.out = None
        else:
            self.out = group.array(counts.out_count, plan.dtype)

    def call(self, group: Optional[Group] = None) -> Callable[[], None]:
        """The collective on this case's buffers, through ``group`` (a variant of the case's
        group: the same ranks, another algorithm) or the case's own."""
        g, x, out, op = group or self.group, self.x, self.out, self.plan.op
        return {
            "allreduce": lambda: g.allreduce(x, op),
            "allgather": lambda: g.allgather(x, out),
            "reduce_scatter": lambda: g.reduce_scatter(x, out, op),
            "broadcast": lambda: g.broadcast(x, _ROOT),
            "reduce": lambda: g.reduce(x, op, _ROOT),
            "alltoall": lambda: g.alltoall(x, out),
            "gather": lambda: g.gather(x, out, _ROOT),
            "scatter": lambda: g.scatter(x, out, _ROOT),
        }[self.plan.collective]

    def fill_inputs(self) -> None:
        rank, p = self.group.rank, self.group.size
        if self.x is None:
            return
        if self.plan.collective == "broadcast" and rank != _ROOT:
            patterns.fill(self.x, patterns.sentinel_values())
        else:
            source = _ROOT if self.plan.collective in ("broadcast", "scatter") else rank
            patterns.fill(self.x, patterns.input_values(self.op, source, p))

    def measures_error(self, variant: Group) -> bool:
        """Whether ``variant``'s results on this case carry a codec's error: ringcomm's float32
        sum or average through a wire codec (--compression; the peers run float32), on host
        arrays."""
        plan = self.plan
        return (
            variant.name == "ringcomm"
            and getattr(variant, "compression", None) is not None
            and plan.collective == "allreduce"
            and plan.dtype == "float32"
            and self.op in ("sum", "avg")
            and isinstance(self.x, np.ndarray)
        )

    def relative_error(self, call: Callable[[], None]) -> float:
        """Runs ``call`` on normally distributed inputs (rank r's drawn from seed r) and returns
        the relative L2 error of this rank's result against the float64 sum (or average) of
        every rank's inputs, over the first _ERROR_ELEMENTS elements."""
        rank, p, x = self.group.rank, self.group.size, self.x
        assert isinstance(x, np.ndarray)  # measures_error()
        x[...] = np.random.default_rng(rank).standard_normal(x.size, dtype=np.float32)
        call()
        n = min(x.size, _ERROR_ELEMENTS)
        exact = np.zeros(n, np.float64)
        for r in range(p):
            exact += np.random.default_rng(r).standard_normal(n, dtype=np.float32)
        if self.op == "avg":
            exact /= p
        scale = float(np.linalg.norm(exact)) or 1.0
        return float(np.linalg.norm(x[:n].astype(np.float64) - exact)) / scale

    def mark_outputs(self) -> None:
        """Before the checked call: a separate output holds what no collective writes, so an
        element it failed to write counts as wrong."""
        if self.out is not None and self.out is not self.x:
            patterns.fill(self.out, patterns.sentinel_values())

    def count_wrong(self) -> int:
        rank, p, n = self.group.rank, self.group.size, self.counts.out_count
        collective = self.plan.collective
        if collective == "allreduce":
            return patterns.count_wrong(self.out, patterns.reduced_values(self.op, p))
        if collective == "reduce":  # the root's buffer only: the others' are scratch
            if rank != _ROOT:
                return 0
            return patterns.count_wrong(self.out, patterns.reduced_values(self.op, p))
        if collective == "reduce_scatter":  # this rank's block of the reduced input
            return patterns.count_wrong(self.out, patterns.reduced_values(self.op, p), rank * n)
        if collective == "broadcast":
            return patterns.count_wrong(self.out, patterns.input_values(self.op, _ROOT, p))
        if collective == "scatter":  # this rank's block of the root's input
            root_input = patterns.input_values(self.op, _ROOT, p)
            return patterns.count_wrong(self.out, root_input, rank * n)
        if self.out is None:  # gather, not the root
            return 0
        block = n // p
        if collective == "alltoall":
            # Block r of this rank's output is block `rank` of rank r's input.
            return sum(
                patterns.count_wrong(
                    self.out[r * block : (r + 1) * block],
                    patterns.input_values(self.op, r, p),
                    rank * block,
                )
                for r in range(p)
            )
        # allgather, gather: block r of the output is rank r's input
        return sum(
            patterns.count_wrong(
                self.out[r * block : (r + 1) * block], patterns.input_values(self.op, r, p)
            )
            for r in range(p)
        )


def _run_size(
    plan: Plan, group: Group, counts: ElementCounts, variants: dict, first: bool = False
) -> dict:
    """{variant name: result row} for one size: every variant (a group on the same ranks: an
    all-reduce schedule, a wire format, a transport) timed on the same buffers, in turns when
    there are several. The ``first`` size of a run with adaptive counts is timed only after the
    ranks have settled (timing.settle()); fixed counts (--iters, --warmup) are run as given."""
    case = _Case(plan, group, counts)
    case.fill_inputs()
    calls = {name: case.call(variant) for name, variant in variants.items()}
    if first and plan.warmup is None and plan.iters is None:
        for call in calls.values():
            settle(call, group)
    if len(calls) == 1:
        ((name, call),) = calls.items()
        timings = {name: measure(call, group, plan.min_time, plan.iters, plan.warmup)}
    else:
        timings = measure_interleaved(calls, group, plan.min_time, plan.iters, plan.warmup)
    rows = {}
    for name, variant in variants.items():
        wrong = None
        if plan.check:
            case.fill_inputs()
            case.mark_outputs()
            calls[name]()
            wrong = int(sum(group.allgather_float(float(case.count_wrong()))))
        rows[name] = _row(plan, variant, counts, timings[name], wrong)
        if case.measures_error(variant):  # the largest of the ranks' (they hold the same bits)
            rows[name]["relerr"] = max(group.allgather_float(case.relative_error(calls[name])))
    return rows


def _row(plan: Plan, group: Group, counts: ElementCounts, timing: Timing, wrong) -> dict:
    algbw, busbw = bandwidths(plan.collective, counts.nbytes, timing.time_us, group.size)
    row = {
        "size": counts.nbytes,
        "count": counts.count,
        "type": plan.dtype,
        "redop": plan.op if plan.collective in REDUCING else "none",
        "time_us": timing.time_us,
        "algbw": algbw,
        "busbw": busbw,
        "wrong": wrong,
        "iters": timing.iters,
        "warmup": timing.warmup,
        "trials_us": timing.trials_us,
    }
    row.update(group.details(plan.collective, counts.nbytes))
    return row


def progress_path(report_path: str) -> str:
    """Where rank 0 says which size it is on, for the CLI's progress display."""
    return report_path + ".progress"


def _note_progress(path: Optional[str], index: int, nbytes: int, total: int) -> None:
    if path is None:
        return
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w") as f:
        json.dump({"index": index, "size": nbytes, "sizes": total}, f)
    os.replace(partial, path)  # the reader never sees half a file


def run_plan(
    plan: Plan,
    group: Group,
    progress: Optional[str] = None,
    variants: Optional[dict] = None,
) -> Optional[dict]:
    """Runs every size of the plan; returns the report on rank 0 and None on the others.
    ``progress``: a file where rank 0 notes each size as it starts it (progress_path()).
    ``variants``: {name: group}, versions of ``group`` on the same ranks that run the collective
    differently (ringcomm's all-reduce schedules, wire formats or transports: a communicator
    each), compared in turns at each size; the report's
    "results" are the first one's, and "variants" has every one's."""
    report = {
        "implementation": group.name,
        "nranks": group.size,
        "collective": plan.collective,
        "dtype": plan.dtype,
        "op": plan.op,
    }
    reason = group.unsupported(plan.collective, plan.dtype, plan.op)
    if reason is not None:
        return dict(report, skipped=reason) if group.rank == 0 else None
    variants = variants or {group.name: group}
    seen: set[int] = set()  # the byte counts timed so far
    rows: dict[str, list[dict]] = {name: [] for name in variants}
    for index, nbytes in enumerate(plan.sizes):
        counts = element_counts(plan.collective, nbytes, ITEMSIZE[plan.dtype], group.size)
        if counts.nbytes in seen:  # two requested sizes that round to the same buffers
            continue
        first = not seen
        seen.add(counts.nbytes)
        if group.rank == 0:
            _note_progress(progress, index, counts.nbytes, len(plan.sizes))
        for name, row in _run_size(plan, group, counts, variants, first).items():
            rows[name].append(row)
        gc.collect()  # free this size's buffers before the next (larger) ones are allocated
    group.barrier()
    if group.rank != 0:
        return None
    report["results"] = next(iter(rows.values()))
    if len(rows) > 1:
        report["variants"] = rows
    return report


def start(argv=None, description: Optional[str] = None) -> tuple[Plan, str]:
    """A worker's command line (--plan P --out R): the plan, where to write the report, and a
    deadline after which this rank prints its stack and exits, so that no rank hangs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--plan", required=True, help="plan file the CLI wrote")
    parser.add_argument("--out", required=True, help="where rank 0 writes its report")
    args = parser.parse_args(argv)
    plan = Plan.load(args.plan)
    faulthandler.dump_traceback_later(plan.timeout, exit=True)
    return plan, args.out


def finish(report: Optional[dict], path: str) -> int:
    if report is not None:
        with open(path, "w") as f:
            json.dump(report, f)
    return 0
