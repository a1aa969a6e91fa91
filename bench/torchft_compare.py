"""torchft on ringcomm and on gloo, in the same invocation: kill-and-heal, and step time across
hosts (issue 49).

    python bench/torchft_compare.py heal --kills 20                  # ringcomm, 2 replica groups
    python bench/torchft_compare.py heal --pg gloo,ringcomm --kills 5 --heartbeat-ms 5000,1000
    python bench/torchft_compare.py speed --link-rate 1gbit          # needs root (namespace hosts)

Each replica group is one process of bench/torchft_worker.py: torchft's DDP with its Manager,
a Lighthouse (torchft's own, started here) forming the quorum, healing through PGTransport.

heal: the replica groups train; again and again one (drawn from --seed) is killed with SIGKILL
at a random point of a step and started again at once with the same replica id, and heals from
a peer. Per kill: the seconds from the kill to the survivors' next committed step (torchft's
Lighthouse waits for the dead replica's heartbeat to time out: --heartbeat-ms), and from the
restart to a step committed at full size with the restarted process in it (its start, imports,
the quorum and the healing). Every step committed by several replica groups must have the same
parameters and optimizer state on each (checked on every step); any difference, or a replica
that fails to heal, is a failed run.

rejoin() (run by bench/heal.py --compare torchft): torchft's heal of bench/heal.py's model
across namespace hosts, a replica group a rank, beside ringcomm's own heal in the same invocation.

speed: replica 0 and replica 1 on two namespace hosts joined by a link shaped to --link-rate;
the mean time of a committed step (after --warmup steps) on each process group, and ringcomm's
with an 8-bit codec on the all-reduce across replica groups; each also with its links unsealed
(ringcomm authenticates every frame on links up to 2.5 Gbit/s by default, gloo none).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("RUST_LOG", "warn")  # torchft's Lighthouse logs every quorum otherwise

WORKER = Path(__file__).with_name("torchft_worker.py")


def stop_after(replicas: list, stop: Path, more: int, deadline: float) -> int:
    """Every replica stops `more` steps past the furthest committed one (the step returned);
    raises a replica's failure."""
    target = max(s["step"] for s in committed(replicas)) + more
    stop.write_text(str(target))
    for replica in replicas:
        replica.proc.wait(timeout=max(5.0, deadline - time.monotonic()))
        if failure := replica.failed():
            raise RuntimeError(failure)
    return target


class Replica:
    """One replica group's process, started again after each kill; its committed steps."""

    def __init__(self, index: int, argv: list, env: dict, work: Path) -> None:
        self.index = index
        self.argv = argv + ["--replica", str(index)]
        self.env = env
        self.log = work / f"replica{index}.jsonl"
        self.stderr = work / f"replica{index}.err"
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    def start(self) -> None:
        with open(self.stderr, "a") as err:
            self.proc = subprocess.Popen(
                self.argv + ["--log", str(self.log)], env=self.env,
                stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        self.started = time.time()

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        # A line the worker is still writing has no newline yet: read whole lines only.
        text = self.log.read_text()
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]

    def steps(self) -> list[dict]:
        """The committed steps."""
        return [r for r in self.records() if "step" in r]

    def events(self) -> list[dict]:
        """The milestones of each of its processes (torchft_worker.py's "event" lines)."""
        return [r for r in self.records() if "event" in r]

    def failures(self) -> list[dict]:
        """The steps given up (the time each learned of a failure)."""
        return [r for r in self.records() if r.get("failed")]

    def kill(self) -> float:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        killed = time.time()
        self.proc.wait()
        return killed

    def failed(self) -> str | None:
        if self.proc is not None and self.proc.poll() not in (None, 0):
            tail = self.stderr.read_text()[-3000:]
            return f"replica {self.index} exited with {self.proc.returncode}:\n{tail}"
        return None


def lighthouse(heartbeat_ms: int):
    from torchft._torchft import LighthouseServer

    # min_replicas 1: the survivors go on alone while a replica restarts, as torchft's examples.
    return LighthouseServer(
        bind="[::]:0", min_replicas=1, join_timeout_ms=1000, heartbeat_timeout_ms=heartbeat_ms
    )


def lighthouse_command(
    port: int, min_replicas: int, join_ms: int, heartbeat_ms: int = 5000, tick_ms: int = 100
) -> list:
    """torchft's Lighthouse as a program of its own (to run on a namespace host)."""
    import shutil

    binary = shutil.which("torchft_lighthouse") or str(
        Path(sys.executable).with_name("torchft_lighthouse")
    )
    return [binary, "--bind", f"[::]:{port}", "--min_replicas", str(min_replicas),
            "--join_timeout_ms", str(join_ms), "--quorum_tick_ms", str(tick_ms),
            "--heartbeat_timeout_ms", str(heartbeat_ms)]  # fmt: skip


