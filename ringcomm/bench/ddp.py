"""DDP training benchmark: DDP's step time on each backend, and how much of its communication
backward hides.

    python -m ringcomm.bench.ddp --np 2,4 --backends gloo,ringcomm

For each rank count and backend, in one invocation, one job of ranks (ddp_worker.py) trains a
4.2M-parameter MLP on synthetic data with torch DistributedDataParallel and measures, on the same
ranks and so under the same CPU contention:
    step      median DDP step: forward, backward (with DDP's bucketed all-reduce), optimizer step
    compute   the same step without communication (a local replica of the model, no DDP)
    comm      all-reduce of DDP's gradient buckets through the backend, with no compute
from which the parent derives
    hidden    (compute + comm - step) / comm, clipped to [0, 1]: the share of the communication
              that overlapped with backward (0: none of it, 1: all of it)
    gloo/x    gloo's step / this backend's step: above 1, this backend trains faster than gloo
Each rank computes on one thread, so with more ranks than cores they share cores, as they would
in a run of that many ranks. At the end every rank's parameters are hashed and the hashes
gathered (through a gloo group of the workers' own, whatever the backend): DDP must leave every
replica bit-identical.

The "ringcomm" backend is registered with torch.distributed by `import ringcomm`; the workers
import it only for a backend torch does not already know, so gloo runs do not need it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from ringcomm._ranks import start_rank
from ringcomm.bench import machine, report
from ringcomm.bench.arguments import command_line, rank_counts
from ringcomm.bench.cli import at_least
from ringcomm.bench.launchers import KILL_SLACK, torch_environment_on_this_host, wait_all
from ringcomm.bench.table import format_ratio, markdown_table

REFERENCE = "gloo"  # the backend the others are compared with
# The target: at this many ranks, a backend's DDP step at least this much faster than
# gloo's (gloo step / backend step).
_TARGET_RANKS, _TARGET_SPEEDUP = 4, 1.3
# Jobs run one after another: when their compute-only steps differ by more than this share, the
# background load changed between them (the machine is shared) and their step ratio says little.
_LOAD_MISMATCH = 0.15
_MIB = 1 << 20
COLUMNS = (
    "ranks",
    "backend",
    "step(ms)",
    "compute(ms)",
    "comm(ms)",
    "hidden",
    "gloo/backend",
    "buckets(MiB)",
    "params equal",
)


def hidden_fraction(step: float, compute: float, comm: float) -> tuple[Optional[float], float]:
    """(clipped to [0, 1], raw) share of the communication hidden behind compute.

    A step that took compute + comm hid nothing (0); one that took only compute hid it all (1).
    The raw value leaves [0, 1] when the phases disturb each other: above 1 when ranks that wait
    for the network give their cores to the others (oversubscribed), below 0 when DDP costs more
    than its all-reduces (bucket copies, or a backend slower while computation runs beside it)."""
    if comm <= 0:
        return None, 0.0
    raw = (compute + comm - step) / comm
    return min(1.0, max(0.0, raw)), raw


def _environment(nranks: int) -> dict:
    """torch.distributed's env:// rendezvous for ``nranks`` ranks on this host (as run_gloo)."""
    # Set before torch loads: no OpenMP pool per rank beyond one thread.
    return dict(torch_environment_on_this_host(nranks), OMP_NUM_THREADS="1")


def _worker_command(backend: str, args, out: Path) -> list[str]:
    command = [sys.executable, "-m", "ringcomm.bench.ddp_worker", "--backend", backend]
    for option in ("batch_size", "hidden", "layers", "bucket_cap_mb", "steps", "warmup", "device"):
        value = getattr(args, option)
        if value is not None:
            command += [f"--{option.replace('_', '-')}", str(value)]
    return command + ["--timeout", str(args.timeout), "--out", str(out)]


