"""Two "hosts" on one machine: network namespaces joined by a veth pair, each with its own address.

Ranks 0-1 run in one namespace and ranks 2-3 in the other, rendezvous through MASTER_ADDR (rank 0
serves the store), talk shared memory within a namespace and TCP across, and listen on the address
that reaches the store. Then the link is cut mid-run: every rank must raise, naming a peer, within
the timeout. Needs root and iproute2 (skipped otherwise).
"""

import shutil
import subprocess
import sys
import time

import pytest
from harness import WORKERS, namespace_hosts, results_of_ranks, start_ranks_on_hosts, worker_env

# Addresses of our own test hosts, inside namespaces this test creates and deletes.
SUBNET = "10.231.77"


@pytest.fixture(scope="module")
def hosts_for_module():
    with namespace_hosts(SUBNET) as hosts:
        yield hosts


@pytest.fixture
def two_hosts(hosts_for_module):
    """The two hosts, their link up; a test that cuts it leaves it mended for the next."""
    yield hosts_for_module
    hosts_for_module.mend(1)


# What a job across hosts needs besides the rendezvous address: the same secret everywhere.
SECRET = {"RINGCOMM_SECRET": "multihost-test-secret-0123456789abcdef"}


def start_ranks(hosts, worker_args, env_extra, port, secret=SECRET):
    return start_ranks_on_hosts(hosts, worker_args, {**secret, **env_extra}, f"{SUBNET}.1", port)


collect = results_of_ranks


def test_collectives_across_two_hosts(two_hosts):
    procs = start_ranks(two_hosts, [str(WORKERS / "collectives.py"), "65537"], {}, 29611)
    results = collect(procs, time.monotonic() + 240)
    for rank, result in enumerate(results):
        assert result["failures"] == [], result["failures"][:10]
        expected = [
            "self" if p == rank else ("shm" if p // 2 == rank // 2 else "tcp") for p in range(4)
        ]
        assert result["transports"] == expected


def test_job_across_hosts_without_a_secret_is_refused_naming_the_variable(two_hosts):
    timeout = 5.0
    procs = start_ranks(
        two_hosts,
        [str(WORKERS / "launched.py")],
        {"LAUNCHED_TIMEOUT": str(timeout)},
        29615,
        secret={},
    )
    for rank, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        assert proc.returncode != 0, rank
        if rank >= 2:  # on the other host: they cannot read rank 0's host-local secret
            assert "RINGCOMM_SECRET" in err and "another host" in err, err[-2000:]
        else:  # the refused ranks never arrive; the store's host names one after the timeout
            assert proc.returncode > 0, (rank, err[-2000:])
            assert "rank 2" in err or "rank 3" in err or "store" in err, err[-2000:]


def test_cut_link_is_reported_by_every_rank(two_hosts):
    timeout = 5.0
    procs = start_ranks(
        two_hosts,
        [str(WORKERS / "failures.py"), "none", "-1"],
        {"RINGCOMM_TIMEOUT": str(timeout), "RINGCOMM_TRANSPORT": "auto"},
        29612,
    )
    time.sleep(4.0)  # let them connect and stream all-reduces across the link
    two_hosts.cut(1)
    results = collect(procs, time.monotonic() + 60)
    for result in results:
        assert result["error"] in ("TimeoutError", "TransportError"), result
        assert "rank " in result["message"] and result["peer"] is not None, result
        assert result["waited"] < timeout + 10.0, result


def test_cut_link_is_named_within_the_link_timeout_not_the_collective_timeout(two_hosts, tmp_path):
    # The collectives may wait 300 s; TCP keepalive and the user timeout find the dead link in
    # about RINGCOMM_LINK_TIMEOUT seconds.
    link_timeout = 3.0
    procs = start_ranks(
        two_hosts,
        [str(WORKERS / "failures.py"), "none", "-1"],
        {
            "RINGCOMM_TIMEOUT": "300",
            "RINGCOMM_LINK_TIMEOUT": str(link_timeout),
            "TEST_READY_DIR": str(tmp_path),
        },
        29613,
    )
    deadline = time.monotonic() + 120
    while len(list(tmp_path.iterdir())) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)  # every rank connected and streaming (setup waits use the 300 s)
    two_hosts.cut(1)
    results = collect(procs, time.monotonic() + 90)
    for result in results:
        assert result["error"] in ("TimeoutError", "TransportError"), result
        assert "rank " in result["message"] and result["peer"] is not None, result
        assert result["waited"] < link_timeout + 15.0, result
    assert any("is dead" in r["message"] for r in results), [r["message"] for r in results]


