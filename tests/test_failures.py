"""A dead, late, stalled or mismatched rank makes every other rank raise, naming it, in time."""

import pytest
from harness import NETWORK_TRANSPORTS, assert_all_succeeded, run_job

TIMEOUT = 5.0  # RINGCOMM_TIMEOUT for these jobs
# Time allowed beyond the timeout: detection runs every 100 ms, plus process start-up on 2 cores.
SLACK = 10.0
# The workers' 4 MiB all-reduces through shared memory take the direct schedule's single-copy
# path (cross-memory attach) with this; without it, the default threshold decides.
SINGLE_COPY = {"RINGCOMM_SHM_CMA": "1", "RINGCOMM_SHM_CMA_MIN_BYTES": str(1 << 20)}


def transport_env(transport: str, single_copy: bool = True) -> dict:
    env = {"RINGCOMM_TIMEOUT": str(TIMEOUT), "RINGCOMM_TRANSPORT": transport}
    if transport == "shm" and single_copy:
        env.update(SINGLE_COPY)
    return env


def survivors(outcomes, victim):
    reports = [o for o in outcomes if o.rank != victim]
    for outcome in reports:
        assert outcome.returncode == 0 and outcome.result is not None, outcome.describe()
    return [o.result for o in reports]


@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
@pytest.mark.parametrize("size", [2, 4])
def test_killed_rank_is_named_by_every_survivor(size, transport):
    victim = size - 1
    outcomes = run_job(
        size,
        "failures.py",
        ["kill", str(victim)],
        deadline=60,
        env=transport_env(transport, single_copy=size == 4),  # 2 ranks: the staged path
    )
    for result in survivors(outcomes, victim):
        assert result["error"] in ("TransportError", "TimeoutError"), result
        assert f"rank {victim}" in result["message"], result
        assert result["waited"] < TIMEOUT + SLACK, result
        assert result["after"] == "CommunicatorClosed", result


def test_a_rank_killed_between_collectives_is_named_while_still_a_zombie():
    """Issue 33: the liveness check of shared memory was kill(pid, 0), which succeeds for a
    process that has exited but not been reaped: survivors waited out their whole timeout for a
    rank killed between collectives until its parent reaped it. The harness leaves the victim
    unreaped until the others have ended."""
    victim = 2
    outcomes = run_job(
        3,
        "failures.py",
        ["idlekill", str(victim)],
        deadline=60,
        env={**transport_env("shm", single_copy=True), "RINGCOMM_TIMEOUT": "20"},
        unreaped=[victim],
    )
    for result in survivors(outcomes, victim):
        assert result["error"] == "TransportError", result
        assert f"rank {victim}" in result["message"], result
        assert result["waited"] < 3, result  # 20 s before


@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
def test_stalled_rank_is_named_within_the_timeout(transport):
    victim = 1
    outcomes = run_job(
        3,
        "failures.py",
        ["stall", str(victim)],
        deadline=60,
        env={**transport_env(transport), "RINGCOMM_STALL_WARNING": "1"},
    )
    for result in survivors(outcomes, victim):
        assert result["error"] in ("TimeoutError", "TransportError"), result
        assert f"rank {victim}" in result["message"], result
        assert result["waited"] < TIMEOUT + SLACK, result
    # Before the deadline, each survivor warned once that it was still waiting, naming a rank.
    for outcome in outcomes:
        if outcome.rank != victim:
            warnings = [w for w in outcome.stderr.splitlines() if "ringcomm: warning:" in w]
            assert len(warnings) == 1 and "still waiting" in warnings[0], outcome.stderr


def test_rank_that_never_arrives_fails_rendezvous():
    victim = 2
    outcomes = run_job(
        3, "failures.py", ["late", str(victim)], deadline=60, env={"RINGCOMM_TIMEOUT": str(TIMEOUT)}
    )
    for result in survivors(outcomes, victim):
        assert result["error"] == "TimeoutError", result
        assert f"rank {victim}" in result["message"], result
        assert result["since_start"] < TIMEOUT + SLACK, result


