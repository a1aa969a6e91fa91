"""Communicator.shrink: the survivors of a lost rank agree on who goes on and get a working
communicator, without restarting (issue 33). Each job runs ranks of tests/workers/shrink.py,
which shrink after every failure as a training loop would."""

import json
import subprocess
import sys
import time

import pytest
from harness import (
    WORKERS,
    RankOutcome,
    finish_ranks,
    free_port,
    mpirun,
    namespace_hosts,
    run_job,
    start_ranks_on_hosts,
    worker_env,
)

# Far beyond what a shrink takes here (10-150 ms): a survivor that waited for a dead rank's
# timeout would show.
TIMEOUT = 20
SHRINK_WITHIN = 3.0


def survivors_agree(outcomes, victims, expected_shrinks=None, late_victim=None):
    """Every survivor went on with the same communicator: the others, renumbered in order, with
    the same bits; returns their reports. `late_victim` may have died only after the survivors
    were done with it: then it is among them (it may have died before it reported)."""
    alive = sorted(o.rank for o in outcomes if o.rank not in victims)
    finished = {o.rank: o.result for o in outcomes if o.result and "digest" in o.result}
    done_with_it = any(late_victim in r.get("survivors", ()) for r in finished.values())
    if late_victim is not None and (late_victim in finished or done_with_it):
        alive = sorted(alive + [late_victim])
    reports = []
    for outcome in outcomes:
        if outcome.rank not in alive or (outcome.rank == late_victim and not outcome.result):
            continue
        exited = outcome.returncode == 0 or outcome.rank == late_victim
        assert exited and outcome.result is not None, outcome.describe()
        result = outcome.result
        assert "shrink_error" not in result, result
        assert result["survivors"] == alive, result
        assert result["rank_after"] == alive.index(outcome.rank), result
        assert result["size_after"] == len(alive), result
        assert result["exact"], result
        assert result["broadcast_from"] == alive[-1], result
        assert all(s["seconds"] < SHRINK_WITHIN for s in result["shrinks"]), result
        if expected_shrinks is not None:
            assert len(result["shrinks"]) == expected_shrinks, result
        reports.append(result)
    assert len({r["digest"] for r in reports}) == 1, reports
    return reports


CASES = [(2, "shm", "1"), (3, "tcp", "0"), (4, "shm", "2"), (5, "tcp", "1,3"), (8, "shm", "0,5")]


@pytest.mark.parametrize(
    "size,transport,victims", CASES, ids=[f"{s}ranks-{t}-kill{v}" for s, t, v in CASES]
)
def test_survivors_of_a_killed_rank_go_on(size, transport, victims):
    outcomes = run_job(
        size,
        "shrink.py",
        ["kill", victims],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "RINGCOMM_TRANSPORT": transport},
        deadline=90,
    )
    survivors_agree(outcomes, {int(v) for v in victims.split(",")}, expected_shrinks=1)


def test_rank_0_that_served_the_store_is_lost():
    """env://, as under mpirun: rank 0 serves the job's store, and dies with it. The agreement
    needs no store."""
    outcomes = run_job(
        4,
        "shrink.py",
        ["kill", "0", str(free_port())],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT)},
        deadline=90,
    )
    survivors_agree(outcomes, {0}, expected_shrinks=1)


@pytest.mark.parametrize("delay_ms", [0, 5, 15])
def test_a_second_death_during_the_shrink(delay_ms):
    """Rank 1 dies in the stream; rank 3 dies delay_ms into the shrink: during the agreement, as
    the new communicator forms, or in its first collectives (the survivors shrink again). Either
    way every survivor ends with the same members."""
    outcomes = run_job(
        6,
        "shrink.py",
        ["during", "1,3"],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "SECOND_DEATH_MS": str(delay_ms)},
        deadline=90,
    )
    survivors_agree(outcomes, {1, 3}, late_victim=3)


