"""What the results were measured on, and how: printed above the tables for bench/RESULTS.md."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

from ringcomm._host import cores, cpu_model


def memory_gib() -> Optional[float]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError, AttributeError):
        return None


def version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The invocation as typed: "ringcomm-bench ..." or "python -m ringcomm.bench ..."."""
    args = list(sys.argv[1:] if argv is None else argv)
    program = Path(sys.argv[0]).name
    prefix = (
        "python -m ringcomm.bench"
        if program in ("__main__.py", "-m", "-c", "")
        else "ringcomm-bench"
    )
    return " ".join([prefix, shlex.join(args)]).strip()


def describe() -> dict:
    import ringcomm

    versions = {name: version(name) for name in ("numpy", "torch", "mpi4py", "mpich")}
    versions["ringcomm"] = ringcomm.__version__
    return {
        "cpu": cpu_model(),
        "cores": cores(),
        "logical_cpus": os.cpu_count(),
        "memory_gib": memory_gib(),
        "python": platform.python_version(),
        "versions": {k: v for k, v in versions.items() if v},
    }
