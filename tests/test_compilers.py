"""Compiles every C++ source and header with a second compiler: clang with LLVM's libc++.

The build itself uses the system g++ and libstdc++, whose headers include each other generously:
a file that uses std::to_string without <string> compiles with gcc 12 and fails with gcc 13
(src/engine/work.cc did). libc++ with _LIBCPP_REMOVE_TRANSITIVE_INCLUDES drops the includes its
headers do not need, so a file that does not include what it uses fails here, whichever gcc a
user has. Each file is checked on its own in -fsyntax-only mode (nothing is linked), headers
included, so that every header compiles first in a translation unit.

The compiler: $RINGCOMM_STRICT_CXX, else the newest clang++-N on PATH whose libc++ works.
.ci/run installs one (Debian's clang-N and libc++-N-dev); elsewhere the test is skipped, saying
what to install. libc++ 19 and older still reach <string> from <mutex>, so they miss what gcc 13
rejects: use 20 or newer.

Groups, each skipped with its reason when what it needs is missing:
  core       src/, include/ringcomm/ (the library; the CUDA kernels are .cu, see cuda-host)
  unit-tests tests/cpp/
  bindings   bindings/ (pybind11's headers and Python's)
  cuda-host  the host code in src/ that includes the CUDA toolkit's headers, itself or through
             ours (src/device/cuda_path.cc, src/cuda/kernels.h...), and tests/cuda/*.h.
             The .cu files are left to nvcc (tests/test_cuda.py): CUDA's headers refuse libc++
             on x86.
  c10d       ringcomm/c10d/csrc/ (the torch backend, against this torch's headers)
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import background_builds
import pytest

REPO = Path(__file__).resolve().parent.parent
# The oldest libc++ whose <mutex> no longer brings in <string> (see the module docstring).
MIN_LIBCXX_MAJOR = 20
FLAGS = [
    "-std=c++17",
    "-fsyntax-only",
    "-stdlib=libc++",
    "-D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES",
    # A header compiled as the main file is expected to say #pragma once.
    "-Wno-pragma-once-outside-header",
]
SOURCE_SUFFIXES = (".cc",)
HEADER_SUFFIXES = (".h",)


def _probe(compiler: str) -> Optional[int]:
    """The major version of the libc++ this clang compiles against, or None if it has none."""
    probe = "#include <string>\nint version = _LIBCPP_VERSION;\n"
    done = subprocess.run(
        [compiler, "-std=c++17", "-stdlib=libc++", "-x", "c++", "-E", "-dM", "-"],
        input=probe,
        capture_output=True,
        text=True,
    )
    match = re.search(r"#define _LIBCPP_VERSION (\d+)", done.stdout)
    if done.returncode != 0 or not match:
        return None
    # XXYYZZ since libc++ 16 (190107 is 19.1.7), XXYZZ before (15000 is 15.0.0).
    version = int(match.group(1))
    return version // 10000 if version >= 160000 else version // 1000


@functools.lru_cache(maxsize=None)
def strict_compiler() -> Tuple[Optional[str], str]:
    """(compiler, "") or (None, why not)."""
    chosen = os.environ.get("RINGCOMM_STRICT_CXX")
    if chosen:
        candidates = [chosen]
    else:
        versioned = set()
        for directory in os.environ.get("PATH", "").split(os.pathsep):
            if os.path.isdir(directory):
                versioned.update(
                    name for name in os.listdir(directory) if re.fullmatch(r"clang\+\+-\d+", name)
                )
        by_version = sorted(versioned, key=lambda name: int(name.split("-")[1]), reverse=True)
        candidates = [shutil.which(name) for name in by_version + ["clang++"]]
    tried = []
    for compiler in filter(None, candidates):
        libcxx = _probe(compiler)
        if libcxx is not None and libcxx >= MIN_LIBCXX_MAJOR:
            return compiler, ""
        tried.append(f"{compiler} (libc++ {libcxx or 'missing'})")
    install = (
        f"install clang with libc++ {MIN_LIBCXX_MAJOR} or newer (Debian: apt-get install "
        "clang-22 libc++-22-dev libc++abi-22-dev; .ci/run does) or set RINGCOMM_STRICT_CXX"
    )
    if tried:
        return None, f"no clang++ with a recent libc++: tried {', '.join(tried)}; {install}"
    return None, f"clang++ not found; {install}"


def cuda_include_dir() -> Optional[Path]:
    """The CUDA toolkit's headers, where tests/test_cuda.py's nvcc would find them."""
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    for nvcc in [os.environ.get("CUDACXX", ""), shutil.which("nvcc") or ""]:
        if nvcc:
            homes.append(str(Path(nvcc).resolve().parent.parent))
    homes.append("/usr/local/cuda")
    for home in filter(None, homes):
        include = Path(home) / "include"
        if (include / "cuda_runtime_api.h").is_file():
            return include
    return None


@dataclass
class Group:
    files: List[Path]
    include_dirs: List[Path]
    system_dirs: List[Path] = field(default_factory=list)
    missing: str = ""  # why this group cannot be compiled here


def pybind11_headers() -> List[Path]:
    """pybind11's headers and this Python's, which they include."""
    import pybind11

    return [Path(pybind11.get_include()), Path(sysconfig.get_paths()["include"])]


def _paths(*patterns: str) -> List[Path]:
    return sorted(path for pattern in patterns for path in REPO.glob(pattern))


def includes_cuda(path: Path, include_dirs: List[Path], seen: Optional[set] = None) -> bool:
    """Whether the file includes the CUDA toolkit's headers, itself or through ours."""
    seen = set() if seen is None else seen
    if path in seen:
        return False
    seen.add(path)
    for line in path.read_text().splitlines():
        if re.match(r"\s*#\s*include\s*<(cuda|cuda_runtime|cuda_runtime_api)\.h>", line):
            return True
        match = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if match:
            for directory in [path.parent, *include_dirs]:
                header = (directory / match.group(1)).resolve()
                if header.is_file():
                    if includes_cuda(header, include_dirs, seen):
                        return True
                    break
    return False