@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
def test_mismatched_sizes_raise_instead_of_hanging(transport):
    outcomes = run_job(
        3,
        "failures.py",
        ["mismatch", "1"],
        deadline=60,
        env=transport_env(transport),
    )
    results = [o.result for o in outcomes]
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    assert all(r["error"] for r in results), results
    assert any(r["error"] == "MismatchError" for r in results), results
    # The caller's name for the data is quoted, as Horovod names the tensor.
    assert all("'weights'" in r["message"] for r in results if r["error"] == "MismatchError")


@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
@pytest.mark.parametrize("mode,words", [("root", "root 1"), ("dtype", "int32")])
def test_disagreeing_root_or_type_is_named(transport, mode, words):
    outcomes = run_job(
        3,
        "failures.py",
        [mode, "2"],
        deadline=60,
        env=transport_env(transport),
    )
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    results = [o.result for o in outcomes]
    assert all(r["error"] for r in results), results
    named = [r for r in results if r["error"] == "MismatchError"]
    assert named and all(words in r["message"] for r in named), results


# Two roots, each with a receiver that agrees with it: through the direct schedule's slots a
# receiver must not return from the broadcast with its root's data while the other root's group
# fails; every rank raises in the call itself. (Over TCP such a receiver returns, and learns of
# the failure at its next collective: the tree's receivers do not wait for the other root.)
def test_broadcast_with_two_roots_fails_on_every_rank_in_the_call():
    outcomes = run_job(4, "failures.py", ["splitroot", "0"], deadline=60, env=transport_env("shm"))
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    results = [o.result for o in outcomes]
    assert all(r["error"] in ("MismatchError", "TransportError") for r in results), results
    assert all(r["iteration"] == 3 for r in results), results
    named = [r for r in results if r["error"] == "MismatchError"]
    assert named and all("root" in r["message"] for r in named), results


# Ranks that disagree this way wait for messages the other never sends; each looks up what the
# other runs after a second of waiting (the store), so the mismatch is named long before the
# 60 s timeout, on every rank.
MISMATCHES = [
    ("allgather", "shm", 2, 1),
    ("allgather", "tcp", 3, 1),
    ("scatter", "tcp", 3, 0),
    ("tree", "tcp", 4, 2),
    ("fp16", "tcp", 2, 1),
    ("longer", "shm", 2, 1),
    ("bcount", "shm", 3, 1),
    ("bcount", "tcp", 2, 1),
]


@pytest.mark.parametrize(
    "mode,transport,size,victim",
    MISMATCHES,
    ids=[f"{m}-{t}-{n}ranks" for m, t, n, _ in MISMATCHES],
)
def test_ranks_in_different_collectives_are_named_at_once(mode, transport, size, victim):
    outcomes = run_job(
        size,
        "failures.py",
        [mode, str(victim)],
        deadline=90,
        env={"RINGCOMM_TIMEOUT": "60", "RINGCOMM_TRANSPORT": transport},
    )
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    results = [o.result for o in outcomes]
    assert all(r["error"] for r in results), results
    # Every rank fails well before the timeout; at least one names the disagreement itself
    # (the others may learn of it as the first one's abort).
    assert all(r["waited"] < 15 for r in results), results
    assert any(r["error"] == "MismatchError" for r in results), results
    assert all(r["error"] in ("MismatchError", "TransportError") for r in results), results


@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
def test_receive_of_another_element_type_is_named(transport):
    outcomes = run_job(
        2,
        "failures.py",
        ["p2p", "1"],
        deadline=90,
        env={"RINGCOMM_TIMEOUT": "60", "RINGCOMM_TRANSPORT": transport},
    )
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    receiver = outcomes[1].result
    assert receiver["error"] == "MismatchError", receiver
    assert "int32" in receiver["message"] and "float32" in receiver["message"], receiver
    # The sender's send completed; it learns of the failure at its next collective.
    sender = outcomes[0].result
    assert sender["error"] and sender["waited"] < 15, sender


