"""Healing in place across hosts: kill -9 of a rank, the survivors' next step, and the job back at
full size once a replacement joins and gets the state from a member (issue 48); with --compare
torchft, torchft's rejoin of the same model on the same hosts, in the same invocation.

    python bench/heal.py --hosts 2 --link-rate 1gbit --np 8 --runs 3 --compare torchft
    python bench/heal.py --np 8 --runs 3 --survivors wait,train --compare torchft \
        --torchft-pg gloo,ringcomm
    python bench/heal.py --hosts 2 --link-rate 1gbit --np 4 --transfer 100M

Needs root (network namespaces). The ranks run on --hosts namespace hosts whose links are
shaped to --link-rate, evenly spread, each started on its own (env://, as no launcher ends the
survivors), DDP on the ringcomm backend (bench/heal_worker.py) on bench/heal_model.py's MLP
(1.3M parameters, SGD with momentum). A victim drawn from the seed (rank 0 in the first run)
kills itself at the start of a step; the moment it is gone, this script starts a replacement on
its host, as ringcomm-run --replace does, which finds the members in RINGCOMM_DOOR_DIR. Per run:
the seconds from the kill to the survivors' next step, and where they went for the first
survivor to step (the failed collective, lost_ranks()' agreement, shrink_group(), the state's
broadcast, DDP, the step); the replacement's process start (to its first line of user code),
imports (torch, ringcomm) and the building of its model and optimizer apart; and from its
join_process_group() to the job at full size: joined, the state on every rank (the grow and
the state's broadcast), and the first step at full size done on every rank. Every rank's state
is hashed after every step: the ranks of a step must agree, and all of them, the replacement
included, at the last. --survivors: after their next step the survivors wait for the replacement
(grow_group(expect=1), docs/guides/recovery.md's loop: "wait"), or train on and admit it at the
end of the step it knocks in (grow_group(): "train", as torchft's survivors do).

--compare torchft: torchft's DDP on the same model, optimizer and hosts, a replica group of one
process for each rank (torchft_compare.rejoin: its Manager and Lighthouse, the Lighthouse on the
first host), the same victim; killed the same way, started again at once with the same replica
id, healing from a peer; a quorum needs a majority of the replica groups. Its join is the
Manager's creation (it then heartbeats to the Lighthouse and asks for a quorum at its first
step); its state is on every rank when its load_state_dict ran. --torchft-* set the timings
(torchft_compare.RejoinSettings says why its defaults are the fastest kept).

--transfer 100M times the state's transfer alone: a 100M-parameter model and its SGD momentum
(800 MB) from the members to a newcomer, against the link's rate.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = Path(__file__).with_name("heal_worker.py")
KILL_STEP = 2  # the victim dies at the start of its third step
# The first survivor's path from the kill to its next step (heal_worker.py's events), and what
# each leg is called in the report.
LEGS = [("failed", "a collective fails"), ("agreed", "lost_ranks() agreed"),
        ("shrunk", "shrink_group()"), ("state", "broadcast_state()"), ("ddp", "DDP built"),
        ("step", "the step")]  # fmt: skip


def read_log(work: str) -> list[tuple]:
    """heal_worker.py's lines: (event, who, wall time, the fields after)."""
    path = Path(work) / "heal.txt"
    lines = (
        [line.split() for line in path.read_text().splitlines() if line] if path.exists() else []
    )
    return [(w[0], w[1], float(w[2]), w[3:]) for w in lines]


