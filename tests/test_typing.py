"""Typed Python: the core's stubs (ringcomm/_core.pyi) match the built module, and mypy passes on
the whole package - the library, the torch integration (ringcomm.torch, ringcomm.c10d) and the
benchmark (ringcomm.bench) - with torch, CuPy, MPI and the optional extras taken as Any
(pyproject.toml's [tool.mypy]). The package ships py.typed, so that editors and users' mypy read
both."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_package_is_marked_typed():
    assert (REPO / "ringcomm" / "py.typed").exists()


def test_core_stubs_match_the_build():
    pytest.importorskip("pybind11_stubgen")
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "stubs.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if done.returncode == 2:  # another pybind11 or generator: their text, not the API, differs
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_passes_on_the_library(tmp_path):
    pytest.importorskip("mypy")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