def groups() -> Dict[str, Group]:
    core_dirs = [REPO / "include", REPO / "src"]
    sources = _paths("src/**/*.cc", "src/**/*.h", "include/ringcomm/*.h")
    needs_cuda = [path for path in sources if includes_cuda(path, core_dirs)]
    core = [path for path in sources if path not in needs_cuda]
    found: Dict[str, Group] = {
        "core": Group(core, core_dirs),
        "unit-tests": Group(
            _paths("tests/cpp/*.cc", "tests/cpp/*.h"), [*core_dirs, REPO / "tests/cpp"]
        ),
    }

    bindings = Group(_paths("bindings/*.cc", "bindings/*.h"), [*core_dirs, REPO / "bindings"])
    try:
        bindings.system_dirs = pybind11_headers()
    except ImportError:
        bindings.missing = "pybind11 is not installed (pip install pybind11; the test extra has it)"
    found["bindings"] = bindings

    cuda = Group(
        needs_cuda + _paths("tests/cuda/*.h"),
        [*core_dirs, REPO / "tests/cpp", REPO / "tests/cuda"],
    )
    cuda_include = cuda_include_dir()
    if cuda_include:
        cuda.system_dirs = [cuda_include]
    else:
        cuda.missing = "the CUDA toolkit's headers (cuda_runtime_api.h) are not installed"
    found["cuda-host"] = cuda

    csrc = REPO / "ringcomm/c10d/csrc"
    c10d = Group(
        _paths("ringcomm/c10d/csrc/*.cc", "ringcomm/c10d/csrc/*.h"), [REPO / "include", csrc]
    )
    try:
        from torch.utils import cpp_extension

        c10d.system_dirs = [*map(Path, cpp_extension.include_paths()), *pybind11_headers()]
    except ImportError as error:
        c10d.missing = f"torch or pybind11 is not installed ({error})"
    found["c10d"] = c10d
    return found


