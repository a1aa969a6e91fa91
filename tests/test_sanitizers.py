"""Builds the core and the C++ unit tests with clang under ASan + UBSan and, separately, TSan
(CMake's RINGCOMM_SANITIZE), and runs them; any report fails the test.

The unit tests include tests/cpp/test_ranks_as_threads.cc: ranks as threads of one process,
meeting through a TCP store and talking over shared memory and TCP, so that the sanitizers see
the engine's threads, the callers' and every rank's failure paths at once.

Time: each build is about 70 s of 2 cores, the runs are listed in docs/reliability.md. CI runs
every unit test under ASan + UBSan and the ranks-as-threads, store and handshake tests under TSan
(the TSan run of the rest adds minutes and found nothing); RINGCOMM_SANITIZE_FULL=1 runs every
test under both. Needs clang with its sanitizer runtime (libclang-rt-N-dev; .ci/run installs
it): skipped, saying so, without it; failed in CI.
"""

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import background_builds
import pytest

REPO = Path(__file__).resolve().parent.parent
# TSan's subset in CI (substrings of test names, tests/cpp/main.cc's filter): the tests where
# threads meet.
TSAN_SUBSET = ["ranks_as_threads", "tcpStore", "hashStore", "handshake"]

KINDS = {
    "address,undefined": {
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        # The reduction kernels' matrix at 65,539 elements rather than 262,147: still many
        # blocks of every kernel, a quarter of the time (the ordinary run checks the large one).
        "RINGCOMM_UNIT_TESTS_QUICK": "1",
    },
    "thread": {
        "TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1:suppressions="
        + str(REPO / "tests" / "cpp" / "tsan_suppressions.txt")
    },
}


def _versioned(pattern: str) -> list:
    found = [p for p in Path("/usr/bin").glob(pattern) if p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]), reverse=True)


@functools.lru_cache(maxsize=None)
def sanitizing_clang(kind: str) -> str:
    """The newest clang++ that links a program with -fsanitize=kind, or ""."""
    for clang in [*map(str, _versioned("clang++-*")), shutil.which("clang++") or ""]:
        if not clang:
            continue
        probe = subprocess.run(
            [clang, f"-fsanitize={kind}", "-x", "c++", "-", "-o", os.devnull],
            input="int main() { return 0; }",
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return clang
    return ""


def symbolizer(clang: str) -> str:
    """An llvm-symbolizer, so that reports name functions and lines."""
    version = clang.rsplit("-", 1)[-1]
    for candidate in [
        f"/usr/lib/llvm-{version}/bin/llvm-symbolizer",
        f"/usr/bin/llvm-symbolizer-{version}",
        *map(str, _versioned("llvm-symbolizer-*")),
        shutil.which("llvm-symbolizer") or "",
    ]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return ""


def tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or "")


def build_directory(kind: str) -> Path:
    return REPO / "build" / f"sanitize-{kind.split(',')[0]}"


def build_unit_tests(kind: str) -> subprocess.CompletedProcess:
    """Configures and builds the unit tests with -fsanitize=kind; run in the background from the
    session's start (tests/background_builds.py)."""
    cmake, build = tool("cmake"), build_directory(kind)
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}"] if tool("ninja") else []
    configure = [cmake, "-S", str(REPO), "-B", str(build), *generator]
    configure += [f"-DCMAKE_CXX_COMPILER={sanitizing_clang(kind)}", "-DRINGCOMM_BUILD_PYTHON=OFF"]
    configure += ["-DRINGCOMM_BUILD_TESTS=ON", f"-DRINGCOMM_SANITIZE={kind}"]
    configure += ["-DRINGCOMM_UNITY_BUILD=ON"]  # a third less compiling; the tests are the same
    configured = subprocess.run(
        background_builds.idle_priority(configure), capture_output=True, text=True
    )
    if configured.returncode != 0:
        return configured
    compile_all = [cmake, "--build", str(build), "--target", "ringcomm_unit_tests"]
    return subprocess.run(
        background_builds.idle_priority([*compile_all, "-j", str(os.cpu_count() or 2)]),
        capture_output=True,
        text=True,
    )


def background_builds_for(item) -> dict:
    kind = item.callspec.params["kind"]
    if not (sanitizing_clang(kind) and tool("cmake")):
        return {}
    return {f"sanitize-{kind}": functools.partial(build_unit_tests, kind)}


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", list(KINDS), ids=["asan-ubsan", "tsan"])
def test_unit_tests_under_sanitizers(kind):
    clang = sanitizing_clang(kind)
    if not clang:
        message = (
            f"no clang that links -fsanitize={kind} (apt-get install clang-22 libclang-rt-22-dev)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    if not tool("cmake"):
        pytest.skip("cmake not installed")
    build = build_directory(kind)
    started = time.monotonic()
    built = background_builds.result(f"sanitize-{kind}", functools.partial(build_unit_tests, kind))
    assert built.returncode == 0, built.stdout[-5000:] + built.stderr[-5000:]
    # The build ran at idle priority beside other tests; this is the time this test waited.
    build_seconds = time.monotonic() - started

    env = dict(os.environ, **KINDS[kind])
    found = symbolizer(clang)
    if found:
        env["ASAN_SYMBOLIZER_PATH"] = found
        env["TSAN_OPTIONS"] = env.get("TSAN_OPTIONS", "") + f":external_symbolizer_path={found}"
    full = kind != "thread" or os.environ.get("RINGCOMM_SANITIZE_FULL") == "1"
    filters = [None] if full else TSAN_SUBSET
    summary = []
    for name_filter in filters:
        started = time.monotonic()
        run = subprocess.run(
            [str(build / "ringcomm_unit_tests"), *([name_filter] if name_filter else [])],
            capture_output=True,
            text=True,
            env=env,
            timeout=1200,
        )
        seconds = time.monotonic() - started
        counts = re.search(r"(\d+) passed, (\d+) failed", run.stdout)
        label = name_filter or "all"
        summary.append(f"{label}: {counts.group(0) if counts else '?'} in {seconds:.0f} s")
        print(run.stdout)
        reports = re.findall(r"(?:ERROR|WARNING): \w+Sanitizer.*|runtime error: .*", run.stderr)
        assert not reports and run.returncode == 0 and counts, (
            f"{kind} ({label}): exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-12000:]}"
        )
        assert name_filter is not None or int(counts.group(1)) > 0
    waited = f"waited {build_seconds:.0f} s for the build"
    print(f"-fsanitize={kind} with {clang}: {waited}; " + "; ".join(summary))
