"""Starting one rank's process, as every launcher here does it (ringcomm-run, the elastic driver,
and the benchmarks' torch.distributed jobs).

Each rank gets a session of its own, as MPICH's mpiexec (hydra) and torchrun give theirs. Where
the kernel groups processes by session for scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
on by default in most distributions), the ranks of one session share one group's CPU time: with 4
busy processes beside them on 2 cores, 16 ranks in one session got 0.4-0.7 of the cores, and
MPICH's 16, each its own group, 1.6 (bench/RESULTS.md, "Ranks in sessions of their own"). A session
of its own also keeps a terminal's Ctrl-C from reaching the ranks directly: the launcher passes
signals on itself (ringcomm.launch), once, and stops what is left after a grace period.
"""

from __future__ import annotations

import subprocess
from typing import Mapping, Sequence


def start_rank(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    return subprocess.Popen(list(command), env=dict(env), start_new_session=True)
