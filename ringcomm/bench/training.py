"""Synthetic-data training benchmark, like Horovod's pytorch_synthetic_benchmark.

    python -m ringcomm.bench.training --np 1,2,4

For each rank count, in one invocation: ringcomm's DistributedOptimizer (without and with fp16
compression) and torch DDP on gloo train the same 2.7M-parameter CNN on synthetic 3x32x32
images. Reports images/s per rank and in total, and the scaling efficiency from 1 rank:
total(p) / (p x total(1)). Each rank gets max(1, cores // p) compute threads, so one rank may
use every core, as in a single-process run.

``--device cuda`` trains on GPUs (rank r on GPU r % count: all ranks share one GPU where there is
one), and adds DDP on the ringcomm backend to the runs. ``--model resnet50`` trains torchvision's
ResNet-50 on 3x224x224 images instead (Horovod's benchmark model); ``--runs`` picks the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ringcomm._ports import free_port
from ringcomm._ranks import start_rank
from ringcomm.bench import machine
from ringcomm.bench.launchers import ExitStatus, clean_environment, wait_all
from ringcomm.launch import spawn

_RUN_TIMEOUT = 600.0


def _run(impl: str, compression: str, nranks: int, args, workdir: Path) -> dict:
    out = workdir / f"{impl}-{compression}-{nranks}.json"
    threads = max(1, machine.cores() // nranks)
    command = [
        sys.executable,
        "-m",
        "ringcomm.bench.training_worker",
        "--impl",
        impl,
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--compression",
        compression,
        "--threads",
        str(threads),
        "--device",
        args.device,
        "--model",
        args.model,
        "--out",
        str(out),
    ]
    env = clean_environment()
    status: ExitStatus
    if impl == "ringcomm":
        status = spawn(nranks, command, env=env)
    else:
        base = dict(
            env,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            WORLD_SIZE=str(nranks),
            GLOO_SOCKET_IFNAME="lo",
        )
        children = [
            start_rank(command, dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(nranks)
        ]
        status = wait_all(children, time.monotonic() + _RUN_TIMEOUT)
    if status != 0:
        return {"error": f"exit status {status}"}
    return json.loads(out.read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ringcomm.bench.training", description=__doc__)
    parser.add_argument("--np", default="1,2,4", help="rank counts, comma-separated")
    parser.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--model",
        choices=("cnn", "resnet50"),
        default="cnn",
        help="cnn: the 2.7M-parameter CNN (3x32x32 images); resnet50: torchvision's ResNet-50 "
        "(3x224x224), as Horovod's synthetic benchmark (needs torchvision)",
    )
    parser.add_argument(
        "--runs",
        default=None,
        help="which of ringcomm, ringcomm-fp16, gloo, ringcomm-ddp (cuda) to run, "
        "comma-separated (default: all)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda":
        from ringcomm.bench import device as bench_device

        problem = bench_device.cuda_problem()
        if problem is not None:
            parser.error(f"--device cuda: {problem}")
    counts = [int(n) for n in args.np.split(",")]
    every = {
        "ringcomm": ("ringcomm", "none"),
        "ringcomm-fp16": ("ringcomm", "fp16"),
        "gloo": ("gloo", "none"),
        "ringcomm-ddp": ("ringcomm-ddp", "none"),
    }
    if args.device != "cuda":
        del every["ringcomm-ddp"]
    chosen = args.runs.split(",") if args.runs else list(every)
    unknown = [name for name in chosen if name not in every]
    if unknown:
        parser.error(f"--runs: {', '.join(unknown)} not among {', '.join(every)}")
    runs = [every[name] for name in chosen]
    info = machine.describe()
    console = Console(width=160)
    shown = " ".join(sys.argv[1:] if argv is None else argv)
    console.print(f"# python -m ringcomm.bench.training {shown}")
    console.print(
        f"# machine: {info['cpu']}, {info['cores']} cores; torch {machine.version('torch')}"
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for nranks in counts:
            for impl, compression in runs:
                console.print(f"running {impl} ({compression}) on {nranks} ranks ...")
                results[(impl, compression, nranks)] = _run(
                    impl, compression, nranks, args, Path(tmp)
                )
    table = Table(title="images/s (total, per rank) and scaling efficiency from 1 rank")
    for column in (
        "ranks",
        "implementation",
        "images/s",
        "per rank",
        "step (ms)",
        "efficiency",
        "ringcomm / gloo",
    ):
        table.add_column(column, justify="right")
    for nranks in counts:
        gloo = results.get(("gloo", "none", nranks), {}).get("images_per_second")
        for impl, compression in runs:
            row = results[(impl, compression, nranks)]
            name = {"ringcomm": "ringcomm", "gloo": "gloo", "ringcomm-ddp": "ringcomm"}[impl]
            name += "" if compression == "none" else f" {compression}"
            name += " (DistributedOptimizer)" if impl == "ringcomm" else " (DDP)"
            if "error" in row:
                table.add_row(str(nranks), name, row["error"], "", "", "", "")
                continue
            base = results.get((impl, compression, counts[0]), {}).get("images_per_second")
            efficiency = row["images_per_second"] / (nranks / counts[0] * base) if base else None
            ratio = row["images_per_second"] / gloo if gloo and impl != "gloo" else None
            table.add_row(
                str(nranks),
                name,
                f"{row['images_per_second']:.0f}",
                f"{row['images_per_second_per_rank']:.0f}",
                f"{row['step_ms']:.1f}",
                f"{efficiency:.2f}" if efficiency else "",
                f"{ratio:.2f}" if ratio else "",
            )
    console.print(table)
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
