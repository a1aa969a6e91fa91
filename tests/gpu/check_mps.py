"""The GPU check's MPS step (tests/gpu/run.sh mps): with the MPS daemon started, ringcomm sees it
and a 1 GiB all-reduce of 4 ranks on the one GPU takes the IPC path at more than half the
single-device limit the benchmark prints; with the daemon stopped, ringcomm says so and stages.

    python tests/gpu/check_mps.py     # needs a CUDA build, one GPU, nvidia-cuda-mps-control

Prints one line per check and exits 1 if any failed. On a5f2f50 the first check failed: ringcomm
asked the driver 580 endpoint for a stream connection (EPROTOTYPE) and saw no daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

PYTHON = sys.executable
failures: list[str] = []


def check(name: str, ok: bool, detail: object = "") -> None:
    print(f"{'ok    ' if ok else 'FAILED'} {name}{'' if ok else f': {detail}'}", flush=True)
    if not ok:
        failures.append(name)


def mps(start: bool) -> None:
    if start:
        subprocess.run(["nvidia-cuda-mps-control", "-d"], check=False)
        time.sleep(1)
    else:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, check=False)
        time.sleep(2)


def seen_running() -> bool:
    out = subprocess.run(
        [PYTHON, "-m", "ringcomm", "info", "--json"], capture_output=True, text=True, timeout=120
    )
    return bool(json.loads(out.stdout)["mps"]["running"])


def allreduce(size: str) -> tuple[dict, str]:
    """A 4-rank all-reduce on the GPU: (the benchmark's JSON, the ranks' CUDA log)."""
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "out.json")
        env = dict(os.environ, RINGCOMM_DEBUG="INFO", RINGCOMM_DEBUG_SUBSYS="CUDA")
        done = subprocess.run(
            ["ringcomm-bench", "allreduce", "--device", "cuda", "-np", "4", "--size", size,
             "--check", "--quiet", "--min-time", "0.2", "--json", report],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            return {}, done.stdout + done.stderr
        with open(report) as f:
            return json.load(f), done.stderr


mps(True)
try:
    check("MPS running: ringcomm info sees it", seen_running())
    document, log = allreduce("1G")
    check(
        "MPS running: no warning that it is not", "MPS daemon is not running" not in log, log[-800:]
    )
    check("MPS running: IPC path", "IPC (peers read each other's device memory)" in log, log[-800:])
    check("MPS running: not staged", "go through host memory instead" not in log, log[-800:])
    rows = document.get("implementations", {}).get("ringcomm", {}).get("results", [])
    limit = document.get("limit_busbw") or 0
    busbw = rows[0]["busbw"] if rows else 0
    check("MPS running: 1 GiB busbw > 0.5 of the limit", busbw > 0.5 * limit, f"{busbw} of {limit}")
    check("MPS running: 0 wrong", bool(rows) and rows[0].get("wrong") == 0, rows)
finally:
    mps(False)
check("MPS stopped: ringcomm info says so", not seen_running())
_, log = allreduce("64M")
check("MPS stopped: the warning", "the CUDA MPS daemon is not running" in log, log[-800:])
check("MPS stopped: staged", "go through host memory instead" in log, log[-800:])
print(f"{len(failures)} of the MPS checks failed" if failures else "every MPS check passed")
sys.exit(1 if failures else 0)
