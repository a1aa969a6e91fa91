"""A simulated cluster for the benchmark: ``ringcomm-bench ... --hosts H --link-rate 1gbit``.

Each host is a network namespace (ringcomm.bench.netns) whose link is shaped to the rate each
way; the ranks are spread over the hosts in blocks of consecutive ranks, as a launcher places
them, the first hosts taking one more when they do not divide evenly. Every implementation's
ranks meet through env:// (RANK, WORLD_SIZE, MASTER_ADDR = host 0's address), so that ringcomm,
gloo and MPICH cross the same links.

The link bound: what each host's link must carry each way. An all-reduce over H hosts moves
2(H-1)/H of the vector out of every host and as much in (N for two hosts), so algbw = size / time
can reach at most rate * H / (2(H-1)); the other collectives' bounds are in link_bound().
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import sys
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from ringcomm._ports import free_port
from ringcomm._ranks import start_rank
from ringcomm.bench import netns
from ringcomm.bench.collectives import bus_factor

SUBNET = "10.231.100"  # host i is SUBNET.(i+1): private addresses, inside our own namespaces
# MPICH's network module, UCX, takes processes in network namespaces of one kernel for one host
# and reaches them through shared memory, past the shaped links (an all-reduce at 2x the link's
# rate). Between hosts it is held to TCP over the hosts' links; within a host MPICH's own shared
# memory serves, as on a real cluster.
MPI_ACROSS_HOSTS = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": netns.LINK_NAME}
MPI_NOTE = (
    "MPICH's UCX is held to TCP between the simulated hosts (UCX_TLS=tcp,self): left to itself it "
    "takes namespaces on one kernel for one host and reaches them through shared memory, past the "
    "links"
)
# ringcomm's UCX transport (--transport ucx) likewise: between hosts TCP over the hosts' links
# (UCX's shared-memory lanes cannot report a lost peer, so ringcomm takes them for peers on the
# same host only), no cross-memory attach, which would reach past the links. Its device is the
# one ringcomm's TCP listens on, whatever each host calls it (--link-names): no UCX_NET_DEVICES.
RINGCOMM_UCX_ACROSS_HOSTS = {"UCX_TLS": "tcp,posix,self"}
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate(text: str) -> float:
    """tc's rate units ("1gbit", "500mbit", "10gbit") -> bytes per second."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]+)\s*", text.lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(
            f"link rate must be a number and one of {', '.join(_UNITS)} (as tc takes it, e.g. "
            f"1gbit or 500mbit); got {text!r}"
        )
    return float(match.group(1)) * _UNITS[match.group(2)] / 8


