"""Randomized fault injection: from a seeded RNG (printed, for replay), jobs of 2-8 ranks under
ringcomm-run in which one rank is SIGKILLed, SIGSTOPped (a late peer) or exits early at a random
point of a loop of mixed collectives (tests/workers/fault.py). Every survivor must raise an error
naming the victim within the timeout; nothing may hang; and once the launcher returns, no
/dev/shm/ringcomm-* segment, rank process or listening port may be left.

Each job runs in fresh mount, network and PID namespaces (needs root and unshare, as on the
development and CI machines): its own /dev/shm, its own loopback and its own process table, so
that what is left in them is the job's alone. Skipped otherwise.

Link faults (flap, 5% loss, corruption) on the link between two "hosts" (network namespaces, as
tests/test_multihost.py makes them) shaped with tc netem: results stay correct, or the error
names a peer. Skipped without root, iproute2 or tc. Where the kernel has no netem (the
development VM), the same 5% loss is made by iptables' random drops instead.

RINGCOMM_FAULT_SEED replays a run; RINGCOMM_FAULT_TRIALS sets the number of jobs (8 in CI, about
a minute and a half on 2 cores).
"""

import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time

import pytest
from harness import WORKERS, finish_ranks, start_ranks_on_hosts, worker_env

from ringcomm.bench import netns

TIMEOUT = 3.0  # RINGCOMM_TIMEOUT of the jobs: a late (stopped) peer is named after this long
# Beyond the timeout: the health check (100 ms), the abort travelling to the other survivors,
# and Python on 2 busy cores.
SLACK = 7.0
GRACE = 5  # ringcomm-run --grace: how long survivors may go on after the first one failed
FAULTS = ["kill", "stop", "exit"]


def _can_isolate() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


# What the job's namespaces hold once the launcher has returned: the /dev/shm entries, the
# listening TCP sockets, and every process but this script's own.
LEFTOVERS = r"""
echo LEFT_SHM $(ls /dev/shm)
echo LEFT_LISTEN $(awk 'NR > 1 && $4 == "0A" {print $2}' /proc/net/tcp /proc/net/tcp6)
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  [ "$n" = 1 ] || [ "$n" = "$$" ] && continue
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case "$c" in ""|*"awk "*|*"tr "*) ;; *) echo LEFT_PROC $n $c ;; esac
done
"""


def run_trial(rng: random.Random, directory):
    size = rng.randint(2, 8)
    victim = rng.randrange(size)
    fault = rng.choice(FAULTS)
    transport = rng.choice(["shm", "tcp"])
    at_iteration = rng.randint(0, 12)
    delay_ms = rng.randint(0, 40)
    seed = rng.randrange(1 << 30)
    args = [str(seed), str(victim), fault, str(at_iteration), str(delay_ms), str(directory)]
    launch = [sys.executable, "-m", "ringcomm.launch", "--grace", str(GRACE), "-np", str(size)]
    command = shlex.join([*launch, str(WORKERS / "fault.py"), *args])
    script = (
        "mount -t tmpfs -o size=512m tmpfs /dev/shm && ip link set lo up && "
        f"{{ {command}; echo LAUNCHER_EXIT $?; }}\n{LEFTOVERS}"
    )
    started = time.monotonic()
    done = subprocess.run(
        ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
        env=worker_env({"RINGCOMM_TIMEOUT": str(TIMEOUT), "RINGCOMM_TRANSPORT": transport}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    trial = {
        "size": size,
        "victim": victim,
        "fault": fault,
        "transport": transport,
        "at_iteration": at_iteration,
        "delay_ms": delay_ms,
        "seconds": time.monotonic() - started,
    }
    results, left = {}, {"shm": [], "listen": [], "procs": []}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            results[result["rank"]] = result
        elif line.startswith("LEFT_SHM"):
            left["shm"] = line.split()[1:]
        elif line.startswith("LEFT_LISTEN"):
            left["listen"] = line.split()[1:]
        elif line.startswith("LEFT_PROC"):
            left["procs"].append(line)
    fault_file = directory / "fault"
    fault_at = float(fault_file.read_text()) if fault_file.exists() else None
    return trial, results, left, fault_at, done


@pytest.mark.timeout(900)
@pytest.mark.skipif(not _can_isolate(), reason="needs root, iproute2 and unshare (mount/net/pid)")
def test_random_faults_are_named_by_every_survivor_and_leave_nothing(tmp_path):
    seed = int(os.environ.get("RINGCOMM_FAULT_SEED", str(random.randrange(1 << 31))))
    trials = int(os.environ.get("RINGCOMM_FAULT_TRIALS", "8"))
    print(f"fault injection: {trials} jobs, RINGCOMM_FAULT_SEED={seed}")
    rng = random.Random(seed)
    problems = []
    for number in range(trials):
        directory = tmp_path / str(number)
        directory.mkdir()
        trial, results, left, fault_at, done = run_trial(rng, directory)
        victim = trial["victim"]
        where = f"seed {seed} job {number} {trial}"
        detections = []
        for rank in range(trial["size"]):
            if rank == victim:
                continue
            result = results.get(rank)
            if result is None:
                problems.append(f"{where}: rank {rank} reported nothing\n{done.stderr[-3000:]}")
                continue
            if fault_at is None:
                # The fault was due after the loop ended for this rank: nothing to detect.
                problems.append(f"{where}: the victim never struck")
                continue
            if result["error"] is None:
                problems.append(f"{where}: rank {rank} finished without an error")
                continue
            if f"rank {victim}" not in result["message"]:
                problems.append(f"{where}: rank {rank} did not name rank {victim}: {result}")
            waited = result["at"] - fault_at
            detections.append(waited)
            if waited > TIMEOUT + SLACK:
                problems.append(f"{where}: rank {rank} took {waited:.1f} s: {result}")
        if left["shm"] or left["listen"] or left["procs"]:
            problems.append(f"{where}: left behind {left}")
        print(
            f"job {number}: {trial['size']} ranks, {trial['fault']} rank {victim} at collective "
            f"{trial['at_iteration']} + {trial['delay_ms']} ms over {trial['transport']}: "
            f"named after {min(detections, default=-1):.2f}-{max(detections, default=-1):.2f} s "
            f"(errors {sorted({r['error'] for r in results.values() if r['error']})}), "
            f"job {trial['seconds']:.1f} s"
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
    try:
        with netns.two_hosts(SUBNET, tag="rf") as made:
            yield made
    except netns.NamespacesUnavailableError as reason:
        pytest.skip(str(reason))


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
