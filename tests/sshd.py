"""An ssh server in each of some namespace hosts (ringcomm.bench.netns), for the tests of ranks
started over ssh: keys made for the test, root's login by key only, on the host's own address,
and a client configuration file for ``ssh -F``. Everything goes when the context exits."""

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


@contextlib.contextmanager
def servers(hosts, indices: Sequence[int], workdir: Path) -> Iterator[Path]:
    """sshd on hosts ``indices``; yields the client's configuration file."""
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
    started = []
    try:
        for index in indices:
            config = workdir / f"sshd_config_{index}"
            config.write_text(
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
            started.append(
                subprocess.Popen(
                    hosts.command(index, [SSHD, "-D", "-e", "-f", str(config)]),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        deadline = time.monotonic() + 10
        for index in indices:
            _wait_for_port(hosts, index, deadline)
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
        yield client
    finally:
        for server in started:
            server.terminate()
        for server in started:
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
