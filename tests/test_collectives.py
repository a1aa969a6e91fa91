"""Every collective, dtype, op, algorithm and transport at world sizes 1-8.

The cases themselves are in tests/workers/collectives.py.
"""

import pytest
from harness import assert_all_succeeded, run_job

# Results every rank must hold bit for bit (the others differ by rank by design).
SHARED_RESULTS = ("allreduce/", "allgather/", "broadcast/")
# "A few MiB" of float32 per rank; smaller at the oversubscribed world sizes to bound CI time.
LARGE_COUNT = {1: 786_433, 2: 786_433, 3: 786_433, 4: 786_433, 5: 262_147, 8: 262_147}

CASES = [(1, "auto")] + [
    (size, transport) for size in (2, 3, 4, 5, 8) for transport in ("shm", "tcp")
]
# The direct schedule's single-copy path (cross-memory attach) from 1000 bytes on: the 1009-element
# cases of every dtype and op and the large ones take it, the smaller ones stay staged. At 3 ranks
# it runs. At 5, pinned to one core (more than 4 ranks a core) with RINGCOMM_SHM_CMA_BUSY_CORES=0,
# the lowest rank asks every rank to stage those all-reduces instead, call by call, as when other
# processes take the cores. At 8 one rank turns it off, and every rank must then stage (the same
# decision everywhere). 2 and 4 ranks keep the default threshold.
SINGLE_COPY_FROM = {"RINGCOMM_SHM_CMA_MIN_BYTES": "1000"}
SINGLE_COPY = {3: "on", 5: "staged instead", 8: "off on rank 7"}
STAGED_INSTEAD = {"PIN_TO_ONE_CORE": "1", "RINGCOMM_SHM_CMA_BUSY_CORES": "0"}
SINGLE_COPY_LOG = {"RINGCOMM_DEBUG": "INFO", "RINGCOMM_DEBUG_SUBSYS": "TRANSPORT"}


@pytest.mark.parametrize("size,transport", CASES, ids=[f"{s}ranks-{t}" for s, t in CASES])
def test_collectives_match_numpy_and_agree_across_ranks(size, transport):
    env = {"RINGCOMM_TRANSPORT": transport}
    single_copy = SINGLE_COPY.get(size) if transport == "shm" else None
    if single_copy:
        env.update(SINGLE_COPY_FROM, **SINGLE_COPY_LOG)
    if single_copy == "staged instead":
        env.update(STAGED_INSTEAD)
    turned_off = {size - 1: {"RINGCOMM_SHM_CMA": "0"}} if single_copy == "off on rank 7" else None
    outcomes = run_job(
        size,
        "collectives.py",
        [str(LARGE_COUNT[size])],
        env=env,
        per_rank_env=turned_off,
        deadline=280,
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"][:20])
    if transport == "shm" and size > 1:
        assert "direct" in outcomes[0].result["algorithms"]
    if single_copy == "off on rank 7":
        assert f"cross-memory attach unavailable (RINGCOMM_SHM_CMA=0 on rank {size - 1})" in (
            outcomes[0].stderr
        ), outcomes[0].stderr[-2000:]
    elif single_copy:
        assert "of 1000 B and more read and write peers' buffers" in outcomes[0].stderr
    if single_copy == "staged instead":
        assert "5 local ranks stage all-reduces of 1000 B and more through shared memory" in (
            outcomes[0].stderr
        ), outcomes[0].stderr[-2000:]
    reference = outcomes[0].result["digests"]
    for outcome in outcomes[1:]:
        for name, value in outcome.result["digests"].items():
            if name.startswith(SHARED_RESULTS):
                assert value == reference[name], f"rank {outcome.rank} differs on {name}"


@pytest.mark.parametrize("size", [4, 5])
def test_two_hosts_mix_shared_memory_and_tcp(size):
    # RINGCOMM_HOSTID makes ranks 0..1 one "host" and the rest another: shared memory within each,
    # TCP between them, one progress loop driving both.
    hosts = {rank: {"RINGCOMM_HOSTID": "host-a" if rank < 2 else "host-b"} for rank in range(size)}
    outcomes = run_job(size, "collectives.py", ["65537"], per_rank_env=hosts, deadline=280)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"][:20])
        assert "direct" not in outcome.result["algorithms"]
        transports = outcome.result["transports"]
        for peer, kind in enumerate(transports):
            same_host = (peer < 2) == (outcome.rank < 2)
            expected = "self" if peer == outcome.rank else ("shm" if same_host else "tcp")
            assert kind == expected, (outcome.rank, transports)