def link_rate(text: str) -> str:
    """argparse type of --link-rate: tc's units, checked."""
    try:
        parse_rate(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def spread(nranks: int, hosts: int) -> list[int]:
    """The host of every rank: blocks of consecutive ranks, the first hosts one larger."""
    if hosts < 2 or nranks < hosts:
        raise ValueError(f"{nranks} ranks cannot spread over {hosts} hosts (at least one each)")
    base, extra = divmod(nranks, hosts)
    layout = []
    for host in range(hosts):
        layout += [host] * (base + (1 if host < extra else 0))
    return layout


def link_bound(collective: str, layout: Sequence[int], rate: float) -> Optional[float]:
    """The most algbw (GB/s, nccl-tests' size / time) the hosts' links allow, or None.

    Per byte of nccl-tests' size, the busiest host's link must carry, each way:
      allreduce         2(H-1)/H   (reduce-scatter and all-gather of the hosts' shares)
      broadcast, reduce 1          (every other host needs, or holds part of, all of it)
      allgather, reduce_scatter  1 - L/p (a host receives, or sends, all blocks not its own)
      alltoall          L(p-L)/p   (each of a host's L ranks sends the blocks for other hosts)
    with H hosts, p ranks and L ranks on the largest host (for alltoall, the host where
    L(p-L) is largest)."""
    hosts = len(set(layout))
    p = len(layout)
    largest = max(layout.count(h) for h in set(layout))
    if collective == "allreduce":
        per_byte = 2 * (hosts - 1) / hosts
    elif collective in ("broadcast", "reduce"):
        per_byte = 1.0
    elif collective in ("allgather", "reduce_scatter"):
        per_byte = 1 - largest / p
    elif collective == "alltoall":
        per_byte = max(layout.count(h) * (p - layout.count(h)) / p for h in set(layout))
    else:
        return None
    return rate / per_byte / 1e9


def link_bound_busbw(collective: str, layout: Sequence[int], rate: float) -> Optional[float]:
    """link_bound() in busbw, the unit of the tables' limit columns."""
    bound = link_bound(collective, layout, rate)
    return None if bound is None else bound * bus_factor(collective, len(layout))


@dataclass
class Cluster:
    hosts: netns.Hosts
    layout: list[int]  # the host of each rank
    rate: Optional[float]  # bytes per second each way per host, None when not shaped
    rate_text: Optional[str]
    secret: str

    @property
    def size(self) -> int:
        return len(self.layout)

    def describe(self) -> str:
        counts = [self.layout.count(h) for h in range(len(self.hosts))]
        per_host = f"{counts[0]} per host" if len(set(counts)) == 1 else "+".join(map(str, counts))
        link = f"{self.rate_text} links" if self.rate_text else "unshaped links"
        return (
            f"{self.size} ranks on {len(self.hosts)} simulated hosts ({per_host}; network "
            f"namespaces, {link})"
        )

    def start(self, argv: Sequence[str], env: dict, extra: Optional[dict] = None) -> list:
        """Starts rank r of ``python argv...`` on its host for every r, meeting through env://
        at host 0 (which serves the store), each in a session of its own."""
        port = str(free_port())
        procs = []
        for rank, host in enumerate(self.layout):
            local = [r for r, h in enumerate(self.layout) if h == host]
            rank_env = dict(
                env,
                RANK=str(rank),
                WORLD_SIZE=str(self.size),
                LOCAL_RANK=str(local.index(rank)),
                LOCAL_WORLD_SIZE=str(len(local)),
                MASTER_ADDR=self.hosts.address(0),
                MASTER_PORT=port,
                RINGCOMM_SECRET=self.secret,
                GLOO_SOCKET_IFNAME=self.hosts.links[host],
                **{k: v for k, v in RINGCOMM_UCX_ACROSS_HOSTS.items() if k not in env},
                **(extra or {}),
            )
            procs.append(start_rank(self.hosts.command(host, [sys.executable, *argv]), rank_env))
        return procs

    def mpiexec(self, mpiexec: str, argv: Sequence[str], workdir: str) -> list:
        """The command that runs ``argv`` as this cluster's ranks under MPICH's mpiexec (hydra),
        itself started on host 0: hydra starts its proxy on every other host through a script
        (its ssh launcher's stand-in) that enters that host's namespace."""
        script = os.path.join(workdir, "enter_host.sh")
        cases = "\n".join(
            f"  {self.hosts.address(h)}) ns={self.hosts.namespaces[h]} ;;"
            for h in range(len(self.hosts))
        )
        with open(script, "w") as f:
            f.write(
                "#!/bin/sh\n"
                "# hydra's launcher for a simulated host: its options, the host, then a command\n"
                "# line for a remote shell\n"
                'while [ "${1#-}" != "$1" ]; do shift; done\n'
                f'case "$1" in\n{cases}\n  *) echo "unknown host $1" >&2; exit 1 ;;\nesac\n'
                'shift\nexec ip netns exec "$ns" /bin/sh -c "$*"\n'
            )
        os.chmod(script, 0o700)
        counts = [self.layout.count(h) for h in range(len(self.hosts))]
        placement = ",".join(f"{self.hosts.address(h)}:{n}" for h, n in enumerate(counts))
        inner = [mpiexec, "-hosts", placement, "-launcher", "ssh", "-launcher-exec", script]
        return self.hosts.command(0, [*inner, "-n", str(self.size), *argv])


@contextlib.contextmanager
def simulated(
    hosts: int,
    nranks: int,
    rate: Optional[str],
    mtu: int = 1500,
    link_names: Optional[Sequence[str]] = None,
) -> Iterator[Cluster]:
    """The hosts, for as long as the benchmark runs (netns.NamespacesUnavailableError without
    root or iproute2); `link_names`: each host's name for its link."""
    layout = spread(nranks, hosts)
    rate_bytes = parse_rate(rate) if rate else None
    with netns.hosts(hosts, SUBNET, rate=rate, tag="rcb", mtu=mtu, link_names=link_names) as made:
        yield Cluster(made, layout, rate_bytes, rate, secrets.token_hex(16))
