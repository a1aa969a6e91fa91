"""A worker of an elastic ``ringcomm-run`` job: where ``ringcomm.init()`` gets its rank, and
where ``ringcomm.torch.elastic`` reads the driver's host-change notices.

The driver starts a worker with its host, its slot there and the generation it joins
(RINGCOMM_ELASTIC_HOST, _SLOT, _GENERATION). Its first ``init()`` reads its place in that
generation; every later one is a reset, as in Horovod: the worker says it is ready to leave
the generation it was in, and waits until the driver has heard from every worker of it and
answers with its place in the next one, or with its removal.
"""

from __future__ import annotations

import os
from typing import Optional

from ringcomm import _core
from ringcomm.elastic import protocol
from ringcomm.elastic.protocol import HostUpdateResult

# How long one wait for the driver's answer lasts; the worker waits again while the driver
# is alive (the driver ends the job when it cannot go on).
_ANSWER_POLL_SECONDS = 5.0


class WorkerRemovedError(RuntimeError):
    """This worker has no place in the job's next generation (Horovod's message)."""


class _Session:
    """This process's standing with the driver, kept across init() and shutdown()."""

    def __init__(self, timeout: float, secret: bytes):
        host, _, port = os.environ["RINGCOMM_STORE"].rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.secret = secret
        self.store = _core.TcpStore(self.address[0], self.address[1], timeout, secret)
        self.host = os.environ["RINGCOMM_ELASTIC_HOST"]
        self.slot = int(os.environ["RINGCOMM_ELASTIC_SLOT"])
        self.name = protocol.worker_name(self.host, self.slot)
        self.generation: Optional[int] = None  # the one this process is in
        self.notices_before = 0  # notices the driver had sent when it placed us


_session: Optional[_Session] = None


def active() -> bool:
    """Whether this process is a worker of an elastic ringcomm-run job."""
    return os.environ.get("RINGCOMM_ELASTIC") == "1"


def _the_session(timeout: float, secret: bytes) -> _Session:
    global _session
    if _session is None:
        _session = _Session(timeout, secret)
    return _session


def join(timeout: float, secret: bytes):
    """(rank, size, store of this generation's rendezvous, its data links' secret, generation)
    for this process's next generation; raises WorkerRemovedError when it has none."""
    session = _the_session(timeout, secret)
    if session.generation is None:
        generation = int(os.environ["RINGCOMM_ELASTIC_GENERATION"])
    else:
        session.store.set(protocol.ready_key(session.generation, session.name), b"1")
        generation = session.generation + 1
    answer = _wait_for(session, protocol.slot_key(generation, session.name))
    slot, notices, reason = protocol.decode_answer(answer)
    if slot is None:
        session.generation = None
        raise WorkerRemovedError(
            f"{session.host}[{session.slot}] has been removed from elastic job ({reason})"
        )
    session.generation = generation
    session.notices_before = notices
    # The generation's own connection to the store: its communicators' rendezvous, nothing else.
    connection = _core.TcpStore(session.address[0], session.address[1], timeout, secret)
    store = _core.PrefixStore(protocol.job_prefix(generation), connection)
    return slot, store, protocol.generation_secret(secret, generation), generation


def _wait_for(session: _Session, key: str) -> bytes:
    while True:
        try:
            return session.store.get(key, _ANSWER_POLL_SECONDS)
        except _core.TimeoutError:
            continue  # the driver has not heard from every worker yet


def notices_after(seen: int) -> list:
    """[(number, HostUpdateResult)] for the driver's notices after ``seen`` and after those it
    had sent when it placed this worker; [] outside an elastic job."""
    if _session is None or _session.generation is None:
        return []
    count = _session.store.add(protocol.NOTICE_COUNT, 0)
    first = max(seen, _session.notices_before) + 1
    return [
        (n, HostUpdateResult(int(_session.store.get(protocol.notice_key(n), 30.0))))
        for n in range(first, count + 1)
    ]
