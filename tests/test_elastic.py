"""Elastic training: ringcomm-run --host-discovery-script with hvd.elastic (workers/
elastic_train.py), hosts changing 2 -> 3 -> 2, a worker killed with SIGKILL, too few slots
for --min-np; torchrun restarting its worker group; ElasticSampler and discovery units.

The jobs train a small model and keep every committed step's batches in their state; the test
replays those steps in one process and compares the parameters, so a rank that got a wrong or
stale state (a new worker not synchronized, a restore to the wrong commit) fails it."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import WORKERS, worker_env

torch = pytest.importorskip("torch")

LAUNCH = [sys.executable, "-m", "ringcomm.launch", "--verbose"]


def discovery(tmp_path: Path, hosts: str) -> str:
    """A discovery script printing tmp_path/hosts, which starts as ``hosts``."""
    (tmp_path / "hosts").write_text(hosts)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'hosts'}\n")
    script.chmod(0o755)
    return str(script)


def elastic_job(tmp_path, scenario, hosts, flags, timeout=100):
    """Starts elastic_train.py under ringcomm-run; returns the launcher's process."""
    command = [
        *LAUNCH,
        *flags,
        "--host-discovery-script",
        discovery(tmp_path, hosts),
        str(WORKERS / "elastic_train.py"),
        str(tmp_path),
        scenario,
    ]
    env = worker_env({"OMP_NUM_THREADS": "1", "RINGCOMM_TIMEOUT": "30"})
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(launcher, timeout=100):
    try:
        out, err = launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate()
        pytest.fail(f"the elastic job did not finish in {timeout} s\n{out[-3000:]}\n{err[-6000:]}")
    results = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    return launcher.returncode, sorted(results, key=lambda r: r["rank"]), out + err


def sample(i: int):
    x = torch.tensor([math.sin(i), math.cos(i), i / 48, 1.0])
    y = torch.tensor([0.3 * math.sin(0.5 * i) + 0.1])
    return x, y


def replay(steps) -> list:
    """The parameters after ``steps`` (each: every rank's batch indices), trained in one
    process as the ranks did: each rank's mean loss, gradients averaged over the ranks."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for batches in steps:
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for batch in batches:
            model.zero_grad()
            x = torch.stack([sample(i)[0] for i in batch])
            y = torch.stack([sample(i)[1] for i in batch])
            torch.nn.functional.mse_loss(model(x), y).backward()
            for total, p in zip(grads, model.parameters()):
                total += p.grad
        for total, p in zip(grads, model.parameters()):
            p.grad = total / len(batches)
        optimizer.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


def check_training(results, size: int, log: str) -> None:
    assert [r["rank"] for r in results] == list(range(size)), log[-6000:]
    first = results[0]
    for r in results[1:]:  # every rank ended with the same state
        for key in ("batches", "steps", "sizes", "parameters"):
            assert r[key] == first[key], (key, log[-6000:])
    assert first["batches"] == len(first["steps"]) == len(first["sizes"])
    # Each step's batches came from as many ranks as the job had then, and each epoch's steps
    # covered the dataset (48 samples; padding repeats a few at an epoch's end).
    assert [len(step) for step in first["steps"]] == first["sizes"]
    seen = [i for step in first["steps"] for batch in step for i in batch]
    assert set(seen) == set(range(48)) and len(seen) < 2 * 48 + 2 * 3 * 2
    expected = replay(first["steps"])
    for got, want in zip(first["parameters"], expected):
        assert got == pytest.approx(want, abs=1e-5), log[-6000:]


@pytest.mark.timeout(150)
def test_hosts_added_then_removed_2_3_2(tmp_path):
    launcher = elastic_job(
        tmp_path, "grow-shrink", "localhost:2\n", ["-np", "2", "--min-np", "2", "--max-np", "3"]
    )
    status, results, log = finish(launcher, timeout=140)
    assert status == 0, log[-6000:]
    check_training(results, 2, log)
    sizes = results[0]["sizes"]
    # 4 batches at 2 ranks, then 3 ranks until batch 12, then 2 again.
    assert sizes[:4] == [2] * 4 and sizes[4:12] == [3] * 8 and set(sizes[12:]) == {2}, sizes
    assert results[0]["resets"] == [3, 2]  # the reset callbacks saw the new sizes
    assert "has been removed from elastic job" in log  # the third worker, at the shrink


@pytest.mark.timeout(150)
def test_killed_worker_is_blacklisted_and_training_resumes_from_the_commit(tmp_path):
    launcher = elastic_job(
        tmp_path,
        "kill",
        "localhost:2\n127.0.0.2:1\n",
        ["-np", "3", "--min-np", "2", "--max-np", "3"],
    )
    progress = tmp_path / "progress"
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline and launcher.poll() is None:
        if progress.exists() and progress.read_text() and int(progress.read_text()) >= 6:
            break
        time.sleep(0.1)
    os.kill(int((tmp_path / "pid-127.0.0.2-0").read_text()), signal.SIGKILL)
    status, results, log = finish(launcher, timeout=120)
    assert status == 0, log[-6000:]
    assert "blacklisting host 127.0.0.2" in log
    check_training(results, 2, log)
    sizes = results[0]["sizes"]
    assert sizes[:6] == [3] * 6 and sizes[-1] == 2, sizes


@pytest.mark.timeout(120)
def test_too_few_slots_for_min_np_fails_the_job_naming_it(tmp_path):
    launcher = elastic_job(
        tmp_path,
        "min-np",
        "localhost:2\n",
        ["-np", "2", "--min-np", "2", "--elastic-timeout", "2", "--grace", "5"],
    )
    status, results, log = finish(launcher, timeout=110)
    assert status == 1, log[-6000:]
    assert "fewer than --min-np 2 slots available after the elastic timeout of 2 s" in log
    assert not results
