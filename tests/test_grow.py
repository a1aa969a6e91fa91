"""Communicator.grow and ringcomm.join: new processes join a running job in place, a lost rank's
replacement or extra ones, and get their state from a member (issue 48). Each job runs ranks of
tests/workers/grow.py beside processes started with RINGCOMM_JOIN=1."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import WORKERS, assert_all_succeeded, free_port, mpirun, run_job, worker_env

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 20
# Far beyond what a grow takes here (a few ms once the newcomer knocked, 0.2-0.4 s with its
# start-up): a newcomer left to the timeout would show.
GROW_WITHIN = 5.0


def everyone_agrees(outcomes, victims=(), size=None):
    """Every live process (members and newcomers) ended in one communicator of `size` ranks,
    numbered 0..size-1, with the same weights; returns the reports."""
    reports = []
    for outcome in outcomes:
        if outcome.rank in victims:
            assert outcome.returncode == -9, outcome.describe()
            continue
        assert outcome.returncode == 0 and outcome.result, outcome.describe()
        reports.append(outcome.result)
    assert sorted(r["rank"] for r in reports) == list(range(size)), reports
    assert {r["size"] for r in reports} == {size}, reports
    assert len({r["digest"] for r in reports}) == 1, reports
    assert len({r["step"] for r in reports}) == 1, reports
    newcomers = [r for r in reports if r["newcomer"]]
    assert all(r["rank"] >= size - len(newcomers) for r in newcomers), reports
    assert all(r.get("grow_seconds", 0) < GROW_WITHIN for r in reports), reports
    return reports


CASES = [(4, "2", 1), (4, "0", 1), (5, "1,3", 2)]


@pytest.mark.parametrize(
    "size,victims,newcomers", CASES, ids=[f"{s}ranks-kill{v}-{n}new" for s, v, n in CASES]
)
def test_replacements_join_the_survivors(size, victims, newcomers):
    """The victims die in the stream, the survivors shrink, the replacements (started at the
    job's start, they find the members on the launcher's store, and follow them through the
    shrink) are admitted by grow(expect=...) and get the weights from rank 0: the job is back at
    full size with the same weights everywhere. Rank 0, whose mailbox they first knocked at,
    among the victims."""
    lost = {int(v) for v in victims.split(",")}
    outcomes = run_job(
        size, "grow.py", ["replace", victims, str(newcomers)],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT)}, newcomers=newcomers, deadline=90,
    )  # fmt: skip
    everyone_agrees(outcomes, lost, size - len(lost) + newcomers)


def test_newcomers_join_a_healthy_job():
    outcomes = run_job(
        3, "grow.py", ["add", "", "2"], env={"RINGCOMM_TIMEOUT": str(TIMEOUT)}, newcomers=2,
        deadline=90,
    )  # fmt: skip
    reports = everyone_agrees(outcomes, size=5)
    members = sorted((r for r in reports if not r["newcomer"]), key=lambda r: r["rank_before"])
    assert [r["rank"] for r in members] == [0, 1, 2], reports  # the members keep their ranks


def test_grow_with_nobody_waiting_keeps_the_communicator():
    outcomes = run_job(3, "grow.py", ["idle"], env={"RINGCOMM_TIMEOUT": str(TIMEOUT)})
    for report in everyone_agrees(outcomes, size=3):
        assert report["same"], report


def test_a_newcomer_with_another_secret_is_refused(tmp_path):
    """It raises at once, naming the secret; the member's log names where it came from; the
    members, admitting newcomers every step meanwhile, go on unchanged."""
    outcomes = run_job(
        2, "grow.py", ["stranger"],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "TEST_DIR": str(tmp_path)}, newcomers=1,
        per_rank_env={2: {"RINGCOMM_SECRET": "another-job-secret-0123456789abcdef"}},
        deadline=60,
    )  # fmt: skip
    stranger = outcomes[2]
    assert stranger.returncode == 0 and stranger.result, stranger.describe()
    assert not stranger.result["joined"], stranger.result
    assert stranger.result["error"] == "TransportError", stranger.result
    assert "secret" in stranger.result["message"], stranger.result
    assert stranger.result["seconds"] < 2.0, stranger.result
    for member in outcomes[:2]:
        assert member.returncode == 0 and member.result["same"], member.describe()
        assert member.result["size"] == 2, member.result
    assert "refused a connection from" in outcomes[0].stderr, outcomes[0].stderr[-3000:]
    assert "did not prove the job's secret" in outcomes[0].stderr, outcomes[0].stderr[-3000:]


def test_grow_says_what_is_wrong():
    outcomes = run_job(2, "grow.py", ["misuse"], env={"RINGCOMM_TIMEOUT": str(TIMEOUT)})
    for outcome in outcomes:
        assert outcome.returncode == 0 and outcome.result, outcome.describe()
        said = outcome.result["said"]
        assert said["negative expect"].startswith("ValueError: expect"), said
        assert said["expect not a count"].startswith("TypeError: expect must be an int"), said
        assert (
            "TimeoutError" in said["first grow"] and "1 newcomers expected" in said["first grow"]
        ), said
        assert "another grow of this communicator is under way" in said["second grow"], said
        assert "CommunicatorClosed" in said["closed"] and "shrink() it first" in said["closed"], (
            said
        )
        assert "no way to find the members" in said["join without a way"], said
        assert "host:port" in said["join a bad address"], said


def test_ddp_heals_a_killed_rank_with_a_replacement(tmp_path):
    """torch users (issue 48): rank 0 (which served torch's store) is killed; the survivors
    shrink the default group, wait for a replacement at the end of the next step
    (ringcomm.c10d.grow_group), which joins (join_process_group, finding them on the launcher's
    store) and gets the model and the optimizer's momentum from the new rank 0
    (broadcast_state): 4 ranks again, the same parameters and momentum everywhere."""
    outcomes = run_job(
        4, "ddp_grow.py", ["0", "8"],
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "TEST_DIR": str(tmp_path),
             "TEST_MASTER_PORT": str(free_port())},
        newcomers=1, deadline=150,
    )  # fmt: skip
    assert outcomes[0].returncode == -9, outcomes[0].describe()
    reports = []
    for outcome in outcomes[1:]:
        assert outcome.returncode == 0 and outcome.result, outcome.describe()
        reports.append(outcome.result)
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3], reports
    assert {r["size"] for r in reports} == {4} and {r["step"] for r in reports} == {8}, reports
    assert len({r["params"] for r in reports}) == 1, reports
    assert len({r["momentum"] for r in reports}) == 1, reports
    newcomer = next(r for r in reports if r["newcomer"])
    assert newcomer["rank"] == 3 and newcomer["join_seconds"] < GROW_WITHIN, newcomer


def test_broadcast_state_sends_the_state_only_where_a_rank_differs():
    """ringcomm.c10d.broadcast_state on 3 ranks: where every rank holds rank 0's state only the
    hashes cross (the survivors of a shrink, bench/heal.py's 0.13-0.17 s saved); where one
    rank's parameter, bfloat16 buffer or Adam moment differs, all is sent and every rank ends
    with rank 0's; after a grow it is sent without hashing. The step is root's throughout."""
    outcomes = run_job(
        3, "torch_broadcast_state.py", env={"TEST_MASTER_PORT": str(free_port())}, deadline=90
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])


@pytest.mark.parametrize(
    "worker, args",
    [("grow.py", ["replace", "2", "1"]), ("ddp_grow.py", ["1", "8"]), ("horovod_grow.py", ["0"])],
    ids=["core", "ddp", "horovod"],
)
def test_ringcomm_run_replaces_a_lost_rank(worker, args):
    """ringcomm-run --replace: the launcher starts a killed rank's process again on its host
    (RINGCOMM_JOIN=1), which joins the job in place; the job ends at full size and succeeds.
    Through the core API, DDP (grow_group), and the Horovod API (hvd.elastic.run without a
    driver admits it at a state.commit(); rank 0 the victim)."""
    done = subprocess.run(
        [sys.executable, "-m", "ringcomm.launch", "--replace", "-np", "4",
         str(WORKERS / worker), *args],
        env=worker_env({"RINGCOMM_TIMEOUT": str(TIMEOUT)}), capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "replaces it (--replace)" in done.stderr, done.stderr[-3000:]
    results = [
        json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT")
    ]
    assert len(results) == 4, done.stdout + done.stderr[-3000:]
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3], results
    assert {r["size"] for r in results} == {4}, results
    assert sum(r["newcomer"] for r in results) == 1, results
    digests = {r.get("digest", r.get("params")) for r in results}
    assert len(digests) == 1, results


@pytest.mark.skipif(not mpirun(), reason="mpirun not installed (pip install mpich)")
def test_a_replacement_joins_a_job_under_mpirun(tmp_path):
    """Under MPICH's mpirun (-disable-auto-cleanup keeps the survivors of a rank that exited),
    which serves no store that outlives a rank: the members keep their addresses in
    RINGCOMM_DOOR_DIR, and a replacement started by another mpirun with RINGCOMM_JOIN=1 (the
    command docs/guides/recovery.md gives a job script) finds them there and joins."""
    pytest.importorskip("mpi4py")
    env = worker_env(
        {
            "RINGCOMM_TIMEOUT": str(TIMEOUT),
            "RINGCOMM_DOOR_DIR": str(tmp_path / "door"),
            "RINGCOMM_SECRET": "a-secret-the-job-script-made-0123456789",
            "VICTIM_EXITS": "1",
            "EXIT_WITHOUT_FINALIZE": "1",
        }
    )
    command = [sys.executable, str(WORKERS / "grow.py"), "replace", "1", "1"]
    job = subprocess.Popen(
        [mpirun(), "-disable-auto-cleanup", "-np", "3", *command], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    replacement = subprocess.run(
        [mpirun(), "-np", "1", *command], env=dict(env, RINGCOMM_JOIN="1"),
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    out, err = job.communicate(timeout=90)
    results = [
        json.loads(line[7:])
        for line in (out + replacement.stdout).splitlines()
        if line.startswith("RESULT")
    ]
    assert replacement.returncode == 0, replacement.stdout + replacement.stderr[-3000:]
    assert len(results) == 3, out + err[-3000:] + replacement.stderr[-3000:]
    assert sorted(r["rank"] for r in results) == [0, 1, 2], results
    assert {r["size"] for r in results} == {3}, results
    assert len({r["digest"] for r in results}) == 1, results


def test_a_short_chaos_run_heals_every_job():
    """bench/chaos.py, short: jobs losing 1-3 processes at random moments (steps, rank 0's
    included, the shrink, the grow, the state's transfer, a replacement right after it joined)
    under ringcomm-run --replace all heal to full size with the same weights, and none hangs.
    The full run (100 jobs) is in bench/RESULTS.md."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "chaos.py"), "--jobs", "4", "--seed", "7",
         "--deadline", "90"],
        env=worker_env({}), capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "| 4 | 4 | 0 | 0 | 0 | 0 |" in done.stdout, done.stdout[-4000:]
