"""Which hosts an elastic job may use, as Horovod's driver sees them: a discovery script that
prints ``host:slots`` lines, a blacklist of hosts whose workers failed (with Horovod's optional
cooldown, after which a host may come back), and the assignment of ranks to slots.

A host that names this machine (ringcomm._host.is_local_host) gets its workers started directly;
any other over ssh (ringcomm/_remote.py). Several names of this machine are several hosts to the
driver: each is blacklisted on its own.
"""

from __future__ import annotations

import collections
import random
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

from ringcomm.elastic.protocol import HostUpdateResult, SlotInfo

# How long one run of the discovery script may take.
_SCRIPT_TIMEOUT_SECONDS = 60.0
# Horovod's bounds for --blacklist-cooldown-range.
_COOLDOWN_LOWER_BOUND_SECONDS = 1
_COOLDOWN_UPPER_BOUND_SECONDS = 3600


class HostDiscoveryScript:
    """Runs the user's script; each line of its output is ``host:slots``, or ``host`` when
    ``default_slots`` (--slots-per-host) says how many. A script that fails raises."""

    def __init__(self, script: str, default_slots: Optional[int] = None):
        self.script = script
        self.default_slots = default_slots

    def find_available_hosts_and_slots(self) -> dict:
        try:
            done = subprocess.run(
                self.script,
                shell=True,
                capture_output=True,
                text=True,
                timeout=_SCRIPT_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"the host discovery script {self.script} ran longer than "
                f"{_SCRIPT_TIMEOUT_SECONDS:g} s"
            ) from None
        if done.returncode != 0:
            raise RuntimeError(
                f"failed to execute the host discovery script {self.script}: exit code "
                f"{done.returncode}\n{done.stderr.strip()}"
            )
        return self.parse(done.stdout)

    def parse(self, output: str) -> dict:
        hosts: dict = {}
        for line in output.splitlines():
            line = line.strip()
            if not line:  # a script may print nothing while no host is ready
                continue
            host, colon, slots_text = line.rpartition(":")
            slots: Optional[str] = slots_text if colon else None
            if not colon:
                host = line
            if slots is None:
                if self.default_slots is None:
                    raise ValueError(
                        f"the host discovery script printed {line!r} without slots: print "
                        "host:slots, or pass --slots-per-host"
                    )
                count = self.default_slots
            else:
                try:
                    count = int(slots)
                except ValueError:
                    raise ValueError(
                        f"the host discovery script printed {line!r}: expected host:slots"
                    ) from None
            hosts[host] = count
        return hosts


class HostState:
    """One host's standing: blacklisted after a worker on it failed, for ever or (with a
    cooldown range) until a cooldown that doubles with every blacklisting has passed."""

    def __init__(self, cooldown_range: Optional[tuple] = None):
        self.blacklisted = False
        self.blacklist_count = 0
        self.cooldown_range = cooldown_range
        self.cooldown_ends = 0.0

    def blacklist(self) -> None:
        self.blacklisted = True
        now = time.time()
        if self.cooldown_range is None or self.cooldown_ends > now:
            return
        lower, upper = self.cooldown_range
        self.blacklist_count += 1
        delay = lower * (1 << self.blacklist_count) + random.uniform(0, 1) * lower
        self.cooldown_ends = now + max(lower, min(upper, delay))

    def whitelist(self) -> None:
        self.blacklisted = False
        self.cooldown_ends = 0.0

    def resurrected(self) -> bool:
        """Blacklisted, and its cooldown has passed."""
        return self.cooldown_ends > 0 and time.time() >= self.cooldown_ends


def check_cooldown_range(cooldown_range: tuple) -> None:
    lower, upper = cooldown_range
    if lower < _COOLDOWN_LOWER_BOUND_SECONDS or upper > _COOLDOWN_UPPER_BOUND_SECONDS:
        raise ValueError(
            f"--blacklist-cooldown-range must lie within [{_COOLDOWN_LOWER_BOUND_SECONDS}, "
            f"{_COOLDOWN_UPPER_BOUND_SECONDS}] seconds; got {lower} {upper}"
        )
    if lower > upper:
        raise ValueError(f"--blacklist-cooldown-range: {lower} is above {upper}")


@dataclass
class DiscoveredHosts:
    slots: dict = field(default_factory=dict)  # host -> slots, as the script said
    order: list = field(default_factory=list)  # hosts that may get ranks, oldest first

    def available_slots(self) -> int:
        return sum(self.slots[host] for host in self.order)


class HostManager:
    """The hosts discovered last, without the blacklisted ones. Hosts keep the order in which
    they first appeared, so that the oldest workers keep the lowest ranks (rank 0 broadcasts
    the state to new workers, so it must be one that has it)."""

    def __init__(self, discovery: HostDiscoveryScript, cooldown_range: Optional[tuple] = None):
        self.discovery = discovery
        self.states: dict[str, HostState] = collections.defaultdict(
            lambda: HostState(cooldown_range)
        )
        self._current = DiscoveredHosts()

    @property
    def current(self) -> DiscoveredHosts:
        order = [h for h in self._current.order if not self.states[h].blacklisted]
        return DiscoveredHosts(self._current.slots, order)

    def update(self) -> HostUpdateResult:
        """Runs discovery once; what changed since the last run (raises if the script fails)."""
        slots = self.discovery.find_available_hosts_and_slots()
        previous = self._current.slots
        resurrected = [h for h in slots if self.states[h].resurrected()]
        if slots == previous and not resurrected:
            return HostUpdateResult.no_update
        result = HostUpdateResult.no_update
        for host in previous:
            if host not in slots:
                result |= HostUpdateResult.removed
        for host, count in slots.items():
            if host not in previous or count > previous[host] or host in resurrected:
                result |= HostUpdateResult.added
            elif count < previous[host]:
                result |= HostUpdateResult.removed
        for host in resurrected:
            self.states[host].whitelist()
        usable = {h for h in slots if not self.states[h].blacklisted}
        order = [h for h in self._current.order if h in usable]
        order += sorted(usable - set(order), key=list(slots).index)
        self._current = DiscoveredHosts(slots, order)
        return result

    def blacklist(self, host: str) -> None:
        self.states[host].blacklist()

    def is_blacklisted(self, host: str) -> bool:
        return self.states[host].blacklisted


def host_assignments(hosts: DiscoveredHosts, min_np: int, max_np: int) -> list:
    """Ranks for the slots of ``hosts``, host by host in their order, up to ``max_np``
    (Horovod's get_host_assignments). Raises ValueError below ``min_np``."""
    placed = []  # (host, [ranks])
    cross: dict[int, dict[str, int]] = collections.defaultdict(dict)  # local rank -> {host: rank}
    rank = 0
    for host in hosts.order:
        ranks = []
        for local_rank in range(hosts.slots[host]):
            if rank == max_np:
                break
            ranks.append(rank)
            cross[local_rank][host] = len(cross[local_rank])
            rank += 1
        placed.append((host, ranks))
    if rank < min_np:
        raise ValueError(f"{min_np} processes needed, but only {rank} slots are available")
    return [
        SlotInfo(
            hostname=host,
            rank=r,
            local_rank=local_rank,
            cross_rank=cross[local_rank][host],
            size=rank,
            local_size=len(ranks),
            cross_size=len(cross[local_rank]),
        )
        for host, ranks in placed
        for local_rank, r in enumerate(ranks)
    ]
