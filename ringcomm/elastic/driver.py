"""The elastic driver in ``ringcomm-run``: starts workers on the slots discovery offers, and
moves the job from one generation to the next, with Horovod's rules.

A generation is a set of workers with ranks. It ends with a *round*, once every one of its
workers has either left it to meet again (a worker whose collective failed, or that was told
the hosts changed, calls ``init()`` again: it is *ready*), or exited (success or failure).
Then, as Horovod's driver does:

- a worker that exited 0 ends the job: its status is that of the round's workers;
- every worker failed: the job fails;
- the hosts of failed workers are blacklisted; if no host of the round is left, the job fails;
- more rounds than --reset-limit: the job fails;
- otherwise the driver waits (up to --elastic-timeout) for at least --min-np slots, assigns
  ranks to at most --max-np of them (the oldest hosts first, so rank 0 has the state), tells
  each ready worker its place or that it was removed, and starts workers on the new slots.

Meanwhile it runs the discovery script every second; when the hosts change so that the
assignment would, it posts a notice, which the workers' ``state.commit()`` /
``check_host_updates()`` turn into a HostsUpdatedInterrupt.

It runs in the launcher's main thread, polling: the store (for ready workers), the worker
processes (for exits), the discovery script, and the signals to pass on.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ringcomm import _core
from ringcomm._host import address_towards
from ringcomm._remote import DEFAULT_SSH, Ssh, start_on
from ringcomm.elastic import protocol
from ringcomm.elastic.discovery import HostManager, host_assignments
from ringcomm.elastic.protocol import HostUpdateResult

# How often the driver runs the discovery script (Horovod's DISCOVER_HOSTS_FREQUENCY_SECS).
DISCOVERY_INTERVAL_SECONDS = 1.0
# How often it looks at its workers and the store.
_POLL_SECONDS = 0.05
# Default --elastic-timeout (Horovod's ELASTIC_TIMEOUT_SECS; HOROVOD_ELASTIC_TIMEOUT too).
ELASTIC_TIMEOUT_SECONDS = 600.0

READY, SUCCESS, FAILURE = "ready", "success", "failure"


class JobFailedError(Exception):
    """The job cannot go on; the message says why."""


class _SignalError(Exception):
    """A signal came: pass it on and stop (status 128 + its number)."""

    def __init__(self, number: int):
        self.number = number


@dataclass(eq=False)
class ElasticDriver:
    """One elastic job: what it was started with (the launcher's arguments), and where it is."""

    hosts: HostManager
    command: list
    env: dict
    store: "_core.Store"
    start_np: int
    min_np: int
    max_np: int
    timeout: float
    reset_limit: Optional[int]
    grace: float
    signals: Any
    verbose: bool = False
    ssh: Ssh = DEFAULT_SSH
    store_port: Optional[int] = None  # where workers reach the store: env's RINGCOMM_STORE if not
    generation: int = field(default=-1, init=False)
    # The current generation's SlotInfo, in rank order.
    assignment: list = field(default_factory=list, init=False)
    states: dict = field(default_factory=dict, init=False)  # worker -> READY/SUCCESS/FAILURE
    exit_codes: dict = field(default_factory=dict, init=False)  # worker -> status this round
    workers: dict = field(default_factory=dict, init=False)  # worker name -> latest process
    notices: int = field(default=0, init=False)
    resets: int = field(default=0, init=False)
    _forwarded: int = field(default=0, init=False)
    _next_discovery: float = field(default=0.0, init=False)
    _started: float = field(default_factory=time.monotonic, init=False)

    # ---- the job ----------------------------------------------------------------------------
    def run(self) -> int:
        try:
            try:
                self._discover(first=True)
                self._start_generation(self._wait_for_slots(self.start_np), ready=[])
                while True:
                    status = self._step()
                    if status is not None:
                        return status
                    time.sleep(_POLL_SECONDS)
            except JobFailedError as failure:
                self._say(f"elastic job failed: {failure}", always=True)
                self._tell_ready_workers(f"the elastic job failed: {failure}")
                return 1
        except _SignalError as stop:
            for process in self._running():
                process.send_signal(stop.number)
            return 128 + stop.number
        finally:
            self._end_workers()

    def _step(self) -> Optional[int]:
        """One look at everything; the job's status once it has ended."""
        self._check_signals()
        if time.monotonic() >= self._next_discovery:
            self._discover()
        self._record_exits()
        self._record_ready()
        if len(self.states) < len(self.assignment):
            return None
        return self._end_round()

    def _end_round(self) -> Optional[int]:
        states = self.states
        if SUCCESS in states.values():
            # Some worker finished training: the job ends with its round's statuses.
            self._say(f"generation {self.generation}: a worker succeeded; the job ends")
            self._tell_ready_workers("the elastic job has finished")
            codes = [self.exit_codes[n] for n in sorted(self.exit_codes)]
            return next((code for code in codes if code != 0), 0)
        if all(state == FAILURE for state in states.values()):
            codes = [self.exit_codes[n] for n in sorted(self.exit_codes)]
            raise JobFailedError(
                f"every worker of generation {self.generation} failed (exit statuses "
                f"{', '.join(map(str, codes))})"
            )
        for slot in self.assignment:
            if states[slot.name] == FAILURE:
                if not self.hosts.is_blacklisted(slot.hostname):
                    self._say(f"blacklisting host {slot.hostname}: its worker {slot.name} failed")
                self.hosts.blacklist(slot.hostname)
        if all(self.hosts.is_blacklisted(slot.hostname) for slot in self.assignment):
            raise JobFailedError("every host of the job is blacklisted")
        if self.reset_limit is not None and self.resets >= self.reset_limit:
            raise JobFailedError(
                f"the number of resets exceeded --reset-limit {self.reset_limit} (Horovod: "
                "Horovod was shutdown because number of resets during elastic job exceeded limit)"
            )
        self.resets += 1
        ready = [name for name, state in states.items() if state == READY]
        self._start_generation(self._wait_for_slots(self.min_np), ready)
        return None

    # ---- generations ------------------------------------------------------------------------
    def _start_generation(self, hosts, ready: list) -> None:
        """Assigns ranks on ``hosts``, answers the ``ready`` workers, starts the new ones."""
        assignment = host_assignments(hosts, self.min_np, self.max_np)
        if self.assignment:
            before = {slot.hostname for slot in self.assignment}
            if not before & {slot.hostname for slot in assignment}:
                raise JobFailedError(
                    "no host of the previous generation remains: nobody could broadcast the "
                    "state to the new workers"
                )
        self.generation += 1
        self.assignment = assignment
        self.states, self.exit_codes = {}, {}
        assigned = {slot.name: slot for slot in assignment}
        for slot in assignment:
            self.store.set(
                protocol.slot_key(self.generation, slot.name),
                protocol.encode_assignment(slot, self.notices),
            )
        for name in ready:
            if name not in assigned:
                self.store.set(
                    protocol.slot_key(self.generation, name),
                    protocol.encode_removal("its slot is no longer in the job"),
                )
        hosts_text = ", ".join(
            f"{h}:{len([s for s in assignment if s.hostname == h])}"
            for h in dict.fromkeys(s.hostname for s in assignment)
        )
        self._say(f"generation {self.generation}: {len(assignment)} ranks on {hosts_text}")
        for slot in assignment:
            if slot.name not in ready:
                self._spawn(slot)

    def _spawn(self, slot: protocol.SlotInfo) -> None:
        env = dict(
            self.env,
            RINGCOMM_ELASTIC="1",
            RINGCOMM_ELASTIC_HOST=slot.hostname,
            RINGCOMM_ELASTIC_SLOT=str(slot.local_rank),
            RINGCOMM_ELASTIC_GENERATION=str(self.generation),
        )
        if self.store_port is not None:
            # The address on the way to the worker's host reaches every other host too (they
            # are one network), and is where the worker listens for the others.
            env["RINGCOMM_STORE"] = f"{address_towards(slot.hostname)}:{self.store_port}"
        self._say(f"starting worker {slot.name} as rank {slot.rank}")
        self.workers[slot.name] = start_on(slot.hostname, self.command, env, self.ssh)

    def _wait_for_slots(self, needed: int):
        """The discovered hosts once they offer ``needed`` slots; JobFailedError after the elastic
        timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            current = self.hosts.current
            if current.available_slots() >= needed:
                return current
            if time.monotonic() > deadline:
                usable = ", ".join(f"{h}:{current.slots[h]}" for h in current.order) or "none"
                blacklisted = [h for h in current.slots if self.hosts.is_blacklisted(h)]
                raise JobFailedError(
                    f"fewer than --min-np {needed} slots available after the elastic timeout "
                    f"of {self.timeout:g} s: {current.available_slots()} (hosts {usable}"
                    + (f"; blacklisted: {', '.join(blacklisted)}" if blacklisted else "")
                    + ")"
                )
            self._check_signals()
            self._record_exits()
            if time.monotonic() >= self._next_discovery:
                self._discover()
            time.sleep(_POLL_SECONDS)

    # ---- what the workers do ----------------------------------------------------------------
    def _record_exits(self) -> None:
        for slot in self.assignment:
            process = self.workers.get(slot.name)
            if process is None or process.poll() is None:
                continue
            if slot.name in self.exit_codes:
                continue
            code = process.returncode
            status = code if code >= 0 else 128 - code
            self.exit_codes[slot.name] = status
            # A worker that said it was ready and then died failed (Horovod overrides too).
            self.states[slot.name] = SUCCESS if status == 0 else FAILURE
            if status != 0:
                self._say(f"worker {slot.name} (rank {slot.rank}) exited with status {status}")

    def _record_ready(self) -> None:
        for slot in self.assignment:
            if slot.name in self.states:
                continue
            key = protocol.ready_key(self.generation, slot.name)
            try:
                self.store.get(key, 0.0)
            except _core.TimeoutError:
                continue
            self.states[slot.name] = READY

    def _tell_ready_workers(self, reason: str) -> None:
        """Workers waiting for their place in a next generation are told there is none."""
        for name, state in self.states.items():
            if state == READY:
                self.store.set(
                    protocol.slot_key(self.generation + 1, name), protocol.encode_removal(reason)
                )

    # ---- discovery --------------------------------------------------------------------------
    def _discover(self, first: bool = False) -> None:
        self._next_discovery = time.monotonic() + DISCOVERY_INTERVAL_SECONDS
        try:
            result = self.hosts.update()
        except (RuntimeError, ValueError) as error:
            if first:  # a misconfiguration: fail at once, as Horovod does
                raise JobFailedError(str(error)) from None
            self._say(f"host discovery failed (will retry): {error}", always=True)
            return
        if result == HostUpdateResult.no_update or not self.assignment:
            return
        current = self.hosts.current
        try:
            upcoming = host_assignments(current, self.min_np, self.max_np)
        except ValueError:
            upcoming = []
        if upcoming == self.assignment:
            return  # the change moves no rank: nobody needs to hear of it
        # The result first, then the count: a worker that sees the count can read the result.
        self.store.set(protocol.notice_key(self.notices + 1), str(int(result)).encode())
        self.notices = self.store.add(protocol.NOTICE_COUNT, 1)
        self._say(f"hosts changed ({result.name or int(result)}): notice {self.notices}")

    # ---- processes --------------------------------------------------------------------------
    def _running(self) -> list:
        return [p for p in self.workers.values() if p.poll() is None]

    def _check_signals(self) -> None:
        if self._forwarded < len(self.signals.received):
            number = self.signals.received[self._forwarded]
            self._forwarded += 1
            raise _SignalError(number)

    def _end_workers(self) -> None:
        """Lets workers still running finish within the grace period, then kills them."""
        deadline = time.monotonic() + self.grace
        while self._running() and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)
        for process in self._running():
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        while self._running() and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)
        for process in self._running():
            process.kill()
        for process in self.workers.values():
            process.wait()

    def _say(self, message: str, always: bool = False) -> None:
        if always or self.verbose:
            elapsed = time.monotonic() - self._started
            print(f"ringcomm-run [{elapsed:.1f} s]: {message}", file=sys.stderr, flush=True)


def default_timeout() -> float:
    value = os.environ.get("HOROVOD_ELASTIC_TIMEOUT")
    return float(value) if value else ELASTIC_TIMEOUT_SECONDS
