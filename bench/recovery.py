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

    python bench/recovery.py --cut-link --np 4,8 --runs 3

A lost host instead (root: network namespaces): the ranks run on two namespace hosts, a quarter
of them on the second (3+1, 6+2), ringcomm in place only, and the second host's link goes down
at --kill-step. Reports the seconds from the cut to the next step every rank of the majority
completed (the target: RINGCOMM_LINK_TIMEOUT + 1 s), and whether every rank of the minority
stopped on its lost quorum. A torchrun restart has no counterpart here: without the lost host
its rendezvous waits for it.
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
import time
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


def measure_cut(hosts, nranks, kill_step, steps, link_timeout) -> dict:
    minority = nranks // 4
    layout = [0] * (nranks - minority) + [1] * minority
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "steps.txt"
        env = dict(
            os.environ, OMP_NUM_THREADS="1", MASTER_ADDR=hosts.address(0), MASTER_PORT="29533",
            WORLD_SIZE=str(nranks), RINGCOMM_LINK_TIMEOUT=str(link_timeout),
        )  # fmt: skip
        args = [str(WORKER), "inplace", "ringcomm", "-1", str(kill_step), str(steps), work]
        procs = [
            subprocess.Popen(
                hosts.command(host, [sys.executable, *args]),
                env=dict(env, RANK=str(rank)),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank, host in enumerate(layout)
        ]
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                lines = [line.split() for line in log.read_text().split("\n")] if log.exists() else []
                if ["0", "0", str(kill_step)] in [words[:3] for words in lines]:
                    break
                time.sleep(0.02)
            cut_at = time.time()
            hosts.cut(1)
            errors = [p.communicate(timeout=300)[1] for p in procs]
        finally:
            hosts.mend(1)
            for p in procs:
                p.kill()
        lines = [line.split() for line in log.read_text().split("\n") if line]
    stopped = {int(words[1]) for words in lines if words[0] == "stopped"}
    recovered = {int(words[1]): float(words[2]) for words in lines if words[0] == "recovered"}
    majority = [r for r, h in enumerate(layout) if h == 0]
    ok = sorted(recovered) == majority and stopped == set(range(nranks - minority, nranks))
    return {
        "ok": ok,
        "seconds": max(recovered.values()) - cut_at if recovered else float("nan"),
        "split": f"{nranks - minority}+{minority}",
        "stopped": len(stopped),
        "status": [p.returncode for p in procs],
        "tail": "".join(e[-800:] for e in errors),
    }


def main_cut(args) -> int:
    from ringcomm.bench import netns

    print(f"# python bench/recovery.py --cut-link --np {args.np} --runs {args.runs} "
          f"--link-timeout {args.link_timeout}")  # fmt: skip
    print("| ranks | hosts | cut -> next step of the majority (s), each run | median "
          "| minority stopped (lost quorum) |")  # fmt: skip
    print("|---:|---|---|---:|---|")
    with netns.two_hosts("10.231.83", tag="rv") as hosts:
        for nranks in (int(n) for n in args.np.split(",")):
            runs = [
                measure_cut(hosts, nranks, args.kill_step, args.steps, args.link_timeout)
                for _ in range(args.runs)
            ]
            for run in runs:
                if not run["ok"]:
                    print(f"# failed (exit {run['status']}):\n{run['tail']}", file=sys.stderr)
            times = [r["seconds"] for r in runs if r["ok"]]
            median = statistics.median(times) if times else float("nan")
            shown = ", ".join(f"{t:.2f}" for t in times) + (
                f" ({len(runs) - len(times)} failed)" if len(times) < len(runs) else ""
            )
            stopped = ", ".join(f"{r['stopped']} of {nranks // 4}" for r in runs)
            print(f"| {nranks} | {runs[0]['split']} | {shown} | {median:.2f} | {stopped} |")
    print(f"# target: RINGCOMM_LINK_TIMEOUT + 1 s = {args.link_timeout + 1:.1f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--np", default="4", help="rank counts, comma-separated (4)")
    parser.add_argument("--runs", type=int, default=3, help="kills per rank count and way (3)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--kill-step", type=int, default=10)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--cut-link", action="store_true",
                        help="cut a host's link instead of killing a rank (root)")
    parser.add_argument("--link-timeout", type=float, default=2.0,
                        help="RINGCOMM_LINK_TIMEOUT with --cut-link (2)")
    args = parser.parse_args()
    if args.cut_link:
        return main_cut(args)
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
