"""Randomized fault injection: from a seeded RNG (printed, for replay), jobs of 2-8 ranks under
ringcomm-run, mpirun (MPICH's hydra; ringcomm meets through mpi4py) or torchrun (--standalone:
its agent's store), the launcher drawn per job, in which one rank is SIGKILLed, SIGSTOPped (a
late peer) or exits early at a random point of a loop of mixed collectives
(tests/workers/fault.py). Every survivor must raise an error naming the victim within the
timeout, unless its launcher ended it first (below); nothing may hang; and once the launcher
returns, no /dev/shm/ringcomm-* segment, secret file, rank process or listening port may be left.

What each launcher does once a rank fails, and so what is required under it:
  ringcomm-run  lets the others go on for --grace seconds before it stops them: every survivor
                names the victim, whatever the fault.
  mpirun        hydra SIGKILLs every rank as soon as one dies: the survivors of a killed rank
                are gone before they can report (over TCP each first waits up to 1 s for the
                dead peer's reason in the store; over shared memory it sees the process gone in
                0.1 s, still later than hydra), and the PID hydra prints is often another rank's
                (rank 0's). Required: it says a rank was killed by signal 9 and that it cleaned up
                the rest. An exiting rank calls MPI_Finalize (mpi4py does, at exit): hydra ends
                nobody, every survivor names it. A stopped one is named by every survivor, who
                then block in MPI_Finalize, waiting for it: hydra never returns. The job's
                script then kills the stopped rank, as an operator or a time limit would, and
                hydra must return. After a SIGKILL, hydra leaves MPICH's own segment,
                /dev/shm/mpich_shm_*, which is not counted.
  torchrun      its agent sends SIGTERM to every worker 0.1 s after one failed, a survivor
                too: a survivor may be ended before it reports, and must then be one the
                agent says it ended. A killed rank must be named in torchrun's summary (exitcode
                -9). A stopped one ignores the SIGTERM until torch's SIGKILL 30 s later: the
                job's script kills it first, as under mpirun.
Under every launcher the job must fail (a non-zero status), and a stopped or exiting victim,
which no launcher sees fail, must be named by at least one survivor.

Each job runs in fresh mount, network and PID namespaces (needs root and unshare, as on the
development and CI machines): its own /dev/shm, its own loopback and its own process table, so
that what is left in them is the job's alone. Skipped otherwise.

Link faults (flap, 5% loss, corruption) on the link between two "hosts" (network namespaces, as
tests/test_multihost.py makes them) shaped with tc netem: results stay correct, or the error
names a peer. Skipped without root, iproute2 or tc. Where the kernel has no netem (the
development VM), the same 5% loss is made by iptables' random drops instead.

RINGCOMM_FAULT_SEED replays a run; RINGCOMM_FAULT_TRIALS sets the number of jobs (6 in CI, two at
a time, 1 to 1.5 minutes on 2 cores: a job that stops a rank takes about 25 s under torchrun and
15 s under mpirun, and torchrun's ranks import torch); RINGCOMM_FAULT_LAUNCHERS (e.g. "mpirun" or
"torchrun,mpirun") limits the launchers drawn from (a replay needs the same list: the header line
prints it).
"""

import concurrent.futures
import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
from harness import (
    WORKERS,
    finish_ranks,
    mpirun,
    namespace_hosts,
    start_ranks_on_hosts,
    worker_env,
)

TIMEOUT = 3.0  # RINGCOMM_TIMEOUT of the jobs: a late (stopped) peer is named after this long
# Beyond the timeout: the health check (100 ms), the abort travelling to the other survivors,
# and Python on 2 busy cores.
SLACK = 7.0
GRACE = 5  # ringcomm-run --grace: how long survivors may go on after the first one failed
FAULTS = ["kill", "stop", "exit"]
PARALLEL_JOBS = 2  # jobs run at once
LAUNCHERS = ["ringcomm-run", "mpirun", "torchrun"]


def _can_isolate() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _available(launcher: str) -> bool:
    if launcher == "mpirun":
        return bool(mpirun()) and importlib.util.find_spec("mpi4py") is not None
    if launcher == "torchrun":
        return importlib.util.find_spec("torch") is not None
    return True


