"""Elastic training: ringcomm-run --host-discovery-script with hvd.elastic (workers/
elastic_train.py), hosts changing 2 -> 3 -> 2, too few slots for --min-np; torchrun restarting
its worker group; ElasticSampler and discovery units. A worker killed with SIGKILL, its host
blacklisted and training resumed from the commit: tests/test_over_ssh.py, across hosts.

The jobs train a small model and keep every committed step's batches in their state; the test
replays those steps in one process and compares the parameters, so a rank that got a wrong or
stale state (a new worker not synchronized, a restore to the wrong commit) fails it."""

import json
import math
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
        for key in ("batches", "steps", "sizes", "epochs", "parameters"):
            assert r[key] == first[key], (key, log[-6000:])
    assert first["batches"] == len(first["steps"]) == len(first["sizes"]) == len(first["epochs"])
    # Each step's batches came from as many ranks as the job had then, and each epoch's steps
    # covered the dataset (48 samples) once, but for a few repeated as padding where the
    # samples left did not divide evenly among the ranks.
    assert [len(step) for step in first["steps"]] == first["sizes"]
    for epoch in (0, 1):
        seen = [
            i
            for step, e in zip(first["steps"], first["epochs"])
            if e == epoch
            for batch in step
            for i in batch
        ]
        assert sorted(set(seen)) == list(range(48)), (epoch, sorted(seen))
        assert len(seen) <= 48 + 2 * 2, (epoch, sorted(seen))
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


