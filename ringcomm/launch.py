"""Starts N local ranks of a Python program, like a one-host mpirun, with no MPI needed.

    ringcomm-run -np 4 train.py --epochs 3
    python -m ringcomm.launch -np 4 -m mypackage.worker

The launcher serves the rendezvous store itself and passes its address in RINGCOMM_STORE. It
also sets what torch.distributed's env:// rendezvous reads (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun does, so init_process_group() works
under it too. If one rank fails, the others are stopped (after a grace period, so they can report
the failure themselves), and the launcher exits with the failing rank's status.

SIGTERM, SIGHUP and SIGINT (what timeout, Slurm, Kubernetes and a terminal send) are passed on to
every rank; ranks still running after the grace period are killed, and the launcher exits with
128 + the signal's number. It never leaves ranks behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence

from ringcomm import _core, _secret
from ringcomm._ports import free_port

# Signals the launcher passes on to its ranks.
_FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# Ranks still running this long after another failed (or after a signal was passed on) are
# terminated: long enough for them to notice the failure through the transport and print their
# own error, or to act on the signal.
_GRACE_SECONDS = 10.0


def default_ranks() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def spawn(
    nranks: int, command: Sequence[str], env: Optional[dict] = None, grace: float = _GRACE_SECONDS
) -> int:
    """Runs ``command`` as ``nranks`` ranks; returns the job's exit status (0 if all succeeded)."""
    if nranks < 1:
        raise ValueError(f"-np must be at least 1; got {nranks}")
    base = dict(os.environ if env is None else env)
    # The job's secret: the user's (RINGCOMM_SECRET / _FILE), or a fresh one in the ranks'
    # environment, which only this user's processes can read.
    secret = base.get("RINGCOMM_SECRET", "").encode() or _core.Config.from_environment().secret
    if not secret:
        secret = _secret.new_secret()
        base["RINGCOMM_SECRET"] = secret.decode()
    server = _core.TcpStoreServer("127.0.0.1", 0, secret)
    base["RINGCOMM_STORE"] = f"127.0.0.1:{server.port}"
    base["RINGCOMM_WORLD_SIZE"] = str(nranks)
    base["RINGCOMM_LOCAL_WORLD_SIZE"] = str(nranks)
    # torch.distributed's env:// convention, as torchrun sets it (rank 0 serves torch's store).
    base.update(
        WORLD_SIZE=str(nranks),
        LOCAL_WORLD_SIZE=str(nranks),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    children = []
    signals = _SignalsToForward()
    try:
        for rank in range(nranks):
            child_env = dict(
                base,
                RINGCOMM_RANK=str(rank),
                RINGCOMM_LOCAL_RANK=str(rank),
                RANK=str(rank),
                LOCAL_RANK=str(rank),
            )
            children.append(subprocess.Popen(list(command), env=child_env))
        return _supervise(children, grace, signals)
    finally:
        signals.restore()
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        server.stop()


class _SignalsToForward:
    """Catches the signals the launcher passes on, for _supervise to act on (a handler only notes
    them: the supervising loop does the rest)."""

    def __init__(self):
        self.received: list[int] = []
        self._previous = {}
        for number in _FORWARDED:
            try:
                self._previous[number] = signal.signal(number, self._note)
            except ValueError:  # not the main thread: the caller keeps its own handling
                pass

    def _note(self, number, frame) -> None:
        self.received.append(number)

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


def _supervise(children, grace: float, signals: _SignalsToForward) -> int:
    status = 0
    deadline = None  # when ranks still running are killed
    forwarded = 0
    while True:
        running = [c for c in children if c.poll() is None]
        for child in children:
            code = child.returncode
            if code not in (None, 0) and status == 0:
                status = code if code > 0 else 128 - code
                deadline = time.monotonic() + grace
        while forwarded < len(signals.received):
            number = signals.received[forwarded]
            forwarded += 1
            for child in running:
                child.send_signal(number)
            status = 128 + number
            if deadline is None:
                deadline = time.monotonic() + grace
        if not running:
            return status
        if deadline is not None and time.monotonic() > deadline:
            for child in running:
                child.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            for child in running:
                if child.poll() is None:
                    child.kill()
            return status
        time.sleep(0.05)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ringcomm-run", description="Run N local ranks of a Python program."
    )
    parser.add_argument(
        "-np",
        "-n",
        dest="nranks",
        type=int,
        default=default_ranks(),
        help="number of ranks (default: one per core)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=_GRACE_SECONDS,
        help="seconds ranks may go on after one failed or a signal came, before they are killed "
        f"({_GRACE_SECONDS:g})",
    )
    parser.add_argument("-m", dest="module", help="run a module, as python -m does")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="script and its arguments")
    args = parser.parse_args(argv)
    if args.module:
        command = [sys.executable, "-m", args.module, *args.program]
    elif args.program:
        program = args.program[1:] if args.program[0] == "--" else args.program
        command = [sys.executable, *program]
    else:
        parser.error("give a script to run (or -m module)")
    return spawn(args.nranks, command, grace=args.grace)


if __name__ == "__main__":
    sys.exit(main())
