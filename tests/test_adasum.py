"""Adasum (op=ringcomm.ADASUM, hvd.Adasum): one launch per rank count runs every case
(tests/workers/adasum.py); the reference is tests/workers/adasum_reference.py."""

import pytest
from harness import assert_all_succeeded, run_job

# "hosts": two hosts of two ranks (RINGCOMM_HOSTID), shared memory within and TCP between.
CASES = [(1, "auto"), (2, "auto"), (3, "auto"), (4, "shm"), (4, "tcp"), (4, "hosts")]
TWO_HOSTS = {rank: {"RINGCOMM_HOSTID": f"host-{rank // 2}"} for rank in range(4)}


@pytest.mark.parametrize("size,transport", CASES, ids=[f"{s}ranks-{t}" for s, t in CASES])
def test_adasum(size, transport):
    env = {"RINGCOMM_TRANSPORT": "auto" if transport == "hosts" else transport}
    hosts = TWO_HOSTS if transport == "hosts" else None
    outcomes = run_job(size, "adasum.py", env=env, per_rank_env=hosts, deadline=300)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], (outcome.rank, outcome.result["failures"])
    # Every rank holds the same bits.
    first = outcomes[0].result["digests"]
    assert (size & (size - 1) != 0) or len(first) > 50, sorted(first)
    for outcome in outcomes[1:]:
        differ = [k for k in first if outcome.result["digests"].get(k) != first[k]]
        assert not differ, (outcome.rank, differ)