def plain_job(tmp_path, flags, timeout=60, args=(), env=None):
    """elastic_plain.py (no torch) on localhost:1 and 127.0.0.2:1, whose second worker fails."""
    command = [
        *LAUNCH,
        "-np",
        "2",
        *flags,
        "--host-discovery-script",
        discovery(tmp_path, "localhost:1\n127.0.0.2:1\n"),
        str(WORKERS / "elastic_plain.py"),
        *args,
    ]
    launcher = subprocess.Popen(
        command,
        env=worker_env({"RINGCOMM_TIMEOUT": "30", **(env or {})}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return finish(launcher, timeout=timeout)


@pytest.mark.timeout(60)
def test_failed_worker_without_torch_goes_on_with_min_np_1(tmp_path):
    status, results, log = plain_job(tmp_path, ["--min-np", "1"])
    assert status == 0, log[-6000:]
    assert results == [{"rank": 0, "size": 1, "sum": 1.0}], log[-6000:]
    assert "worker 127.0.0.2:0 (rank 1) exited with status 3" in log
    assert "blacklisting host 127.0.0.2" in log


@pytest.mark.timeout(60)
def test_worker_dead_before_meeting_the_others_is_replaced_by_a_new_generation(tmp_path):
    status, results, log = plain_job(
        tmp_path, ["--min-np", "1"], args=["early"], env={"RINGCOMM_TIMEOUT": "3"}
    )
    assert status == 0, log[-6000:]
    assert results == [{"rank": 0, "size": 1, "sum": 1.0}], log[-6000:]
    assert "generation 1: 1 ranks on localhost:1" in log


def test_a_reset_that_fails_to_meet_tries_the_next_generation(monkeypatch):
    import ringcomm
    from ringcomm.torch import elastic
    from ringcomm.torch import state as job

    attempts = []

    def reinit():
        attempts.append(1)
        if len(attempts) < 3:
            raise ringcomm.TimeoutError("rank 1 did not arrive within 3 s")

    monkeypatch.setattr(job, "reinit", reinit)
    with pytest.warns(UserWarning, match="meeting the next generation failed"):
        elastic._reset()
    assert len(attempts) == 3
    attempts.clear()
    monkeypatch.setattr(elastic, "_RESET_ATTEMPTS", 2)
    with pytest.raises(ringcomm.TimeoutError), pytest.warns(UserWarning):
        elastic._reset()  # gives up after _RESET_ATTEMPTS


@pytest.mark.timeout(60)
def test_too_few_slots_for_min_np_fails_the_job_naming_it(tmp_path):
    status, results, log = plain_job(tmp_path, ["--min-np", "2", "--elastic-timeout", "2"])
    assert status == 1, log[-6000:]
    assert (
        "elastic job failed: fewer than --min-np 2 slots available after the elastic timeout "
        "of 2 s: 1 (hosts localhost:1; blacklisted: 127.0.0.2)" in log
    ), log[-6000:]
    # The surviving worker, waiting for its next generation, is told why there is none.
    assert "has been removed from elastic job (the elastic job failed: fewer than" in log
    assert not results


def children_of(pid: int, running: str) -> list:
    """The processes whose parent is ``pid`` and whose command line mentions ``running``."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
            command = (status.parent / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if fields.get("PPid", "").strip() == str(pid) and running in command:
            found.append(int(status.parent.name))
    return found


@pytest.mark.timeout(60)
def test_sigterm_reaches_elastic_workers_and_leaves_none_behind(tmp_path):
    command = [
        *LAUNCH,
        "-np",
        "2",
        "--grace",
        "2",
        "--host-discovery-script",
        discovery(tmp_path, "localhost:2\n"),
        str(WORKERS / "elastic_plain.py"),  # no failing host: all-reduces until stopped
    ]
    launcher = subprocess.Popen(command, env=worker_env(None), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(children_of(launcher.pid, "elastic_plain")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)  # past their imports: in their all-reduces
    workers = children_of(launcher.pid, "elastic_plain")
    assert len(workers) == 2
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.2)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]


@pytest.mark.timeout(150)
def test_torchrun_restart_meets_afresh(tmp_path):
    """torchrun --nnodes=1:2: the first attempt's rank 1 dies, the agent restarts the group,
    and init_process_group("ringcomm") and hvd.init() both work in the new attempt."""
    from harness import free_port

    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1:2",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--rdzv-conf=last_call_timeout=1",
        str(WORKERS / "elastic_torchrun.py"),
    ]
    env = worker_env({"OMP_NUM_THREADS": "1", "RINGCOMM_TIMEOUT": "30"})
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=140)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    results = sorted(
        (json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")),
        key=lambda r: r["rank"],
    )
    assert results == [
        {"rank": r, "size": 2, "attempt": 1, "backend": [3.0] * 3, "hvd": [r, 2, 3.0]}
        for r in range(2)
    ], log[-6000:]


# ---- units: no processes ------------------------------------------------------------------


@pytest.fixture
def world(monkeypatch):
    """ElasticSampler's view of the job: set world["size"] and world["rank"]."""
    from ringcomm.torch import state

    now = {"size": 1, "rank": 0}
    monkeypatch.setattr(state, "size", lambda: now["size"])
    monkeypatch.setattr(state, "rank", lambda: now["rank"])
    return now


def shards(sampler, world, size):
    """Every rank's indices at ``size`` ranks."""
    out = []
    for rank in range(size):
        world.update(size=size, rank=rank)
        sampler.reset()
        out.append(list(sampler))
        assert len(sampler) == len(out[-1])
    return out


def test_elastic_sampler_shards_over_the_current_size(world):
    from ringcomm.torch.elastic import ElasticSampler

    sampler = ElasticSampler(list(range(10)), shuffle=False)
    assert shards(sampler, world, 2) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    # 10 samples over 3 ranks: 4 each, the first two repeated as padding.
    assert shards(sampler, world, 3) == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]


def test_elastic_sampler_skips_what_was_processed_and_reshards(world):
    from ringcomm.torch.elastic import ElasticSampler

    world.update(size=2, rank=0)
    sampler = ElasticSampler(list(range(20)), shuffle=True, seed=3)
    order = [i for pair in zip(*shards(sampler, world, 2)) for i in pair]
    assert sorted(order) == list(range(20))
    world.update(size=2, rank=0)
    sampler.reset()
    sampler.record_batch(0, 2)
    sampler.record_batch(1, 2)  # two batches of 2 on each of 2 ranks: 8 samples done
    saved = sampler.state_dict()
    assert saved["processed_num"] == 8
    remaining = shards(sampler, world, 3)  # a third rank joins
    assert sorted({i for shard in remaining for i in shard}) == sorted(order[8:])
    assert all(len(shard) == 4 for shard in remaining)
    # The same seed and epoch give the same order on every rank; set_epoch starts afresh.
    other = ElasticSampler(list(range(20)), shuffle=True, seed=3)
    other.load_state_dict(saved)
    assert other.remaining_indices == order[8:]
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and sorted(sampler.remaining_indices) == list(range(20))
    assert sampler.remaining_indices != order


def test_elastic_sampler_record_indices(world):
    from ringcomm.torch.elastic import ElasticSampler

    world.update(size=2, rank=1)
    sampler = ElasticSampler(list(range(8)), shuffle=False)
    sampler.record_indices([1, 3])
    sampler.record_indices(torch.tensor([5]))
    sampler.reset()
    assert sampler.remaining_indices == [0, 2, 4, 6, 7]
    assert list(sampler) == [2, 6, 0]  # 5 samples, 3 each: padded with the first
    restored = ElasticSampler(list(range(8)), shuffle=False)
    restored.load_state_dict(sampler.state_dict())
    assert restored.remaining_indices == [0, 2, 4, 6, 7]


def test_object_state_commit_restore_and_reset_callbacks():
    from ringcomm.torch.elastic import ObjectState

    calls = []
    state = ObjectState(bcast_object=lambda obj: obj, get_rank=lambda: 0, epoch=0, lr=0.1)
    state.register_reset_callbacks([lambda: calls.append("reset")])
    state.epoch, state.lr = 3, 0.2
    state.save()
    state.epoch = 5
    state.restore()
    assert (state.epoch, state.lr) == (3, 0.2)
    state.on_reset()
    assert calls == ["reset"]


def test_check_host_updates_raises_once_per_notice():
    from ringcomm.elastic.protocol import HostUpdateResult
    from ringcomm.torch.elastic import HostsUpdatedInterrupt, ObjectState

    state = ObjectState(bcast_object=lambda obj: obj, get_rank=lambda: 1, epoch=0)
    state.check_host_updates()  # nothing posted
    state.on_hosts_updated(1, HostUpdateResult.removed)
    with pytest.raises(HostsUpdatedInterrupt) as removed:
        state.commit()
    assert removed.value.skip_sync  # removed only: the state needs no broadcast
    state.check_host_updates()  # the same notice does not raise twice
    state.on_hosts_updated(2, HostUpdateResult.removed)
    state.on_hosts_updated(3, HostUpdateResult.added)
    with pytest.raises(HostsUpdatedInterrupt) as mixed:
        state.check_host_updates()
    assert not mixed.value.skip_sync


def test_each_generation_has_its_own_data_link_secret():
    from ringcomm.elastic.protocol import generation_secret

    secret = b"the job's secret"
    secrets = {generation_secret(secret, g) for g in range(3)}
    assert len(secrets) == 3 and secret not in secrets
    assert generation_secret(secret, 1) == generation_secret(secret, 1)
    assert generation_secret(b"another job", 1) != generation_secret(secret, 1)


def test_discovery_parses_host_lines(tmp_path):
    from ringcomm.elastic.discovery import HostDiscoveryScript

    script = HostDiscoveryScript("unused", default_slots=4)
    assert script.parse("localhost:2\n\n127.0.0.2\nnode7:1\n") == {
        "localhost": 2,
        "127.0.0.2": 4,
        "node7": 1,  # another machine: its workers start over ssh (tests/test_over_ssh.py)
    }
    with pytest.raises(ValueError, match="without slots"):
        HostDiscoveryScript("unused").parse("localhost\n")
    with pytest.raises(ValueError, match="expected host:slots"):
        script.parse("node7:x\n")
    failing = HostDiscoveryScript(discovery(tmp_path, "") + "; exit 7")
    with pytest.raises(RuntimeError, match="exit code 7"):
        failing.find_available_hosts_and_slots()


def test_host_manager_orders_blacklists_and_assigns(tmp_path):
    from ringcomm.elastic.discovery import HostDiscoveryScript, HostManager, host_assignments
    from ringcomm.elastic.protocol import HostUpdateResult

    hosts = HostManager(HostDiscoveryScript(discovery(tmp_path, "localhost:2\n")))
    assert hosts.update() == HostUpdateResult.added
    assert hosts.update() == HostUpdateResult.no_update
    (tmp_path / "hosts").write_text("127.0.0.2:1\nlocalhost:1\n")
    assert hosts.update() == HostUpdateResult.mixed  # a host added, a slot removed
    # The older host keeps the lower ranks, whatever order the script prints.
    slots = host_assignments(hosts.current, min_np=1, max_np=8)
    assert [(s.hostname, s.rank, s.local_rank, s.size) for s in slots] == [
        ("localhost", 0, 0, 2),
        ("127.0.0.2", 1, 0, 2),
    ]
    assert [(s.cross_rank, s.cross_size) for s in slots] == [(0, 2), (1, 2)]
    hosts.blacklist("127.0.0.2")
    assert hosts.current.available_slots() == 1
    with pytest.raises(ValueError, match="2 processes needed"):
        host_assignments(hosts.current, min_np=2, max_np=8)
    (tmp_path / "hosts").write_text("localhost:4\n")
    hosts.update()
    assert len(host_assignments(hosts.current, min_np=1, max_np=3)) == 3  # --max-np caps it