def _launchers() -> list:
    """What the trials draw their launcher from: RINGCOMM_FAULT_LAUNCHERS, else every launcher
    this machine has."""
    named = [n.strip() for n in os.environ.get("RINGCOMM_FAULT_LAUNCHERS", "").split(",")]
    named = [n for n in named if n]
    if not named:
        return [n for n in LAUNCHERS if _available(n)]
    unknown = [n for n in named if n not in LAUNCHERS]
    assert not unknown, f"RINGCOMM_FAULT_LAUNCHERS: unknown {unknown}; choose from {LAUNCHERS}"
    missing = [n for n in named if not _available(n)]
    if missing:
        pytest.skip(f"RINGCOMM_FAULT_LAUNCHERS names {missing}, not installed here")
    return named


def launch_command(launcher: str, size: int) -> list:
    """The command that starts `size` ranks of the script that follows it."""
    if launcher == "mpirun":
        return [mpirun(), "-np", str(size), sys.executable]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={size}"]  # fmt: skip
    return [sys.executable, "-m", "ringcomm.launch", "--grace", str(GRACE), "-np", str(size)]


# How long each launcher takes, once a rank has failed, to end the others by itself: ringcomm-run
# its --grace (then SIGTERM, and SIGKILL a second later); torchrun's agent sends SIGTERM and waits
# 30 s (hard-coded in LocalElasticAgent._shutdown) before SIGKILL, which a stopped rank needs;
# hydra kills at once.
TEARDOWN = {"ringcomm-run": GRACE + 1, "mpirun": 0, "torchrun": 30}


def teardown(launcher: str, fault: str) -> int:
    """A stopped rank is seen failing by no launcher but ringcomm-run: under mpirun and torchrun
    the job's script kills it once it is stuck (as an operator would), without waiting out
    torchrun's 30 s (that wait is torch's, and costs CI half a minute a job)."""
    return 0 if fault == "stop" and launcher in ("mpirun", "torchrun") else TEARDOWN[launcher]


# A launcher still running this long past its teardown after the fault is stuck: the job's script
# then reports it and kills the job's stopped processes, as an operator or a scheduler's time
# limit would, and the launcher must return within UNSTUCK seconds after that.
STUCK_AFTER = TIMEOUT + SLACK + 5
UNSTUCK = 20

# The job, in its namespaces: the launcher in the background, watched from here; then what the
# namespaces hold once it has returned: the /dev/shm entries, the secret files ringcomm wrote in
# the job's TMPDIR (under torchrun's agent store, which has no secure channel, rank 0 writes one,
# removed once every rank has met), the listening TCP sockets, and every process but this
# script's own.
JOB = r"""
mount -t tmpfs -o size=512m tmpfs /dev/shm && ip link set lo up || exit 1
{ eval "$COMMAND"; echo $? > "$DIR/launcher.exit"; } &
stuck_at=""
self=$(tr '\0' ' ' < /proc/$$/cmdline | cut -c1-120)
while [ ! -e "$DIR/launcher.exit" ]; do
  now=$(date +%s)
  since_fault=$((now - $(stat -c %Y "$DIR/fault" 2>/dev/null || echo $now)))
  if [ -z "$stuck_at" ] && [ $since_fault -ge $STUCK ]; then
    stuck_at=$now
    for p in /proc/[0-9]*; do
      n=${p#/proc/}
      c=$(tr '\0' ' ' 2>/dev/null < $p/cmdline | cut -c1-120)
      [ "$n" = 1 ] || [ "$n" = "$$" ] || [ -z "$c" ] || [ "$c" = "$self" ] && continue
      state=$(sed 's/.*) //' $p/stat 2>/dev/null | cut -d' ' -f1)
      echo STUCK_PROC $n $state $(cat $p/wchan 2>/dev/null) $c
      [ "$state" = T ] && kill -KILL $n && echo STOPPED_KILLED $n
    done
  elif [ -n "$stuck_at" ] && [ $((now - stuck_at)) -ge $UNSTUCK ]; then
    echo LAUNCHER_HUNG; kill -KILL -1; break
  fi
  sleep 0.1
done
wait
echo LAUNCHER_EXIT $(cat "$DIR/launcher.exit" 2>/dev/null || echo hung)
echo LEFT_SHM $(ls /dev/shm)
echo LEFT_FILES $(find "$TMPDIR" -path '*/ringcomm-*/*')
echo LEFT_LISTEN $(awk 'NR > 1 && $4 == "0A" {print $2}' /proc/net/tcp /proc/net/tcp6)
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  [ "$n" = 1 ] || [ "$n" = "$$" ] && continue
  c=$(tr '\0' ' ' 2>/dev/null < $p/cmdline)
  case "$c" in ""|*"awk "*|*"tr "*) ;; *) echo LEFT_PROC $n $c ;; esac
done
"""

