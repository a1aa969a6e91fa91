"""Starting one rank's process, as every launcher here does it (ringcomm-run, the elastic driver,
and the benchmarks' torch.distributed jobs).

Each rank gets a session of its own, as MPICH's mpiexec (hydra) and torchrun give theirs. Where
the kernel groups processes by session for scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
on by default in most distributions), the ranks of one session share one group's CPU time: with 4
busy processes beside them on 2 cores, 16 ranks in one session got 0.4-0.7 of the cores, and
MPICH's 16, each its own group, 1.6 (bench/RESULTS.md, "Ranks in sessions of their own"). A session
of its own also keeps a terminal's Ctrl-C from reaching the ranks directly: the launcher passes
signals on itself (ringcomm.launch), once, and stops what is left after a grace period.

Out of the launcher's process group, a rank is no longer reached by a signal sent to that group
(``timeout -s KILL``, a shell killing a job). So on Linux each rank asks the kernel for SIGKILL
when its launcher dies (PR_SET_PDEATHSIG): a launcher killed outright leaves no rank behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any, Callable, Mapping, Optional, Sequence

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# The variables by which ringcomm-run and torchrun tell a process its rank and where rank 0 is.
# A job a launcher starts must not inherit those of a launcher above it, or its processes
# mistake them for their own (ringcomm.launch's elastic workers, the benchmarks' peers).
RANK_VARIABLES = (
    "RINGCOMM_RANK",
    "RINGCOMM_WORLD_SIZE",
    "RINGCOMM_LOCAL_RANK",
    "RINGCOMM_LOCAL_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def _die_with(launcher: int) -> Optional[Callable[[], None]]:
    """What the child runs between fork and exec (Linux only): SIGKILL when `launcher` dies.

    The libc function is looked up here, in the launcher, so the child only calls it. Linux sends
    the signal when the thread that forked exits: every launcher here waits for its ranks in the
    thread that started them. Where the kernel refuses the request, the rank runs on as before,
    reached by the signals the launcher passes on."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != launcher:  # it died before the request: nothing would be sent
            os._exit(1)

    return in_child


def start_rank(command: Sequence[str], env: Mapping[str, str], **popen: Any) -> subprocess.Popen:
    """``command`` in a session of its own, killed when this process dies (``popen``: more of
    subprocess.Popen's arguments, such as stdin)."""
    return subprocess.Popen(
        list(command),
        env=dict(env),
        start_new_session=True,
        preexec_fn=_die_with(os.getpid()),
        **popen,
    )
