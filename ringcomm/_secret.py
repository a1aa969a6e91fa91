"""The job's secret: every store connection and data link proves it knows it (src/auth), and it
never travels through the store.

Where it comes from, first found first:
  1. the user: RINGCOMM_SECRET, or RINGCOMM_SECRET_FILE (readable by its owner only); the core's
     Config reads both. A job across hosts launched by anything but mpirun needs this, the same
     on every host.
  2. the launcher: ringcomm-run puts a fresh one in its ranks' environment; under mpirun with
     mpi4py, rank 0 makes one and sends it to the others through MPI.
  3. otherwise (env://, torchrun, MPI without mpi4py, the torch.distributed backend): a file on
     this host that only this user can read. Rank 0 writes a fresh secret there and the others
     read it; its name, not its content, is what they agree on. Rank 0 removes it once every
     rank has met. A rank on another host cannot read it, and stops saying to set
     RINGCOMM_SECRET.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import tempfile
import time
from pathlib import Path

_POLL_SECONDS = 0.05


def new_secret() -> bytes:
    """A fresh secret: 256 random bits, as text (it may go into an environment variable)."""
    return secrets.token_hex(32).encode()


class NoSecretError(RuntimeError):
    pass


def missing_secret(why: str) -> NoSecretError:
    return NoSecretError(
        f"ringcomm: no job secret ({why}). Ranks on several hosts need the same "
        "RINGCOMM_SECRET (or RINGCOMM_SECRET_FILE, readable by its owner only) on every host, "
        'e.g. export RINGCOMM_SECRET="$(openssl rand -hex 32)"; ringcomm-run and mpirun with '
        "mpi4py make one themselves"
    )


def _private_directory() -> Path:
    """This user's directory for secret files, made if need be; refused unless it is a real
    directory that only this user can use (another user's, or a symlink, would leak it)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and os.path.isdir(runtime) else Path(tempfile.gettempdir())
    directory = base / f"ringcomm-{os.getuid()}"
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    ):
        raise NoSecretError(
            f"ringcomm: {directory} must be a directory of this user's that nobody else may use; "
            "remove it, or set RINGCOMM_SECRET"
        )
    return directory


def host_file(name: str) -> Path:
    """Where the host-local secret of the job called ``name`` (e.g. its store's address) lives."""
    return _private_directory() / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".secret")


def write_host_secret(path: Path) -> bytes:
    """Rank 0: a fresh secret into ``path`` (replacing a stale one from an earlier job)."""
    secret = new_secret()
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(secret)
    os.replace(partial, path)
    return secret


def read_host_secret(path: Path, timeout: float) -> bytes:
    """The others: rank 0's secret from ``path``, waiting up to ``timeout`` for it to appear."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = os.stat(path)
            if info.st_uid == os.getuid() and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                secret = path.read_bytes()
                if secret:
                    return secret
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise missing_secret(
                f"waited {timeout:.0f} s for rank 0 to write {path} on this host: it runs on "
                "another host, or has not started"
            )
        time.sleep(_POLL_SECONDS)


def remove_host_secret(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
