"""Adasum (op=ringcomm.ADASUM, hvd.Adasum): one launch per rank count runs every case
(tests/workers/adasum.py); the reference is tests/workers/adasum_reference.py."""

import pytest
from harness import assert_all_succeeded, run_job


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_adasum(size):
    outcomes = run_job(size, "adasum.py", deadline=300)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], (outcome.rank, outcome.result["failures"])
    # Every rank holds the same bits.
    first = outcomes[0].result["digests"]
    assert (size & (size - 1) != 0) or len(first) > 50, sorted(first)
    for outcome in outcomes[1:]:
        differ = [k for k in first if outcome.result["digests"].get(k) != first[k]]
        assert not differ, (outcome.rank, differ)
