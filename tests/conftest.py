import importlib.util
import sys
from pathlib import Path

# The harness and workers import each other by plain name.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_sessionstart(session):
    """Build the torch.distributed backend once, before any test's timeout starts: on a fresh
    machine it compiles for about a minute, which ranks of a test would otherwise wait out."""
    if importlib.util.find_spec("torch") is None:
        return
    from ringcomm.c10d._build import extension

    extension()