@pytest.mark.skipif(not mpirun(), reason="mpirun not installed (pip install mpich)")
def test_survivors_go_on_under_mpirun_that_keeps_them():
    """MPICH's mpirun -disable-auto-cleanup keeps the survivors of a rank that exited with an
    error (and tells them with SIGUSR1, which ringcomm ignores): they shrink and finish, leaving
    without MPI_Finalize, which waits for the lost rank for ever. Hydra ends every rank on the
    host of one killed by a signal whatever the flag says: no kill -9 here (docs/guides/
    recovery.md)."""
    pytest.importorskip("mpi4py")
    done = subprocess.run(
        [mpirun(), "-disable-auto-cleanup", "-np", "4", sys.executable,
         str(WORKERS / "shrink.py"), "exit", "2"],
        env=worker_env({"RINGCOMM_TIMEOUT": str(TIMEOUT), "EXIT_WITHOUT_FINALIZE": "1"}),
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    results = [
        json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT")
    ]
    outcomes = [
        RankOutcome(r["rank"], 0, done.stdout, done.stderr, 0.0, r)
        for r in sorted(results, key=lambda r: r["rank"])
    ]
    assert done.returncode == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert [o.rank for o in outcomes] == [0, 1, 3], done.stdout + done.stderr[-3000:]
    survivors_agree(outcomes, {2}, expected_shrinks=1)


def test_ranks_dropped_on_purpose():
    outcomes = run_job(
        5, "shrink.py", ["exclude", "1,2"], env={"RINGCOMM_TIMEOUT": str(TIMEOUT)}, deadline=90
    )
    for outcome in outcomes:
        assert outcome.returncode == 0, outcome.describe()
    survivors_agree(outcomes, {1, 2}, expected_shrinks=1)


def test_split_by_color_numbered_by_key():
    outcomes = run_job(5, "shrink.py", ["split", ""], env={"RINGCOMM_TIMEOUT": str(TIMEOUT)})
    for outcome in outcomes:
        assert outcome.returncode == 0 and outcome.result, outcome.describe()
        result = outcome.result
        members = result["members"]
        assert result["size_after"] == len(members)
        # key = -rank: numbered backwards
        assert result["rank_after"] == sorted(members, reverse=True).index(outcome.rank)
        assert result["sum"] == sum(members)


# A rank other than 0; the test across two hosts below loses rank 0, torch's store with it.
@pytest.mark.parametrize("victim", [2])
def test_ddp_trains_on_after_a_rank_is_killed(victim):
    """torch.distributed.shrink_group on the ringcomm backend: the survivors ask which ranks are
    gone (ringcomm.c10d.lost_ranks), shrink the default group, wrap the model in DDP again and
    train on, the same processes, with the same parameters. Rank 0 served torch's store."""
    outcomes = run_job(
        4,
        "ddp_shrink.py",
        [str(victim)],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "TEST_MASTER_PORT": str(free_port())},
        deadline=120,
    )
    killed_at = float(outcomes[victim].stdout.split("KILLED_AT ")[1].split()[0])
    alive = [o for o in outcomes if o.rank != victim]
    for outcome in alive:
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()
        result = outcome.result
        assert result["shrinks"] == [[victim]], result
        assert result["size_after"] == 3, result
        # Measured here: 0.12-0.3 s from the kill to the next completed step.
        assert result["recovered_at"] - killed_at < 2.0, result
    assert len({o.result["params"] for o in alive}) == 1


def test_ddp_survives_a_second_death_between_lost_ranks_and_shrink_group():
    """Issue 48: 8 ranks; rank 2 is killed in a step, rank 5 right after lost_ranks() named rank
    2 and before shrink_group(): torch forms a group of 7 that lacks rank 5. Every survivor used
    to die (`6 ranks go on where 7 were expected`); now that group's first collective
    (broadcast_state's all-gather) fails at once naming its rank 4, and the loop of
    docs/guides/recovery.md shrinks again: 6 ranks train on with the same parameters."""
    outcomes = run_job(
        8,
        "ddp_shrink.py",
        ["2,5"],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "TEST_MASTER_PORT": str(free_port())},
        deadline=180,
    )
    alive = [o for o in outcomes if o.rank not in (2, 5)]
    for outcome in alive:
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()
        result = outcome.result
        assert result["shrinks"] == [[2], [4]], result  # old rank 5 is rank 4 of the group of 7
        assert result["size_after"] == 6, result
        assert result["recovered_in"] < 3.0, result
    assert len({o.result["params"] for o in alive}) == 1


