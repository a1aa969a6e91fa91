"""Time from kill -9 of a rank to the survivors' next training step: ringcomm's in-place shrink
against a torchrun restart from a checkpoint, in one invocation.

    python bench/recovery.py --np 4,8 --runs 3

For each rank count and run, a victim drawn from the seed kills itself at --kill-step of a DDP
job (bench/recovery_worker.py: a 1.3M-parameter MLP, checkpointed by rank 0 at every step where
it restarts), three ways:

    ringcomm in place   ringcomm-run --keep-survivors; the survivors call
                        dist.shrink_group(ringcomm.c10d.lost_ranks()) and wrap the model again
    ringcomm restart    torchrun --standalone --max-restarts 1 on the ringcomm backend
    gloo restart        the same on gloo, with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (without it
                        torchrun's restarted gloo workers read the failed attempt's addresses)

and reports the seconds from the kill to the next step every survivor completed, and the steps
done again (a restart goes back to the last checkpoint).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = Path(__file__).with_name("recovery_worker.py")
WAYS = (("ringcomm", "inplace"), ("ringcomm", "restart"), ("gloo", "restart"))


def command(way, nranks, victim, kill_step, steps, log_dir) -> list:
    backend, mode = way
    args = [str(WORKER), mode, backend, str(victim), str(kill_step), str(steps), str(log_dir)]
    if mode == "inplace":
        launcher = [sys.executable, "-m", "ringcomm.launch", "--keep-survivors"]
        return [*launcher, "-np", str(nranks), *args]
    torchrun = shutil.which("torchrun") or "torchrun"
    return [torchrun, "--standalone", f"--nproc-per-node={nranks}", "--max-restarts=1", *args]


def measure(way, nranks, victim, kill_step, steps) -> dict:
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if way[0] == "gloo":
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        done = subprocess.run(
            command(way, nranks, victim, kill_step, steps, work),
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        lines = (Path(work) / "steps.txt").read_text().split("\n")
    killed = next(float(line.split()[1]) for line in lines if line.startswith("killed"))
    records = [tuple(line.split()) for line in lines if line and not line.startswith("killed")]
    after = [(int(a), int(r), int(s), float(t)) for a, r, s, t in records if float(t) > killed]
    before = [int(s) for a, r, s, t in records if float(t) <= killed]
    first = {}
    for _, rank, step, at in after:
        first.setdefault(rank, (step, at))
    survivors = nranks - 1 if way[1] == "inplace" else nranks
    ok = done.returncode == 0 and len(first) == survivors
    return {
        "ok": ok,
        "seconds": max(at for _, at in first.values()) - killed if first else float("nan"),
        "redone": max(before, default=0) - min(step for step, _ in first.values()) + 1
        if first
        else 0,
        "status": done.returncode,
        "tail": done.stderr[-1500:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--np", default="4", help="rank counts, comma-separated (4)")
    parser.add_argument("--runs", type=int, default=3, help="kills per rank count and way (3)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--kill-step", type=int, default=10)
    parser.add_argument("--seed", type=int, default=33)
    args = parser.parse_args()
    draw = random.Random(args.seed)
    print(f"# python bench/recovery.py --np {args.np} --runs {args.runs} --seed {args.seed}")
    print("| ranks | way | victims | kill -> next step (s), each run | median | steps redone |")
    print("|---:|---|---|---|---:|---:|")
    medians = {}
    for nranks in (int(n) for n in args.np.split(",")):
        victims = [draw.randrange(nranks) for _ in range(args.runs)]
        for way in WAYS:
            runs = [measure(way, nranks, v, args.kill_step, args.steps) for v in victims]
            for run in runs:
                if not run["ok"]:
                    print(f"# {way} failed (exit {run['status']}):\n{run['tail']}", file=sys.stderr)
            times = [r["seconds"] for r in runs if r["ok"]]
            median = statistics.median(times) if times else float("nan")
            medians[(nranks, way)] = median
            shown = ", ".join(f"{t:.2f}" for t in times) + (
                f" ({len(runs) - len(times)} failed)" if len(times) < len(runs) else ""
            )
            redone = ", ".join(str(r["redone"]) for r in runs if r["ok"])
            name = f"{way[0]} {'in place' if way[1] == 'inplace' else 'restart'}"
            print(f"| {nranks} | {name} | {victims} | {shown} | {median:.2f} | {redone} |")
    for nranks in (int(n) for n in args.np.split(",")):
        inplace = medians[(nranks, WAYS[0])]
        for way in WAYS[1:]:
            print(f"# {nranks} ranks: in place {medians[(nranks, way)] / inplace:.1f}x faster "
                  f"than {way[0]} restart")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