# How each launcher says ranks ended. MPICH's hydra (5.0.2 from PyPI), once a rank died or exited
# without MPI_Finalize, kills every other one (SIGKILL) and prints one block:
#   =   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
#   =   PID 6 RUNNING AT vm
#   =   EXIT CODE: 9
#   =   CLEANING UP REMAINING PROCESSES
#   YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
# The PID is one of the ranks killed, by the fault or by hydra's cleanup, often not the culprit's
# (rank 0's after most kills of another rank; a survivor's after a stopped rank was killed):
# hydra's output cannot say which rank failed first.
HYDRA_BLOCK = re.compile(r"PID (\d+) RUNNING AT \S+\s+=\s+EXIT CODE: (\d+)")
HYDRA_CLEANUP = "CLEANING UP REMAINING PROCESSES"
# torchrun: every failure its agent saw, the first observed one as "Root Cause",
#   rank      : 3 (local_rank: 3)
#   exitcode  : -9 (pid: 41)  (SIGKILL)
# and the workers its agent ended once one failed ("Sending process 42 closing signal SIGTERM").
TORCHRUN_FAILURE = re.compile(r"rank\s*: (\d+) \(local_rank: \d+\)\s+exitcode\s*: (-?\d+)")
TORCHRUN_ENDS = re.compile(r"Sending process (\d+) closing signal SIGTERM")
ENDED_BY_LAUNCHER = "ended by the launcher"


def launcher_account(launcher: str, output: str, pids: dict) -> tuple:
    """What the launcher's output says: ({rank: how it ended}, the failure it reports). How a
    rank ended: "signal N" or "exit N" (torchrun names each rank that failed), or
    ENDED_BY_LAUNCHER (torchrun sent it SIGTERM; hydra's cleanup ran while it was running). The
    failure: hydra's block ("rank 0 (PID 6) signal 9"); torchrun's root cause. ringcomm-run
    prints neither."""
    ended, said = {}, ""
    rank_of = {pid: rank for rank, pid in pids.items()}
    if launcher == "mpirun":
        block = HYDRA_BLOCK.search(output)
        if block:
            code = block[2]
            how = f"signal {code}" if f"(signal {code})" in output else f"exit {code}"
            said = f"rank {rank_of.get(int(block[1]), '?')} (PID {block[1]}) {how}"
        if HYDRA_CLEANUP in output:
            ended = dict.fromkeys(pids, ENDED_BY_LAUNCHER)
    elif launcher == "torchrun":
        for rank, code in TORCHRUN_FAILURE.findall(output):
            ended[int(rank)] = f"signal {-int(code)}" if int(code) < 0 else f"exit {code}"
        root = TORCHRUN_FAILURE.search(output, max(output.rfind("Root Cause"), 0))
        if root:
            said = f"rank {root[1]} {ended[int(root[1])]}"
        for pid in TORCHRUN_ENDS.findall(output):
            if int(pid) in rank_of:
                ended[rank_of[int(pid)]] = ENDED_BY_LAUNCHER
    return ended, said