def wait_for(condition, replicas: list, deadline: float, what: str):
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        for replica in replicas:
            if failure := replica.failed():
                raise RuntimeError(failure)
        time.sleep(0.01)
    raise TimeoutError(f"timed out waiting for {what}")


def committed(replicas: list) -> list[dict]:
    return [dict(step, replica=r.index) for r in replicas for step in r.steps()]


def check_identical(steps: list[dict]) -> int:
    """Every step committed by several replicas has one digest; returns how many were compared."""
    digests: dict = {}
    for s in steps:
        digests.setdefault(s["step"], []).append(s["digest"])
    differ = sorted(step for step, d in digests.items() if len(set(d)) > 1)
    if differ:
        raise AssertionError(f"replicas differ after steps {differ[:5]}")
    return sum(1 for d in digests.values() if len(d) > 1)


def at_full_size(replicas: list, after: float, pid: int | None = None) -> float | None:
    """When the first step after `after` was committed by every replica (with `pid` in it)."""
    hits = [
        s["time"] for s in committed(replicas)
        if s["time"] > after and s["replicas"] == len(replicas)
        and (pid is None or s["pid"] == pid)
    ]  # fmt: skip
    return min(hits, default=None)


def kill_and_heal(replicas: list, rng: random.Random, deadline: float) -> dict:
    """A few steps at full size since the last heal, then a kill inside a step, and the restart:
    the seconds to the survivors' next committed step, and to full size again."""
    settled = time.time()
    wait_for(
        lambda: len([
            s for s in committed(replicas) if s["time"] > settled and s["replicas"] == len(replicas)
        ]) >= 5 * len(replicas),
        replicas, deadline, "steps at full size after the last heal",
    )  # fmt: skip
    time.sleep(rng.uniform(0, 0.05))
    victim = replicas[rng.randrange(len(replicas))]
    killed = victim.kill()
    victim.start()
    survivors = [r for r in replicas if r is not victim]
    next_step = wait_for(
        lambda: min(
            (s["time"] for r in survivors for s in r.steps() if s["time"] > killed), default=None
        ),
        replicas, deadline, "the survivors' next step",
    )  # fmt: skip
    full = wait_for(
        lambda: at_full_size(replicas, killed, victim.proc.pid), replicas, deadline,
        "the restarted replica at full size",
    )  # fmt: skip
    # A kill between steps fails no collective: the survivor only waits in the next quorum.
    failed = [f["time"] for r in survivors for f in r.failures() if killed < f["time"] < next_step]
    return {
        "victim": victim.index,
        "gave_up_step": min(failed) - killed if failed else None,
        "next_step": next_step - killed,
        "restart_to_full": full - victim.started,
    }


def heal_run(args, pg: str, heartbeat_ms: int) -> dict:
    rng = random.Random(args.seed)
    server = lighthouse(heartbeat_ms)
    replicas: list = []
    try:
        with tempfile.TemporaryDirectory() as work:
            work = Path(work)
            stop = work / "stop"
            argv = [
                sys.executable, str(WORKER), "--lighthouse", server.address(), "--pg", pg,
                "--steps", "1000000", "--stop-file", str(stop), "--timeout", str(args.timeout),
                "--step-sleep", str(args.step_sleep), "--algorithm", args.algorithm,
            ]  # fmt: skip
            env = dict(os.environ, OMP_NUM_THREADS="1", RUST_LOG="warn")
            replicas += [Replica(i, argv, env, work) for i in range(args.replicas)]
            for replica in replicas:
                replica.start()
            deadline = time.monotonic() + args.deadline

            wait_for(lambda: at_full_size(replicas, 0), replicas, deadline, "the first quorum")
            kills = [kill_and_heal(replicas, rng, deadline) for _ in range(args.kills)]
            target = stop_after(replicas, stop, 3, deadline)
            steps = committed(replicas)
            compared = check_identical(steps)
            ends = {max(s["step"] for s in r.steps()) for r in replicas}
            if ends != {target}:
                raise AssertionError(f"replicas ended at steps {ends}, not {target}")
            return {"pg": pg, "heartbeat_ms": heartbeat_ms, "kills": kills,
                    "steps": target, "steps_compared": compared}  # fmt: skip
    finally:
        for replica in replicas:
            if replica.proc is not None and replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait()
        server.shutdown()


