"""ringcomm-bench: nccl-tests-style tables for ringcomm, with gloo and MPI in the same run.

    ringcomm-bench allreduce --size 1GB
    ringcomm-bench allreduce -b 8 -e 256M -f 2 -np 4 --compare gloo,mpi --check
    ringcomm-bench allreduce --device cuda -b 1M -e 1G -np 4 --compare gloo   # on one GPU
    mpirun -np 4 ringcomm-bench allreduce          # the launcher's ranks run the benchmark
    srun -n 8 ringcomm-bench allreduce             # so do srun's tasks
    ringcomm-bench tune -np 4                      # measure; algorithm="auto" follows (tune.py)
    ringcomm-bench init --np 8,16,32,64 --hosts 8  # start-up and recovery as the job grows

Started from a shell, the CLI is the parent: it measures memory bandwidth, then launches the
ranks of ringcomm and of each peer one after another (launchers.py) and prints their tables.
Started by a launcher (ringcomm-run, torchrun, mpirun, srun), each process is a ringcomm rank and
rank 0 prints; peers are not run then, since they need ranks of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from ringcomm.bench import background_load, cluster, machine, memory_bandwidth, netns, plot, report
from ringcomm.bench import device as bench_device
from ringcomm.bench.arguments import command_line
from ringcomm.bench.cluster import link_rate
from ringcomm.bench.collectives import COLLECTIVES, REDUCING, limit_busbw
from ringcomm.bench.dtypes import DTYPES
from ringcomm.bench.launchers import PEERS, RUNNERS, Outcome, launched_as_rank, report_file
from ringcomm.bench.plan import Plan, run_deadline
from ringcomm.bench.progress import SweepProgress
from ringcomm.bench.sizes import parse_size, sweep
from ringcomm.bench.worker import progress_path

OPS = ("sum", "avg", "min", "max", "prod")
ALGORITHMS = ("auto", "ring", "tree", "direct", "hierarchical")
COMPRESSIONS = ("none", "fp16", "bf16", "int8", "fp8")
TRANSPORTS = ("auto", "tcp", "shm", "ucx")
# The options that may list several values, timed in turns in one set of ranks: one at a time.
IN_TURNS = ("algorithm", "compression", "transport")
_DEFAULT_BEGIN, _DEFAULT_END, _DEFAULT_FACTOR = "8", "128M", 4


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _comma_list(kind: str, choices: Sequence[str], empty_ok: bool = False):
    """An argparse type: comma-separated names from ``choices``, in order, without repeats."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown or not (names or empty_ok):
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(unknown) or repr(text)}; choose from "
                f"{', '.join(choices)}"
            )
        return list(dict.fromkeys(names))

    return parse


_peers = _comma_list("peer", PEERS, empty_ok=True)
_algorithms = _comma_list("algorithm", ALGORITHMS)
_compressions = _comma_list("compression", COMPRESSIONS)
_transports = _comma_list("transport", TRANSPORTS)


