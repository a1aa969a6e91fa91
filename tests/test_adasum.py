"""Adasum (op=ringcomm.ADASUM, hvd.Adasum): one launch per rank count runs every case
(tests/workers/adasum.py); the reference is tests/workers/adasum_reference.py."""

import pytest
from harness import assert_all_succeeded, run_job

CASES = [(1, "auto"), (2, "auto"), (3, "auto"), (4, "shm"), (4, "tcp")]


@pytest.mark.parametrize("size,transport", CASES, ids=[f"{s}ranks-{t}" for s, t in CASES])
def test_adasum(size, transport):
    outcomes = run_job(size, "adasum.py", env={"RINGCOMM_TRANSPORT": transport}, deadline=300)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], (outcome.rank, outcome.result["failures"])
    # Every rank holds the same bits.
    first = outcomes[0].result["digests"]
    assert (size & (size - 1) != 0) or len(first) > 50, sorted(first)
    for outcome in outcomes[1:]:
        differ = [k for k in first if outcome.result["digests"].get(k) != first[k]]
        assert not differ, (outcome.rank, differ)
