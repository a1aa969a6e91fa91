import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

# The harness and workers import each other by plain name.
sys.path.insert(0, str(Path(__file__).parent))
# No tuning file: algorithm="auto" is the cost model's in every test and every rank it starts,
# whatever `ringcomm-bench tune` measured on this machine. Tests of tuning set their own directory.
os.environ["RINGCOMM_TUNING_DIR"] = "off"


_SESSION_STARTED = time.time()


def pytest_sessionstart(session):
    """Build the torch.distributed backend once, before any test's timeout starts: on a fresh
    machine it compiles for about half a minute, which ranks of a test would otherwise wait out."""
    if importlib.util.find_spec("torch") is None:
        return
    from ringcomm.c10d._build import extension

    extension()


def _builds_of(item) -> dict:
    """The background builds a test needs (its module's background_builds_for), by name."""
    builds_for = getattr(item.module, "background_builds_for", None)
    return builds_for(item) if builds_for else {}


# Last: after -k and -m have deselected what will not run.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests that compile the core again run last, their builds started now at idle priority
    (tests/background_builds.py): the rest of the suite leaves them its idle CPU time."""
    import background_builds

    if config.option.collectonly:
        return
    needs_build = [item for item in items if _builds_of(item)]
    if not needs_build:
        return
    items[:] = [item for item in items if not _builds_of(item)] + needs_build
    for item in needs_build:
        for name, build in _builds_of(item).items():
            background_builds.start(name, build)


def pytest_sessionfinish(session, exitstatus):
    import background_builds

    background_builds.cancel_pending()
    _remove_mpich_leftovers()


def _remove_mpich_leftovers() -> None:
    """MPICH's own segments (/dev/shm/mpich_shm_*) that the suite's mpirun jobs left: MPI_Finalize
    removes them, and ranks that hydra SIGKILLed (tests/test_fault_injection.py) or that leave
    without it (the survivors of tests/test_shrink.py under mpirun) never get there. Only those
    made during this session that no process still maps."""
    shm = Path("/dev/shm")
    try:
        made = [
            path
            for path in shm.glob("mpich_shm_*")
            if path.stat().st_mtime >= _SESSION_STARTED and path.stat().st_uid == os.getuid()
        ]
    except OSError:
        return
    if not made:
        return
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(
                line.split()[-1] for line in maps.read_text().splitlines() if "mpich_shm_" in line
            )
        except OSError:
            continue
    for path in made:
        if str(path) not in mapped:
            path.unlink(missing_ok=True)