def draw_trial(rng: random.Random, launchers: list) -> dict:
    """One job's parameters, drawn in a fixed order: a seed replays every job."""
    size = rng.randint(2, 8)
    return {
        "size": size,
        "victim": rng.randrange(size),
        "fault": rng.choice(FAULTS),
        "transport": rng.choice(["shm", "tcp"]),
        "at_iteration": rng.randint(0, 12),
        "delay_ms": rng.randint(0, 40),
        "seed": rng.randrange(1 << 30),
        "launcher": rng.choice(launchers),
    }


def run_trial(drawn: dict, directory):
    size, victim, fault = drawn["size"], drawn["victim"], drawn["fault"]
    transport, launcher = drawn["transport"], drawn["launcher"]
    at_iteration, delay_ms, seed = drawn["at_iteration"], drawn["delay_ms"], drawn["seed"]
    args = [str(seed), str(victim), fault, str(at_iteration), str(delay_ms), str(directory)]
    command = shlex.join([*launch_command(launcher, size), str(WORKERS / "fault.py"), *args])
    (directory / "tmp").mkdir()
    env = worker_env(
        {
            "RINGCOMM_TIMEOUT": str(TIMEOUT),
            "RINGCOMM_TRANSPORT": transport,
            "OMP_NUM_THREADS": "1",  # torchrun's workers import torch
            "TMPDIR": str(directory / "tmp"),  # where ringcomm's secret files go
            "COMMAND": command,
            "DIR": str(directory),
            "STUCK": str(int(teardown(launcher, fault) + STUCK_AFTER)),
            "UNSTUCK": str(UNSTUCK),
        }
    )
    env.pop("XDG_RUNTIME_DIR", None)
    started = time.monotonic()
    # --kill-child: should this script outlive the timeout, the job dies with its namespaces.
    isolated = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    try:
        done = subprocess.run(
            [*isolated, "sh", "-c", JOB], env=env, capture_output=True, text=True, timeout=180
        )
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        stdout, stderr = (
            out.decode(errors="replace") if isinstance(out, bytes) else out or ""
            for out in (expired.stdout, expired.stderr)
        )
    trial = {
        "launcher": launcher,
        "size": size,
        "victim": victim,
        "fault": fault,
        "transport": transport,
        "at_iteration": at_iteration,
        "delay_ms": delay_ms,
        "seconds": time.monotonic() - started,
    }
    job = {"exit": None, "stuck": [], "stopped_killed": [], "hung": False}
    results, left = {}, {"shm": [], "files": [], "listen": [], "procs": []}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            results[result["rank"]] = result
        elif line.startswith("LAUNCHER_EXIT "):
            job["exit"] = line.split()[1]
        elif line.startswith("STUCK_PROC "):
            job["stuck"].append(line[len("STUCK_PROC ") :])
        elif line.startswith("STOPPED_KILLED "):
            job["stopped_killed"].append(int(line.split()[1]))
        elif line.startswith("LAUNCHER_HUNG"):
            job["hung"] = True
        elif line.startswith("LEFT_SHM"):
            left["shm"] = line.split()[1:]
        elif line.startswith("LEFT_FILES"):
            left["files"] = line.split()[1:]
        elif line.startswith("LEFT_LISTEN"):
            left["listen"] = line.split()[1:]
        elif line.startswith("LEFT_PROC"):
            left["procs"].append(line)
    pids = {int(p.name.split(".")[1]): int(p.read_text()) for p in directory.glob("pid.*")}
    job["pids"] = pids
    job["ended"], job["said"] = launcher_account(launcher, stdout + "\n" + stderr, pids)
    if launcher == "mpirun" and HYDRA_CLEANUP in stdout:
        # MPICH's own segment, which it removes at the end of MPI_Finalize, where the ranks
        # hydra killed never got: MPICH's leftover, not ringcomm's.
        left["shm"] = [name for name in left["shm"] if not name.startswith("mpich_shm_")]
    fault_file = directory / "fault"
    job["fault_at"] = float(fault_file.read_text()) if fault_file.exists() else None
    return trial, results, left, job, stderr