def at_least(kind, least):
    def parse(text: str):
        value = kind(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}; got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = command_line("ringcomm-bench", __doc__)
    parser.add_argument("collective", choices=COLLECTIVES)
    sizes = parser.add_argument_group("sizes (bytes; K/M/G = 1024-based: 8, 4K, 1MB, 1GiB)")
    sizes.add_argument("--size", type=_size, help="one size (instead of a sweep)")
    sizes.add_argument(
        "-b", "--minbytes", type=_size, help=f"sweep from (default {_DEFAULT_BEGIN})"
    )
    sizes.add_argument("-e", "--maxbytes", type=_size, help=f"sweep to (default {_DEFAULT_END})")
    sizes.add_argument(
        "-f",
        "--stepfactor",
        type=int,
        default=_DEFAULT_FACTOR,
        help=f"sweep factor (default {_DEFAULT_FACTOR})",
    )
    parser.add_argument(
        "-np",
        "-n",
        dest="nranks",
        type=at_least(int, 1),
        help="ranks (default: one per core this process may run on)",
    )
    parser.add_argument(
        "--compression",
        type=_compressions,
        default=["none"],
        metavar="none|fp16|bf16|int8|fp8[,...]",
        help="ringcomm all-reduce wire format: fp16/bf16, or int8/fp8 with a scale per block "
        "of 32, on the wire, float32 accumulation (float32 sum/avg; the ring schedule, or the "
        "hierarchical one across hosts); several, as none,fp16,int8, are timed in turns in one "
        "set of ranks and compared per size",
    )
    parser.add_argument(
        "--memory",
        choices=("private", "shared"),
        default="private",
        help="ringcomm's CPU buffers: private (numpy/torch, as the peers') or shared "
        "(ringcomm.empty: memory the local ranks map, read and written without the kernel's "
        "copies)",
    )
    parser.add_argument(
        "--algorithm",
        type=_algorithms,
        default=["auto"],
        metavar="auto|ring|tree|direct|hierarchical[,...]",
        help="ringcomm all-reduce algorithm (default auto: this host's tuning file's, else the "
        "cost model's); several, as auto,direct,ring,tree, are timed in turns in one set of "
        "ranks and compared per size (auto/best: auto against the fastest forced one)",
    )
    parser.add_argument(
        "--transport",
        type=_transports,
        default=["auto"],
        metavar="auto|tcp|shm|ucx[,...]",
        help="ringcomm's transport (default auto: shared memory within a host; between hosts "
        "TCP, or UCX where both ends have RDMA); tcp and ucx (a build with UCX) carry every "
        "link; several, as tcp,ucx, are timed in turns in one set of ranks, each through a "
        "communicator of its own, compared per size, and each is a column of --compare's table",
    )
    parser.add_argument(
        "--device",
        choices=bench_device.DEVICES,
        default="cpu",
        help="where the buffers are: cpu, or cuda (every rank on one GPU; gloo and "
        "torch-ringcomm peers on CUDA tensors too; the reference is the GPU's copy bandwidth)",
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--op", choices=OPS, help="reduction (default sum)")
    parser.add_argument(
        "--iters",
        type=at_least(int, 1),
        help="timed calls per size (default: enough for --min-time, 3..1000)",
    )
    parser.add_argument(
        "--warmup", type=at_least(int, 0), help="untimed calls first (default: adaptive)"
    )
    parser.add_argument(
        "--min-time",
        type=at_least(float, 0.001),
        default=0.3,
        help="seconds of timed calls per size when adaptive (default 0.3)",
    )
    parser.add_argument("--check", action="store_true", help="verify results (#wrong column)")
    parser.add_argument(
        "--compare",
        type=_peers,
        default=[],
        metavar="gloo,mpi",
        help="also run these peers, same sizes, ranks and dtype",
    )
    parser.add_argument("--json", metavar="PATH", help="write all results here")
    parser.add_argument(
        "--plot",
        metavar="PNG",
        help="draw busbw against size for ringcomm and every peer, with the single-host limit "
        "(needs matplotlib: pip install 'ringcomm[plot]')",
    )
    parser.add_argument(
        "--timeout",
        type=at_least(float, 1.0),
        help="seconds each implementation's run may take (default: from sizes)",
    )
    parser.add_argument(
        "--background-load",
        type=at_least(int, 0),
        default=0,
        metavar="N",
        help="run N busy-loop processes beside every implementation's ranks (a busy machine)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress display (shown only on a terminal)"
    )
    several = parser.add_argument_group(
        "a simulated cluster on this machine (root; network namespaces joined by shaped links)"
    )
    several.add_argument(
        "--hosts",
        type=at_least(int, 2),
        metavar="H",
        help="spread the ranks over H hosts, consecutive ranks together; every implementation "
        "crosses the same links, and the tables compare with the links' bound",
    )
    several.add_argument(
        "--link-rate",
        type=link_rate,
        metavar="RATE",
        help="each host's link, each way, in tc's units (1gbit, 10gbit); default: unshaped",
    )
    several.add_argument(
        "--mtu", type=at_least(int, 576), default=1500, help="the links' MTU (default 1500)"
    )
    several.add_argument(
        "--link-names",
        type=lambda text: [name for name in text.split(",") if name],
        metavar="NAMES",
        help="each host's name for its link, comma-separated (real clusters mix eth0, ens5, "
        "ib0); default: link0 on every host",
    )
    return parser


def requested_sizes(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[int]:
    if args.size is not None:
        if args.minbytes is not None or args.maxbytes is not None:
            parser.error("give --size or -b/-e, not both")
        return [args.size]
    begin = args.minbytes if args.minbytes is not None else parse_size(_DEFAULT_BEGIN)
    end = args.maxbytes if args.maxbytes is not None else max(begin, parse_size(_DEFAULT_END))
    try:
        return sweep(begin, end, args.stepfactor)
    except ValueError as error:
        parser.error(str(error))


def make_plan(args: argparse.Namespace, sizes: list[int], nranks: int) -> Plan:
    return Plan(
        collective=args.collective,
        sizes=sizes,
        dtype=args.dtype,
        op=(args.op or "sum") if args.collective in REDUCING else "sum",
        check=args.check,
        iters=args.iters,
        warmup=args.warmup,
        min_time=args.min_time,
        algorithms=args.algorithm,
        transports=args.transport,
        compressions=args.compression,
        device=args.device,
        memory=args.memory,
        # Variants timed in turns take as long again each.
        timeout=args.timeout
        or run_deadline(sizes, nranks)
        * max(len(args.algorithm), len(args.compression), len(args.transport)),
    )


def _bandwidth(nranks: int, method: Optional[str] = None):
    """B_mem with as many processes as ranks can run at once (at most one per core)."""
    try:
        return memory_bandwidth.measure(min(nranks, machine.cores()), method=method)
    except Exception as error:  # the tables are still worth having without the limit
        print(f"note: memory bandwidth not measured: {error}", file=sys.stderr)
        return None


def _finish(
    args, command, info, plan, nranks, bandwidth, limit, outcomes, comparison, limit_label=None
) -> int:
    if args.json:
        report.save_json(
            args.json, command, info, plan, nranks, bandwidth, limit, outcomes, comparison
        )
    if args.plot:
        columns = report.by_column(outcomes, plan)  # a line per transport timed in turns
        plot.plot_busbw(args.plot, columns, plan.collective, nranks, limit, command, limit_label)
    wrong = any(
        (row.get("wrong") or 0) > 0
        for o in outcomes
        for rows in [o.rows, *o.variants.values()]
        for row in rows
    )
    return 1 if wrong or outcomes[0].report is None else 0


def _hosts_of_ranks(comm) -> list[int]:
    """The host (cross rank) of every rank, in rank order."""
    import numpy as np

    hosts = comm.allgather(np.array([comm.cross_rank], dtype=np.int64))
    return [int(host) for host in hosts.reshape(-1)]


def _run_as_rank(args, parser, command: str) -> int:
    """Under mpirun/torchrun/ringcomm-run: this process is one ringcomm rank."""
    from ringcomm.bench import in_ranks, ringcomm_worker

    plan = make_plan(args, requested_sizes(args, parser), nranks=1)  # deadline unused here
    out = report.console()
    comm = ringcomm_worker.connect(plan)
    try:
        bandwidth = limit = None
        hosts = _hosts_of_ranks(comm)  # a collective call: every rank makes it
        if comm.rank == 0:
            info = machine.describe()
            for line in report.header_lines(command, info, plan, comm.size):
                out.print(line)
            if args.nranks:
                out.print("note: under a launcher the launcher sets the ranks; -np is ignored")
            if len(set(hosts)) > 1:
                # Across hosts the links bound the collectives, at the rate the communicator
                # measured (or was given: RINGCOMM_LINK_BANDWIDTH).
                rate = comm._core.config.link_bandwidth
                limit = cluster.link_bound_busbw(plan.collective, hosts, rate) if rate else None
                out.print(report.measured_link_line(plan.collective, hosts, rate, limit))
            else:
                # Spawned, not forked: this process already runs the communicator's threads.
                bandwidth = _bandwidth(comm.size, method="spawn")
                limit = limit_busbw(plan.collective, comm.size, bandwidth and bandwidth.gbps)
                for line in report.limit_lines(plan.collective, comm.size, bandwidth, limit):
                    out.print(line)
        comm.barrier()
        result = ringcomm_worker.run(plan, comm)
        if comm.rank == 0:
            if result is None:  # ringcomm_worker.run() returns the report on rank 0
                raise RuntimeError("rank 0 of the benchmark run has no report")
            outcomes = [Outcome("ringcomm", result, result.get("skipped"))]
            report.print_outcome(out, outcomes[0], plan, comm.size, info)
        for peer in args.compare:  # in these same ranks, one after another
            outcome = in_ranks.run_peer(peer, plan, comm)
            if comm.rank == 0:
                report.print_outcome(out, outcome, plan, comm.size, info)
                outcomes.append(outcome)
    finally:
        comm.shutdown()
    if comm.rank != 0:
        return 0
    comparison = None
    if args.compare:
        limit_name = "the links' bound" if len(set(hosts)) > 1 else "the single-host limit"
        comparison = report.print_comparison(out, outcomes, plan, limit, limit_name)
    return _finish(args, command, info, plan, comm.size, bandwidth, limit, outcomes, comparison)


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["tune"]:
        from ringcomm.bench import tune

        return tune.main(words[1:])
    if words[:1] == ["init"]:
        from ringcomm.bench import init_scale

        return init_scale.main(words[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    command = machine.command_line(argv)
    listed = [f"--{axis}" for axis in IN_TURNS if len(getattr(args, axis)) > 1]
    if len(listed) > 1:
        parser.error(
            f"{', '.join(listed[:-1])} and {listed[-1]} each list several: vary one at a time"
        )
    if len(args.algorithm) > 1:
        if args.collective != "allreduce":
            parser.error("several algorithms: they are all-reduce schedules; measure allreduce")
        if args.compression != ["none"]:
            parser.error("several algorithms: compression runs the ring schedule only")
    if len(args.compression) > 1:
        if args.collective != "allreduce":
            parser.error("several compressions: they are wire formats of allreduce; measure it")
    if args.plot and plot.available() is not None:
        print(f"ringcomm-bench: {plot.available()}", file=sys.stderr)  # before minutes of runs
        return 2
    if args.device == "cuda":
        if args.collective != "allreduce":
            parser.error("--device cuda measures allreduce only")
        if "mpi" in args.compare:
            parser.error("--device cuda: the mpi peer takes host buffers; compare with gloo")
        problem = bench_device.cuda_problem()
        if problem is not None:
            print(f"ringcomm-bench: --device cuda: {problem}", file=sys.stderr)
            return 2
    if (args.link_rate or args.mtu != 1500 or args.link_names) and not args.hosts:
        parser.error(
            "--link-rate, --mtu and --link-names shape the links of a simulated cluster: add "
            "--hosts H"
        )
    if args.link_names and len(args.link_names) != args.hosts:
        parser.error(
            f"--link-names: one name a host; got {len(args.link_names)} for --hosts {args.hosts}"
        )
    if launched_as_rank():
        if args.hosts:
            parser.error(
                "--hosts simulates hosts on this machine; under a launcher (mpirun, "
                "srun, torchrun) the launcher places the ranks on real hosts"
            )
        return _run_as_rank(args, parser, command)
    nranks = args.nranks or machine.cores()
    if args.hosts and nranks < args.hosts:
        parser.error(
            f"-np {nranks} cannot spread over --hosts {args.hosts}: one rank per host at least"
        )
    plan = make_plan(args, requested_sizes(args, parser), nranks)
    with contextlib.ExitStack() as stack:
        hosts = None
        if args.hosts:
            try:
                hosts = stack.enter_context(
                    cluster.simulated(args.hosts, nranks, args.link_rate, args.mtu, args.link_names)
                )
            except netns.NamespacesUnavailableError as error:
                print(f"ringcomm-bench: --hosts: {error}", file=sys.stderr)
                return 2
        return _run_from_shell(args, command, plan, nranks, hosts)


def _run_from_shell(args, command: str, plan: Plan, nranks: int, hosts) -> int:
    """Started from a shell: the ranks of ringcomm and of each peer, one run after another, on
    this host or on the simulated cluster ``hosts``."""
    out, progress = report.console(), report.console(stderr=True)
    info = machine.describe()
    placement = hosts.describe() if hosts else None
    for line in report.header_lines(command, info, plan, nranks, placement):
        out.print(line)
    if args.op and args.collective not in REDUCING:
        out.print(f"note: --op does not apply to {args.collective}; ignored")
    if hosts and "mpi" in args.compare:
        out.print(f"note: {cluster.MPI_NOTE}")
    copy = link = None
    bandwidth = None
    if hosts:
        limit = (
            cluster.link_bound_busbw(plan.collective, hosts.layout, hosts.rate)
            if hosts.rate
            else None
        )
        for line in report.link_lines(plan.collective, hosts, limit):
            out.print(line)
    elif plan.device == "cuda":
        bandwidth = None
        copy = bench_device.measure_copy()
        link = bench_device.measure_host_link()
        limit = limit_busbw(plan.collective, nranks, copy.gbps)
        for line in bench_device.reference_lines(copy, plan.collective, nranks, limit):
            out.print(line)
        for line in bench_device.host_link_lines(link):
            out.print(line)
    else:
        bandwidth = _bandwidth(nranks)
        limit = limit_busbw(plan.collective, nranks, bandwidth and bandwidth.gbps)
        for line in report.limit_lines(plan.collective, nranks, bandwidth, limit):
            out.print(line)
    out.file.flush()
    outcomes = []
    if args.background_load:
        out.print(f"background load: {args.background_load} busy-loop processes during every run")
    live = not args.quiet and progress.file.isatty()
    with (
        tempfile.TemporaryDirectory(prefix="ringcomm-bench-") as workdir,
        background_load.running(args.background_load),
        SweepProgress(live, len(plan.sizes), progress) as sweep,
    ):
        plan_path = Path(workdir) / "plan.json"
        plan.save(plan_path)
        for implementation in ["ringcomm", *args.compare]:
            notes = Path(progress_path(str(report_file(implementation, Path(workdir)))))
            outcome = sweep.track(
                implementation,
                notes,
                lambda i=implementation: RUNNERS[i](plan, nranks, plan_path, Path(workdir), hosts),
            )
            report.print_outcome(out, outcome, plan, nranks, info)
            outcomes.append(outcome)
    limit_name = "the links' bound" if hosts else "the single-host limit"
    comparison = (
        report.print_comparison(out, outcomes, plan, limit, limit_name) if args.compare else None
    )
    if copy is not None and link is not None:  # measured together (--device cuda)
        for line in bench_device.copy_ratio_lines(outcomes, copy):
            out.print(line)
        for line in bench_device.host_link_ratio_lines(outcomes, link, nranks):
            out.print(line)
    link_label = f"the links' bound = {limit:.3f} GB/s" if hosts and limit else None
    return _finish(
        args, command, info, plan, nranks, bandwidth, limit, outcomes, comparison, link_label
    )
