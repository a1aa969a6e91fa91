"""Two "hosts" on one machine: network namespaces joined by a veth pair, each with its own address.

Ranks 0-1 run in one namespace and ranks 2-3 in the other, rendezvous through MASTER_ADDR (rank 0
serves the store), talk shared memory within a namespace and TCP across, and listen on the address
that reaches the store. Then the link is cut mid-run: every rank must raise, naming a peer, within
the timeout. Needs root and iproute2 (skipped otherwise).
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from harness import WORKERS, worker_env

# Addresses of our own test hosts, inside namespaces this test creates and deletes.
SUBNET = "10.231.77"
NAMESPACES = (f"rca{os.getpid()}", f"rcb{os.getpid()}")
LINKS = (f"rcva{os.getpid()}"[:15], f"rcvb{os.getpid()}"[:15])


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create network namespaces")
    try:
        for ns in NAMESPACES:
            ip("netns", "add", ns)
        ip("link", "add", LINKS[0], "type", "veth", "peer", "name", LINKS[1])
        for index, (ns, link) in enumerate(zip(NAMESPACES, LINKS)):
            ip("link", "set", link, "netns", ns)
            ip("-n", ns, "addr", "add", f"{SUBNET}.{index + 1}/24", "dev", link)
            ip("-n", ns, "link", "set", link, "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as error:
        for ns in NAMESPACES:
            ip("netns", "delete", ns, check=False)
        pytest.skip(f"cannot create network namespaces here: {error.stderr.strip()}")
    yield
    for ns in NAMESPACES:
        ip("netns", "delete", ns, check=False)


def start_ranks(worker_args, env_extra, port):
    procs = []
    for rank in range(4):
        ns = NAMESPACES[rank // 2]
        env = worker_env(
            {
                "RANK": str(rank),
                "WORLD_SIZE": "4",
                "MASTER_ADDR": f"{SUBNET}.1",
                "MASTER_PORT": str(port),
                **env_extra,
            }
        )
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, *worker_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def collect(procs, deadline):
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert lines, f"rank exited {proc.returncode} without a result\n{out}\n{err}"
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    return results


def test_collectives_across_two_hosts(two_hosts):
    procs = start_ranks([str(WORKERS / "collectives.py"), "65537"], {}, 29611)
    results = collect(procs, time.monotonic() + 240)
    for rank, result in enumerate(results):
        assert result["failures"] == [], result["failures"][:10]
        expected = [
            "self" if p == rank else ("shm" if p // 2 == rank // 2 else "tcp") for p in range(4)
        ]
        assert result["transports"] == expected


def test_cut_link_is_reported_by_every_rank(two_hosts):
    timeout = 5.0
    procs = start_ranks(
        [str(WORKERS / "failures.py"), "none", "-1"],
        {"RINGCOMM_TIMEOUT": str(timeout), "RINGCOMM_TRANSPORT": "auto"},
        29612,
    )
    time.sleep(4.0)  # let them connect and stream all-reduces across the link
    ip("-n", NAMESPACES[1], "link", "set", LINKS[1], "down")
    results = collect(procs, time.monotonic() + 60)
    for result in results:
        assert result["error"] in ("TimeoutError", "TransportError"), result
        assert "rank " in result["message"] and result["peer"] is not None, result
        assert result["waited"] < timeout + 10.0, result