def judge(trial, results, job):
    """(problems, seconds each survivor took to name the victim, survivors the launcher ended
    before they could report)."""
    launcher, fault, victim = trial["launcher"], trial["fault"], trial["victim"]
    ended, fault_at = job["ended"], job["fault_at"]
    if fault_at is None:
        # The fault was due after the loop ended: nothing to detect.
        return ["the victim never struck"], [], []
    # Launchers that end the survivors once a rank has failed, with no grace: hydra kills them
    # at once when a rank dies (a stopped rank fails nothing until the job's script kills it,
    # past every survivor's deadline; an exiting one calls MPI_Finalize: hydra ends nobody
    # early), torchrun's agent sends SIGTERM 0.1 s (its monitor interval) after any worker
    # failed, a survivor too. A survivor that saw a peer over TCP die first waits up to 1 s for
    # a reason that peer left in the store (kChainWait, src/core/failure_records.cc): under
    # hydra and torchrun it is ended meanwhile, before it can print anything. (Over shared
    # memory it sees the dead process and reports after 0.1 s, which torchrun may allow.)
    may_end_survivors = launcher == "torchrun" or (launcher == "mpirun" and fault == "kill")
    problems, detections, excused = [], [], []
    for rank in range(trial["size"]):
        if rank == victim:
            continue
        result = results.get(rank)
        if result is None:
            if may_end_survivors and ended.get(rank) == ENDED_BY_LAUNCHER:
                excused.append(rank)
            else:
                problems.append(f"rank {rank} reported nothing ({launcher} says: {ended})")
            continue
        if result["error"] is None:
            problems.append(f"rank {rank} finished without an error")
            continue
        if f"rank {victim}" not in result["message"]:
            problems.append(f"rank {rank} did not name rank {victim}: {result}")
        waited = result["at"] - fault_at
        detections.append(waited)
        if waited > TIMEOUT + SLACK:
            problems.append(f"rank {rank} took {waited:.1f} s: {result}")
    # A killed rank whose survivors were all ended before they could report: the launcher must
    # say what happened. torchrun names the rank; hydra only that a rank was killed (the PID it
    # prints is often another rank's: see HYDRA_BLOCK).
    if fault == "kill" and launcher == "torchrun" and ended.get(victim) != "signal 9":
        problems.append(f"torchrun did not say rank {victim} was killed: {job['said']}")
    if fault == "kill" and launcher == "mpirun" and not job["said"].endswith("signal 9"):
        problems.append(f"mpirun did not say a rank was killed: {job['said'] or '-'}")
    if fault != "kill" and not detections:
        # A stopped or exiting rank fails no launcher: only the survivors can name it.
        problems.append(f"no survivor named the {fault} of rank {victim}")
    if job["stuck"]:
        stuck = f"{launcher} had not returned {STUCK_AFTER + teardown(launcher, fault):.0f} s after"
        if launcher in ("mpirun", "torchrun") and fault == "stop":
            # MPI's way, not a ringcomm failure: every survivor named the victim, then blocked
            # in MPI_Finalize (mpi4py calls it at exit), which waits for every rank, the stopped
            # one too; hydra sees no failure, and the job would hang for ever. (Under `python -m
            # mpi4py` a survivor's exit(1) would be an MPI_Abort instead.) Required instead:
            # once the stopped rank is killed (the job's script does it, as an operator or a
            # time limit would), hydra cleans up and returns, leaving nothing. torchrun would
            # return by itself, 30 s after its SIGTERM, which a stopped rank does not take.
            if job["stopped_killed"] != [job["pids"].get(victim)]:
                killed = job["stopped_killed"]
                problems.append(f"{stuck} the stop; stopped, not the victim alone: {killed}")
        else:
            problems.append(f"{stuck} the {fault}: {job['stuck']}")
    if job["hung"] or job["exit"] in (None, "hung"):
        problems.append(f"{launcher} never returned, even with its stopped processes killed")
    elif job["exit"] == "0":
        problems.append(f"{launcher} exited 0")
    return problems, detections, excused


