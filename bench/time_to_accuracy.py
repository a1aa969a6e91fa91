"""Time to a test accuracy, every way of carrying the gradients, in one invocation (issue 35).

    python bench/time_to_accuracy.py --hosts 2 --link-rate 1gbit -np 4 --model wide \\
        --target-accuracy 0.97 --epochs 10 --lr 0.1 --repeats 2 --json tta.json --plot tta.png

Each row is one run of examples/train.py (the same data, seed, batch and learning rate; only
what carries the gradients differs):

    hvd <codec>         the Horovod API (ringcomm.torch's DistributedOptimizer) on ringcomm,
                        --compression none (float32), fp16, int8, fp8 (8-bit: error feedback)
    DDP <codec>         DistributedDataParallel on the ringcomm backend: float32, torch's
                        fp16_compress_hook, ringcomm's compress_hook for int8 and fp8 (with EF)
    DDP PowerSGD rN     torch's PowerSGD hook of matrix rank N, on ringcomm and on gloo
    DDP float32 (gloo)  the peer every row is measured against

and reports the steps and the training seconds (the clock stops while the test set is evaluated)
to the first evaluation at or above --target-accuracy, the accuracy at the end, the time per step,
and the time to the target as a fraction of float32 on ringcomm (the same API's float32 row) and
of float32 DDP on gloo. With --repeats R every row runs R times, the rows taking turns (each
round starting one row later), so that a drift of the machine's speed reaches every row alike;
the table shows each row's medians.

--hosts 2 puts the ranks on two network namespace "hosts" (root; ringcomm.bench.netns), half on
each, their link shaped to --link-rate each way, so that the all-reduce crosses a 1 Gbit/s link
as between two machines. --hosts 1 runs every rank on this machine, over loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ringcomm._ports import free_port
from ringcomm._ranks import start_rank
from ringcomm.bench import cluster, netns, plot, report
from ringcomm.bench.launchers import clean_environment, wait_all
from ringcomm.bench.table import format_ratio, markdown_table

TRAIN = Path(__file__).resolve().parent.parent / "examples" / "train.py"
# The simulated hosts' addresses and namespace names: used by no test and no other benchmark
# (tests/ and bench/ take 10.231.77-84 and 10.231.100), so this can run beside any of them.
SUBNET = "10.231.91"
TAG = "tta"
CODECS = ("none", "fp16", "int8", "fp8")
_CODEC_NAMES = {
    "none": "float32",
    "fp16": "fp16",
    "bf16": "bf16",
    "int8": "int8+EF",
    "fp8": "fp8+EF",
}
COLUMNS = (
    "row", "backend", "codec", "reached", "steps to target", "s to target", "final accuracy",
    "ms/step", "time vs float32 ringcomm", "time vs gloo",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    name: str
    api: str  # horovod or ddp
    backend: str  # ringcomm or gloo
    compression: str = "none"
    powersgd: int = 0  # PowerSGD's matrix rank; 0: none

    @property
    def codec(self) -> str:
        return f"PowerSGD r{self.powersgd}" if self.powersgd else _CODEC_NAMES[self.compression]

    def train_arguments(self) -> list:
        argv = ["--api", self.api, "--compression", self.compression]
        if self.api == "ddp":
            argv += ["--backend", self.backend]
        if self.powersgd:
            argv += ["--powersgd", str(self.powersgd)]
        return argv


GLOO_BASELINE = Row("DDP float32 (gloo)", "ddp", "gloo")


def rows_for(apis, codecs, powersgd: int) -> list:
    """The rows to run: each API's codecs on ringcomm, PowerSGD on both backends, then gloo's
    float32."""
    rows = []
    for api in apis:
        label = "hvd" if api == "horovod" else "DDP"
        rows += [Row(f"{label} {_CODEC_NAMES[c]}", api, "ringcomm", c) for c in codecs]
    if powersgd:
        rows.append(Row(f"DDP PowerSGD r{powersgd}", "ddp", "ringcomm", powersgd=powersgd))
        rows.append(Row(f"DDP PowerSGD r{powersgd} (gloo)", "ddp", "gloo", powersgd=powersgd))
    return rows + [GLOO_BASELINE]


def start_job(argv: list, nranks: int, hosts: Optional[netns.Hosts], log) -> list:
    """``python argv`` as ranks 0..nranks-1 meeting through env:// at rank 0: on this machine
    over loopback, or spread over ``hosts`` in blocks of consecutive ranks (cluster.spread), as
    ringcomm-bench --hosts places them. Their output goes to ``log``."""
    layout = cluster.spread(nranks, len(hosts)) if hosts else [0] * nranks
    env = dict(
        clean_environment(),
        OMP_NUM_THREADS="1",
        WORLD_SIZE=str(nranks),
        MASTER_ADDR=hosts.address(0) if hosts else "127.0.0.1",
        MASTER_PORT=str(free_port()),
        RINGCOMM_SECRET=secrets.token_hex(16),
        GLOO_SOCKET_IFNAME=netns.LINK_NAME if hosts else "lo",
    )
    procs = []
    for rank, host in enumerate(layout):
        local = [r for r, h in enumerate(layout) if h == host]
        command = [sys.executable, *argv]
        rank_env = dict(
            env,
            RANK=str(rank),
            LOCAL_RANK=str(local.index(rank)),
            LOCAL_WORLD_SIZE=str(len(local)),
        )
        command = hosts.command(host, command) if hosts else command
        procs.append(start_rank(command, rank_env, stdout=log, stderr=log))
    return procs


def run_once(row: Row, args, hosts, workdir: Path, index: int) -> dict:
    """One run of ``row``: train.py's results (with its curve), or {"error": ...}."""
    out = workdir / f"run{index}.json"
    argv = [str(TRAIN), "--model", args.model, "--epochs", str(args.epochs), "--lr", str(args.lr),
            "--batch-size", str(args.batch_size), "--target-accuracy", str(args.target_accuracy),
            "--eval-every", str(args.eval_every), "--device", "cpu", "--json", str(out),
            *row.train_arguments()]  # fmt: skip
    log_path = workdir / f"run{index}.log"
    with open(log_path, "w") as log:
        procs = start_job(argv, args.np, hosts, log)
        try:
            status = wait_all(procs, time.monotonic() + args.timeout)
        finally:  # interrupted: no rank outlives the run (nor keeps a namespace busy)
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    tail = log_path.read_text()[-2000:]
    if not out.exists():
        return {"error": f"exit status {status}, no results", "tail": tail}
    results = json.loads(out.read_text())
    # gloo's ranks may abort at exit after training is done (tests/test_train_example.py): the
    # results stand; a status still says so.
    results["exit_status"] = status
    if not results["identical"]:
        results["error"] = "the ranks ended with different parameters"
    return results


