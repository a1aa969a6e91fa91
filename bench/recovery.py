"""Time from kill -9 of a rank to the survivors' next training step: ringcomm's in-place shrink
against a torchrun restart from a checkpoint, in one invocation.

    python bench/recovery.py --np 4,8 --runs 3

For each rank count and run, a victim drawn from the seed kills itself at --kill-step of a
training job (bench/recovery_worker.py: a 1.3M-parameter MLP, checkpointed by rank 0 at every
step where it restarts), four ways:

    DDP in place        ringcomm-run --keep-survivors; the survivors call
                        dist.shrink_group(ringcomm.c10d.lost_ranks()) and wrap the model again
    Horovod API         the same job through hvd.DistributedOptimizer under hvd.elastic.run,
    in place            which shrinks in place
    ringcomm restart    DDP under torchrun --standalone --max-restarts 1 on the ringcomm backend
    gloo restart        the same on gloo, with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (without it
                        torchrun's restarted gloo workers read the failed attempt's addresses)

and reports the seconds from the kill to the next step every survivor completed, and the steps
done again (a restart goes back to the last checkpoint).

    python bench/recovery.py --hosts 2 --link-rate 1gbit --np 8 --runs 3

The same across namespace hosts (root), the ranks spread evenly: the in-place ranks started on
their own (env://, no launcher to end the survivors), the restarts under one torchrun agent per
host meeting in a c10d rendezvous on the first.

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
from collections import Counter
from pathlib import Path

WORKER = Path(__file__).with_name("recovery_worker.py")
WAYS = (
    ("ringcomm", "inplace"), ("horovod", "inplace"), ("ringcomm", "restart"), ("gloo", "restart")
)  # fmt: skip
NAMES = {
    ("ringcomm", "inplace"): "DDP on ringcomm, in place",
    ("horovod", "inplace"): "Horovod API on ringcomm, in place",
    ("ringcomm", "restart"): "DDP on ringcomm, torchrun restart",
    ("gloo", "restart"): "DDP on gloo, torchrun restart",
}
TORCHRUN_PORT = "29541"  # the c10d rendezvous across namespace hosts, on the first


def torchrun() -> str:
    return shutil.which("torchrun") or "torchrun"


def start(way, nranks, args, env, hosts=None, layout=None) -> list:
    """The job's processes: on this machine one launcher; on namespace hosts (``hosts``) every
    in-place rank on its own (env://, nothing to end the survivors; rank r on host layout[r],
    evenly spread by default) or one torchrun agent per
    host (a c10d rendezvous on the first, which is told it serves the store, and each agent its
    address: torch takes this machine's hostname for both, which no namespace host reaches)."""
    backend, mode = way
    run = lambda argv, host=None, **extra: subprocess.Popen(  # noqa: E731
        argv if host is None else hosts.command(host, argv),
        env=dict(env, **extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if hosts is None and mode == "inplace":
        return [run([sys.executable, "-m", "ringcomm.launch", "--keep-survivors",
                     "-np", str(nranks), *args])]  # fmt: skip
    if hosts is None:
        return [run([torchrun(), "--standalone", f"--nproc-per-node={nranks}",
                     "--max-restarts=1", *args])]  # fmt: skip
    per_host = nranks // len(hosts)
    if mode == "inplace":
        layout = layout or [rank // per_host for rank in range(nranks)]
        return [
            run([sys.executable, *args], host, RANK=str(rank), WORLD_SIZE=str(nranks))
            for rank, host in enumerate(layout)
        ]
    return [
        run([torchrun(), f"--nnodes={len(hosts)}", f"--nproc-per-node={per_host}",
             "--max-restarts=1", "--rdzv-backend=c10d", "--rdzv-id=recovery",
             f"--rdzv-endpoint={hosts.address(0)}:{TORCHRUN_PORT}",
             f"--rdzv-conf=is_host={int(host == 0)}", f"--local-addr={hosts.address(host)}",
             *args], host)
        for host in range(len(hosts))
    ]  # fmt: skip


def measure(way, nranks, victim, kill_step, steps, hosts=None) -> dict:
    backend, mode = way
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, OMP_NUM_THREADS="1", RINGCOMM_SECRET=os.urandom(16).hex())
        if backend == "gloo":
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        if hosts is not None:  # ranks meet at the first host; gloo finds its interface by name
            env.update(GLOO_SOCKET_IFNAME=hosts.links[0])
            if mode == "inplace":
                env.update(MASTER_ADDR=hosts.address(0), MASTER_PORT="29542")
        args = [str(WORKER), mode, backend, str(victim), str(kill_step), str(steps), work]
        procs = start(way, nranks, args, env, hosts)
        deadline = time.monotonic() + 240
        try:
            errors = [p.communicate(timeout=max(1, deadline - time.monotonic()))[1] for p in procs]
        except subprocess.TimeoutExpired:  # a hang: reported as a failed run
            for p in procs:
                p.kill()
            errors = ["(timed out after 240 s) " + p.communicate()[1] for p in procs]
        finally:
            for p in procs:
                p.kill()
        log = Path(work) / "steps.txt"
        lines = log.read_text().split("\n") if log.exists() else []
    statuses = [p.returncode for p in procs]
    tail = "".join(e[-1500:] for e in errors)
    if not any(line.startswith("killed") for line in lines):
        return {"ok": False, "seconds": float("nan"), "status": statuses, "tail": tail}
    killed = next(float(line.split()[1]) for line in lines if line.startswith("killed"))
    records = [line.split() for line in lines if line and line.split()[0].isdigit()]
    # The next step: the first beyond the one the victim died in. A survivor may still log the
    # step before it after the kill (its all-reduce was done); that one owes nothing to recovery.
    after = [
        (int(a), int(r), int(s), float(t))
        for a, r, s, t in records
        if float(t) > killed and int(s) > kill_step
    ]
    # Steps done twice: a rank that logs a step number again went back to a checkpoint.
    redone = max(Counter((r, s) for a, r, s, t in records).values(), default=1) - 1
    first = {}
    for _, rank, step, at in after:
        first.setdefault(rank, (step, at))
    # A step's time before the kill, for scale: the next step after it includes one.
    times = sorted(float(t) for a, r, s, t in records if r == records[0][1] and float(t) <= killed)
    step_time = statistics.median(b - a for a, b in zip(times, times[1:])) if len(times) > 2 else 0
    survivors = nranks - 1 if mode == "inplace" else nranks
    # Every launcher (or, on their own, every survivor) ended well; the victim was killed.
    ended = [code for i, code in enumerate(statuses) if len(procs) == 1 or i != victim]
    ok = all(code == 0 for code in ended) and len(first) == survivors
    return {
        "ok": ok,
        "seconds": max(at for _, at in first.values()) - killed if first else float("nan"),
        "step": step_time,
        "redone": redone,
        "status": statuses,
        "tail": tail,
    }


def measure_cut(hosts, nranks, kill_step, steps, link_timeout) -> dict:
    minority = nranks // 4
    layout = [0] * (nranks - minority) + [1] * minority
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "steps.txt"
        env = dict(
            os.environ, OMP_NUM_THREADS="1", MASTER_ADDR=hosts.address(0), MASTER_PORT="29533",
            RINGCOMM_LINK_TIMEOUT=str(link_timeout),
        )  # fmt: skip
        args = [str(WORKER), "inplace", "ringcomm", "-1", str(kill_step), str(steps), work]
        procs = start(("ringcomm", "inplace"), nranks, args, env, hosts, layout)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                text = log.read_text() if log.exists() else ""
                if ["0", "0", str(kill_step)] in [line.split()[:3] for line in text.split("\n")]:
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
    parser.add_argument(
        "--cut-link", action="store_true", help="cut a host's link instead of killing a rank (root)"
    )
    parser.add_argument(
        "--link-timeout", type=float, default=2.0, help="RINGCOMM_LINK_TIMEOUT with --cut-link (2)"
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="namespace hosts to spread the ranks over (root; 1: this machine)",
    )
    parser.add_argument(
        "--link-rate",
        default=None,
        help="with --hosts: each host's link rate, e.g. 1gbit (unshaped)",
    )
    parser.add_argument(
        "--ways",
        default="all",
        help="which to time, comma-separated: ddp, horovod, torchrun, torchrun-gloo (all)",
    )
    args = parser.parse_args()
    if args.cut_link:
        return main_cut(args)
    if args.hosts > 1:
        from ringcomm.bench import netns

        with netns.hosts(args.hosts, "10.231.84", rate=args.link_rate, tag="rk") as hosts:
            return main_kill(args, hosts)
    return main_kill(args, None)


def main_kill(args, hosts) -> int:
    draw = random.Random(args.seed)
    by_name = dict(zip(("ddp", "horovod", "torchrun", "torchrun-gloo"), WAYS))
    chosen = list(WAYS) if args.ways == "all" else [by_name[w] for w in args.ways.split(",")]
    where = f" --hosts {args.hosts} --link-rate {args.link_rate}" if hosts else ""
    ways = "" if args.ways == "all" else f" --ways {args.ways}"
    print(f"# python bench/recovery.py --np {args.np} --runs {args.runs} --seed {args.seed}"
          f"{where}{ways}")  # fmt: skip
    print("| ranks | way | victims | kill -> next step (s), each run | median | a step before (s) "
          "| steps redone |")  # fmt: skip
    print("|---:|---|---|---|---:|---:|---:|")
    medians = {}
    for nranks in (int(n) for n in args.np.split(",")):
        victims = [draw.randrange(nranks) for _ in range(args.runs)]
        for way in chosen:
            runs = [measure(way, nranks, v, args.kill_step, args.steps, hosts) for v in victims]
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
            step = statistics.median([r["step"] for r in runs if r["ok"]] or [float("nan")])
            print(f"| {nranks} | {NAMES[way]} | {victims} | {shown} | {median:.2f} | {step:.2f} "
                  f"| {redone} |")  # fmt: skip
    for nranks in (int(n) for n in args.np.split(",")):
        for inplace in [w for w in WAYS[:2] if w in chosen]:
            for restart in [w for w in WAYS[2:] if w in chosen]:
                print(f"# {nranks} ranks: {NAMES[inplace]} "
                      f"{medians[(nranks, restart)] / medians[(nranks, inplace)]:.1f}x faster "
                      f"than {NAMES[restart]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