def heal(args) -> list[dict]:
    results = []
    for heartbeat_ms in [int(h) for h in args.heartbeat_ms.split(",")]:
        for pg in args.pg.split(","):
            outcome = heal_run(args, pg, heartbeat_ms)
            results.append(outcome)
            next_steps = [k["next_step"] for k in outcome["kills"]]
            gave_up = [k["gave_up_step"] for k in outcome["kills"] if k["gave_up_step"]]
            fulls = [k["restart_to_full"] for k in outcome["kills"]]
            print(
                f"{pg:10s} heartbeat {heartbeat_ms / 1000:.1f} s: {len(outcome['kills'])} kills "
                f"healed, {outcome['steps_compared']} steps compared identical; kill -> a "
                f"survivor gives its step up {spread(gave_up)} ({len(gave_up)} kills inside a "
                f"step), -> next step {spread(next_steps)}; restart -> full size {spread(fulls)}",
                flush=True,
            )
    return results


@dataclass
class RejoinSettings:
    """torchft's side of bench/heal.py: the process group and the timings that bound a heal.

    After a kill the survivors' quorum waits for the dead replica group until the Lighthouse
    stops counting it (its heartbeat timeout) or until ``join_ms`` after the first survivor asked
    (the join timeout), whichever comes first; the latter only where the survivors are more
    than half of the replica groups heartbeating (with 2 groups the heartbeat timeout bounds it).
    The join timeout is also every quorum's patience with stragglers where the last quorum's
    members are not all back (a fast quorum, all of them back, forms at once and leaves out
    whoever else asks later): a group slower than that, as one healing is, is left out again and
    again. 8 replica groups on this 2-core VM never all got into one quorum at 200 ms (150 s)
    and did at 250, 300 and 500 ms (one run each); 300 ms is the fastest kept. A live replica
    group whose heartbeats the Lighthouse misses for ``heartbeat_ms`` drops out of the quorum
    (and heals back in): 1 s, as tests/test_torchft.py runs it, above the join timeout, so that
    the join timeout bounds a heal."""

    pg: str = "gloo"
    heartbeat_ms: int = 1000  # the Lighthouse's heartbeat timeout (torchft's default: 5000)
    join_ms: int = 300  # its join timeout (default: 60000)
    tick_ms: int = 20  # how often it checks a quorum that waits (default: 100)
    interval_ms: int = 50  # the Managers' heartbeat interval (default: 100)
    timeout_s: float = 10.0  # the process group's and the Manager's timeout
    kill_after: int = 2  # steps at full size before the victim dies (heal_worker.py's kill_step)

    def describe(self) -> str:
        return (f"torchft on {self.pg}: Lighthouse heartbeat timeout {self.heartbeat_ms} ms, join "
                f"timeout {self.join_ms} ms, quorum tick {self.tick_ms} ms; Managers heartbeat "
                f"every {self.interval_ms} ms; a quorum needs a majority of the replica "
                "groups")  # fmt: skip


