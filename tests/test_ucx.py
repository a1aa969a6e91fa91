"""RINGCOMM_TRANSPORT=ucx: every collective over UCX's shared memory within a host and over its TCP
lane between two network-namespace hosts, each rank saying which lanes it got, and a cut link
named by every rank. Mismatches and lost ranks over UCX are in test_failures.py (its network
transports), a stranger without the secret in tests/cpp/test_ucx_network.cc. Skipped where this
build has no UCX (install libucx-dev and reinstall).
"""

import time

import pytest
from harness import (
    WORKERS,
    assert_all_succeeded,
    namespace_hosts,
    results_of_ranks,
    run_job,
    start_ranks_on_hosts,
    ucx_built,
)
from test_collectives import SHARED_RESULTS

pytestmark = pytest.mark.skipif(not ucx_built(), reason="this build of ringcomm has no UCX")

SUBNET = "10.231.79"
# Hosts whose links have names of their own.
SUBNET_NAMED = "10.231.93"
SECRET = {"RINGCOMM_SECRET": "ucx-test-secret-0123456789abcdef"}


def assert_collectives_agree(results):
    reference = results[0]["digests"]
    for rank, result in enumerate(results):
        assert result["failures"] == [], result["failures"][:10]
        assert result["transports"] == ["self" if p == rank else "ucx" for p in range(len(results))]
        for name, value in result["digests"].items():
            if name.startswith(SHARED_RESULTS):
                assert value == reference[name], f"rank {rank} differs on {name}"


@pytest.mark.parametrize("size", [2, 3, 8])
def test_every_collective_over_ucx_shared_memory_within_a_host(size):
    env = {"RINGCOMM_TRANSPORT": "ucx", "UCX_TLS": "sm,self", "RINGCOMM_DEBUG": "INFO",
           "RINGCOMM_DEBUG_SUBSYS": "TRANSPORT,AUTH"}  # fmt: skip
    outcomes = run_job(size, "collectives.py", ["65537"], env=env, deadline=240)
    assert_all_succeeded(outcomes)
    assert_collectives_agree([o.result for o in outcomes])
    # Which lane each peer got, and that it proved the secret first.
    assert "over UCX" in outcomes[0].stderr and "lane[" in outcomes[0].stderr, outcomes[0].stderr
    assert "proved the job's secret" in outcomes[0].stderr


@pytest.fixture(scope="module")
def two_hosts():
    with namespace_hosts(SUBNET) as hosts:
        yield hosts


# Between the hosts UCX's TCP lane: its shared-memory lanes would reach past the link (the
# namespaces share one kernel).
UCX_BETWEEN_HOSTS = {"RINGCOMM_TRANSPORT": "ucx", "UCX_TLS": "tcp", **SECRET}


def start_on_hosts(hosts, argv, env, port, layout):
    return start_ranks_on_hosts(
        hosts, argv, {**UCX_BETWEEN_HOSTS, **env}, f"{SUBNET}.1", port, layout
    )


def test_every_collective_over_ucx_tcp_across_two_hosts(two_hosts):
    # 3 ranks on one host, 2 on the other: uneven hosts, a world size that is no power of two.
    procs = start_on_hosts(
        two_hosts, [str(WORKERS / "collectives.py"), "65537"], {}, 29631, (0, 0, 0, 1, 1)
    )
    assert_collectives_agree(results_of_ranks(procs, time.monotonic() + 240))


@pytest.mark.parametrize("layout", [(0, 1), (0, 0, 1, 1)], ids=["1-rank-a-host", "2-ranks-a-host"])
def test_ucx_across_hosts_whose_interfaces_are_named_differently(layout):
    """Real clusters mix interface names (eth0, ens5, enp65s0f0): UCX's devices follow the
    interface ringcomm's own TCP chose for the peers, whatever each host calls it."""
    with namespace_hosts(SUBNET_NAMED, tag="rcn", link_names=("rcmhv0", "rcmhv1")) as hosts:
        procs = start_ranks_on_hosts(
            hosts, [str(WORKERS / "collectives.py"), "4097"], UCX_BETWEEN_HOSTS,
            f"{SUBNET_NAMED}.1", 29633, layout,
        )  # fmt: skip
        assert_collectives_agree(results_of_ranks(procs, time.monotonic() + 180))


def test_cut_link_over_ucx_is_named_by_every_rank(two_hosts):
    timeout = 5.0
    procs = start_on_hosts(
        two_hosts,
        [str(WORKERS / "failures.py"), "none", "-1"],
        {"RINGCOMM_TIMEOUT": str(timeout)},
        29632,
        (0, 0, 1, 1),
    )
    try:
        time.sleep(4.0)  # let them connect and stream all-reduces across the link
        two_hosts.cut(1)
        results = results_of_ranks(procs, time.monotonic() + 60)
    finally:
        two_hosts.mend(1)
    for result in results:
        assert result["error"] in ("TimeoutError", "TransportError"), result
        assert "rank " in result["message"] and result["peer"] is not None, result
        assert result["waited"] < timeout + 10.0, result


def test_ucx_refuses_a_configuration_that_asks_for_sealed_links():
    env = {"RINGCOMM_TRANSPORT": "ucx", "RINGCOMM_WIRE_PROTECTION": "integrity"}
    outcomes = run_job(2, "launched.py", env=env, deadline=60)
    for outcome in outcomes:
        assert outcome.returncode != 0, outcome.describe()
        assert (
            "cannot seal" in outcome.stderr and "RINGCOMM_TRANSPORT=auto or tcp" in outcome.stderr
        )
