"""Two "hosts" on one machine: network namespaces joined by a veth pair, each with its own address.

Ranks 0-1 run in one namespace and ranks 2-3 in the other, rendezvous through MASTER_ADDR (rank 0
serves the store), talk shared memory within a namespace and TCP across, and listen on the address
that reaches the store. Then the link is cut mid-run: every rank must raise, naming a peer, within
the timeout. Needs root and iproute2 (skipped otherwise).
"""

import subprocess
import time

import pytest
from harness import WORKERS, finish_ranks, start_ranks_on_hosts

from ringcomm.bench import netns

# Addresses of our own test hosts, inside namespaces this test creates and deletes.
SUBNET = "10.231.77"


@pytest.fixture(scope="module")
def hosts_for_module():
    try:
        with netns.two_hosts(SUBNET) as hosts:
            yield hosts
    except netns.NamespacesUnavailableError as reason:
        pytest.skip(str(reason))


@pytest.fixture
def two_hosts(hosts_for_module):
    """The two hosts, their link up; a test that cuts it leaves it mended for the next."""
    yield hosts_for_module
    hosts_for_module.mend(1)


# What a job across hosts needs besides the rendezvous address: the same secret everywhere.
SECRET = {"RINGCOMM_SECRET": "multihost-test-secret-0123456789abcdef"}


def start_ranks(hosts, worker_args, env_extra, port, secret=SECRET):
    return start_ranks_on_hosts(hosts, worker_args, {**secret, **env_extra}, f"{SUBNET}.1", port)


def collect(procs, deadline):
    results = []
    for result, code, out, err in finish_ranks(procs, deadline):
        assert result is not None, f"rank exited {code} without a result\n{out}\n{err}"
        results.append(result)
    return results


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
