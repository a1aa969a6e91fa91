"""Ranks on other hosts, started over ssh as horovodrun and mpirun's rsh launcher start theirs.

The launcher runs ``ssh HOST PYTHON -m ringcomm._remote`` (the same Python path as its own, as
mpirun assumes the same paths on every host) and writes one JSON line on ssh's standard input:
the rank's command, working directory and environment, the job's secret among them. So the
secret never shows on a command line, where ``ps`` on either host would show it to anyone.

On the far host this module starts the rank in a session of its own and stays beside it:

- each line ``signal N`` the launcher writes later is passed on to the rank (the launcher
  forwards SIGTERM, SIGINT, SIGHUP and kills this way);
- the end of its standard input (the launcher died, or ssh's connection broke) ends the rank:
  SIGTERM, then SIGKILL after a grace period. A lost launcher leaves nothing behind;
- its exit status is the rank's, 128 + N where signal N ended it (ssh passes on numbers only),
  or 127 where the rank's command could not be started, as a shell says it.

RemoteRank is the launcher's side: a handle on one such rank with the calls of subprocess.Popen
that the launchers use (poll, wait, send_signal, kill, returncode).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ringcomm._host import is_local_host
from ringcomm._ranks import start_rank

# Variables that describe the launcher's own host or login session, not the job: the far host's
# session has its own.
_OF_THE_LAUNCHING_SESSION = frozenset(
    {
        "HOSTNAME",
        "DISPLAY",
        "TERM",
        "SHELL",
        "SHLVL",
        "PWD",
        "OLDPWD",
        "_",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "SSH_AUTH_SOCK",
        "XAUTHORITY",
        "XDG_RUNTIME_DIR",
        "XDG_SESSION_ID",
    }
)
# How long a rank may take to end after its launcher is lost, before it is killed.
_GRACE_SECONDS = 10.0
# ssh's own check of a silent connection: a host lost without a word ends its ranks' ssh
# sessions after about this many seconds times the count, rather than after TCP's minutes.
_ALIVE_INTERVAL = 5
# How long ssh tries to reach a host before it gives up (and the job fails, naming it).
_CONNECT_TIMEOUT = 10
_ALIVE_COUNT = 3


@dataclass(frozen=True)
class Ssh:
    """How to reach other hosts (ringcomm-run's --ssh-command, --ssh-port, --ssh-identity-file)."""

    command: tuple = ("ssh",)  # the client and options of the user's own
    port: Optional[int] = None
    identity_file: Optional[str] = None


DEFAULT_SSH = Ssh()


def start_on(host: Optional[str], command: Sequence[str], env: Mapping[str, str], ssh: Ssh):
    """A rank of ``command`` on ``host``: started here where the host is this machine (or none is
    named), over ssh otherwise. Either way a handle with Popen's calls."""
    if host is None or is_local_host(host):
        return start_rank(command, env)
    return RemoteRank(host, command, env, ssh)


def ssh_command(host: str, ssh: Ssh) -> list[str]:
    """The command that runs this module on ``host``; never a password prompt (BatchMode)."""
    command = list(ssh.command) + [
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={_CONNECT_TIMEOUT}",
        "-o",
        f"ServerAliveInterval={_ALIVE_INTERVAL}",
        "-o",
        f"ServerAliveCountMax={_ALIVE_COUNT}",
    ]
    if ssh.port is not None:
        command += ["-p", str(ssh.port)]
    if ssh.identity_file is not None:
        command += ["-i", ssh.identity_file]
    return command + [host, shlex.join([sys.executable, "-m", "ringcomm._remote"])]


class RemoteRank:
    """One rank on another host (see the module's text), with Popen's calls the launchers use."""

    def __init__(
        self,
        host: str,
        command: Sequence[str],
        env: Mapping[str, str],
        ssh: Ssh = DEFAULT_SSH,
    ):
        self.host = host
        self._lock = threading.Lock()
        self._process = start_rank(ssh_command(host, ssh), os.environ, stdin=subprocess.PIPE)
        job = {
            "argv": list(command),
            "cwd": os.getcwd(),
            "env": {k: v for k, v in env.items() if k not in _OF_THE_LAUNCHING_SESSION},
        }
        self._write(json.dumps(job) + "\n")

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> Optional[int]:
        return self._process.returncode

    def poll(self) -> Optional[int]:
        return self._process.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        return self._process.wait(timeout)

    def send_signal(self, number: int) -> None:
        self._write(f"signal {int(number)}\n")

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Kills the rank, and ssh with it (a lost host may never pass the word on)."""
        self.send_signal(signal.SIGKILL)
        try:
            self._process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self._process.kill()

    def _write(self, line: str) -> None:
        with self._lock:
            try:
                assert self._process.stdin is not None  # started with stdin=PIPE
                self._process.stdin.write(line.encode())
                self._process.stdin.flush()
            except (BrokenPipeError, ValueError):  # ssh ended (the rank with it), or closed
                pass


def _relay(rank: subprocess.Popen, commands) -> None:
    """Passes the launcher's signals on to the rank; ends it when the launcher is gone."""
    for line in commands:
        word, _, number = line.decode(errors="replace").partition(" ")
        if word == "signal" and number.strip().isdigit():
            rank.send_signal(int(number))
    if rank.poll() is None:  # standard input ended: the launcher (or the way to it) is gone
        rank.terminate()
        try:
            rank.wait(_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            rank.kill()


def main() -> int:
    commands = sys.stdin.buffer
    first = commands.readline()
    if not first:
        print("ringcomm._remote: no job on standard input (ringcomm-run sends it)", file=sys.stderr)
        return 2
    job = json.loads(first)
    env = dict(os.environ, **job["env"])
    try:
        os.chdir(job["cwd"])
    except OSError as error:
        print(
            f"ringcomm._remote: staying in {os.getcwd()} on {os.uname().nodename}: the launcher's "
            f"directory is not here ({error.strerror})",
            file=sys.stderr,
        )
    try:
        rank = start_rank(job["argv"], env)
    except OSError as error:  # as a shell answers a command it cannot run
        print(
            f"ringcomm._remote: cannot run {job['argv'][0]} on {os.uname().nodename}: "
            f"{error.strerror}",
            file=sys.stderr,
        )
        return 127
    threading.Thread(target=_relay, args=(rank, commands), daemon=True).start()
    code = rank.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the relay may be blocked reading standard input, which the interpreter's
    # shutdown would wait for.
    os._exit(status)
