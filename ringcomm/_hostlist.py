"""Which hosts a job runs on, as horovodrun and mpirun take them, and where each rank goes.

    ringcomm-run -np 8 -H node1:4,node2:4 train.py
    ringcomm-run -np 8 --hostfile hosts.txt train.py

A host list is ``host[:slots]`` items, comma-separated (one slot where none is given). A
hostfile has one host a line, in any of the launchers' spellings: ``node1 slots=4`` (Open MPI,
Horovod), ``node1:4`` (MPICH) or ``node1``; ``#`` starts a comment. Ranks fill the hosts in order,
each host's slots before the next (rank 0 on the first host), as mpirun's default by-slot
mapping does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

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