# The firewall mark on the relay's own connections, which its DNAT rule leaves alone.
RELAY_MARK = 7


@pytest.mark.parametrize(
    "protection, link_gbits",
    [("auto", 1), ("integrity", 10), ("encrypt", 10), ("off", 1), ("auto", 10)],
    ids=["auto-1gbit", "integrity-10gbit", "encrypt-10gbit", "off", "auto-10gbit"],
)
def test_relay_rewriting_frames_is_caught_where_links_are_sealed(two_hosts, protection, link_gbits):
    """Rank 1's connections go through a relay (tests/workers/relay.py) that passes the handshake
    and then changes a byte of every 64 KiB it forwards. Where the frames are sealed (auto on a
    link of at most 2.5 Gbit/s; integrity; encrypt) both ranks raise, rank 0 naming rank 1 and
    the failed check, and no result is ever wrong. Unsealed (off; auto on a faster link, which it
    leaves unchecked for speed), the relay's bytes reach rank 0's results, as they did before
    links were sealed: so the relay is known to work, and what auto leaves open is on record."""
    if not shutil.which("iptables"):
        pytest.skip("iptables not installed")
    relay = subprocess.Popen(
        two_hosts.command(1, [sys.executable, str(WORKERS / "relay.py"), str(RELAY_MARK)]),
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(relay.stdout.readline().split()[1])
    rule = ["OUTPUT", "-p", "tcp", "-d", two_hosts.address(0), "-m", "mark", "!", "--mark"]
    rule += [str(RELAY_MARK), "-j", "DNAT", "--to-destination", f"{two_hosts.address(1)}:{port}"]
    nat = ["iptables", "-t", "nat"]
    subprocess.run(two_hosts.command(1, [*nat, "-A", *rule]), check=True)
    try:
        procs = [
            subprocess.Popen(
                two_hosts.command(rank, [sys.executable, str(WORKERS / "relayed.py")]),
                env=worker_env(
                    {
                        "RANK": str(rank),
                        "WORLD_SIZE": "2",
                        "MASTER_ADDR": two_hosts.address(0),
                        "MASTER_PORT": "29617",
                        "RINGCOMM_WIRE_PROTECTION": protection,
                        # The link's figures given, so that no probe runs at setup (the relay's
                        # bytes then land in the collectives), and auto decides from its rate.
                        "RINGCOMM_LINK_LATENCY_US": "50",
                        "RINGCOMM_LINK_GBITS": str(link_gbits),
                        # The relay takes rank 1's connections: rank 1 must make the link. With
                        # links made on first use, either rank may (whichever dials first).
                        "RINGCOMM_LINKS": "at_start",
                        **SECRET,
                    }
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in range(2)
        ]
        results = collect(procs, time.monotonic() + 90)
    finally:
        subprocess.run(two_hosts.command(1, [*nat, "-D", *rule]), check=False)
        relay.kill()
        relay_output = relay.communicate()[0]
    tampered = relay_output.count("tampered")
    print(f"RINGCOMM_WIRE_PROTECTION={protection}, {link_gbits} Gbit/s: {tampered} bytes changed")
    print(results)
    assert tampered > 0, relay_output  # else the relay saw no data link: the test proves nothing
    if protection == "off" or (protection == "auto" and link_gbits > 2.5):
        assert results[0]["error"] is not None or not all(results[0]["exact"]), results
        return
    for result in results:
        assert result["error"] == "TransportError", results
        assert all(result["exact"]), results  # nothing the relay touched was delivered
    assert "rank 1" in results[0]["message"], results[0]
    assert "authentication check" in results[0]["message"], results[0]