def _median(values: list) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: list) -> dict:
    """A row's medians over its successful runs; time and steps over the runs that reached the
    target."""
    good = [r for r in runs if "error" not in r]
    reached = [r for r in good if r["target_reached"]]
    return {
        "runs": len(runs),
        "failed": len(runs) - len(good),
        "reached": len(reached),
        "steps_to_target": _median([r["steps_to_target"] for r in reached]),
        "seconds_to_target": _median([r["seconds_to_target"] for r in reached]),
        "final_accuracy": _median([r["final_accuracy"] for r in good]),
        "ms_per_step": _median([r["ms_per_step"] for r in good]),
    }


def _reference(row: Row, summaries: dict) -> Optional[float]:
    """Float32 on ringcomm through the row's own API (the Horovod row's for the Horovod API,
    DDP's for DDP on either backend), else through the other."""
    order = ("horovod", "ddp") if row.api == "horovod" else ("ddp", "horovod")
    for api in order:
        for other, summary in summaries.items():
            if other.api == api and other.backend == "ringcomm" and other.codec == "float32":
                return summary["seconds_to_target"]
    return None


def _ratio(value: Optional[float], reference: Optional[float]) -> str:
    return format_ratio(value / reference) if value is not None and reference else "-"


def _number(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table_rows(summaries: dict) -> list:
    """Cells in COLUMNS' order, one list a row."""
    gloo = summaries.get(GLOO_BASELINE, {}).get("seconds_to_target")
    cells = []
    for row, s in summaries.items():
        reached = f"{s['reached']}/{s['runs']}" + (
            f" ({s['failed']} failed)" if s["failed"] else ""
        )
        seconds = s["seconds_to_target"]
        cells.append([
            row.name, row.backend, row.codec, reached,
            _number(s["steps_to_target"], ".0f"), _number(seconds, ".2f"),
            _number(s["final_accuracy"], ".3f"), _number(s["ms_per_step"], ".1f"),
            _ratio(seconds, _reference(row, summaries)), _ratio(seconds, gloo),
        ])  # fmt: skip
    return cells


def draw(path: str, rows: list, runs: dict, target: float, title: str) -> None:
    """Test accuracy against training seconds, a line per run, one colour per row."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 6))
    colours = plt.get_cmap("tab20").colors
    for index, row in enumerate(rows):
        good = [r for r in runs[row] if "error" not in r and r["curve"]]
        for number, result in enumerate(good):
            seconds = [point[0] for point in result["curve"]]
            accuracy = [point[2] for point in result["curve"]]
            axes.plot(
                seconds,
                accuracy,
                color=colours[index % len(colours)],
                linewidth=1.2,
                alpha=0.9 if number == 0 else 0.5,
                label=row.name if number == 0 else None,  # one legend entry a row
            )
    axes.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:g}")
    axes.set_xlabel("training time (s; evaluation excluded)")
    axes.set_ylabel("test accuracy")
    axes.set_ylim(max(0.0, target - 0.3), 1.0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    # A long command line wraps rather than running off the figure.
    heading = "\n".join(textwrap.fill(line, 120) for line in title.splitlines())
    axes.set_title(heading, fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def describe_run(result: dict) -> str:
    if "error" in result:
        return f"  failed: {result['error']}\n{result.get('tail', '')}"
    reached = (
        f"{result['seconds_to_target']:.2f} s, step {result['steps_to_target']}"
        if result["target_reached"]
        else "target not reached"
    )
    return (
        f"  {reached}; final accuracy {result['final_accuracy']:.3f}, "
        f"{result['ms_per_step']:.1f} ms/step"
    )


def _link_rate(text: str) -> str:
    """--link-rate: tc's units (cluster.link_rate checks them), or none."""
    return text if text == "none" else cluster.link_rate(text)


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-np", "--np", type=int, default=4, help="ranks (4)")
    parser.add_argument(
        "--hosts", type=int, default=2, help="namespace hosts to spread the ranks over (root; "
        "1: all on this machine, over loopback) (2)"
    )  # fmt: skip
    parser.add_argument(
        "--link-rate", type=_link_rate, default="1gbit",
        help="each host's link, each way, in tc's units (1gbit); 'none': unshaped",
    )  # fmt: skip
    parser.add_argument("--model", choices=("digits", "wide"), default="digits")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch (64)")
    parser.add_argument("--target-accuracy", type=float, default=0.97)
    parser.add_argument("--eval-every", type=int, default=5, help="steps between evaluations (5)")
    parser.add_argument(
        "--apis", default="horovod,ddp", help="which ringcomm APIs carry the codecs' rows (both)"
    )
    parser.add_argument(
        "--codecs", default=",".join(CODECS), help=f"the codecs' rows ({','.join(CODECS)})"
    )
    parser.add_argument(
        "--powersgd-rank", type=int, default=4, help="PowerSGD's matrix rank (4); 0: no PowerSGD"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs of every row, in turns (1)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take (900)")
    parser.add_argument("--json", help="write every run's results and curve here")
    parser.add_argument("--plot", help="draw accuracy against training time here (matplotlib)")
    args = parser.parse_args(argv)
    args.apis = args.apis.split(",")
    args.codecs = args.codecs.split(",")
    if not set(args.apis) <= {"horovod", "ddp"}:
        parser.error(f"--apis: horovod, ddp or both; got {','.join(args.apis)}")
    if not set(args.codecs) <= set(_CODEC_NAMES):
        parser.error(f"--codecs: some of {', '.join(_CODEC_NAMES)}; got {','.join(args.codecs)}")
    if args.hosts > 1 and args.np < args.hosts:
        parser.error(f"-np {args.np} cannot spread over --hosts {args.hosts}")
    if args.plot and plot.available():
        parser.error(plot.available())
    return args


def _interrupt(number, frame):
    raise KeyboardInterrupt  # so that the namespaces are deleted and the table still printed


def run_rows(rows: list, runs: dict, args, hosts, workdir: Path, progress) -> None:
    """Every row --repeats times into ``runs``, the rows taking turns: round r starts with row r
    (mod the rows), so that no row always runs first, or after the same one."""
    index = 0
    for repeat in range(args.repeats):
        turn = repeat % len(rows)
        for row in rows[turn:] + rows[:turn]:
            progress.print(f"[{repeat + 1}/{args.repeats}] {row.name} ...")
            result = run_once(row, args, hosts, workdir, index)
            index += 1
            runs[row].append(result)
            progress.print(describe_run(result))


def main(argv=None) -> int:
    args = parse_arguments(argv)
    # SIGTERM (timeout, kill) as Ctrl-C: the namespaces are deleted, the table still printed.
    signal.signal(signal.SIGTERM, _interrupt)
    rate = None if args.link_rate == "none" or args.hosts < 2 else args.link_rate
    shown = " ".join(sys.argv[1:]) if argv is None else " ".join(argv)
    command = f"python bench/time_to_accuracy.py {shown}".strip()
    out, progress = report.console(), report.console(stderr=True)
    rows = rows_for(args.apis, args.codecs, args.powersgd_rank)
    runs: dict = {row: [] for row in rows}
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        hosts = None
        if args.hosts > 1:
            try:
                hosts = stack.enter_context(netns.hosts(args.hosts, SUBNET, rate=rate, tag=TAG))
            except netns.NamespacesUnavailableError as error:
                print(f"time_to_accuracy.py: --hosts {args.hosts}: {error}", file=sys.stderr)
                return 2
        try:
            run_rows(rows, runs, args, hosts, workdir, progress)
            interrupted = False
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what was done still gets its table
            interrupted = True
    summaries = {row: summarize(runs[row]) for row in rows}
    where = (
        f"{args.np} ranks on {args.hosts} namespace hosts, {rate or 'unshaped'} links"
        if args.hosts > 1
        else f"{args.np} ranks on this machine (loopback)"
    )
    out.print(f"# {command}")
    out.print(
        f"# {where}; {args.model} model, {args.epochs} epochs, lr {args.lr}, global batch "
        f"{args.batch_size}, target test accuracy {args.target_accuracy:g}; medians of "
        f"{args.repeats} run(s) a row; seconds: training only, evaluation excluded"
    )
    table = markdown_table(COLUMNS)
    for cells in table_rows(summaries):
        table.add_row(*cells)
    report.print_table(out, table)
    if args.json:
        document = {
            "command": command,
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
            "rows": [
                {**asdict(row), "codec": row.codec, "summary": summaries[row], "runs": runs[row]}
                for row in rows
            ],
        }
        Path(args.json).write_text(json.dumps(document, indent=1))
    if args.plot:
        draw(args.plot, rows, runs, args.target_accuracy, f"{command}\n{where}")
    failed = sum(s["failed"] for s in summaries.values())
    if interrupted:
        out.print("# interrupted: the table holds the runs done before")
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
