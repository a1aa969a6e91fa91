"""Strangers against a job: a process that can reach its ports but has no secret must not join,
read, write or inject anything, nor make the job fail, hold memory or run out of descriptors.

The store is attacked directly (it is the launcher's, or rank 0's, in a real job); the ranks'
data ports are found the way an attacker on the host would (/proc) and flooded during
rendezvous and while the job runs. Results must stay exact.
"""

import os
import socket
import struct
import threading
import time

import pytest
from harness import assert_all_succeeded, run_job

from ringcomm import _core, _secret

HELLO_BYTES, REPLY_BYTES = 38, 78


def stranger_connections(port: int, count: int, payload: bytes = b"") -> list:
    """``count`` connections to ``port``, each sending ``payload`` (kept open)."""
    opened = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            if payload:
                s.sendall(payload)
            opened.append(s)
        except OSError:
            pass  # refused or reset: what a defended port may do
    return opened


def forged_reply(claims_rank: int, to: int) -> bytes:
    """A handshake reply with a made-up proof, claiming to be a rank."""
    magic, version, data = 0x48414352, 1, 2
    return struct.pack("<IBBii", magic, version, data, claims_rank, to) + os.urandom(64)


def test_store_refuses_strangers_and_keeps_serving():
    secret = _secret.new_secret()
    server = _core.TcpStoreServer("127.0.0.1", 0, secret)
    store = _core.TcpStore("127.0.0.1", server.port, 10.0, secret)
    store.set("job", b"value")
    baseline = len(os.listdir("/proc/self/fd"))
    # Without the secret: no store object can even be made.
    with pytest.raises(RuntimeError, match="proof"):
        _core.TcpStore("127.0.0.1", server.port, 5.0, b"a guess")
    # A flood of idle connections, half frames and random handshakes.
    frame = struct.pack("<IB", 200 << 20, 1)  # a "set" announcing 200 MiB, never sent
    flood = stranger_connections(server.port, 600)
    flood += stranger_connections(server.port, 50, frame)
    flood += stranger_connections(server.port, 50, os.urandom(REPLY_BYTES))
    started = time.monotonic()
    for i in range(20):
        store.set(f"k{i}", b"x")
        assert store.get(f"k{i}", 5.0) == b"x"
    assert time.monotonic() - started < 5.0
    assert store.get("job", 1.0) == b"value"  # nothing a stranger sent took effect
    # The server did not keep them all: at most its handshake quota is open at once.
    descriptors = len(os.listdir("/proc/self/fd")) - baseline
    assert descriptors <= 700 + 256 + 8, descriptors  # our 700 client ends + its quota
    assert server.refused_connections >= 600 - 256
    for s in flood:
        s.close()
    server.stop()


def listening_ports(pid: int) -> set:
    """The TCP ports process ``pid`` listens on, found through /proc as any local user can."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        ports.add(int(fields[1].split(":")[1], 16))
        except OSError:
            pass
    return ports


def attack_ranks(stop: threading.Event, found: set) -> None:
    """Finds the job's ranks (python processes running attacked.py) and floods every port they
    listen on: idle connections, garbage, and forged hellos claiming to be rank 1."""
    held = []
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"attacked.py" not in f.read():
                        continue
            except OSError:
                continue
            for port in listening_ports(int(pid)) - found:
                found.add(port)
                held += stranger_connections(port, 40)
                held += stranger_connections(port, 10, os.urandom(10))
                held += stranger_connections(port, 10, forged_reply(1, 0))
        time.sleep(0.01)
    for s in held:
        s.close()


@pytest.mark.timeout(300)
def test_job_over_tcp_stays_exact_while_strangers_flood_its_ports():
    stop, found = threading.Event(), set()
    attacker = threading.Thread(target=attack_ranks, args=(stop, found))
    attacker.start()
    try:
        # Rank 1 arrives 3 s late: rank 0 waits in setup, its port open, while the flood lands
        # (a data port is open only until every peer has connected).
        outcomes = run_job(
            2,
            "attacked.py",
            ["300"],
            env={"RINGCOMM_TRANSPORT": "tcp"},
            per_rank_env={1: {"TEST_DELAY_INIT": "3"}},
            deadline=240,
        )
    finally:
        stop.set()
        attacker.join()
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["error"] is None, outcome.describe()
        assert outcome.result["wrong"] == 0, outcome.describe()
    assert found, "the attacker found no port to flood (the test saw nothing)"
    # Rank 0 dropped the strangers (and says so), and took rank 1's connection among them.
    assert "did not prove the job's secret" in outcomes[0].stderr, outcomes[0].stderr
