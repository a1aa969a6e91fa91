"""Two "hosts" on one machine: network namespaces joined by a veth pair, each with an address.

Used by the multi-host tests and by bench/compression_over_link.py. Needs root and iproute2;
everything created is deleted when the context exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterator, Optional


class NamespacesUnavailableError(RuntimeError):
    """This machine (or user) cannot create network namespaces."""


@dataclass
class TwoHosts:
    namespaces: tuple
    links: tuple  # the veth end inside each namespace
    subnet: str  # "10.231.77": host i has address subnet.(i+1)

    def address(self, host: int) -> str:
        return f"{self.subnet}.{host + 1}"

    def command(self, host: int, argv: list) -> list:
        """``argv`` run inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def cut(self, host: int = 1) -> None:
        """Takes host ``host``'s end of the link down (the link fails mid-run)."""
        _ip("-n", self.namespaces[host], "link", "set", self.links[host], "down")

    def mend(self, host: int = 1) -> None:
        """Brings host ``host``'s end of the link back up (after cut())."""
        _ip("-n", self.namespaces[host], "link", "set", self.links[host], "up")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@contextlib.contextmanager
def two_hosts(subnet: str, rate: Optional[str] = None, tag: str = "rc") -> Iterator[TwoHosts]:
    """Creates the two hosts; ``rate`` (e.g. "5gbit") shapes each end of the link with tc's token
    bucket, so that the link, not the CPU, limits a transfer."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise NamespacesUnavailableError("needs root and iproute2 to create network namespaces")
    suffix = str(os.getpid())
    hosts = TwoHosts(
        namespaces=(f"{tag}a{suffix}", f"{tag}b{suffix}"),
        links=(f"{tag}va{suffix}"[:15], f"{tag}vb{suffix}"[:15]),
        subnet=subnet,
    )
    try:
        for ns in hosts.namespaces:
            _ip("netns", "add", ns)
        _ip("link", "add", hosts.links[0], "type", "veth", "peer", "name", hosts.links[1])
        for index, (ns, link) in enumerate(zip(hosts.namespaces, hosts.links)):
            _ip("link", "set", link, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{hosts.address(index)}/24", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if rate is not None:
                shape = ["tc", "qdisc", "add", "dev", link, "root", "tbf", "rate", rate,
                         "burst", "4mb", "latency", "100ms"]  # fmt: skip
                subprocess.run(hosts.command(index, shape), check=True, capture_output=True)
    except subprocess.CalledProcessError as error:
        for ns in hosts.namespaces:
            _ip("netns", "delete", ns, check=False)
        raise NamespacesUnavailableError(
            f"cannot create network namespaces: {error.stderr}"
        ) from error
    try:
        yield hosts
    finally:
        for ns in hosts.namespaces:
            _ip("netns", "delete", ns, check=False)
