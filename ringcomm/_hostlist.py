"""Which hosts a job runs on, as horovodrun and mpirun take them, and where each rank goes.

    ringcomm-run -np 8 -H node1:4,node2:4 train.py
    ringcomm-run -np 8 --hostfile hosts.txt train.py

A host list is ``host[:slots]`` items, comma-separated (one slot where none is given). A
hostfile has one host a line, in any of the launchers' spellings: ``node1 slots=4`` (Open MPI,
Horovod), ``node1:4`` (MPICH) or ``node1``; ``#`` starts a comment. Ranks fill the hosts in order,
each host's slots before the next (rank 0 on the first host), as mpirun's default by-slot
mapping does. Slots beyond ``-np`` are spares, where ``ringcomm-run --replace`` may start a lost
rank's replacement (Slots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

_SLOTS_WORD = re.compile(r"^slots=(\d+)$")


@dataclass(frozen=True)
class Placement:
    """One rank's place: its host, and its rank and the number of ranks on that host."""

    host: str
    local_rank: int
    local_size: int


def _host_and_slots(item: str, where: str) -> tuple[str, int]:
    host, colon, slots = item.rpartition(":")
    if not colon or "]" in slots:  # no slots, or the end of a bracketed IPv6 address
        host, slots = item, "1"
    host = host.strip("[]")
    if not host or not slots.isdigit() or int(slots) < 1:
        raise ValueError(f"{where}: expected host or host:slots with slots >= 1; got {item!r}")
    return host, int(slots)


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``-H node1:4,node2:4`` as [(host, slots)], in order."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("-H: expected host[:slots],...; got nothing")
    return _merged([_host_and_slots(item, "-H") for item in items])


def read_hostfile(path: str) -> list[tuple[str, int]]:
    """A hostfile (module text) as [(host, slots)], in order."""
    hosts = []
    with open(path) as file:
        for number, line in enumerate(file, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"hostfile {path}, line {number}"
            if len(words) == 1:
                hosts.append(_host_and_slots(words[0], where))
                continue
            match = _SLOTS_WORD.match(words[1])
            if len(words) > 2 or not match or int(match.group(1)) < 1:
                raise ValueError(
                    f"{where}: expected 'host slots=N', 'host:N' or 'host'; got {line.strip()!r}"
                )
            hosts.append((words[0], int(match.group(1))))
    if not hosts:
        raise ValueError(f"hostfile {path} names no host")
    return _merged(hosts)


def _merged(hosts: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """A host named twice has the slots of both, at its first place (as mpirun counts them)."""
    slots: dict[str, int] = {}
    for host, count in hosts:
        slots[host] = slots.get(host, 0) + count
    return list(slots.items())


def place(hosts: Sequence[tuple[str, int]], nranks: int) -> list[Placement]:
    """Where each of ``nranks`` ranks runs: the hosts' slots in order."""
    total = sum(slots for _, slots in hosts)
    if nranks > total:
        listed = ",".join(f"{host}:{slots}" for host, slots in hosts)
        raise ValueError(f"-np {nranks} is more than the {total} slots of the hosts ({listed})")
    placements: list[Placement] = []
    for host, slots in hosts:
        used = min(slots, nranks - len(placements))
        placements += [Placement(host, local, used) for local in range(used)]
    return placements


# Exit statuses of a process started over ssh that say it never ran, or its host is gone: ssh's
# own (it could not connect or log in, or the connection broke), and the far shell's for a
# command it could not run (ringcomm._remote answers 127 too where it cannot start the rank).
UNREACHED = {
    255: "ssh could not reach it, or lost it",
    126: "the command could not be run there",
    127: "the command could not be run there",
}


class Slots:
    """The hosts' slots under ``ringcomm-run --replace``: which the job's processes hold, which
    hosts to keep away from, and where a lost process's replacement goes.

    The first ``nranks`` slots in order start the job (place()); the others are spares. A host

    - fails, and gets no process again, once a process over ssh there ends with a status of
      UNREACHED: ssh could not reach it or lost it, or the command could not run there;
    - is avoided once a loss leaves it without any process of the job running (every rank there
      lost in one check of the launcher, or its only one), as Horovod's elastic driver
      blacklists the host of a failed worker; but nothing proves it gone, and a job without a
      spare would rather try it again than go on short.

    A replacement takes, in this order: the slot its lost process held, where that host is
    neither failed nor avoided; the lowest free slot of the first host in order that is neither
    (a spare, or a slot a loss freed without a replacement); the lost slot again, or else the
    lowest free slot of the first avoided host. Its local rank is that slot; its local world
    size is its host's, where it takes the lost slot back, else the processes there with it."""

    def __init__(self, hosts: Sequence[tuple[str, int]], nranks: int):
        self.initial = place(hosts, nranks)
        self._slots = dict(hosts)
        self._free = {host: set(range(slots)) for host, slots in hosts}
        for placement in self.initial:
            self._free[placement.host].discard(placement.local_rank)
        self.failed: dict[str, str] = {}  # host: why, in the order they failed
        self.avoided: dict[str, str] = {}  # the same, of the hosts avoided (and not failed)

    def end(self, ended: Sequence[tuple[Placement, int, bool]]) -> list[str]:
        """Frees the slots of the processes that ended, given as (placement, exit status, whether
        it ran over ssh), all those one check of the launcher found; the hosts that failed or
        are avoided by it (the rule above), in order."""
        for placement, _, _ in ended:
            self._free[placement.host].add(placement.local_rank)
        newly = []
        for placement, status, over_ssh in ended:
            host = placement.host
            if status == 0 or host in self.failed:
                continue
            if over_ssh and status in UNREACHED:
                self.avoided.pop(host, None)
                self.failed[host] = f"status {status}: {UNREACHED[status]}"
            elif host not in self.avoided and len(self._free[host]) == self._slots[host]:
                self.avoided[host] = "no process of the job is left running there"
            else:
                continue
            newly.append(host)
        return newly

    def refuse(self, placement: Placement, why: str) -> None:
        """The slot take() gave could not be used (``why``: no way to its host): frees it, and
        its host fails."""
        self._free[placement.host].add(placement.local_rank)
        self.avoided.pop(placement.host, None)
        self.failed.setdefault(placement.host, why)

    def take(self, lost: Placement) -> Optional[Placement]:
        """A slot for the replacement of the process ``lost`` held (freed by end()), taken; None
        where every host that has not failed is full."""

        def usable(host: str, healthy: bool) -> bool:
            kept_away = host in self.failed or (healthy and host in self.avoided)
            return bool(self._free[host]) and not kept_away

        found = next(
            (
                host
                for healthy in (True, False)
                for host in (lost.host, *self._slots)
                if usable(host, healthy)
            ),
            None,
        )
        if found is None:
            return None
        free = self._free[found]
        slot = lost.local_rank if found == lost.host and lost.local_rank in free else min(free)
        free.discard(slot)
        if found == lost.host and slot == lost.local_rank:
            return lost
        return Placement(found, slot, self._slots[found] - len(free))
