"""TCP links made on first use (RINGCOMM_LINKS=on_first_use, src/transport/tcp/tcp_dialer.h): a
rank links to a peer when a message first goes to or comes from it, with the job-secret
handshake, and holds links only to the peers it exchanges messages with."""

import re

from harness import assert_all_succeeded, run_job

ENV = {"RINGCOMM_TRANSPORT": "tcp", "RINGCOMM_DEBUG": "INFO", "RINGCOMM_DEBUG_SUBSYS": "TRANSPORT"}
LINKED = re.compile(r"rank (\d+) linked to rank (\d+) over TCP \(([^)]*)\)")


def links_of(outcome) -> dict:
    """The peers this rank linked to, each with how ("this rank's dial" or "its dial")."""
    return {int(peer): how for _, peer, how in LINKED.findall(outcome.stderr)}


def test_a_sender_dials_a_higher_rank_that_receives_from_any_source():
    outcomes = run_job(3, "lazy_links.py", ["any_source"], env=ENV, deadline=120)
    assert_all_succeeded(outcomes)
    assert outcomes[2].result["received"] == 7000.0
    assert links_of(outcomes[0])[2] == "this rank's dial"
    assert links_of(outcomes[2])[0] == "its dial"


def test_two_ranks_that_send_to_each_other_first_end_with_one_link():
    outcomes = run_job(2, "lazy_links.py", ["crossing"], env=ENV, deadline=120)
    assert_all_succeeded(outcomes)
    assert [o.result["received"] for o in outcomes] == [2.0, 1.0]
    # Whichever dial won (the lower rank's, where both were under way), one link at each end,
    # made by the same dial.
    made = [LINKED.findall(o.stderr) for o in outcomes]
    assert len(made[0]) == 1 and len(made[1]) == 1, made
    ours, theirs = links_of(outcomes[0]), links_of(outcomes[1])
    assert set(ours) == {1} and set(theirs) == {0}
    assert {ours[1], theirs[0]} == {"this rank's dial", "its dial"}


def test_a_ring_allreduce_links_each_rank_to_its_neighbours_only():
    env = dict(ENV, RINGCOMM_ALGORITHM="ring")
    outcomes = run_job(4, "lazy_links.py", ["ring"], env=env, deadline=120)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        rank = outcome.rank
        assert outcome.result["received"] == 6.0
        assert set(links_of(outcome)) == {(rank - 1) % 4, (rank + 1) % 4}, outcome.stderr
        assert outcome.result["transports"].count("tcp") == 3  # a TCP peer before its link too
    # Beyond the same few sockets on every rank (the store, its mailbox, its listener), its
    # sockets are its links.
    beyond = {o.result["sockets_after"] - len(links_of(o)) for o in outcomes}
    assert len(beyond) == 1, [o.result for o in outcomes]


def test_links_at_start_make_the_full_mesh():
    env = dict(ENV, RINGCOMM_ALGORITHM="ring", RINGCOMM_LINKS="at_start")
    outcomes = run_job(4, "lazy_links.py", ["ring"], env=env, deadline=120)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["received"] == 6.0
        assert links_of(outcome) == {}  # none made on first use
    assert len({o.result["sockets_after"] for o in outcomes}) == 1


def test_a_rank_out_of_descriptors_says_so_and_names_no_peer_as_gone():
    env = dict(ENV, RINGCOMM_TIMEOUT="15")
    outcomes = run_job(2, "lazy_links.py", ["no_descriptors"], env=env, deadline=120)
    assert_all_succeeded(outcomes)
    zero = outcomes[0].result
    assert zero["error"] == "TransportError", zero
    assert "descriptor limit, ulimit -n" in zero["message"], zero
    assert outcomes[1].result["error"] is not None, outcomes[1].result


def test_a_dial_to_a_rank_that_aborted_names_its_reason():
    """A rank that aborted refuses dials; its peer's error says why it aborted (abort() records
    its reason, as a failing rank does), not that it is gone."""
    outcomes = run_job(2, "lazy_links.py", ["aborted"], env=ENV, deadline=120)
    assert_all_succeeded(outcomes)
    sender = outcomes[0].result
    assert sender.get("error") == "TransportError", sender
    assert "communicator aborted on rank 1: the test's reason" in sender["message"], sender
