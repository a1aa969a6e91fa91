"""Healing in place across hosts: kill -9 of a rank, the survivors' next step, and the job back at
full size once a replacement joins and gets the state from a member (issue 48).

    python bench/heal.py --hosts 2 --link-rate 1gbit --np 8 --runs 3
    python bench/heal.py --hosts 2 --link-rate 1gbit --np 4 --transfer 100M

Needs root (network namespaces). The ranks run on --hosts namespace hosts whose links are
shaped to --link-rate, evenly spread, each started on its own (env://, as no launcher ends the
survivors), DDP on the ringcomm backend (bench/heal_worker.py). A victim drawn from the seed
(rank 0 in the first run) kills itself; the moment it is gone, this script starts a replacement
on its host, as ringcomm-run --replace does, which finds the members in RINGCOMM_DOOR_DIR. Per
run: the seconds from the kill to the survivors' next step; the replacement's process start (to
its first line of user code), imports (torch, ringcomm) and the building of its model and
optimizer apart; and from its join_process_group() to the job at full size with the state on
every rank (join, grow, the state's broadcast).

--transfer 100M times the state's transfer alone: a 100M-parameter model and its SGD momentum
(800 MB) from the members to a newcomer, against the link's rate.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = Path(__file__).with_name("heal_worker.py")


def read_log(work: str) -> list[list[str]]:
    path = Path(work) / "heal.txt"
    return [line.split() for line in path.read_text().split("\n") if line] if path.exists() else []


def run(hosts, nranks: int, mode: str, victim: int, params: str, steps: int) -> dict:
    per_host = nranks // len(hosts)
    layout = [rank // per_host for rank in range(nranks)]
    with tempfile.TemporaryDirectory() as work:
        env = dict(
            os.environ, OMP_NUM_THREADS="1", RINGCOMM_SECRET=os.urandom(16).hex(),
            MASTER_ADDR=hosts.address(0), MASTER_PORT="29551", WORLD_SIZE=str(nranks),
            RINGCOMM_DOOR_DIR=str(Path(work) / "door"), RINGCOMM_TIMEOUT="120",
        )  # fmt: skip
        args = [sys.executable, str(WORKER), mode, str(victim), "2", str(steps), work, params]
        start = lambda host, **extra: subprocess.Popen(  # noqa: E731
            hosts.command(host, args), env=dict(env, **extra), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs = [start(host, RANK=str(rank)) for rank, host in enumerate(layout)]
        launched = None
        if mode == "transfer":
            launched = time.time()
            procs.append(start(layout[-1], RINGCOMM_JOIN="1"))
        deadline = time.monotonic() + 600
        while launched is None and time.monotonic() < deadline:
            if procs[victim].poll() is not None:  # the victim is gone: replace it
                launched = time.time()
                procs.append(start(layout[victim], RINGCOMM_JOIN="1"))
            time.sleep(0.005)
        errors = []
        for p in procs:
            try:
                errors.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[1])
            except subprocess.TimeoutExpired:
                p.kill()
                errors.append("(timed out) " + p.communicate()[1])
        lines = read_log(work)
        if os.environ.get("HEAL_LOG"):
            print("\n".join(" ".join(w) for w in lines))
            print("".join(e for e in errors if e and "STAMP" in e))
    codes = [p.returncode for p in procs]
    ok = all(code == 0 for i, code in enumerate(codes) if mode == "transfer" or i != victim)
    first = {words[0]: float(words[1]) for words in lines if words[0] in (
        "start", "imported", "calling", "joined", "received", "killed")}  # fmt: skip
    # The replacement's "received <t> <bytes>", and the members' "synced <rank> <t> <bytes>".
    synced = [(float(w[-2]), int(w[-1])) for w in lines if w[0] in ("received", "synced")]
    grown = [float(w[2]) for w in lines if w[0] == "grown"]
    result = {"ok": ok and "received" in first, "codes": codes,
              "tail": "".join(e[-1200:] for e in errors if e)}  # fmt: skip
    if not result["ok"]:
        return result
    full = max(t for t, _ in synced)
    result.update(
        process_start=first["start"] - launched,
        imports=first["imported"] - first["start"],
        setup=first["calling"] - first["imported"],
        heal=full - first["calling"],
        join=first["joined"] - first["calling"],
        transfer_bytes=max(b for _, b in synced),
        # From when the last of them has the grown group (the newcomer's join returned, every
        # member's grow did) to the newcomer holding the state.
        transfer_seconds=first["received"] - max(grown + [first["joined"]]),
    )
    if "killed" in first:
        killed = first["killed"]
        steps_after = [
            float(w[2]) for w in lines if w[0].isdigit() and float(w[2]) > killed and int(w[1]) > 2
        ]
        result["next_step"] = min(steps_after) - first["killed"] if steps_after else float("nan")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--link-rate", default="1gbit")
    parser.add_argument("--np", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--transfer", choices=["1.3M", "100M"], help="time the state's transfer")
    args = parser.parse_args(argv)
    from ringcomm.bench import netns

    rng = random.Random(args.seed)
    rate_bits = {"gbit": 1e9, "mbit": 1e6}
    unit = next(u for u in rate_bits if args.link_rate.endswith(u))
    link_bytes = float(args.link_rate[: -len(unit)]) * rate_bits[unit] / 8
    with netns.hosts(args.hosts, "10.231.85", rate=args.link_rate, tag="rh") as hosts:
        results = []
        for number in range(args.runs):
            if args.transfer:
                outcome = run(hosts, args.np, "transfer", -1, args.transfer, args.steps)
            else:
                victim = 0 if number == 0 else rng.randrange(args.np)
                outcome = run(hosts, args.np, "heal", victim, "1.3M", args.steps)
                outcome["victim"] = victim
            results.append(outcome)
            if not outcome["ok"]:
                print(f"run {number}: failed {outcome['codes']}\n{outcome['tail']}", flush=True)
                continue
            rate = outcome["transfer_bytes"] / outcome["transfer_seconds"]
            print(
                f"run {number}: "
                + (f"victim {outcome['victim']}, next step {outcome['next_step']:.2f} s after "
                   "the kill; " if "victim" in outcome else "")
                + f"replacement: process start {outcome['process_start']:.2f} s, imports "
                f"{outcome['imports']:.2f} s, model and optimizer built in "
                f"{outcome['setup']:.2f} s, then from its join_process_group() full size with "
                f"the state in {outcome['heal']:.2f} s (joined in {outcome['join']:.2f} s); "
                f"state {outcome['transfer_bytes'] / 1e6:.0f} MB in "
                f"{outcome['transfer_seconds']:.2f} s = {rate / link_bytes:.2f} of the link",
                flush=True,
            )  # fmt: skip
        good = [r for r in results if r["ok"]]
        if good:
            heal = [r["heal"] for r in good]
            print(f"\n{len(good)}/{len(results)} runs healed; full size {min(heal):.2f}-"
                  f"{max(heal):.2f} s after the replacement's join_process_group() (median "
                  f"{statistics.median(heal):.2f})")  # fmt: skip
    return 0 if len(good) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
