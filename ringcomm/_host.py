"""What this machine is, as the library's reports and the benchmark describe it."""

from __future__ import annotations

import os
import platform
import socket


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    """Cores this process may run on (its affinity): the default number of local ranks."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def is_local_host(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost``, any 127.x.y.z, ``::1``, its hostname, or
    an address of one of its interfaces (the launchers start ranks there directly, not over ssh)."""
    if host in ("localhost", "::1", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return False
    if address.startswith("127."):
        return True
    try:
        with socket.socket() as probe:
            probe.bind((address, 0))
        return True
    except OSError:
        return False


def address_towards(host: str) -> str:
    """This machine's address on the way to ``host``: where ranks there reach a store served here
    (the kernel's route, asked with an unconnected UDP socket; nothing is sent)."""
    try:
        family, _, _, _, target = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as error:
        raise ValueError(f"host {host!r} does not resolve: {error.strerror}") from None
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(target)
        except OSError as error:
            raise ValueError(f"no route to host {host!r}: {error.strerror}") from None
        return probe.getsockname()[0]