@pytest.mark.timeout(900)
@pytest.mark.skipif(not _can_isolate(), reason="needs root, iproute2 and unshare (mount/net/pid)")
def test_random_faults_are_named_by_every_survivor_and_leave_nothing(tmp_path):
    seed = int(os.environ.get("RINGCOMM_FAULT_SEED", str(random.randrange(1 << 31))))
    trials = int(os.environ.get("RINGCOMM_FAULT_TRIALS", "6"))
    launchers = _launchers()
    print(
        f"fault injection: {trials} jobs, RINGCOMM_FAULT_SEED={seed} "
        f"RINGCOMM_FAULT_LAUNCHERS={','.join(launchers)}"
    )
    rng = random.Random(seed)
    drawn = [draw_trial(rng, launchers) for _ in range(trials)]
    for number in range(trials):
        (tmp_path / str(number)).mkdir()
    # Two jobs at a time: each lives in its own namespaces, and spends most of its time waiting
    # for a timeout, a grace period or a launcher's teardown.
    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL_JOBS) as pool:
        ran = list(pool.map(run_trial, drawn, [tmp_path / str(n) for n in range(trials)]))
    problems = []
    for number, (trial, results, left, job, stderr) in enumerate(ran):
        where = f"seed {seed} job {number} {trial}"
        found, detections, excused = judge(trial, results, job)
        if found:
            problems.append(f"{where}: " + "; ".join(found) + f"\n{stderr[-3000:]}")
        if any(left.values()):
            problems.append(f"{where}: left behind {left}")
        stuck = f", stuck: killed stopped {job['stopped_killed']}" if job["stuck"] else ""
        said = f" ({job['said']})" if job["said"] else ""
        print(
            f"job {number}: {trial['launcher']}, {trial['size']} ranks, {trial['fault']} rank "
            f"{trial['victim']} at collective {trial['at_iteration']} + {trial['delay_ms']} ms "
            f"over {trial['transport']}: named by {len(detections)} of {trial['size'] - 1} after "
            f"{min(detections, default=-1):.2f}-{max(detections, default=-1):.2f} s "
            f"(errors {sorted({r['error'] for r in results.values() if r['error']})}), ended by "
            f"the launcher {excused}, launcher exit {job['exit']}{said}{stuck}, job "
            f"{trial['seconds']:.1f} s"
        )
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Link faults between two hosts (network namespaces), shaped with tc netem.

SUBNET = "10.231.78"
SECRET = {"RINGCOMM_SECRET": "fault-injection-test-secret-0123456789abcdef"}


@pytest.fixture(scope="module")
def hosts():
    if shutil.which("tc") is None:
        pytest.skip("needs tc (iproute2) for netem")
    with namespace_hosts(SUBNET, tag="rf") as made:
        yield made


def netem(hosts, host: int, *spec: str) -> None:
    command = ["tc", "qdisc", "replace", "dev", hosts.links[host], "root", "netem", *spec]
    done = subprocess.run(hosts.command(host, command), capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"tc netem unavailable: {done.stderr.strip()}")


def clear_netem(hosts) -> None:
    for host in (0, 1):
        subprocess.run(
            hosts.command(host, ["tc", "qdisc", "del", "dev", hosts.links[host], "root"]),
            capture_output=True,
        )


def run_across_hosts(hosts, port, count, during=None, env=None):
    """4 ranks (2 per host) of the soak worker over the link; `during` runs while they do."""
    procs = start_ranks_on_hosts(
        hosts,
        [str(WORKERS / "soak.py"), str(count), str(port)],
        {"SOAK_TRANSPORTS": "auto", **SECRET, **(env or {})},
        f"{SUBNET}.1",
        port,
    )
    if during is not None:
        during()
    finished = finish_ranks(procs, time.monotonic() + 150)
    return [(result, code, err) for result, code, _, err in finished]


