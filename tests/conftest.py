import importlib.util
import os
import sys
from pathlib import Path

# The harness and workers import each other by plain name.
sys.path.insert(0, str(Path(__file__).parent))
# No tuning file: algorithm="auto" is the cost model's in every test and every rank it starts,
# whatever `ringcomm-bench tune` measured on this machine. Tests of tuning set their own directory.
os.environ["RINGCOMM_TUNING_DIR"] = "off"


def pytest_sessionstart(session):
    """Build the torch.distributed backend once, before any test's timeout starts: on a fresh
    machine it compiles for about a minute, which ranks of a test would otherwise wait out."""
    if importlib.util.find_spec("torch") is None:
        return
    from ringcomm.c10d._build import extension

    extension()
