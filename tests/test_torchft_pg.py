"""Everything torchft asks of a process group, asked of ringcomm.torchft.ProcessGroupRingcomm by
real processes (issue 49): each job is three ranks of tests/workers/torchft_pg.py, which run every
check in one launch (the operations torchft's wrappers forward, errored(), set_timeout(), abort()
from another thread while an operation waits, a rank killed with SIGKILL, a reconfiguration from
3 ranks to 2, and create-use-destroy cycles with live references).

On the torchft installed here, on its route (the nightly's reconfigure(), or configure() where it
is 0.2.0), over shared memory and over TCP; and once more on torchft 0.2.0's configure() where a
copy of it is at hand: a directory to put first on PYTHONPATH, TORCHFT_020_SITE (default
/tmp/tft020-site).

RINGCOMM_TORCHFT_CYCLES sets the number of create-use-destroy cycles (default 12, three of each
way of tearing a group down); issue 49's target is 100 without a hang.
"""

import importlib.metadata
import os
from pathlib import Path

import pytest
from harness import REPO, run_job

pytest.importorskip("torchft")

import torch.distributed as dist  # noqa: E402 (after the skip: torchft brings torch)

CYCLES = int(os.environ.get("RINGCOMM_TORCHFT_CYCLES", "12"))
TORCHFT_020_SITE = Path(os.environ.get("TORCHFT_020_SITE", "/tmp/tft020-site"))
VICTIM = 2
# What a rank may take before it prints where it is and exits: far beyond a run here (about 15 s
# on 2 loaded cores), and each cycle allowed more than torch's TCPStore client's worst connect
# seen (5 s, a reverse DNS lookup that timed out).
HANG_REPORT_AFTER = 120 + 6 * CYCLES


def installed_torchft_version() -> str:
    for name in ("torchft", "torchft-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def torchft_020_site() -> Path:
    """TORCHFT_020_SITE, where it holds torchft 0.2.0 (and the installed one is another)."""
    found = [
        d.version
        for d in importlib.metadata.distributions(path=[str(TORCHFT_020_SITE)])
        if d.metadata["Name"] == "torchft"
    ]
    if found != ["0.2.0"]:
        pytest.skip(f"no torchft 0.2.0 in {TORCHFT_020_SITE} (TORCHFT_020_SITE)")
    if installed_torchft_version() == "0.2.0":
        pytest.skip("the installed torchft is 0.2.0: its run covers configure()")
    return TORCHFT_020_SITE


def run_worker(pythonpath=None, transport="auto") -> dict:
    """Three ranks of the worker; the survivors' reports, checked."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {"TEST_STORE": f"127.0.0.1:{store.port}", "RINGCOMM_TRANSPORT": transport}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(pythonpath)])
    outcomes = run_job(
        3, "torchft_pg.py", [str(CYCLES), str(HANG_REPORT_AFTER)], env=env,
        deadline=HANG_REPORT_AFTER + 30,
    )  # fmt: skip
    assert outcomes[VICTIM].returncode == -9, outcomes[VICTIM].describe()
    reports = []
    for outcome in outcomes[:VICTIM]:
        assert outcome.returncode == 0 and outcome.result, outcome.describe()
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"])
        reports.append(outcome.result)
    for report in reports:
        assert report["timings"]["cycles"]["count"] == CYCLES, report
    cycles = reports[0]["timings"]["cycles"]
    print(
        f"torchft {reports[0]['route']} ({reports[0]['torchft']}): {cycles['count']} "
        f"create-use-destroy cycles in {cycles['seconds']} s (median {cycles['median']} s, "
        f"slowest {cycles['slowest']} s), no hang; timings {reports[0]['timings']}"
    )
    return reports[0]


@pytest.mark.timeout(HANG_REPORT_AFTER + 60)
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_installed_torchft(transport):
    """The installed torchft, on its own route; over shared memory (auto, one host), and over
    TCP, whose waits an abort ends by closing their sockets."""
    report = run_worker(transport=transport)
    want = "configure" if installed_torchft_version() == "0.2.0" else None
    assert want is None or report["route"] == want, report


@pytest.mark.timeout(HANG_REPORT_AFTER + 60)
def test_torchft_020_configure():
    """torchft 0.2.0's configure() route, from TORCHFT_020_SITE."""
    site = torchft_020_site()
    report = run_worker(pythonpath=site)
    assert report["route"] == "configure", report
    assert report["torchft"].startswith(str(site)), report
