"""A TCP port that nothing listens on now, for a store another process is about to serve (torch's
MASTER_PORT, a benchmark's rendezvous). Another process may take it first; callers accept that."""

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
