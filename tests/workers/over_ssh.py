"""A rank started by ringcomm-run -H: an all-reduce, where it runs, and whether the job's secret
shows on any process's command line on the machine (the namespace hosts share one process table,
so this sees the launcher's ssh clients and the far hosts' sshd sessions alike)."""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init(timeout=60)
x = np.full(100_003, comm.rank + 1, np.float64)
comm.allreduce(x)
secret = os.environ["RINGCOMM_SECRET"].encode()
shown = []
for proc in Path("/proc").iterdir():
    try:
        if secret in (proc / "cmdline").read_bytes():
            shown.append(int(proc.name))
    except (OSError, ValueError):
        continue
report(
    {
        "rank": comm.rank,
        "size": comm.size,
        "local_rank": comm.local_rank,
        "local_size": comm.local_size,
        "namespace": os.readlink("/proc/self/ns/net"),
        "cwd": os.getcwd(),
        "marker": os.environ.get("TEST_MARKER"),
        "ok": bool(np.all(x == comm.size * (comm.size + 1) / 2)),
        "secret_on_command_lines": shown,
    }
)
comm.shutdown()