LINK_FAULTS = {
    "loss-5%": ["loss", "5%"],
    "corrupt-1%": ["corrupt", "1%"],
    "delay-loss": ["delay", "20ms", "5ms", "loss", "2%"],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", list(LINK_FAULTS))
def test_lossy_or_corrupting_link_gives_correct_results(hosts, fault):
    """TCP retransmits what netem drops and its checksum rejects what netem corrupts: every
    result is still exact."""
    try:
        for host in (0, 1):
            netem(hosts, host, *LINK_FAULTS[fault])
        started = time.monotonic()
        results = run_across_hosts(hosts, 29631 + list(LINK_FAULTS).index(fault), 200)
        print(f"{fault}: 200 collectives across the link in {time.monotonic() - started:.1f} s")
    finally:
        clear_netem(hosts)
    for result, code, err in results:
        assert result is not None and code == 0, err[-3000:]
        assert result["failures"] == [], result["failures"][:5]
    assert len({r["digest"] for r, _, _ in results}) == 1


def iptables_drop(hosts, host: int, action: str, probability: str) -> list:
    return hosts.command(
        host,
        [
            "iptables",
            action,
            "INPUT",
            "-i",
            hosts.links[host],
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            probability,
            "-j",
            "DROP",
        ],
    )


def dropped_packets(hosts, host: int) -> int:
    listing = subprocess.run(
        hosts.command(host, ["iptables", "-L", "INPUT", "-v", "-n", "-x"]),
        capture_output=True,
        text=True,
    ).stdout
    rules = [line.split() for line in listing.splitlines() if "statistic" in line]
    return sum(int(rule[0]) for rule in rules)


@pytest.mark.timeout(300)
def test_link_dropping_packets_at_random_gives_correct_results(hosts, tmp_path):
    """5% of the packets into each host dropped by iptables (kernels without netem have its
    statistic match), from when every rank is connected: TCP retransmits, every result is
    exact. (Dropped during setup, a SYN costs 1 s and more per retry: most of a run's time.)"""
    if shutil.which("iptables") is None:
        pytest.skip("needs iptables")
    added = []

    def start_dropping():
        deadline = time.monotonic() + 90
        while len(list(tmp_path.iterdir())) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # every rank connected and running collectives
        for host in (0, 1):
            if subprocess.run(iptables_drop(hosts, host, "-A", "0.05")).returncode == 0:
                added.append(host)

    try:
        started = time.monotonic()
        results = run_across_hosts(
            hosts, 29635, 45, during=start_dropping, env={"SOAK_READY_DIR": str(tmp_path)}
        )
        if not added:
            pytest.skip("iptables statistic match unavailable")
        dropped = sum(dropped_packets(hosts, host) for host in added)
        print(
            f"iptables 5% loss: 45 collectives across the link in "
            f"{time.monotonic() - started:.1f} s, {dropped} packets dropped"
        )
    finally:
        for host in added:
            subprocess.run(iptables_drop(hosts, host, "-D", "0.05"), capture_output=True)
    for result, code, err in results:
        assert result is not None and code == 0, err[-3000:]
        assert result["failures"] == [], result["failures"][:5]
    assert len({r["digest"] for r, _, _ in results}) == 1
    assert dropped > 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("down_seconds", [1.0, 8.0], ids=["short-flap", "long-flap"])
def test_flapping_link_recovers_or_names_a_peer(hosts, down_seconds, tmp_path):
    """The link goes down and comes back. Shorter than RINGCOMM_LINK_TIMEOUT (4 s here), TCP
    retransmits and every result is exact; longer, the ranks name a peer (the link is dead)."""
    link_timeout = 4.0

    def flap():
        deadline = time.monotonic() + 90
        while len(list(tmp_path.iterdir())) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # every rank connected and running collectives
        hosts.cut(1)
        time.sleep(down_seconds)
        hosts.mend(1)

    results = run_across_hosts(
        hosts,
        29641 if down_seconds < link_timeout else 29642,
        1500,
        during=flap,
        env={
            "RINGCOMM_LINK_TIMEOUT": str(link_timeout),
            "RINGCOMM_TIMEOUT": "30",
            "SOAK_READY_DIR": str(tmp_path),
        },
    )
    for result, code, err in results:
        assert result is not None, err[-3000:]
        if down_seconds < link_timeout:
            assert code == 0 and result["failures"] == [], (result["failures"][:3], err[-2000:])
        else:
            # The soak worker records the error as a failure and stops: it must name a peer.
            assert result["failures"], result
            assert any("rank " in f for f in result["failures"]), result["failures"][:3]
