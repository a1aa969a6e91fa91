"""Builds and runs the C++ unit tests (planners, reduction kernels, store) from the same command."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "cpp-tests"


def tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or "")


@pytest.mark.timeout(900)
def test_cpp_unit_tests():
    cmake = tool("cmake")
    if not cmake:
        pytest.skip("cmake not installed")
    generator = ["-G", "Ninja"] if tool("ninja") else []
    if generator:
        generator += [f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}"]
    subprocess.run(
        [
            cmake,
            "-S",
            str(REPO),
            "-B",
            str(BUILD),
            *generator,
            "-DRINGCOMM_BUILD_PYTHON=OFF",
            "-DRINGCOMM_BUILD_TESTS=ON",
        ],
        check=True,
        capture_output=True,
    )
    build = subprocess.run(
        [
            cmake,
            "--build",
            str(BUILD),
            "--target",
            "ringcomm_unit_tests",
            "-j",
            str(os.cpu_count() or 2),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-5000:] + build.stderr[-5000:]
    run = subprocess.run(
        [str(BUILD / "ringcomm_unit_tests")], capture_output=True, text=True, timeout=600
    )
    print(run.stdout)
    summary = re.search(r"(\d+) passed, (\d+) failed", run.stdout)
    assert summary and run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    assert int(summary.group(1)) > 0
