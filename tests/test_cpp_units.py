"""Builds and runs the C++ unit tests (planners, reduction kernels, store) from the same command,
and the check of a libringcomm linked with a static libstdc++ (tests/cpp/test_static_libstdcxx.cc).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import background_builds
import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "cpp-tests"


def tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or "")


TARGETS = ["ringcomm_unit_tests", "ringcomm_static_libstdcxx_tests"]


def build_targets() -> dict:
    """Configures the test build (the unit tests, no Python module) and builds each target: its
    CompletedProcess by name, a target that fails not keeping the others from building. Run in
    the background from the session's start (tests/background_builds.py)."""
    cmake = tool("cmake")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}"] if tool("ninja") else []
    configure = [cmake, "-S", str(REPO), "-B", str(BUILD), *generator]
    configure += ["-DRINGCOMM_BUILD_PYTHON=OFF", "-DRINGCOMM_BUILD_TESTS=ON"]
    configure += ["-DRINGCOMM_UNITY_BUILD=ON"]  # a third less compiling; the tests are the same
    configured = subprocess.run(
        background_builds.idle_priority(configure), capture_output=True, text=True
    )
    if configured.returncode != 0:
        return {target: configured for target in TARGETS}
    jobs = str(os.cpu_count() or 2)
    return {
        target: subprocess.run(
            background_builds.idle_priority(
                [cmake, "--build", str(BUILD), "--target", target, "-j", jobs]
            ),
            capture_output=True,
            text=True,
        )
        for target in TARGETS
    }


def background_builds_for(item) -> dict:
    return {"cpp-tests": build_targets} if tool("cmake") else {}


def build_and_run(target: str) -> str:
    """Takes the target's build and runs it; its output, once it says "N passed, 0 failed" with
    N > 0."""
    if not tool("cmake"):
        pytest.skip("cmake not installed")
    build = background_builds.result("cpp-tests", build_targets)[target]
    assert build.returncode == 0, build.stdout[-5000:] + build.stderr[-5000:]
    run = subprocess.run([str(BUILD / target)], capture_output=True, text=True, timeout=600)
    print(run.stdout)
    summary = re.search(r"(\d+) passed, (\d+) failed", run.stdout)
    assert summary and run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    assert int(summary.group(1)) > 0
    return run.stdout


@pytest.mark.timeout(900)
def test_cpp_unit_tests():
    build_and_run("ringcomm_unit_tests")


@pytest.mark.timeout(900)
def test_static_libstdcxx_stays_inside_the_library():
    """libringcomm linked with -static-libstdc++ -static-libgcc, as some toolchains' g++ does:
    it exports nothing of its copy of libstdc++, links the shared unwinder, and works in a
    program that uses the system libstdc++.so (as Python with torch does), errors caught across
    the boundary. The build shares the unit tests' objects."""
    compiler = os.environ.get("CXX") or tool("c++")
    archive = subprocess.run(
        [compiler, "-print-file-name=libstdc++.a"], capture_output=True, text=True
    ).stdout.strip()
    if not os.path.isabs(archive):
        pytest.skip(f"{compiler} has no static libstdc++ (libstdc++.a) to link")
    build_and_run("ringcomm_static_libstdcxx_tests")
    library = BUILD / "libringcomm_static_libstdcxx.so"
    readelf, nm = tool("readelf"), tool("nm")
    if not (readelf and nm):
        pytest.skip("binutils (readelf, nm) not installed")
    dynamic = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True)
    # Else the check proves nothing: the library would use the system's copy.
    assert "libstdc++" not in dynamic.stdout, "the library was not linked with a static libstdc++"
    # The unwinder is the shared one, so that exceptions can leave the library.
    assert "libgcc_s" in dynamic.stdout, dynamic.stdout
    exported = subprocess.run(
        [nm, "-D", "--defined-only", "--demangle", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = [line.split(" ", 2)[2] for line in exported.splitlines() if line.count(" ") >= 2]
    own = re.compile(r"^(ringcomm::|(typeinfo|typeinfo name|vtable) for ringcomm::)")
    leaked = [name for name in names if not own.match(name)]
    assert not leaked, f"{len(leaked)} symbols of the static libstdc++ exported: {leaked[:20]}"
