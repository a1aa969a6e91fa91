"""What one process holds and has sent, read from /proc and its own sockets (Linux): resident
memory, open descriptors, TCP sockets, and the bytes its TCP sockets have sent.

The bytes come from each open TCP socket's ``TCP_INFO`` (``tcpi_bytes_sent``, Linux 4.19+):
exact per socket, and free of the headers and of other processes' traffic, which a namespace
host's interface counters would mix in. Sockets already closed (a store connection dropped, a
probe) are not counted; what ``ringcomm-bench init`` reports is what the rank still holds.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import asdict, dataclass
from typing import Optional

# struct tcp_info (<linux/tcp.h>): tcpi_bytes_sent is the u64 at this offset (after
# tcpi_delivered and tcpi_delivered_ce), present since Linux 4.19.
_TCP_INFO_BYTES_SENT = 200
_TCP_INFO_LENGTH = _TCP_INFO_BYTES_SENT + 8
_SOL_TCP = 6
_TCP_INFO = 11


@dataclass
class Footprint:
    rss_mib: float  # VmRSS
    fds: int  # entries of /proc/self/fd
    sockets: int  # of them, sockets of any kind
    tcp_sockets: int  # of them, TCP sockets (connected or listening)
    tcp_bytes_sent: int  # over the TCP sockets still open

    def as_dict(self) -> dict:
        return asdict(self)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024  # kB
    return float("nan")


def _bytes_sent(fd: int) -> Optional[int]:
    """tcpi_bytes_sent of TCP socket ``fd``; None when it is not one (or the kernel is older)."""
    try:
        # A second handle on the same socket, so that closing it leaves the rank's own open.
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        info = sock.getsockopt(_SOL_TCP, _TCP_INFO, _TCP_INFO_LENGTH)
        if len(info) < _TCP_INFO_LENGTH:
            return None
        return struct.unpack_from("=Q", info, _TCP_INFO_BYTES_SENT)[0]
    except OSError:
        return None
    finally:
        sock.close()


def measure() -> Footprint:
    fds = sockets = tcp = sent = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        fds += 1
        if not target.startswith("socket:"):
            continue
        sockets += 1
        count = _bytes_sent(fd)
        if count is not None:
            tcp += 1
            sent += count
    return Footprint(_rss_mib(), fds, sockets, tcp, sent)
