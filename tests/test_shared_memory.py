"""Shared memory when /dev/shm is small (Docker's and Kubernetes' 64 MiB default) or a rank dies
while setting it up: the job shrinks its slots or falls back to TCP with a warning, never dies of
SIGBUS, names a rank that died, and leaves no segment behind.

Each job runs in a mount namespace of its own with a small tmpfs on /dev/shm (needs root and
unshare, as on the development and CI machines; skipped otherwise), so what is left in it after
the job is the job's alone.
"""

import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
from harness import WORKERS, assert_all_succeeded, run_job, worker_env


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare --mount")


def run_with_shm(megabytes: int, nranks: int, worker: str, *args: str, env=None, timeout=120):
    """Runs ``nranks`` ranks of a worker under ringcomm-run with a /dev/shm of ``megabytes``;
    returns (results by rank, stderr, what was left in /dev/shm)."""
    # A grace beyond the ranks' own timeout: survivors report how they learned of a death.
    launch = [sys.executable, "-m", "ringcomm.launch", "--grace", "25", "-np", str(nranks)]
    command = shlex.join([*launch, str(WORKERS / worker), *args])
    script = (
        f"mount -t tmpfs -o size={megabytes}m tmpfs /dev/shm && {command}; echo LEFT $(ls /dev/shm)"
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script],
        env=worker_env({"RINGCOMM_TIMEOUT": "10", **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    results = {}
    left = []
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            results[result.get("rank", len(results))] = result
        elif line.startswith("LEFT"):
            left = line.split()[1:]
    return results, done.stderr, left


@pytest.mark.parametrize(
    "megabytes,transport,words",
    [(64, "shm", "staging slots"), (8, "tcp", "talk over TCP")],
    ids=["64MiB-shrinks", "8MiB-tcp"],
)
def test_small_dev_shm_works_with_a_warning(megabytes, transport, words):
    results, stderr, left = run_with_shm(megabytes, 8, "small_shm.py")
    assert len(results) == 8, stderr
    for result in results.values():
        assert result["failures"] == [], result
        assert result["transports"] == [transport], result
    warnings = [line for line in stderr.splitlines() if "ringcomm: warning:" in line]
    assert len(warnings) == 1 and words in warnings[0], stderr
    assert "Bus error" not in stderr
    assert left == [], left


# Kill times spread over the setup of a 4-rank job on 2 busy cores (start-up, rendezvous, shared
# memory, the first collectives).
KILL_AFTER = [0.3, 0.6, 0.9, 1.2, 1.6, 2.2]


@pytest.mark.timeout(300)
def test_rank_killed_during_setup_is_named_and_leaves_nothing_behind():
    victim = 2

    def job(seconds):
        return run_with_shm(256, 4, "setup_victim.py", str(victim), str(seconds))

    # Two jobs at a time (each with a /dev/shm of its own): each mostly waits for the ranks to
    # start, and for the survivors to see the death.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        jobs = list(pool.map(job, KILL_AFTER))
    for seconds, (results, stderr, left) in zip(KILL_AFTER, jobs):
        survivors = [r for rank, r in results.items() if rank != victim]
        assert len(survivors) == 3, (seconds, stderr)
        for result in survivors:
            if result["error"] is None:
                continue  # the kill came after this rank had finished
            assert f"rank {victim}" in result["message"], (seconds, result)
            assert result["waited"] < 10 + 10, (seconds, result)
        assert left == [], (seconds, left)


@pytest.mark.parametrize("advice", ["1", "0"])
def test_single_copy_buffers_that_come_back_move_to_huge_pages(advice):
    outcomes = run_job(
        2,
        "huge_pages.py",
        env={
            "RINGCOMM_SHM_CMA": "1",
            "RINGCOMM_SHM_CMA_MIN_BYTES": str(1 << 20),
            "RINGCOMM_SHM_CMA_HUGE_PAGES": advice,
        },
        deadline=60,
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        result = outcome.result
        assert result["failures"] == [], result["failures"]
        if not result["can_collapse"]:
            pytest.skip("this kernel cannot collapse pages into huge pages (MADV_COLLAPSE)")
        if result["before"] > 0:
            pytest.skip("transparent huge pages are 'always' here: the buffer starts huge")
        if advice == "1":
            assert result["after"] >= 2048, result  # 6 MiB hold at least two whole huge pages
        else:
            assert result["after"] == 0, result
