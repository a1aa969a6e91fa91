"""Several "hosts" on one machine: network namespaces, each with an address of its own.

Two hosts are joined by a veth pair; three or more each by a veth pair to a bridge in a namespace
of its own (a switch). With ``rate`` (tc's units: "1gbit", "10gbit") each host's link is shaped
with a token bucket in both directions (the host's end and the switch's end of its veth pair),
so that the link, not the CPU, limits a transfer, as a host's network port would.

Used by the multi-host tests, ``ringcomm-bench --hosts`` and bench/compression_over_link.py.
Needs root and iproute2; everything created is deleted when the context exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

# Every host's end of its link has this name inside its namespace, so that per-host settings that
# name an interface (GLOO_SOCKET_IFNAME, UCX_NET_DEVICES) are the same on every host.
LINK_NAME = "link0"
# tc's token bucket: how much may leave at once after a pause, and how long a packet may queue.
# The bucket must hold at least a jumbo frame and what the kernel hands the device at once
# (TSO: up to 64 KiB); larger bursts let short transfers beat the rate.
_BURST = "256kb"
_QUEUE_LATENCY = "100ms"


class NamespacesUnavailableError(RuntimeError):
    """This machine (or user) cannot create network namespaces."""


@dataclass
class Hosts:
    namespaces: tuple
    links: tuple  # the veth end inside each host's namespace (LINK_NAME in every one)
    subnet: str  # "10.231.77": host i has address subnet.(i+1)
    rate: Optional[str] = None
    switch: Optional[str] = None  # the bridge's namespace, with three hosts or more

    def __len__(self) -> int:
        return len(self.namespaces)

    def address(self, host: int) -> str:
        return f"{self.subnet}.{host + 1}"

    def command(self, host: int, argv: list) -> list:
        """``argv`` run inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def cut(self, host: int = 1) -> None:
        """Takes host ``host``'s end of its link down (the link fails mid-run)."""
        _ip("-n", self.namespaces[host], "link", "set", self.links[host], "down")

    def mend(self, host: int = 1) -> None:
        """Brings host ``host``'s end of its link back up (after cut())."""
        _ip("-n", self.namespaces[host], "link", "set", self.links[host], "up")


# The name the tests and scripts written for two hosts use.
TwoHosts = Hosts


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _shape(namespace: str, link: str, rate: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", link, "root", "tbf",
         "rate", rate, "burst", _BURST, "latency", _QUEUE_LATENCY],
        check=True,
        capture_output=True,
    )  # fmt: skip


@contextlib.contextmanager
def hosts(
    count: int,
    subnet: str,
    rate: Optional[str] = None,
    tag: str = "rc",
    mtu: int = 1500,
    link_names: Optional[Sequence[str]] = None,
) -> Iterator[Hosts]:
    """Creates ``count`` hosts (2 or more) on ``subnet`` ("10.231.77": host i is .i+1), their links
    shaped to ``rate`` each way when given, with ``mtu`` bytes per frame. ``link_names``: each
    host's name for its link (real clusters mix eth0, ens5, enp65s0f0); LINK_NAME on every one
    by default."""
    if count < 2:
        raise ValueError(f"a simulated cluster needs at least 2 hosts; got {count}")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise NamespacesUnavailableError("needs root and iproute2 to create network namespaces")
    suffix = str(os.getpid())
    made = Hosts(
        namespaces=tuple(f"{tag}{i}h{suffix}" for i in range(count)),
        links=tuple(link_names) if link_names else (LINK_NAME,) * count,
        subnet=subnet,
        rate=rate,
        switch=f"{tag}sw{suffix}" if count > 2 else None,
    )
    created = list(made.namespaces) + ([made.switch] if made.switch else [])
    try:
        for ns in created:
            _ip("netns", "add", ns)
        # Made under unique names outside the namespaces, renamed LINK_NAME inside.
        ends = [f"{tag}{i}v{suffix}"[:15] for i in range(count)]
        if made.switch is None:
            _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        else:
            _ip("-n", made.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", made.switch, "link", "set", "br0", "up")
        for index, (ns, end, link) in enumerate(zip(made.namespaces, ends, made.links)):
            if made.switch is not None:
                port = f"{tag}{index}p{suffix}"[:15]
                _ip("link", "add", end, "type", "veth", "peer", "name", port)
                _ip("link", "set", port, "netns", made.switch)
                _ip("-n", made.switch, "link", "set", port, "mtu", str(mtu))
                _ip("-n", made.switch, "link", "set", port, "master", "br0")
                _ip("-n", made.switch, "link", "set", port, "up")
                if rate is not None:
                    _shape(made.switch, port, rate)  # what reaches the host
            _ip("link", "set", end, "netns", ns)
            _ip("-n", ns, "link", "set", end, "name", link)
            _ip("-n", ns, "link", "set", link, "mtu", str(mtu))
            _ip("-n", ns, "addr", "add", f"{made.address(index)}/24", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if rate is not None:
                _shape(ns, link, rate)  # what leaves the host
    except subprocess.CalledProcessError as error:
        for ns in created:
            _ip("netns", "delete", ns, check=False)
        raise NamespacesUnavailableError(
            f"cannot create network namespaces: {error.stderr}"
        ) from error
    try:
        yield made
    finally:
        for ns in created:
            _ip("netns", "delete", ns, check=False)


@contextlib.contextmanager
def two_hosts(
    subnet: str,
    rate: Optional[str] = None,
    tag: str = "rc",
    link_names: Optional[Sequence[str]] = None,
) -> Iterator[Hosts]:
    """Two hosts joined by one link (see hosts())."""
    with hosts(2, subnet, rate=rate, tag=tag, link_names=link_names) as made:
        yield made