def first_local_include(source: Path, include_dirs: List[Path]) -> Optional[Path]:
    """The header a source file includes first, when that is one of ours."""
    for line in source.read_text().splitlines():
        match = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if match:
            for directory in [source.parent, *include_dirs]:
                if (directory / match.group(1)).is_file():
                    return (directory / match.group(1)).resolve()
            return None
        if re.match(r"\s*#\s*include\s*<", line):
            return None
    return None


def translation_units(group: Group) -> List[Path]:
    """The group's sources, and the headers that no source includes first: a header a source
    includes before anything else is already compiled on its own there."""
    sources = [path for path in group.files if path.suffix in SOURCE_SUFFIXES]
    covered = {first_local_include(source, group.include_dirs) for source in sources}
    headers = [
        path
        for path in group.files
        if path.suffix in HEADER_SUFFIXES and path.resolve() not in covered
    ]
    return sources + headers


def compile_command(compiler: str, group: Group, path: Path) -> List[str]:
    command = [compiler, *FLAGS]
    command += [f"-I{directory}" for directory in group.include_dirs]
    # -isystem: warnings and errors in other projects' headers are not ours to fix.
    for directory in group.system_dirs:
        command += ["-isystem", str(directory)]
    if path.suffix in HEADER_SUFFIXES:
        command += ["-x", "c++"]
    return command + [str(path)]


@dataclass
class Outcome:
    group: str
    path: Path
    returncode: int
    output: str


@dataclass
class Compiled:
    compiler: str
    seconds: float
    by_group: Dict[str, List[Outcome]]


def compile_everything() -> Optional[Compiled]:
    """Compiles every group that can be compiled here, all files in one pool so that the slow
    ones (pybind11 and torch headers, several seconds each) overlap the rest; None without the
    strict compiler. Run in the background from the session's start (tests/background_builds.py)."""
    compiler, _ = strict_compiler()
    if compiler is None:
        return None
    jobs = [
        (name, path, compile_command(compiler, group, path))
        for name, group in groups().items()
        if not group.missing
        for path in translation_units(group)
    ]
    # The slowest first, so that the pool does not end waiting on one of them.
    weight = {"c10d": 0, "bindings": 1}
    jobs.sort(key=lambda job: weight.get(job[0], 2))

    def run(job) -> Outcome:
        name, path, command = job
        done = subprocess.run(
            background_builds.idle_priority(command), capture_output=True, text=True, cwd=REPO
        )
        return Outcome(name, path, done.returncode, done.stdout + done.stderr)

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        outcomes = list(pool.map(run, jobs))
    by_group: Dict[str, List[Outcome]] = {}
    for outcome in outcomes:
        by_group.setdefault(outcome.group, []).append(outcome)
    return Compiled(compiler, time.monotonic() - start, by_group)


def background_builds_for(item) -> dict:
    return {"libcxx-syntax": compile_everything}


@pytest.fixture(scope="module")
def compiled() -> Dict[str, List[Outcome]]:
    compiler, why = strict_compiler()
    if compiler is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI installs the strict compiler (.ci/run), but: {why}")
        pytest.skip(why)
    done = background_builds.result("libcxx-syntax", compile_everything)
    files = sum(len(outcomes) for outcomes in done.by_group.values())
    print(f"{done.compiler}: {files} files in {done.seconds:.0f} s (at idle priority)")
    return done.by_group


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["core", "unit-tests", "bindings", "cuda-host", "c10d"])
def test_compiles_with_libcxx(compiled, name):
    group = groups()[name]
    if group.missing:
        pytest.skip(group.missing)
    outcomes = compiled[name]
    assert len(outcomes) >= 1
    failed = [outcome for outcome in outcomes if outcome.returncode != 0]
    report = "\n\n".join(
        f"--- {outcome.path.relative_to(REPO)} ---\n{outcome.output[-4000:]}" for outcome in failed
    )
    assert not failed, f"{len(failed)} of {len(outcomes)} files do not compile:\n{report}"