def run(
    hosts, nranks: int, mode: str, victim: int, params: str, steps: int, deadline_s: float = 600,
    survivors: str = "wait",
) -> dict:  # fmt: skip
    per_host = nranks // len(hosts)
    layout = [rank // per_host for rank in range(nranks)]
    with tempfile.TemporaryDirectory() as work:
        env = dict(
            os.environ, OMP_NUM_THREADS="1", RINGCOMM_SECRET=os.urandom(16).hex(),
            MASTER_ADDR=hosts.address(0), MASTER_PORT="29551", WORLD_SIZE=str(nranks),
            RINGCOMM_DOOR_DIR=str(Path(work) / "door"), RINGCOMM_TIMEOUT="120",
        )  # fmt: skip
        args = [sys.executable, str(WORKER), mode, str(victim), str(KILL_STEP), str(steps), work,
                params, survivors]  # fmt: skip
        start = lambda host, **extra: subprocess.Popen(  # noqa: E731
            hosts.command(host, args), env=dict(env, **extra), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs = [start(host, RANK=str(rank)) for rank, host in enumerate(layout)]
        launched = None
        if mode == "transfer":
            launched = time.time()
            procs.append(start(layout[-1], RINGCOMM_JOIN="1"))
        deadline = time.monotonic() + deadline_s
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
            print("\n".join(f"{e} {who} {t:.3f} {' '.join(rest)}" for e, who, t, rest in lines))
    codes = [p.returncode for p in procs]
    ok = all(code == 0 for i, code in enumerate(codes) if mode == "transfer" or i != victim)
    new = {e: t for e, who, t, _ in lines if who == "new" and e != "step"}
    result = {"ok": ok and "received" in new, "codes": codes,
              "tail": "".join(e[-1200:] for e in errors if e)}  # fmt: skip
    if not result["ok"]:
        return result
    result.update(
        process_start=new["start"] - launched,
        imports=new["imported"] - new["start"],
        setup=new["calling"] - new["imported"],
        join=new["joined"] - new["calling"],
    )
    grown = [t for e, _, t, _ in lines if e == "grown"]
    if mode == "transfer":
        synced = [(t, int(rest[0])) for e, _, t, rest in lines if e in ("received", "synced")]
        result.update(
            state=max(t for t, _ in synced) - new["calling"],
            transfer_bytes=max(b for _, b in synced),
            # From when the last of them has the grown group (the newcomer's join returned,
            # every member's grow did) to the newcomer holding the state.
            transfer_seconds=new["received"] - max(grown + [new["joined"]]),
        )
        return result
    result.update(healed(lines, new, nranks))
    result.update(survived(lines, f"r{victim}"))
    return result


def healed(lines: list, new: dict, nranks: int) -> dict:
    """From the replacement's join call: the state on every rank, the first step at full size
    done on every rank; and whether every step's ranks hold one state (the digests)."""
    after_grow = [t for e, who, t, _ in lines if e == "state" and t > new["joined"]]
    full_steps = [int(r[0]) for e, who, t, r in lines if e == "step" and who == "new"
                  and int(r[1]) == nranks]  # fmt: skip
    first = min(full_steps, default=-1)
    done = [t for e, _, t, r in lines if e == "step" and int(r[0]) == first and int(r[1]) == nranks]
    digests: dict = {}
    for e, who, _, r in lines:
        if e == "digest":
            digests.setdefault((int(r[0]), int(r[1])), {})[who] = r[2]
    differ = sorted(key for key, d in digests.items() if len(set(d.values())) > 1)
    last = digests.get(max((k for k in digests if k[1] == nranks), default=None), {})
    return {
        "state": max(after_grow + [new["received"]]) - new["calling"],
        "full": max(done) - new["calling"] if len(done) == nranks else math.nan,
        "equal": not differ and len(last) == nranks and "new" in last,
        "compared": sum(1 for d in digests.values() if len(d) > 1),
        "differ": differ[:3],
    }


def survived(lines: list, victim: str) -> dict:
    """From the kill to the survivors' next step, and the legs of the first survivor's."""
    killed = next(t for e, _, t, _ in lines if e == "killed")
    after = [(t, who) for e, who, t, r in lines if e == "step" and who not in (victim, "new")
             and int(r[0]) > KILL_STEP and t > killed]  # fmt: skip
    if not after:
        return {"next_step": math.nan, "legs": []}
    stepped, first = min(after)
    mine = {}
    for e, who, t, _ in lines:
        if who == first and killed < t <= stepped and e not in mine:
            mine[e] = t
    legs, since = [], killed
    for event, _ in LEGS:
        at = stepped if event == "step" else mine.get(event, math.nan)
        legs.append(at - since)
        since = at if not math.isnan(at) else since
    detected = [t - killed for e, who, t, _ in lines if e == "failed" and t > killed]
    return {"next_step": stepped - killed, "legs": legs,
            "detected": (min(detected), max(detected)) if detected else None}  # fmt: skip


def torchft_run(hosts, nranks: int, victim: int, settings, deadline_s: float) -> dict:
    from torchft_compare import rejoin

    per_host = nranks // len(hosts)
    return rejoin(hosts, [rank // per_host for rank in range(nranks)], victim, settings, deadline_s)


def report_line(system: str, r: dict, nranks: int) -> str:
    if not r["ok"]:
        return f"  {system:9s} failed {r.get('codes', '')}\n{r['tail']}"
    equal = (f"{nranks} ranks equal at the end, the replacement's too ({r['compared']} steps "
             "compared)" if r["equal"] else f"STATES DIFFER {r.get('differ')}")  # fmt: skip
    split = ""
    if r.get("legs"):
        split = " (" + ", ".join(f"{name} {s:.2f}" for (_, name), s in zip(LEGS, r["legs"])) + ")"
    elif r.get("gave_up") is not None:
        split = f" (a survivor gave its step up after {r['gave_up']:.2f})"
    return (
        f"  {system:9s} next step {r['next_step']:.2f} s after the kill{split}; replacement: "
        f"process start {r['process_start']:.2f} s, imports {r['imports']:.2f} s, model and "
        f"optimizer {r['setup']:.2f} s; from its join call: joined {r['join']:.2f} s, state on "
        f"every rank {r['state']:.2f} s, a step at full size done on every rank "
        f"{r['full']:.2f} s; {equal}"
        + (f"; survivors left out of a quorum and healed again: {r['survivors_healed']}"
           if "survivors_healed" in r else "")
    )  # fmt: skip


def tables(results: list, nranks: int) -> str:
    rows = [
        "| system | run | victim | kill -> survivors' next step | replacement: process start "
        "| imports | model and optimizer | join call -> joined | -> state on every rank "
        f"| -> a step at {nranks} ranks done on every rank | state equal, replacement included |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        if not r["ok"]:
            rows.append(f"| {r['system']} | {r['run']} | {r['victim']} | failed |||||||")
            continue
        cells = [r[k] for k in ("next_step", "process_start", "imports", "setup", "join",
                                "state", "full")]  # fmt: skip
        rows.append(f"| {r['system']} | {r['run']} | {r['victim']} | "
                    + " | ".join(f"{c:.2f} s" for c in cells)
                    + f" | {'yes' if r['equal'] else 'NO'} ({r['compared']} steps) |")  # fmt: skip
    split = [r for r in results if r["ok"] and r.get("legs")]
    if split:
        rows += ["", "ringcomm, kill -> survivors' next step, the first survivor to step:", "",
                 "| system | run | victim | " + " | ".join(name for _, name in LEGS)
                 + " | total | every survivor's collective failed |",
                 "| --- | ---: | ---: |" + " ---: |" * (len(LEGS) + 2)]  # fmt: skip
        for r in split:
            low, high = r["detected"]
            rows.append(f"| {r['system']} | {r['run']} | {r['victim']} | "
                        + " | ".join(f"{s:.2f} s" for s in r["legs"])
                        + f" | {r['next_step']:.2f} s | {low:.2f}-{high:.2f} s |")  # fmt: skip
    return "\n".join(rows)


def main(argv=None) -> int:
    from torchft_compare import RejoinSettings  # this script's folder (first on sys.path)

    torchft_defaults = RejoinSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--link-rate", default="1gbit")
    parser.add_argument("--np", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--deadline", type=float, default=600, help="seconds for one run")
    parser.add_argument("--transfer", choices=["1.3M", "100M"], help="time the state's transfer")
    parser.add_argument("--survivors", default="wait",
                        help="after their next step the survivors wait for the replacement "
                             "(grow_group(expect=1)), or train on and admit it when it knocks "
                             "(grow_group()): wait, train, or both, comma-separated")  # fmt: skip
    parser.add_argument("--compare", choices=["torchft"], help="the same heal by torchft")
    parser.add_argument("--no-ringcomm", action="store_true",
                        help="torchft's side alone (to tune its settings)")  # fmt: skip
    parser.add_argument("--torchft-pg", default="gloo", help="torchft's process group: gloo, "
                        "ringcomm (ringcomm.torchft), or both, comma-separated")  # fmt: skip
    parser.add_argument("--torchft-heartbeat-ms", type=int, default=torchft_defaults.heartbeat_ms,
                        help="the Lighthouse's heartbeat timeout")  # fmt: skip
    parser.add_argument("--torchft-join-ms", type=int, default=torchft_defaults.join_ms,
                        help="the Lighthouse's join timeout")  # fmt: skip
    parser.add_argument("--torchft-tick-ms", type=int, default=torchft_defaults.tick_ms,
                        help="the Lighthouse's quorum tick")  # fmt: skip
    parser.add_argument("--torchft-interval-ms", type=int, default=torchft_defaults.interval_ms,
                        help="the Managers' heartbeat interval")  # fmt: skip
    args = parser.parse_args(argv)
    from ringcomm.bench import netns

    rng = random.Random(args.seed)
    rate_bits = {"gbit": 1e9, "mbit": 1e6}
    unit = next(u for u in rate_bits if args.link_rate.endswith(u))
    link_bytes = float(args.link_rate[: -len(unit)]) * rate_bits[unit] / 8
    torchft = []
    if args.compare == "torchft" and not args.transfer:
        torchft = [
            RejoinSettings(pg=pg, heartbeat_ms=args.torchft_heartbeat_ms,
                           join_ms=args.torchft_join_ms, tick_ms=args.torchft_tick_ms,
                           interval_ms=args.torchft_interval_ms)
            for pg in args.torchft_pg.split(",")
        ]  # fmt: skip
        for settings in torchft:
            print(settings.describe(), flush=True)
    with netns.hosts(args.hosts, "10.231.85", rate=args.link_rate, tag="rh") as hosts:
        results = []
        for number in range(args.runs):
            if args.transfer:
                outcome = run(
                    hosts, args.np, "transfer", -1, args.transfer, args.steps, args.deadline
                )
                results.append(outcome)
                if not outcome["ok"]:
                    print(f"run {number}: failed {outcome['codes']}\n{outcome['tail']}")
                    continue
                rate = outcome["transfer_bytes"] / outcome["transfer_seconds"]
                print(
                    f"run {number}: replacement: process start {outcome['process_start']:.2f} s, "
                    f"imports {outcome['imports']:.2f} s, model and optimizer built in "
                    f"{outcome['setup']:.2f} s, joined in {outcome['join']:.2f} s, the state on "
                    f"every rank {outcome['state']:.2f} s after its join call; state "
                    f"{outcome['transfer_bytes'] / 1e6:.0f} MB in "
                    f"{outcome['transfer_seconds']:.2f} s = {rate / link_bytes:.2f} of the link",
                    flush=True,
                )  # fmt: skip
                continue
            victim = 0 if number == 0 else rng.randrange(args.np)
            print(f"run {number}: victim rank {victim}", flush=True)
            ringcomm = [] if args.no_ringcomm else args.survivors.split(",")
            for settings in ringcomm + torchft:
                if isinstance(settings, str):
                    system = "ringcomm" + {"wait": "", "train": ", trains on"}[settings]
                    outcome = run(hosts, args.np, "heal", victim, "1.3M", args.steps, args.deadline,
                                  settings)  # fmt: skip
                else:
                    system = f"torchft/{settings.pg}"
                    outcome = torchft_run(hosts, args.np, victim, settings, args.deadline)
                outcome.update(system=system, run=number, victim=victim)
                results.append(outcome)
                print(report_line(system, outcome, args.np), flush=True)
        good = [r for r in results if r["ok"]]
        if not args.transfer:
            print("\n" + tables(results, args.np))
            for system in dict.fromkeys(r["system"] for r in results):
                mine = [r for r in good if r["system"] == system]
                if mine:
                    full, step = [r["full"] for r in mine], [r["next_step"] for r in mine]
                    print(f"\n{system}: {len(mine)}/{args.runs} runs healed; survivors' next step "
                          f"{min(step):.2f}-{max(step):.2f} s after the kill; a step at full "
                          f"size on every rank {min(full):.2f}-{max(full):.2f} s after the "
                          f"replacement's join call (median {statistics.median(full):.2f})",
                          end="")  # fmt: skip
            print()
    return 0 if len(good) == len(results) and all(r.get("equal", True) for r in good) else 1


if __name__ == "__main__":
    sys.exit(main())