def _failure(out: Path, status) -> str:
    """The lowest rank's own message, or the job's exit status."""
    found = []
    for path in out.parent.glob(f"{out.name}.rank*.error"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if found:
        first = min(found, key=lambda e: e["rank"])
        return f"rank {first['rank']}: {first['error']}"
    return "timed out" if status == "timeout" else f"exit status {status}"


def run(backend: str, nranks: int, args, workdir: Path) -> dict:
    """One job: ``nranks`` ranks of ddp_worker on ``backend``; rank 0's report, or the error."""
    out = workdir / f"{backend}-{nranks}.json"
    command = _worker_command(backend, args, out)
    base = _environment(nranks)
    children = [
        start_rank(command, dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(nranks)
    ]
    status = wait_all(children, time.monotonic() + args.timeout + KILL_SLACK)
    if status == 0:
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError) as error:
            return {"backend": backend, "ranks": nranks, "error": f"no report ({error})"}
    return {"backend": backend, "ranks": nranks, "error": _failure(out, status)}


def derive(results: list[dict]) -> None:
    """Adds hidden, hidden_raw and the step ratio to gloo (vs_gloo) to each successful result."""
    reference = {
        r["ranks"]: r["step_ms"] for r in results if r["backend"] == REFERENCE and "error" not in r
    }
    for r in results:
        if "error" in r:
            continue
        r["hidden"], r["hidden_raw"] = hidden_fraction(r["step_ms"], r["compute_ms"], r["comm_ms"])
        gloo = reference.get(r["ranks"])
        r["vs_gloo"] = gloo / r["step_ms"] if gloo else None


def ok(result: dict) -> bool:
    return (
        "error" not in result and result["parameters_identical"] and result["allreduce_wrong"] == 0
    )


def row_cells(result: dict) -> list[str]:
    """One result -> the cells of COLUMNS."""
    head = [str(result["ranks"]), result["backend"]]
    if "error" in result:
        return head + ["failed"] + ["-"] * (len(COLUMNS) - 3)
    hidden = result["hidden"]
    equal = "yes" if result["parameters_identical"] else "NO"
    if result["allreduce_wrong"]:
        equal += f" ({result['allreduce_wrong']} wrong sums)"
    return head + [
        f"{result['step_ms']:.1f}",
        f"{result['compute_ms']:.1f}",
        f"{result['comm_ms']:.1f}",
        "-" if hidden is None else f"{hidden:.2f}",
        format_ratio(result["vs_gloo"]),
        "+".join(f"{b / _MIB:.1f}" for b in result["bucket_bytes"]),
        equal,
    ]


def target_line(results: list[dict]) -> Optional[str]:
    ratios = [
        r for r in results if r["ranks"] == _TARGET_RANKS and r["backend"] != REFERENCE and ok(r)
    ]
    parts = []
    for r in ratios:
        if r.get("vs_gloo") is None:
            continue
        verdict = "met" if r["vs_gloo"] >= _TARGET_SPEEDUP else "missed"
        parts.append(f"{r['backend']} {r['vs_gloo']:.2f}x: {verdict}")
    if not parts:
        return None
    return (
        f"# target: step >= {_TARGET_SPEEDUP}x faster than {REFERENCE} at {_TARGET_RANKS} ranks; "
        + "; ".join(parts)
    )


def load_warnings(results: list[dict]) -> list[str]:
    """A line for each job whose compute-only step differs from gloo's at its rank count.

    Compute-only steps do the same work in every job. If their wall time differs but their CPU
    time does not, the background load changed between the jobs; if their CPU time differs too,
    the backend's own threads used CPU while it had nothing to communicate."""
    reference = {r["ranks"]: r for r in results if r["backend"] == REFERENCE and "error" not in r}
    lines = []
    for r in results:
        gloo = reference.get(r["ranks"])
        if "error" in r or gloo is None or r is gloo:
            continue
        wall = r["compute_ms"] / gloo["compute_ms"] - 1
        cpu = r["cpu_ms"]["compute"] / gloo["cpu_ms"]["compute"] - 1
        if abs(cpu) > _LOAD_MISMATCH:
            lines.append(
                f"warning: {r['backend']}, {r['ranks']} ranks: compute-only steps took {cpu:+.0%} "
                f"CPU time against {REFERENCE}'s: the backend's threads use CPU outside its "
                "collectives, which slows the computation beside them"
            )
        elif abs(wall) > _LOAD_MISMATCH:
            lines.append(
                f"warning: {r['backend']}, {r['ranks']} ranks: compute-only steps took {wall:+.0%} "
                f"wall time against {REFERENCE}'s for the same CPU time: the background load "
                f"changed between the jobs, so {REFERENCE}/backend mixes load with communication"
            )
    return lines


def _header(command: str, info: dict, args, first: Optional[dict]) -> list[str]:
    lines = [
        f"# {command}",
        f"# machine: {info['cpu']}, {info['cores']} cores; python {info['python']}; "
        f"torch {info['versions'].get('torch', '?')}",
    ]
    if first is not None:
        buckets = (
            "DDP's default (25 MiB, first bucket 1 MiB)"
            if args.bucket_cap_mb is None
            else f"cap {args.bucket_cap_mb:g} MiB"
        )
        lines.append(
            f"# model: {first['model']}, {first['parameters'] / 1e6:.1f}M parameters "
            f"({first['gradient_bytes'] / 1e6:.1f} MB float32 gradients); batch "
            f"{first['batch_size']} per rank; {first['threads_per_rank']} thread per rank; "
            f"buckets: {buckets}; on {first['device']}"
        )
        lines.append(
            f"# median over {first['timed_steps']} steps (after {args.warmup} warmup) of the "
            "slowest rank; hidden = (compute + comm - step) / comm in [0, 1]; "
            f"gloo/backend > 1: faster than gloo"
        )
    return lines


def _names(text: str) -> list[str]:
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise argparse.ArgumentTypeError("no backend given")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = command_line("python -m ringcomm.bench.ddp", __doc__)
    parser.add_argument("--np", type=rank_counts(1), default=[2, 4], help="rank counts (2,4)")
    parser.add_argument(
        "--backends",
        type=_names,
        default=["gloo", "ringcomm"],
        help="torch.distributed backends (gloo,ringcomm); ratios are to gloo",
    )
    parser.add_argument(
        "--steps", type=at_least(int, 1), default=20, help="timed steps of each phase (20)"
    )
    parser.add_argument(
        "--warmup", type=at_least(int, 0), default=3, help="untimed steps of each phase (3)"
    )
    parser.add_argument(
        "--batch-size", type=at_least(int, 1), default=64, help="samples per rank (64)"
    )
    model = parser.add_argument_group("model size: an MLP 1024 -> hidden x layers -> 10")
    model.add_argument("--hidden", type=at_least(int, 1), default=1024, help="width (1024)")
    model.add_argument(
        "--layers", type=at_least(int, 1), default=4, help="hidden layers (4: 4.2M params)"
    )
    parser.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="DDP bucket cap; default DDP's own: 25 MiB with a 1 MiB first bucket (passing 25 "
        "gives one bucket for all of this model's gradients)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one job may take (300)"
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model trains: cpu, or cuda (rank r on GPU r %% count)",
    )
    parser.add_argument("--json", metavar="PATH", help="also save every result here")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.device == "cuda":
        from ringcomm.bench import device as bench_device

        problem = bench_device.cuda_problem()
        if problem is not None:
            parser.error(f"--device cuda: {problem}")
    shown = shlex.join(sys.argv[1:] if argv is None else argv)
    command = f"python -m ringcomm.bench.ddp {shown}".strip()
    out, progress = report.console(), report.console(stderr=True)
    info = machine.describe()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for nranks in args.np:
            for backend in args.backends:
                progress.print(f"running DDP on {backend}, {nranks} ranks ...")
                results.append(run(backend, nranks, args, Path(tmp)))
    derive(results)
    first = next((r for r in results if "error" not in r), None)
    for line in _header(command, info, args, first):
        out.print(line)
    table = markdown_table(COLUMNS)
    for result in results:
        table.add_row(*row_cells(result))
    report.print_table(out, table)
    for result in results:
        if "error" in result:
            out.print(f"note: {result['backend']}, {result['ranks']} ranks: {result['error']}")
    for line in load_warnings(results):
        out.print(line)
    target = target_line(results)
    if target:
        out.print(target)
    if args.json:
        document = {"command": command, "machine": info, "options": vars(args), "runs": results}
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
    return 0 if all(ok(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
