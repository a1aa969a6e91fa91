"""An ssh server in each of some namespace hosts (ringcomm.bench.netns), for the tests of ranks
started over ssh: keys made for the test, root's login by key only, on the host's own address,
and a client configuration file for ``ssh -F``; a host's server can be stopped for a while (a
host that refuses ssh). Everything goes when the context exits."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


class SshdUnavailableError(RuntimeError):
    """No OpenSSH server on this machine."""


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _wait_for_port(hosts, index: int, deadline: float) -> None:
    """Until host `index`'s sshd accepts connections (asked from inside that host)."""
    probe = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(('{hosts.address(index)}', 22), 1).close()\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    while time.monotonic() < deadline:
        done = subprocess.run(
            hosts.command(index, [sys.executable, "-c", probe]), capture_output=True
        )
        if done.returncode == 0:
            return
        time.sleep(0.1)
    raise SshdUnavailableError(f"sshd on host {index} did not start listening")


class Servers:
    """The ssh servers of some hosts: ``client``, the client's configuration file, and
    stopped(), which takes one host's server away for a while."""

    def __init__(self, hosts, workdir: Path, client: Path):
        self.hosts = hosts
        self.client = client
        self._workdir = workdir
        self._running: dict = {}  # host index: its sshd

    def start(self, index: int) -> None:
        self._running[index] = subprocess.Popen(
            self.hosts.command(
                index, [SSHD, "-D", "-e", "-f", str(self._workdir / f"sshd_config_{index}")]
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # its log (-e): a pipe nobody read would fill and stall it
        )

    def stop(self, index: int) -> None:
        server = self._running.pop(index)
        server.terminate()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    def stop_all(self) -> None:
        for index in list(self._running):
            self.stop(index)

    @contextlib.contextmanager
    def stopped(self, index: int) -> Iterator[None]:
        """Host ``index`` refuses ssh's connections (its server stopped; the sessions it had
        started go on, as they do when sshd stops on a real host); back afterwards."""
        self.stop(index)
        try:
            yield
        finally:
            self.start(index)
            _wait_for_port(self.hosts, index, time.monotonic() + 10)


@contextlib.contextmanager
def servers(hosts, indices: Sequence[int], workdir: Path) -> Iterator[Servers]:
    """sshd on hosts ``indices``; yields them (their client's configuration file in .client)."""
    if not os.path.exists(SSHD) or shutil.which("ssh") is None:
        raise SshdUnavailableError(
            "needs OpenSSH's server and client (apt-get install openssh-server)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    host_key, user_key = workdir / "host_key", workdir / "user_key"
    _keygen(host_key)
    _keygen(user_key)
    authorized = workdir / "authorized_keys"
    shutil.copy(f"{user_key}.pub", authorized)
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege separation directory
    client = workdir / "ssh_config"
    client.write_text(
        "Host *\n"
        "  User root\n"
        f"  IdentityFile {user_key}\n"
        "  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n"
    )
    started = Servers(hosts, workdir, client)
    try:
        for index in indices:
            (workdir / f"sshd_config_{index}").write_text(
                f"ListenAddress {hosts.address(index)}\n"
                "Port 22\n"
                f"HostKey {host_key}\n"
                f"PidFile {workdir / f'sshd_{index}.pid'}\n"
                f"AuthorizedKeysFile {authorized}\n"
                "PermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "PrintMotd no\n"
            )
            started.start(index)
        deadline = time.monotonic() + 10
        for index in indices:
            _wait_for_port(hosts, index, deadline)
        yield started
    finally:
        started.stop_all()
