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

Across hosts:

    mpirun -np 16 -hosts a,b ringcomm-bench tune   # (or srun, torchrun): a job across hosts
    ringcomm-bench tune --hosts 2 -np 8 --link-rate 1gbit   # a simulated cluster, as the bench's

times the flat ring and tree against the hierarchical schedule (and what auto runs) in that job,
and prints the network's figures as the cost model took them (measured between the first two
hosts when the communicator was created). Under a launcher, rank 0 writes them to its host's
link file, which jobs whose rank 0 is on that host use instead of measuring at creation. A
simulated cluster's links are not this host's network: nothing is written for it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from ringcomm import _tuning
from ringcomm.bench import machine
from ringcomm.bench.arguments import command_line
from ringcomm.bench.cluster import link_rate
from ringcomm.bench.launchers import RUNNERS, launched_as_rank, report_file
from ringcomm.bench.plan import Plan, run_deadline
from ringcomm.bench.progress import SweepProgress
from ringcomm.bench.sizes import human, parse_size, sweep
from ringcomm.bench.worker import progress_path

# What each transport can run on one host (direct needs shared memory).
ALGORITHMS = {"shm": ("direct", "ring", "tree"), "tcp": ("ring", "tree")}
# Across hosts: the flat schedules against the one that knows the hosts, and auto's choice.
ACROSS_HOSTS = ("auto", "ring", "tree", "hierarchical")
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
    parser = command_line("ringcomm-bench tune", __doc__)
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
    several = parser.add_argument_group("across hosts: a simulated cluster (see ringcomm-bench)")
    several.add_argument("--hosts", type=int, metavar="H", help="spread the ranks over H hosts")
    several.add_argument("--link-rate", type=link_rate, metavar="RATE", help="e.g. 1gbit")
    several.add_argument("--mtu", type=int, default=1500, help="the links' MTU (default 1500)")
    return parser


def _sweep_sizes(args, parser) -> list[int]:
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
    return sizes


def _across_hosts_plan(args, sizes: list[int], nranks: int) -> Plan:
    return Plan(
        collective="allreduce",
        sizes=sizes,
        algorithms=list(ACROSS_HOSTS),
        min_time=args.min_time,
        timeout=run_deadline(sizes, nranks) * len(ACROSS_HOSTS),
    )


def _print_across_hosts(times: dict, link: Optional[dict], where: str) -> None:
    latency = bandwidth = None
    if link:
        latency, bandwidth = link["latency_s"] * 1e6, link["bytes_per_s"] / 1e9
    forced = {a: t for a, t in times.items() if a != "auto"}
    rules = _tuning.rules_from_times(forced)
    source = "the link as the cost model took it: measured between the first two hosts"
    _print_transport(f"across hosts ({where})", times, latency, bandwidth, rules, source)


def _tune_simulated(args, parser, nranks: int) -> int:
    """--hosts: the sweep across a simulated cluster; prints, writes nothing."""
    from ringcomm.bench import cluster, netns

    if args.hosts < 2 or nranks < args.hosts:
        parser.error(f"--hosts {args.hosts} needs at least 2 hosts and a rank on each")
    sizes = _sweep_sizes(args, parser)
    plan = _across_hosts_plan(args, sizes, nranks)
    try:
        hosts = cluster.simulated(args.hosts, nranks, args.link_rate, args.mtu)
        with hosts as made, tempfile.TemporaryDirectory(prefix="ringcomm-tune-") as workdir:
            print(f"# ringcomm-bench tune: {made.describe()}, all-reduce of float32, "
                  f"{len(sizes)} sizes {human(sizes[0])} .. {human(sizes[-1])}")  # fmt: skip
            plan_path = Path(workdir) / "plan.json"
            plan.save(plan_path)
            outcome = RUNNERS["ringcomm"](plan, nranks, plan_path, Path(workdir), made)
    except netns.NamespacesUnavailableError as error:
        print(f"ringcomm-bench tune: --hosts: {error}", file=sys.stderr)
        return 2
    if not outcome.variants:
        print(f"ringcomm-bench tune: {outcome.note or 'no results'}", file=sys.stderr)
        return 1
    times = {a: {r["size"]: r["time_us"] for r in rows} for a, rows in outcome.variants.items()}
    _print_across_hosts(times, (outcome.report or {}).get("link"), "simulated")
    print("\n# nothing written: a simulated cluster's links are not this host's network")
    return 0


