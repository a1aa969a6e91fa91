"""``ringcomm-bench tune``: measures this host, and writes what ``algorithm="auto"`` should run.

    ringcomm-bench tune                 # one rank per core
    ringcomm-bench tune -np 8 -e 256M

For each transport ranks on one host can use (shared memory, TCP over loopback) it times an
all-reduce sweep with every algorithm that transport can run (direct, ring and tree through
shared memory; ring and tree over TCP), in turns in one set of ranks at each size (the
benchmark's ``--algorithm direct,ring,tree``: a slow phase of the machine falls on every
algorithm alike), then prints, per transport, its latency and bandwidth (an
alpha-beta fit of the ring's times: time = alpha + size / bandwidth) and the sizes at which the
fastest algorithm changes (the crossovers). The fastest algorithm per size range goes into this
host's tuning file for that world size (ringcomm/_tuning.py), which ringcomm.init() reads for
``algorithm="auto"`` from then on, whenever every rank is on this host.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from ringcomm import _tuning
from ringcomm.bench import machine
from ringcomm.bench.launchers import RUNNERS, report_file
from ringcomm.bench.plan import Plan, run_deadline
from ringcomm.bench.progress import SweepProgress
from ringcomm.bench.sizes import human, parse_size, sweep
from ringcomm.bench.worker import progress_path

# What each transport can run on one host (direct needs shared memory).
ALGORITHMS = {"shm": ("direct", "ring", "tree"), "tcp": ("ring", "tree")}
_DEFAULT_BEGIN, _DEFAULT_END, _DEFAULT_FACTOR = "8", "64M", 4


def fit_alpha_beta(times_us: dict) -> tuple[Optional[float], Optional[float]]:
    """Least squares of time = alpha + size / bandwidth over {size: time_us}: (alpha in us,
    bandwidth in GB/s), None where the fit says nothing (one size, or time not growing)."""
    points = sorted(times_us.items())
    if len(points) < 2:
        return (points[0][1] if points else None), None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    alpha = max(0.0, mean_y - slope * mean_x)
    bandwidth = 1e-3 / slope if slope > 0 else None  # bytes/us -> GB/s
    return alpha, bandwidth


def _sizes_text(rules: list) -> str:
    parts, low = [], 0
    for most, algorithm in rules:
        if most == _tuning.EVERY_SIZE:
            parts.append(f"{algorithm} from {human(low)}" if low else f"{algorithm} at every size")
        else:
            parts.append(f"{algorithm} up to {human(most)}")
        low = most + 1
    return ", ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringcomm-bench tune",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-np", "-n", dest="nranks", type=int, help="ranks (default: one per core)")
    parser.add_argument("-b", "--minbytes", default=_DEFAULT_BEGIN, help="sweep from (8)")
    parser.add_argument("-e", "--maxbytes", default=_DEFAULT_END, help="sweep to, included (64M)")
    parser.add_argument("-f", "--stepfactor", type=int, default=_DEFAULT_FACTOR, help="factor (4)")
    parser.add_argument(
        "--min-time",
        type=float,
        default=0.2,
        help="seconds of timed calls per size and algorithm (default 0.2)",
    )
    parser.add_argument(
        "--transports", default="shm,tcp", help="which to measure (default shm,tcp)"
    )
    parser.add_argument("--output", help="tuning file (default: this host's, in the cache)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    nranks = args.nranks or machine.cores()
    if nranks < 2:
        parser.error("tuning needs at least 2 ranks")
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or any(t not in ALGORITHMS for t in transports):
        parser.error(f"--transports: choose from {', '.join(ALGORITHMS)}")
    try:
        largest = parse_size(args.maxbytes)
        sizes = sweep(parse_size(args.minbytes), largest, args.stepfactor)
    except ValueError as error:
        parser.error(str(error))
    if sizes[-1] < largest:
        # Measured too: the last rule holds every larger size, and a winner found at a quarter of
        # --maxbytes (-f 4) is a guess at --maxbytes. On the 2-core VM, 2 ranks, tree won at
        # 8 MiB by 6% and ring at 16 MiB by 11% (bench/RESULTS.md, Issue 13).
        sizes.append(largest)
    output = Path(args.output) if args.output else _tuning.path_for(nranks)
    if output is None:
        parser.error("tuning files are off (RINGCOMM_TUNING_DIR=off): give --output")
    print(f"# ringcomm-bench tune: {nranks} ranks, all-reduce of float32, {len(sizes)} sizes "
          f"{human(sizes[0])} .. {human(sizes[-1])}")  # fmt: skip
    measured: dict = {}
    live = not args.quiet and sys.stderr.isatty()
    with (
        tempfile.TemporaryDirectory(prefix="ringcomm-tune-") as workdir,
        SweepProgress(live, len(sizes)) as progress,
    ):
        for transport in transports:
            algorithms = ALGORITHMS[transport]
            plan = Plan(
                collective="allreduce",
                sizes=sizes,
                algorithms=list(algorithms),
                transport=transport,
                min_time=args.min_time,
                timeout=run_deadline(sizes, nranks) * len(algorithms),
            )
            run_dir = Path(workdir) / transport
            run_dir.mkdir()
            plan_path = run_dir / "plan.json"
            plan.save(plan_path)
            notes = Path(progress_path(str(report_file("ringcomm", run_dir))))
            outcome = progress.track(
                f"{transport} {','.join(algorithms)}",
                notes,
                lambda p=plan, d=run_dir, f=plan_path: RUNNERS["ringcomm"](p, nranks, f, d),
            )
            if not outcome.variants:
                print(f"note: {transport}: {outcome.note or 'no results'}")
                continue
            measured[transport] = {
                "times_us": {
                    algorithm: {row["size"]: row["time_us"] for row in rows}
                    for algorithm, rows in outcome.variants.items()
                }
            }
    written = {}
    for transport, found in measured.items():
        times = found["times_us"]
        rules = _tuning.rules_from_times(times)
        alpha, bandwidth = fit_alpha_beta(times.get("ring") or next(iter(times.values())))
        written[transport] = {
            "rules": rules,
            "latency_us": alpha,
            "bandwidth_gbps": bandwidth,
            "times_us": {a: {str(s): t for s, t in by.items()} for a, by in times.items()},
        }
        _print_transport(transport, times, alpha, bandwidth, rules)
    if not written:
        print("ringcomm-bench tune: nothing was measured; no tuning file written", file=sys.stderr)
        return 1
    _tuning.write(output, nranks, written)
    print(f"\n# wrote {output}: algorithm='auto' with {nranks} ranks on this host follows it")
    return 0


def _print_transport(transport, times, alpha, bandwidth, rules) -> None:
    algorithms = list(times)
    print(f"\n## {transport}: all-reduce time (us) per algorithm")
    print("| size | " + " | ".join(algorithms) + " | fastest |")
    print("|---:|" + "---:|" * len(algorithms) + "---|")
    for size in sorted({s for by in times.values() for s in by}):
        cells = [f"{times[a][size]:.2f}" if size in times[a] else "-" for a in algorithms]
        timed = {a: times[a][size] for a in algorithms if size in times[a]}
        print(f"| {size} | " + " | ".join(cells) + f" | {min(timed, key=timed.get)} |")
    latency = f"{alpha:.1f} us" if alpha is not None else "?"
    speed = f"{bandwidth:.2f} GB/s" if bandwidth is not None else "?"
    print(f"# {transport}: latency {latency}, bandwidth {speed} (ring: time = alpha + size / bw)")
    print(f"# {transport} crossovers: {_sizes_text(rules)}")


if __name__ == "__main__":
    sys.exit(main())
