"""Fuzzes the store protocol, the handshake and the messages peers exchange (tests/fuzz) with
libFuzzer under ASan and UBSan, for a fixed budget: RINGCOMM_FUZZ_SECONDS (30 by default, as
in CI; longer on demand). Needs clang with libFuzzer (libclang-rt-N-dev; .ci/run installs it);
skipped, saying so, without it.
"""

import functools
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import background_builds
import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "fuzz"
SOURCES = [
    "tests/fuzz/fuzz_protocols.cc",
    "src/bootstrap/store.cc",
    "src/bootstrap/tcp_store.cc",
    "src/bootstrap/tcp_store_server.cc",
    "src/bootstrap/tcp_store_requests.cc",
    "src/common/socket.cc",
    "src/common/config.cc",
    "src/common/log.cc",
    "src/common/trace.cc",
    "src/common/types.cc",
    "src/auth/sha256.cc",
    "src/auth/handshake.cc",
    "src/queue/negotiation.cc",
    "src/queue/queue_names.cc",
    "src/common/process.cc",
    "src/transport/shm/segment.cc",
    "src/transport/shm/cross_memory.cc",
]
FLAGS = ["-std=c++17", "-g", "-O1", "-fsanitize=fuzzer,address,undefined"]


@functools.lru_cache(maxsize=None)
def fuzzing_clang() -> str:
    """The newest clang++ that links a libFuzzer program, or ""."""
    candidates = sorted(
        (p for p in Path("/usr/bin").glob("clang++-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
        reverse=True,
    )
    for clang in [*map(str, candidates), shutil.which("clang++") or ""]:
        if not clang:
            continue
        probe = subprocess.run(
            [clang, *FLAGS, "-x", "c++", "-", "-o", os.devnull],
            input='extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long)'
            " { return 0; }",
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return clang
    return ""


def build_fuzzer() -> subprocess.CompletedProcess:
    """Compiles the fuzzer (into build/fuzz); run in the background from the session's start
    (tests/background_builds.py)."""
    clang = fuzzing_clang()
    BUILD.mkdir(parents=True, exist_ok=True)
    # One compiler per core (one call for all sources took 42 s here, two at a time 23 s).
    objects = [BUILD / f"{index}.o" for index in range(len(SOURCES))]

    def compile_one(source: str, target: Path) -> subprocess.CompletedProcess:
        command = [clang, *FLAGS, "-Iinclude", "-Isrc", "-c", source, "-o", str(target)]
        return subprocess.run(
            background_builds.idle_priority(command), cwd=REPO, capture_output=True, text=True
        )

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for compiled in pool.map(compile_one, SOURCES, objects):
            if compiled.returncode != 0:
                return compiled
    link = [clang, *FLAGS, *map(str, objects), "-o", str(BUILD / "fuzz_protocols")]
    return subprocess.run(background_builds.idle_priority(link), capture_output=True, text=True)


def background_builds_for(item) -> dict:
    return {"fuzzer": build_fuzzer} if fuzzing_clang() else {}


@pytest.mark.timeout(1800)
def test_fuzz_store_protocol_handshake_and_peer_messages(tmp_path):
    clang = fuzzing_clang()
    if not clang:
        message = "no clang with libFuzzer (apt-get install clang-22 libclang-rt-22-dev)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    built = background_builds.result("fuzzer", build_fuzzer)
    assert built.returncode == 0, built.stderr[-5000:]
    binary = BUILD / "fuzz_protocols"
    seconds = int(os.environ.get("RINGCOMM_FUZZ_SECONDS", "30"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    run = subprocess.run(
        [
            str(binary),
            str(corpus),
            f"-max_total_time={seconds}",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 600,
    )
    executions = re.search(r"stat::number_of_executed_units:\s*(\d+)", run.stderr)
    print(f"fuzzed for {seconds} s: {executions.group(1) if executions else '?'} inputs")
    assert run.returncode == 0, run.stderr[-8000:]
    assert executions and int(executions.group(1)) > 0