# Rank 0 (the Horovod API's rank 0 broadcasts the state); the DDP test above loses another.
@pytest.mark.parametrize("victim, commits", [(0, "even"), (0, "uneven")])
def test_the_horovod_api_trains_on_after_a_worker_is_killed(victim, commits):
    """hvd.elastic.run without an elastic driver: the survivors restore the last commit, shrink
    the job's communicator in place and go on, with the same parameters: without a broadcast of
    the model where they all went back to the same commit, with one where not (uneven)."""
    outcomes = run_job(
        4, "horovod_shrink.py", [str(victim), commits], env={"RINGCOMM_TIMEOUT": str(TIMEOUT)},
        deadline=90,
    )  # fmt: skip
    killed_at = float(outcomes[victim].stdout.split("KILLED_AT ")[1].split()[0])
    alive = [o for o in outcomes if o.rank != victim]
    for outcome in alive:
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()
        assert outcome.result["size_after"] == 3, outcome.result
        assert outcome.result["resets"] == [3], outcome.result
        assert outcome.result["recovered_at"] - killed_at < 2.0, outcome.result
    assert len({o.result["params"] for o in alive}) == 1


def test_ringcomm_run_keeps_the_survivors_when_asked():
    """ringcomm-run --keep-survivors: a killed rank does not end the job; the survivors shrink,
    finish, and the job succeeds."""
    done = subprocess.run(
        [sys.executable, "-m", "ringcomm.launch", "--keep-survivors", "-np", "4",
         str(WORKERS / "shrink.py"), "kill", "2"],
        capture_output=True, text=True, timeout=120,
        env=worker_env({"RINGCOMM_TIMEOUT": str(TIMEOUT)}),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "rank 2 exited with status -9; the other ranks go on" in done.stderr, done.stderr
    results = [json.loads(line[len("RESULT ") :]) for line in done.stdout.splitlines()
               if line.startswith("RESULT ")]  # fmt: skip
    assert sorted(r["rank"] for r in results) == [0, 1, 3], done.stdout
    assert all(r["survivors"] == [0, 1, 3] for r in results), results


# Addresses of our own test hosts, inside namespaces this test creates and deletes.
SUBNET = "10.231.79"
SECRET = {"RINGCOMM_SECRET": "shrink-test-secret-0123456789abcdef"}
LINK_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def two_hosts():
    with namespace_hosts(SUBNET, tag="rs") as hosts:
        yield hosts


# 5 ms: in the agreement. 60 and 120 ms: as the new communicator forms, where some survivors
# once got past its rendezvous and waited out the timeout for the others to connect, while those
# had found rank 5 gone and were agreeing again (found in CI under load).
@pytest.mark.parametrize("delay_ms", [5, 60, 120])
def test_a_second_death_during_the_shrink_across_two_hosts(two_hosts, delay_ms):
    """8 ranks, 4 on each of two namespace hosts: rank 1 dies in the stream of all-reduces, and
    rank 5, on the other host, delay_ms into the survivors' shrink. Every survivor on both hosts
    ends with the same members and the same bits, within the shrink's time."""
    started = time.monotonic()
    procs = start_ranks_on_hosts(
        two_hosts,
        [str(WORKERS / "shrink.py"), "during", "1,5"],
        {**SECRET, "RINGCOMM_TIMEOUT": str(TIMEOUT), "SECOND_DEATH_MS": str(delay_ms)},
        f"{SUBNET}.1",
        free_port(),
        layout=(0, 0, 0, 0, 1, 1, 1, 1),
    )
    finished = finish_ranks(procs, time.monotonic() + 90)
    outcomes = [
        RankOutcome(rank, code, out, err, time.monotonic() - started, result)
        for rank, (result, code, out, err) in enumerate(finished)
    ]
    survivors_agree(outcomes, {1, 5}, late_victim=5)


@pytest.mark.parametrize(
    "layout,majority",
    [((0, 0, 0, 1), (0, 1, 2)), ((0, 0, 1, 1), ()), ((0, 1, 1, 1), (1, 2, 3))],
    ids=["3+1", "2+2", "1+3"],
)
def test_a_partition_leaves_at_most_one_side_running(two_hosts, tmp_path, layout, majority):
    """The link between two hosts is cut: the side with a strict majority of the ranks shrinks
    and goes on within about RINGCOMM_LINK_TIMEOUT of its failure; the other side (and both of
    a tie) raises MembershipError saying it lost its quorum. In 1+3 rank 0, which served the
    store, is the minority."""
    procs = start_ranks_on_hosts(
        two_hosts,
        [str(WORKERS / "shrink.py"), "partition", ""],
        {
            **SECRET,
            "RINGCOMM_TIMEOUT": "30",
            "RINGCOMM_LINK_TIMEOUT": str(LINK_TIMEOUT),
            "TEST_READY_DIR": str(tmp_path),
        },
        f"{SUBNET}.1",
        free_port(),
        layout=layout,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < len(layout) and time.monotonic() < deadline:
            time.sleep(0.05)
        cut_at = time.time()
        two_hosts.cut(1)
        finished = finish_ranks(procs, time.monotonic() + 90)
    finally:
        two_hosts.mend(1)
    digests = set()
    for rank, (result, code, out, err) in enumerate(finished):
        assert result is not None, f"rank {rank} exited {code}\n{out[-2000:]}\n{err[-3000:]}"
        if rank in majority:
            assert "shrink_error" not in result, result
            assert result["survivors"] == list(majority), result
            assert result["exact"], result
            digests.add(result["digest"])
            # Found by the link's timeout (2.0-2.5 s here at 2 s), then agreed at once: the lost
            # side's mailboxes have been silent as long (0.1-0.5 s; 2.5-2.7 s after the cut in
            # all). Generous for 2 loaded cores.
            assert result["shrunk_at"] - cut_at < 2 * LINK_TIMEOUT + 3, result
            assert result["shrunk_at"] - result["failed_at"] < 2.0, result
        else:
            assert result.get("shrink_error") == "MembershipError", result
            assert "lost its quorum" in result["message"], result
    assert len(digests) <= 1


# Rank 0, which serves torch's store: the hardest to lose. One victim a test bounds CI's time;
# test_survivors_of_a_killed_rank_go_on loses others.
@pytest.mark.parametrize("victim", [0])
def test_ddp_across_two_hosts_trains_on_after_a_rank_is_killed(two_hosts, victim):
    """8 ranks, 4 on each of two namespace hosts, DDP on the ringcomm backend: kill -9 of rank 0
    (which served torch's store) or of a rank on the other host; the survivors find the lost rank,
    shrink the default group and train on. Measured here: 0.25 s from the kill to the next step,
    at 1 Gbit/s too (bench/RESULTS.md, issue 33)."""
    procs = start_ranks_on_hosts(
        two_hosts,
        [str(WORKERS / "ddp_shrink.py"), str(victim), "10"],
        {**SECRET, "RINGCOMM_TIMEOUT": "30"},  # listening where torch's store is reached
        f"{SUBNET}.1",
        free_port(),
        layout=(0, 0, 0, 0, 1, 1, 1, 1),
    )
    finished = finish_ranks(procs, time.monotonic() + 120)
    killed_at = float(finished[victim][2].split("KILLED_AT ")[1].split()[0])
    params = set()
    for rank, (result, code, _out, err) in enumerate(finished):
        if rank == victim:
            continue
        assert code == 0 and result is not None, f"rank {rank} exited {code}\n{err[-3000:]}"
        assert result["shrinks"] == [[victim]] and result["size_after"] == 7, result
        assert result["recovered_at"] - killed_at < 2.0, result
        params.add(result["params"])
    assert len(params) == 1


SQUAT_CASES = [(2, "1"), (3, "0")]


@pytest.mark.parametrize("size,victims", SQUAT_CASES, ids=["2ranks-kill1", "3ranks-kill0-leader"])
def test_a_port_held_by_another_process_is_no_proof_of_life(tmp_path, size, victims):
    """Issue 48: the victim's mailbox port stays open in another process (a child that inherited
    it), where the kernel accepts connections and nobody proves the secret. Counted as life, it
    cost 2 ranks a lost quorum after 14.5 s and 3 ranks a timeout after 15 s; now the survivors
    go on within a probe's patience (150 ms) of what they take without it."""
    done = tmp_path / "done"
    try:
        outcomes = run_job(
            size,
            "shrink.py",
            ["squat", victims],
            env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "TEST_DONE": str(done)},
            deadline=90,
        )
    finally:
        done.touch()  # the squatters leave
    reports = survivors_agree(outcomes, {int(victims)}, expected_shrinks=1)
    for report in reports:
        assert report["shrinks"][0]["after_failure"] < 1.5, report