def _tune_as_rank(args, parser) -> int:
    """Under a launcher: this process is one rank of a job across hosts; rank 0 writes its host's
    link file."""
    import os

    from ringcomm.bench import ringcomm_worker

    output = Path(args.output) if args.output else _tuning.link_path()
    # Measure the link afresh: an old link file would stand in for the measurement.
    os.environ["RINGCOMM_TUNING_DIR"] = "off"
    sizes = _sweep_sizes(args, parser)
    comm = ringcomm_worker.connect(_across_hosts_plan(args, sizes, 1))
    try:
        if comm.cross_size < 2:
            if comm.rank == 0:
                print("ringcomm-bench tune: under a launcher tune measures a job across hosts; "
                      "these ranks are all on one host: run ringcomm-bench tune from a shell "
                      "there", file=sys.stderr)  # fmt: skip
            return 2
        report = ringcomm_worker.run(_across_hosts_plan(args, sizes, comm.size), comm)
    finally:
        comm.shutdown()
    if report is None:
        return 0
    times = {a: {r["size"]: r["time_us"] for r in rows} for a, rows in report["variants"].items()}
    _print_across_hosts(times, report["link"], f"{comm.size} ranks on {comm.cross_size} hosts")
    if output is None:
        print("# nothing written: tuning files are off (RINGCOMM_TUNING_DIR=off); give --output")
        return 0
    link = report["link"]
    measured = {
        "ranks": comm.size,
        "hosts": comm.cross_size,
        "times_us": {a: {str(s): t for s, t in by.items()} for a, by in times.items()},
    }
    _tuning.write_link(output, link["latency_s"], link["bytes_per_s"], measured)
    print(f"\n# wrote {output}: jobs whose rank 0 is on this host take the link from it")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.link_rate or args.mtu != 1500) and not args.hosts:
        parser.error("--link-rate and --mtu shape a simulated cluster's links: add --hosts H")
    if launched_as_rank():
        if args.hosts:
            parser.error("--hosts simulates hosts; under a launcher the launcher places the ranks")
        return _tune_as_rank(args, parser)
    nranks = args.nranks or machine.cores()
    if nranks < 2:
        parser.error("tuning needs at least 2 ranks")
    if args.hosts:
        return _tune_simulated(args, parser, nranks)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or any(t not in ALGORITHMS for t in transports):
        parser.error(f"--transports: choose from {', '.join(ALGORITHMS)}")
    sizes = _sweep_sizes(args, parser)
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
                transports=[transport],
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


def _print_transport(transport, times, alpha, bandwidth, rules, source=None) -> None:
    """``source``: where latency and bandwidth come from (default: a fit of the ring's times)."""
    algorithms = list(times)
    print(f"\n## {transport}: all-reduce time (us) per algorithm")
    print("| size | " + " | ".join(algorithms) + " | fastest |")
    print("|---:|" + "---:|" * len(algorithms) + "---|")
    for size in sorted({s for by in times.values() for s in by}):
        cells = [f"{times[a][size]:.2f}" if size in times[a] else "-" for a in algorithms]
        timed = {a: times[a][size] for a in algorithms if size in times[a]}
        print(f"| {size} | " + " | ".join(cells) + f" | {min(timed, key=timed.__getitem__)} |")
    latency = f"{alpha:.1f} us" if alpha is not None else "?"
    speed = f"{bandwidth:.2f} GB/s" if bandwidth is not None else "?"
    source = source or "ring: time = alpha + size / bw"
    print(f"# {transport}: latency {latency}, bandwidth {speed} ({source})")
    print(f"# {transport} crossovers: {_sizes_text(rules)}")


if __name__ == "__main__":
    sys.exit(main())