# Ranks that disagree about a collective in which ranks only send (each names itself a
# broadcast's root; a scatter meeting a gather at 2 ranks): over TCP every receiver acknowledges,
# so each sender meets the other's data where it waits for the acknowledgement, and raises at
# once (the tree up to 256 KiB, the chain above). Over shared memory a broadcast goes through the
# direct schedule's slots, where every rank compares every rank's descriptor, root included.
@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
@pytest.mark.parametrize(
    "mode,size",
    [
        (["broadcast", "1000"], 2),
        (["broadcast", "1000"], 3),
        (["broadcast", "300000"], 3),
        (["scatter"], 2),
    ],
    ids=["broadcast-tree-2", "broadcast-tree-3", "broadcast-chain-3", "scatter-gather-2"],
)
def test_sender_only_disagreement_is_named_at_once(mode, size, transport):
    outcomes = run_job(
        size,
        "sender_only.py",
        mode,
        deadline=60,
        env={"RINGCOMM_TIMEOUT": "60", "RINGCOMM_TRANSPORT": transport},
    )
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    results = [o.result for o in outcomes]
    assert all(r["error"] in ("MismatchError", "TransportError") for r in results), results
    assert all(r["waited"] < 15 for r in results), results
    named = [r for r in results if r["error"] == "MismatchError"]
    assert named, results
    expected = "root" if mode[0] == "broadcast" else "gather"
    assert all(expected in r["message"] for r in named), results


# A message nobody receives (a send without its recv, as the last call) can only be found at
# shutdown(), which warns about it.
@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
def test_unreceived_message_is_reported_at_shutdown(transport):
    outcomes = run_job(
        2,
        "sender_only.py",
        ["unreceived"],
        deadline=60,
        env={"RINGCOMM_TIMEOUT": str(TIMEOUT), "RINGCOMM_TRANSPORT": transport},
    )
    assert all(o.returncode == 0 and o.result for o in outcomes), [o.describe() for o in outcomes]
    assert "no receive matched" in outcomes[1].stderr, outcomes[1].stderr


# A rank that gives no elements where the others give some is in the same collective as they:
# every rank raises a MismatchError naming both calls, at once, whatever the collective and
# transport; no elements on every rank stays a no-op (issue 28).
@pytest.mark.parametrize("transport", ["shm", *NETWORK_TRANSPORTS])
def test_zero_elements_on_one_rank_are_named_by_every_rank(transport):
    timeout = 20.0
    env = {"RINGCOMM_TRANSPORT": transport, "RINGCOMM_TIMEOUT": str(timeout)}
    outcomes = run_job(3, "zero_size.py", env=env, deadline=240)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        for case, result in outcome.result["results"].items():
            where = (outcome.rank, case, result)
            if case.endswith("all zero"):
                assert result["error"] is None, where
                continue
            assert result["error"] == "MismatchError", where
            assert result["seconds"] < timeout / 4, where
            # Both calls are named: this rank's and the other's (one with 0 elements).
            message = result["message"]
            assert "0 x float32" in message or " 0 bytes" in message, where
            assert "1 x float32" in message or "4 bytes" in message, where


def test_a_failed_communicator_met_through_a_python_store_can_be_dropped():
    # Its destructor joins the thread that records the failure in the store, which needs the
    # GIL for a store written in Python: dropped with the GIL held, rank 0 hung (3251310).
    # Over TCP, where rank 1 leaving closes its links at once (shared memory waits for it).
    env = {"RINGCOMM_TIMEOUT": "20", "RINGCOMM_TRANSPORT": "tcp"}
    outcomes = run_job(2, "python_store_release.py", env=env, deadline=90)
    assert_all_succeeded(outcomes)
    zero = next(outcome.result for outcome in outcomes if outcome.result["rank"] == 0)
    assert zero["error"] is not None, zero  # the all-reduce failed, so the record was written
    # The drop waited for the recording thread, so the case was the one that hung.
    assert 0.5 < zero["dropped_s"] < 10, zero