def rejoin(hosts, layout: list, victim: int, settings: RejoinSettings, deadline_s: float = 300):
    """torchft's rejoin on bench/heal.py's model across namespace hosts: a replica group of one
    process for each rank (replica r on host layout[r]), the Lighthouse on host 0. The victim
    kills itself at the start of a step once it has committed settings.kill_after steps at full
    size; the moment it is gone it is started again on its host with the same replica id, and
    heals from a peer. Returns the seconds bench/heal.py reports, or {"ok": False, "tail": ...}.
    """
    from ringcomm.bench import netns

    port, size = 29512, len(layout)
    # A quorum needs a majority of the replica groups: with fewer, replica groups that start
    # late can form a quorum of their own at step 0 beside the first one's, both commit step 1
    # with different states, and a later quorum joining both at the same step never heals them
    # apart (seen with min_replicas 1: replicas differ from step 1 on, 1 run in 4).
    majority = size // 2 + 1
    model = ["--inputs", "256", "--width", "1024", "--layers", "2", "--optimizer", "sgd",
             "--batch", "32"]  # heal_worker.py's model and optimizer  # fmt: skip
    server = subprocess.Popen(
        hosts.command(0, lighthouse_command(port, majority, settings.join_ms,
                                            settings.heartbeat_ms, settings.tick_ms)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # gloo finds its interface from the host name, which the namespace hosts share: named.
    env = dict(os.environ, OMP_NUM_THREADS="1", RUST_LOG="warn", GLOO_SOCKET_IFNAME=netns.LINK_NAME,
               RINGCOMM_SECRET=os.urandom(16).hex())  # fmt: skip
    replicas: list = []
    with tempfile.TemporaryDirectory() as work:
        try:
            stop = Path(work) / "stop"
            for index, host in enumerate(layout):
                argv = hosts.command(host, [
                    sys.executable, str(WORKER), "--lighthouse", f"http://{hosts.address(0)}:{port}",
                    "--hostname", hosts.address(host), "--pg", settings.pg, "--steps", "1000000",
                    "--stop-file", str(stop), "--timeout", str(settings.timeout_s),
                    "--heartbeat-interval-ms", str(settings.interval_ms), "--expect", str(size),
                    "--min-replicas", str(majority), *model,
                ])  # fmt: skip
                replicas.append(Replica(index, argv, env, Path(work)))
            dying = replicas[victim]
            dying.argv += ["--die-after", str(settings.kill_after)]
            for replica in replicas:
                replica.start()
            deadline = time.monotonic() + deadline_s
            others = [r for r in replicas if r is not dying]
            wait_for(lambda: dying.proc.poll() is not None, others, deadline, "the victim's death")
            launched = time.time()  # the victim is gone: start it again, as heal.py does
            dying.argv = dying.argv[:-2]
            dying.start()

            def newcomer() -> int | None:
                return next((e["pid"] for e in dying.events()
                             if e["event"] == "start" and e["time"] >= launched), None)  # fmt: skip

            pid = wait_for(newcomer, replicas, deadline, "the replacement's start")

            def first_full_step() -> int | None:
                return next((s["step"] for s in dying.steps()
                             if s["pid"] == pid and s["replicas"] == size), None)  # fmt: skip

            full_step = wait_for(first_full_step, replicas, deadline, "a step at full size")
            wait_for(
                lambda: all(any(s["step"] == full_step for s in r.steps()) for r in replicas),
                replicas, deadline, "every replica's step at full size",
            )  # fmt: skip
            target = stop_after(replicas, stop, 2, deadline)
            compared = check_identical(committed(replicas))
            # The last step: every replica group's, the newcomer's too, with one digest.
            last = {s["pid"] for s in committed(replicas) if s["step"] == target}
            if len(last) != size or pid not in last:
                among = "among them" if pid in last else "not"
                raise AssertionError(f"step {target}: {len(last)} replicas, the newcomer {among}")
            events: dict = {}
            for e in dying.events():
                if e["pid"] == pid:
                    events.setdefault(e["event"], e["time"])  # the first of each
            killed = next(e["time"] for e in dying.events() if e["event"] == "killed")
            survivors = [r for r in replicas if r is not dying]
            after = [s["time"] for r in survivors for s in r.steps() if s["time"] > killed]
            gave_up = [f["time"] for r in survivors for f in r.failures() if f["time"] > killed]
            # A survivor that healed after the kill had been left out of a quorum (its requests
            # came later than the join timeout after the first's): a churn, not a clean heal.
            rehealed = [e for r in survivors for e in r.events()
                        if e["event"] == "received" and e["time"] > killed]  # fmt: skip
            full = max(s["time"] for s in committed(replicas) if s["step"] == full_step)
            return {
                "ok": True,
                "next_step": min(after) - killed,
                "gave_up": min(gave_up) - killed if gave_up else None,
                "process_start": events["start"] - launched,
                "imports": events["imported"] - events["start"],
                "setup": events["built"] - events["imported"],
                "join": events["manager"] - events["calling"],
                "state": events["received"] - events["calling"],
                "full": full - events["calling"],
                "equal": True,  # else check_identical or the last step's check raised
                "compared": compared,
                "survivors_healed": len(rehealed),
            }
        except (RuntimeError, TimeoutError, AssertionError) as error:
            tails = [r.stderr.read_text()[-1500:] for r in replicas if r.stderr.exists()]
            tail = "".join(t for t in tails if t.strip())[-3000:]
            return {"ok": False, "tail": f"{error}\n{tail}"}
        finally:
            for replica in replicas:
                if replica.proc is not None and replica.proc.poll() is None:
                    replica.proc.kill()
                    replica.proc.wait()
            server.kill()
            server.wait()


def speed_run(hosts, pg: str, args) -> list[float]:
    """The seconds of each committed step after the warm-up, on replica 0."""
    from ringcomm.bench import netns

    spec, _, unsealed = pg.partition("/")
    name, _, codec = spec.partition(":")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        port = 29510
        server = subprocess.Popen(
            hosts.command(0, lighthouse_command(port, min_replicas=2, join_ms=10000)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # gloo finds its interface from the host name, which the namespace hosts share: named.
        env = dict(os.environ, OMP_NUM_THREADS="1", RINGCOMM_SECRET=os.urandom(16).hex(),
                   GLOO_SOCKET_IFNAME=netns.LINK_NAME)  # fmt: skip
        if unsealed:  # as gloo's links: ringcomm's (at 1 Gbit/s) are authenticated by default
            env["RINGCOMM_WIRE_PROTECTION"] = "off"
        procs, logs = [], []
        try:
            for host in range(2):
                logs.append(work / f"replica{host}.jsonl")
                argv = [
                    sys.executable, str(WORKER), "--replica", str(host), "--pg", name,
                    "--lighthouse", f"http://{hosts.address(0)}:{port}",
                    "--hostname", hosts.address(host), "--min-replicas", "2",
                    "--steps", str(args.warmup + args.steps), "--log", str(logs[-1]),
                    "--width", str(args.width), "--layers", str(args.layers), "--timeout", "60",
                    "--batch", str(args.batch), "--no-digest",
                ] + (["--compression", codec] if codec else [])  # fmt: skip
                procs.append(subprocess.Popen(hosts.command(host, argv), env=env,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                              text=True))  # fmt: skip
            for proc in procs:
                _, err = proc.communicate(timeout=args.deadline)
                if proc.returncode != 0:
                    raise RuntimeError(f"{pg}: a replica exited with {proc.returncode}:\n"
                                       f"{err[-3000:]}")  # fmt: skip
        finally:
            for proc in procs + [server]:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        records = [json.loads(line) for line in logs[0].read_text().splitlines()]
        steps = [r for r in records if "step" in r]  # not the process's milestones
        return [s["seconds"] for s in steps[args.warmup :] if s["replicas"] == 2]


def speed(args) -> list[dict]:
    from ringcomm.bench import netns

    params = (64 * args.width + args.width) + (args.layers - 1) * (args.width**2 + args.width)
    params += args.width * 10 + 10
    print(
        f"torchft DDP, 2 replica groups on 2 namespace hosts, {args.link_rate} link; an MLP of "
        f"{params / 1e6:.1f}M parameters ({params * 4 / 1e6:.0f} MB of float32 gradients); "
        f"mean of {args.steps} committed steps after {args.warmup}",
        flush=True,
    )
    results = []
    with netns.hosts(2, "10.231.49", rate=args.link_rate, tag="tf") as hosts:
        for _ in range(args.runs):
            for pg in args.pg.split(","):
                seconds = speed_run(hosts, pg, args)
                results.append({"pg": pg, "step_ms": 1e3 * statistics.mean(seconds),
                                "steps": len(seconds)})  # fmt: skip
    gloo = statistics.median(r["step_ms"] for r in results if r["pg"] == "gloo") if any(
        r["pg"] == "gloo" for r in results
    ) else None  # fmt: skip
    for pg in args.pg.split(","):
        times = [r["step_ms"] for r in results if r["pg"] == pg]
        ratio = f"{gloo / statistics.median(times):.2f}x gloo" if gloo else ""
        print(f"{pg:14s} step {statistics.median(times):7.1f} ms "
              f"(runs: {', '.join(f'{t:.1f}' for t in times)})  {ratio}", flush=True)  # fmt: skip
    return results


def reconfigure_worker(rank: int, size: int, port: int, pg_name: str, times: int, out) -> None:
    """One rank: `times` quorum changes as torchft's Manager makes them, each timed from the
    abort of the group to the next one formed (the handles, which the Lighthouse carries in a
    job, come through a store here, untimed), and an all-reduce in each group."""
    import uuid
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torchft.process_group import ProcessGroupGloo, ReconfigureOptions

    from ringcomm.torchft import ProcessGroupRingcomm

    timeout = timedelta(seconds=30)
    pg = ProcessGroupGloo(timeout=timeout) if pg_name == "gloo" else ProcessGroupRingcomm(timeout)
    exchange = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
    seconds = []
    for generation in range(times):
        exchange.set(f"{generation}/handle/{rank}", pg.get_reconfigure_handle())
        if rank == 0:
            exchange.set(f"{generation}/uuid", str(uuid.uuid4().int & ((1 << 63) - 1)))
        keys = [f"{generation}/uuid"] + [f"{generation}/handle/{r}" for r in range(size)]
        exchange.wait(keys, timeout)
        quorum, *handles = exchange.multi_get(keys)
        opts = ReconfigureOptions()
        opts.uuid, opts.handles, opts.timeout = int(quorum), [h.decode() for h in handles], timeout
        began = time.perf_counter()
        pg.abort(errored=False)
        pg.reconfigure(opts).wait()
        seconds.append(time.perf_counter() - began)
        value = torch.ones(4)
        pg.allreduce([value], dist_sum()).wait()
        assert value[0].item() == size, value
    pg.shutdown()
    out.put((rank, seconds))


def dist_sum():
    import torch.distributed as dist

    return dist.ReduceOp.SUM


def reconfigure(args) -> list[dict]:
    import multiprocessing

    import torch.distributed as dist

    context = multiprocessing.get_context("spawn")
    results = []
    for pg in args.pg.split(","):
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        out = context.Queue()
        procs = [
            context.Process(target=reconfigure_worker,
                            args=(rank, args.size, store.port, pg, args.changes, out))
            for rank in range(args.size)
        ]  # fmt: skip
        for proc in procs:
            proc.start()
        seconds = [out.get(timeout=300) for _ in procs]
        for proc in procs:
            proc.join()
        slowest = [max(s[1][i] for s in seconds) for i in range(args.changes)][1:]  # 1st: imports
        results.append({"pg": pg, "seconds": slowest})
        route = "ringcomm's mailbox" if pg == "ringcomm" and os.environ.get(
            "RINGCOMM_SECRET") else "torch's store"  # fmt: skip
        print(f"{pg:10s} a quorum change (abort, the next group formed; its ranks meet on "
              f"{route}) on {args.size} ranks: {spread([1e3 * s for s in slowest], 'ms')}",
              flush=True)  # fmt: skip
    return results


# What speed compares by default: gloo, ringcomm in float32 and with its 8-bit codec, sealed
# (its default) and not (as gloo).
SPEED_GROUPS = "gloo,ringcomm,ringcomm:int8,ringcomm/unsealed,ringcomm:int8/unsealed"


def spread(values: list, unit: str = "s") -> str:
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"median {mid:.2f} {unit} ({low:.2f}-{high:.2f})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("heal", help="kill -9 and restart replica groups")
    h.add_argument("--pg", default="ringcomm", help="comma-separated: ringcomm, gloo")
    h.add_argument("--replicas", type=int, default=2)
    h.add_argument("--algorithm", choices=("ddp", "localsgd", "diloco"), default="ddp")
    h.add_argument("--kills", type=int, default=20)
    h.add_argument("--heartbeat-ms", default="1000", help="the Lighthouse's, comma-separated")
    h.add_argument("--step-sleep", type=float, default=0.02, help="seconds of 'compute' a step")
    h.add_argument("--timeout", type=float, default=10.0, help="the process group's, seconds")
    h.add_argument("--seed", type=int, default=49)
    h.add_argument("--deadline", type=float, default=900, help="seconds for a whole run")
    h.add_argument("--json", help="write the results here")
    v = sub.add_parser("speed", help="step time across 2 namespace hosts (needs root)")
    v.add_argument("--pg", default=SPEED_GROUPS,
                   help="comma-separated: gloo, ringcomm, ringcomm:<codec>, and /unsealed: "
                        "RINGCOMM_WIRE_PROTECTION=off, as gloo's links")  # fmt: skip
    v.add_argument("--link-rate", default="1gbit", help="tc's units")
    v.add_argument("--width", type=int, default=1024, help="the MLP's hidden width")
    v.add_argument("--layers", type=int, default=6, help="hidden layers of that width")
    v.add_argument("--batch", type=int, default=8, help="samples a step")
    v.add_argument("--warmup", type=int, default=5)
    v.add_argument("--steps", type=int, default=20)
    v.add_argument("--runs", type=int, default=1, help="alternating the process groups")
    v.add_argument("--deadline", type=float, default=600, help="seconds for one run")
    v.add_argument("--json", help="write the results here")
    r = sub.add_parser("reconfigure", help="the cost of a quorum change, on one host")
    r.add_argument("--pg", default="gloo,ringcomm")
    r.add_argument("--size", type=int, default=2, help="replica groups")
    r.add_argument("--changes", type=int, default=30)
    r.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    modes = {"heal": heal, "speed": speed, "reconfigure": reconfigure}
    results = modes[args.mode](args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
