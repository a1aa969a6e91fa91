"""Builds the CUDA kernels (src/cuda), their tests (tests/cuda) and the core with its device path
(src/device: staging, CUDA IPC), and runs the kernel tests.

The build needs nvcc but no GPU, so it runs wherever the CUDA toolkit is installed (CI has it): a
kernel or a device path that stops compiling or linking fails here. The kernel tests need a GPU;
without one the executable exits with 77 and the test is skipped. The host checks (the kernels'
per-element code compiled for the host, against the CPU kernels) need none and always run.
"""

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import background_builds
import pytest

REPO = Path(__file__).resolve().parent.parent
# The test executable's exit code when there is no CUDA device (the automake "skipped" code).
NO_DEVICE = 77


def tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or "")


def nvcc() -> str:
    """The nvcc CMake would find: $CUDACXX, then PATH, then the toolkit's usual home."""
    candidates = [os.environ.get("CUDACXX", ""), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and Path(c).is_file()), "")


@dataclass
class Build:
    ok: bool
    log: str
    seconds: float
    tests: Path


def build_cuda_targets() -> Build:
    """Configures and builds only the CUDA targets, in a fresh build directory (build/cuda-check,
    emptied first); run in the background from the session's start (tests/background_builds.py)."""
    cmake, build = tool("cmake"), REPO / "build" / "cuda-check"
    shutil.rmtree(build, ignore_errors=True)
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}"] if tool("ninja") else []
    configure = [cmake, "-S", str(REPO), "-B", str(build), *generator]
    configure += [f"-DCMAKE_CUDA_COMPILER={nvcc()}", "-DRINGCOMM_BUILD_CUDA=ON"]
    configure += ["-DRINGCOMM_BUILD_PYTHON=OFF", "-DRINGCOMM_UNITY_BUILD=ON"]
    # The kernels compile for one architecture, not the default two (half of this build's time
    # goes to them): the GPU's own where there is one, else one that nvcc 13 has.
    native = shutil.which("nvidia-smi") is not None
    configure += [f"-DCMAKE_CUDA_ARCHITECTURES={'native' if native else '90'}"]
    configured = subprocess.run(
        background_builds.idle_priority(configure), capture_output=True, text=True
    )
    if configured.returncode != 0:
        return Build(False, configured.stdout[-5000:] + configured.stderr[-5000:], 0.0, build)
    start = time.monotonic()
    targets = ["ringcomm_cuda_kernels", "ringcomm_cuda_tests"]
    # The core linked with the device path, the kernels and cudart.
    targets += ["ringcomm_core"]
    compiled = subprocess.run(
        background_builds.idle_priority(
            [cmake, "--build", str(build), "--target", *targets, "-j", str(os.cpu_count() or 2)]
        ),
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - start
    log = compiled.stdout[-5000:] + compiled.stderr[-5000:]
    return Build(compiled.returncode == 0, log, seconds, build / "ringcomm_cuda_tests")


def background_builds_for(item) -> dict:
    return {"cuda": build_cuda_targets} if nvcc() and tool("cmake") else {}


@pytest.fixture(scope="module")
def cuda_build() -> Build:
    if not nvcc():
        pytest.skip("nvcc not found: the CUDA toolkit is not installed")
    if not tool("cmake"):
        pytest.skip("cmake not installed")
    return background_builds.result("cuda", build_cuda_targets)


def run_tests(build: Build, *arguments: str) -> subprocess.CompletedProcess:
    if not build.ok:
        pytest.fail("the CUDA targets did not build: see test_cuda_sources_compile")
    done = subprocess.run(
        [str(build.tests), *arguments], capture_output=True, text=True, timeout=1200
    )
    print(done.stdout)
    return done


@pytest.mark.timeout(1200)
def test_cuda_sources_compile(cuda_build):
    assert cuda_build.ok, cuda_build.log
    print(f"CUDA kernels and tests built in {cuda_build.seconds:.0f} s (at idle priority)")
    assert cuda_build.tests.is_file()


@pytest.mark.timeout(1200)
def test_cuda_kernels(cuda_build):
    done = run_tests(cuda_build, "--device-only")  # the host checks are the next test
    if done.returncode == NO_DEVICE:
        pytest.skip("no CUDA device")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert " passed, 0 failed" in done.stdout


@pytest.mark.timeout(1200)
def test_cuda_host_checks(cuda_build):
    done = run_tests(cuda_build, "--host-only")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert " passed, 0 failed" in done.stdout
