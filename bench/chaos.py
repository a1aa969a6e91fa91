"""Chaos: many jobs, each losing 1-3 processes at random moments, that must heal (issue 48).

    python bench/chaos.py --jobs 100 --seed 1
    python bench/chaos.py --jobs 50 --seed 2 --hosts 2 --link-rate 1gbit   # root, OpenSSH

Each job runs bench/chaos_worker.py under ``ringcomm-run --replace`` on this machine: 4-8 ranks
train through the core API, shrink after every loss, and admit the launcher's replacements with
grow(), giving them the state by broadcast. Its deaths (SIGKILL) are drawn from the seed: the
first in a training step (rank 0's sometimes), the others in a step, during the survivors'
shrink, during a grow, during the state's transfer to a newcomer, or a replacement right after
it joined. A job passes when it ends within its deadline (no hang) and every process that ended
reports the same weights at the job's first size (healed), or a side reports that it lost its
quorum (MembershipError). Prints a line a job and a summary table (bench/RESULTS.md).

With --hosts, the ranks run on namespace hosts, spread evenly (rank r on host r * hosts // ranks).
--start direct (the default) starts each rank in its namespace from here (env://, rank 0 serving
the store) and plays --replace's part itself: a lost process is started again on its host.
--start ssh runs ``ringcomm-run -H ... --replace`` in host 0, which starts the ranks of the
other hosts over ssh (an OpenSSH server in each, tests/sshd.py) and their replacements, as it
would on a cluster (host 0's ranks are its own). A job takes about 0.9 s longer that way (ssh
and the launcher's own start: median 2.9 s against 2.0 s, 20 jobs of --seed 3 at 1gbit, every
one healed either way).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

WORKER = Path(__file__).with_name("chaos_worker.py")
TESTS = Path(__file__).resolve().parent.parent / "tests"  # sshd.py, for --start ssh
LATER_MOMENTS = ("shrink", "grow", "transfer", "joined")


def plan(rng: random.Random) -> tuple[int, list[str]]:
    """(ranks, death tokens) of one job."""
    ranks = rng.choice([4, 5, 6, 8])
    kills = rng.randint(1, 3)
    first = f"step{rng.randint(2, 8)}" + ("-rank0" if rng.random() < 0.3 else "")
    tokens = [first]
    for _ in range(kills - 1):
        if rng.random() < 0.3:
            tokens.append(f"step{rng.randint(3, 14)}" + ("-rank0" if rng.random() < 0.3 else ""))
        else:
            tokens.append(rng.choice(LATER_MOMENTS))
    return ranks, tokens


def spread(ranks: int, hosts: int) -> list[int]:
    """How many of ``ranks`` each of ``hosts`` runs: rank r on host r * hosts // ranks."""
    return [sum(1 for r in range(ranks) if r * hosts // ranks == h) for h in range(hosts)]


def run_job(ranks: int, tokens: list[str], deadline: float, over_ssh=None) -> dict:
    """Runs one job under ringcomm-run --replace; what it gave. ``over_ssh``: (namespace hosts,
    their ssh client's configuration file) to spread the ranks on, the launcher in host 0."""
    with tempfile.TemporaryDirectory(prefix="ringcomm-chaos-") as chaos_dir:
        for n, token in enumerate(tokens):
            Path(chaos_dir, f"{n}-{token}").touch()
        env = dict(os.environ, CHAOS_DIR=chaos_dir, RINGCOMM_TIMEOUT="30")
        started = time.monotonic()
        command = [sys.executable, "-m", "ringcomm.launch", "--replace", str(len(tokens) + 2),
                   "-np", str(ranks), str(WORKER)]  # fmt: skip
        if over_ssh is not None:
            hosts, client = over_ssh
            slots = ",".join(
                f"{hosts.address(h)}:{n}" for h, n in enumerate(spread(ranks, len(hosts))) if n
            )
            command[3:3] = ["--ssh-command", f"ssh -F {client}", "-H", slots]
            command = hosts.command(0, command)
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=deadline)  # fmt: skip
            hung, out, err = False, done.stdout, done.stderr
        except subprocess.TimeoutExpired as expired:
            hung = True
            out = (
                (expired.stdout or b"").decode()
                if isinstance(expired.stdout, bytes)
                else (expired.stdout or "")
            )
            err = (
                (expired.stderr or b"").decode()
                if isinstance(expired.stderr, bytes)
                else (expired.stderr or "")
            )
        seconds = time.monotonic() - started
        claimed = sum(1 for name in os.listdir(chaos_dir) if name.startswith("claimed-"))
    results = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT")]
    return {"ranks": ranks, "tokens": tokens, "claimed": claimed, "hung": hung,
            "seconds": seconds, "results": results, "stderr": err}  # fmt: skip


def run_job_on_hosts(hosts, ranks: int, tokens: list[str], deadline: float) -> dict:
    """Runs one job on namespace hosts, the ranks spread evenly, each started on its own
    (env://, rank 0 serving the store: it dies with rank 0), playing ringcomm-run --replace's
    part: a process killed is started again on its host, to join. The members keep their
    addresses in RINGCOMM_DOOR_DIR, which every host sees."""
    from ringcomm._ports import free_port

    with tempfile.TemporaryDirectory(prefix="ringcomm-chaos-") as chaos_dir:
        for n, token in enumerate(tokens):
            Path(chaos_dir, f"{n}-{token}").touch()
        base = dict(
            os.environ, CHAOS_DIR=chaos_dir, RINGCOMM_TIMEOUT="30",
            RINGCOMM_SECRET=os.urandom(16).hex(), RINGCOMM_DOOR_DIR=str(Path(chaos_dir, "door")),
            MASTER_ADDR=hosts.address(0), MASTER_PORT=str(free_port()), WORLD_SIZE=str(ranks),
        )  # fmt: skip
        outputs = []

        def start(host: int, env: dict):
            out = open(Path(chaos_dir, f"out-{len(outputs)}"), "w+")
            outputs.append(out)
            return host, subprocess.Popen(
                hosts.command(host, [sys.executable, str(WORKER)]), env=env, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

        started = time.monotonic()
        procs = [start(r * len(hosts) // ranks, dict(base, RANK=str(r))) for r in range(ranks)]
        replaced, left = set(), len(tokens) + 2
        while time.monotonic() - started < deadline:
            running = [p for _, p in procs if p.poll() is None]
            for index, (host, proc) in enumerate(list(procs)):
                # As ringcomm-run --replace: any process that failed (killed, or raised).
                if proc.returncode not in (None, 0) and index not in replaced and left > 0:
                    replaced.add(index)
                    left -= 1
                    procs.append(start(host, dict(base, RINGCOMM_JOIN="1")))
            if not running:
                break
            time.sleep(0.01)
        hung = any(p.poll() is None for _, p in procs)
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        text = ""
        for out in outputs:
            out.seek(0)
            text += out.read()
            out.close()
        claimed = sum(1 for name in os.listdir(chaos_dir) if name.startswith("claimed-"))
    results = [json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT")]
    return {"ranks": ranks, "tokens": tokens, "claimed": claimed, "hung": hung,
            "seconds": time.monotonic() - started, "results": results, "stderr": text}  # fmt: skip


def judge(job: dict) -> str:
    """healed, quorum lost, or what went wrong."""
    if job["hung"]:
        return "hung"
    results = job["results"]
    if any("quorum_lost" in r for r in results):
        return "quorum lost"
    if not results:
        return "no survivor reported"
    if len({r["digest"] for r in results}) != 1 or len({r["step"] for r in results}) != 1:
        return "divergent"
    if {r["size"] for r in results} != {job["ranks"]} or len(results) != job["ranks"]:
        return "not healed"
    if sorted(r["rank"] for r in results) != list(range(job["ranks"])):
        return "ranks wrong"
    return "healed"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--deadline", type=float, default=150.0, help="seconds a job may take")
    parser.add_argument("--json", help="write every job's outcome here")
    parser.add_argument("--hosts", type=int, default=1, help="namespace hosts (root) when > 1")
    parser.add_argument("--link-rate", help="their links' rate, e.g. 1gbit")
    parser.add_argument(
        "--start",
        choices=("direct", "ssh"),
        default="direct",
        help="with --hosts: each rank started in its namespace from here, replaced by this "
        "script (default), or ringcomm-run -H --replace in host 0, over ssh to the others",
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        hosts, client = None, None
        if args.hosts > 1:
            from ringcomm.bench import netns

            hosts = stack.enter_context(
                netns.hosts(args.hosts, "10.231.86", rate=args.link_rate, tag="rx")
            )
            if args.start == "ssh":
                sys.path.insert(0, str(TESTS))
                import sshd

                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sshd-")))
                client = stack.enter_context(
                    sshd.servers(hosts, range(1, args.hosts), workdir)
                ).client
        return run_jobs(args, hosts, client)


def run_jobs(args, hosts, client=None) -> int:
    rng = random.Random(args.seed)
    verdicts: Counter = Counter()
    jobs = []
    for number in range(args.jobs):
        ranks, tokens = plan(rng)
        if hosts is None:
            job = run_job(ranks, tokens, args.deadline)
        elif client is not None:
            job = run_job(ranks, tokens, args.deadline, over_ssh=(hosts, client))
        else:
            job = run_job_on_hosts(hosts, ranks, tokens, args.deadline)
        verdict = judge(job)
        verdicts[verdict] += 1
        job["verdict"] = verdict
        jobs.append({k: v for k, v in job.items() if k != "stderr"})
        print(f"job {number:3d}: {ranks} ranks, deaths {' '.join(tokens)} ({job['claimed']} "
              f"struck): {verdict} in {job['seconds']:.1f} s", flush=True)  # fmt: skip
        if verdict not in ("healed", "quorum lost"):
            print(job["stderr"][-3000:], flush=True)
    struck = Counter(j["claimed"] for j in jobs)
    print("\n| jobs | healed at full size | stopped on a lost quorum | hung | divergent | other |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    other = args.jobs - sum(verdicts[v] for v in ("healed", "quorum lost", "hung", "divergent"))
    print(f"| {args.jobs} | {verdicts['healed']} | {verdicts['quorum lost']} | {verdicts['hung']} "
          f"| {verdicts['divergent']} | {other} |")  # fmt: skip
    moments = Counter(
        ("step, rank 0" if "rank0" in t else "step") if t.startswith("step") else t
        for j in jobs
        for t in j["tokens"]
    )
    print(f"\ndeaths that struck, per job: {dict(sorted(struck.items()))}; moments drawn: "
          f"{dict(moments)}")  # fmt: skip
    seconds = sorted(j["seconds"] for j in jobs)
    print(f"job wall time: median {seconds[len(seconds) // 2]:.1f} s, longest {seconds[-1]:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(jobs, indent=1))
    return 0 if verdicts["healed"] + verdicts["quorum lost"] == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
