"""ringcomm-run across hosts over ssh (-H, --hostfile, --replace onto a spare host, and elastic jobs
whose discovery names other hosts): three namespace hosts, an OpenSSH server in the two the
launcher does not run in (tests/sshd.py). The launcher runs in host 0, as on a cluster's first
node."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sshd
from harness import WORKERS, worker_env

from ringcomm import _hostlist
from ringcomm._hostlist import Placement
from ringcomm.bench import netns

SUBNET = "10.231.83"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(hosts, their ssh servers: sshd.Servers)."""
    try:
        with netns.hosts(3, SUBNET, tag="ss") as hosts:
            with sshd.servers(hosts, [1, 2], tmp_path_factory.mktemp("sshd")) as servers:
                yield hosts, servers
    except (netns.NamespacesUnavailableError, sshd.SshdUnavailableError) as reason:
        pytest.skip(str(reason))


def launch(cluster, flags, program, env=None, cwd=None):
    """ringcomm-run in host 0 with ``flags``, where {h0}, {h1}, {h2} stand for the hosts."""
    hosts, servers = cluster
    names = {f"h{i}": hosts.address(i) for i in range(len(hosts))}
    flags = [flag.format(**names) for flag in flags]
    command = hosts.command(
        0,
        [
            sys.executable,
            "-m",
            "ringcomm.launch",
            "--ssh-command",
            f"ssh -F {servers.client}",
            *flags,
            *program,
        ],
    )
    return subprocess.Popen(
        command,
        env=worker_env(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def results_of(out: str) -> list:
    found = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    return sorted(found, key=lambda r: r["rank"])


def test_ranks_on_three_hosts_over_ssh(cluster, tmp_path):
    launcher = launch(
        cluster,
        ["-H", "{h0}:1,{h1}:2,{h2}:2"],
        [str(WORKERS / "over_ssh.py")],
        env={"TEST_MARKER": "passed on"},
        cwd=tmp_path,
    )
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err[-4000:]
    results = results_of(out)
    assert [r["rank"] for r in results] == list(range(5)), err[-4000:]
    assert all(r["ok"] and r["size"] == 5 for r in results), results
    assert [r["local_size"] for r in results] == [1, 2, 2, 2, 2]
    assert [r["local_rank"] for r in results] == [0, 0, 1, 0, 1]
    namespaces = [r["namespace"] for r in results]
    assert len({namespaces[0], namespaces[1], namespaces[3]}) == 3
    assert namespaces[1] == namespaces[2] and namespaces[3] == namespaces[4]
    # The launcher's directory and environment, but its secret on no command line anywhere.
    assert {r["cwd"] for r in results} == {str(tmp_path)}
    assert {r["marker"] for r in results} == {"passed on"}
    assert all(r["secret_on_command_lines"] == [] for r in results), results


def test_hostfile_places_ranks_on_other_hosts_only(cluster, tmp_path):
    hosts, _ = cluster
    hostfile = tmp_path / "hosts"
    hostfile.write_text(
        f"# the cluster\n{hosts.address(1)} slots=2\n{hosts.address(2)}:1  # one more\n"
    )
    launcher = launch(cluster, ["--hostfile", str(hostfile)], [str(WORKERS / "over_ssh.py")])
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err[-4000:]
    results = results_of(out)
    assert [r["local_size"] for r in results] == [2, 2, 1], err[-4000:]
    assert all(r["ok"] for r in results)


def test_unreachable_host_fails_the_job_naming_it(cluster):
    launcher = launch(
        cluster,
        ["--grace", "2", "-H", "{h0}:1,10.231.83.77:1"],
        [str(WORKERS / "over_ssh.py")],
        env={"RINGCOMM_TIMEOUT": "30"},
    )
    out, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 255, err[-4000:]  # ssh's status: it could not connect
    assert "10.231.83.77" in err, err[-4000:]


def pids_written(directory: Path, count: int, deadline: float) -> list:
    while time.monotonic() < deadline:
        written = sorted(p for p in directory.iterdir() if not p.name.startswith("."))
        if len(written) == count:
            return [int(p.read_text()) for p in written]
        time.sleep(0.1)
    raise AssertionError(f"only {list(directory.iterdir())} of {count} ranks started")


def alive(pids) -> list:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_stopped_launcher_leaves_no_rank_on_any_host(cluster, tmp_path, how):
    """SIGTERM: passed on to every rank (the last ignores it and is killed after --grace).
    SIGKILL: the launcher cannot act; each far host's helper finds its ssh session gone and
    ends its rank (SIGTERM, then SIGKILL after its own grace of 10 s)."""
    launcher = launch(
        cluster,
        ["--grace", "2", "-H", "{h0}:1,{h1}:1,{h2}:1"],
        [str(WORKERS / "sleeper.py"), str(tmp_path)],
    )
    pids = pids_written(tmp_path, 3, time.monotonic() + 60)
    if how == "sigterm":
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 5
    else:
        # The launcher runs under `ip netns exec`, which execs it: the same process.
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 20
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids), launcher.stderr.read()[-4000:]


@pytest.mark.timeout(150)
def test_elastic_job_drops_a_lost_host_and_uses_it_again(cluster, tmp_path):
    """hvd.elastic training (workers/elastic_train.py) on h0:2 and h1:1 over ssh; the worker on h1
    is killed: its host is blacklisted and the two on h0 go on from the last commit; once its
    cooldown (1 s) is over, the host, still discovered, gets a worker again and the three finish."""
    from test_elastic import check_training, discovery

    hosts, _ = cluster
    far = hosts.address(1)
    launcher = launch(
        cluster,
        ["--verbose", "-np", "3", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
         discovery(tmp_path, f"{hosts.address(0)}:2\n{far}:1\n"),
         "--blacklist-cooldown-range", "1", "1"],
        [str(WORKERS / "elastic_train.py"), str(tmp_path), "kill-return"],
        env={"OMP_NUM_THREADS": "1", "RINGCOMM_TIMEOUT": "30"},
    )  # fmt: skip
    progress = tmp_path / "progress"
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline and launcher.poll() is None:
        if progress.exists() and progress.read_text() and int(progress.read_text()) >= 6:
            break
        time.sleep(0.1)
    os.kill(int((tmp_path / f"pid-{far}-0").read_text()), signal.SIGKILL)
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err[-6000:]
    assert f"blacklisting host {far}" in err
    results = results_of(out)
    check_training(results, 3, out + err)
    sizes = results[0]["sizes"]
    assert sizes[:6] == [3] * 6 and 2 in sizes and sizes[-1] == 3, sizes


def test_host_lists_and_hostfiles(tmp_path):
    assert _hostlist.parse_hosts("a:2,b,c:3") == [("a", 2), ("b", 1), ("c", 3)]
    assert _hostlist.parse_hosts("a:1,a:2") == [("a", 3)]
    assert _hostlist.parse_hosts("[fe80::1]:2") == [("fe80::1", 2)]
    for bad in ("", "a:0", "a:x", ":2"):
        with pytest.raises(ValueError, match="-H"):
            _hostlist.parse_hosts(bad)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# comment\nn1 slots=4\n\nn2:2\nn3\n")
    assert _hostlist.read_hostfile(str(hostfile)) == [("n1", 4), ("n2", 2), ("n3", 1)]
    hostfile.write_text("n1 slots=4 extra\n")
    with pytest.raises(ValueError, match="line 1"):
        _hostlist.read_hostfile(str(hostfile))
    placed = _hostlist.place([("a", 2), ("b", 2)], 3)
    assert [(p.host, p.local_rank, p.local_size) for p in placed] == [
        ("a", 0, 2),
        ("a", 1, 2),
        ("b", 0, 1),
    ]
    with pytest.raises(ValueError, match="more than the 4 slots"):
        _hostlist.place([("a", 2), ("b", 2)], 5)


def test_survivors_on_both_hosts_shrink_and_finish(cluster):
    """--keep-survivors across hosts: rank 2, on the far host, is killed in a stream of
    all-reduces; the survivors on both hosts shrink (workers/shrink.py) and the job succeeds."""
    launcher = launch(
        cluster,
        ["--keep-survivors", "-H", "{h0}:2,{h1}:2"],
        [str(WORKERS / "shrink.py"), "kill", "2"],
        env={"RINGCOMM_TIMEOUT": "20"},
    )
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, out[-3000:] + err[-3000:]
    assert f"rank 2 exited with status {128 + signal.SIGKILL}; the other ranks go on" in err, err
    results = results_of(out)
    assert [r["rank"] for r in results] == [0, 1, 3], out
    assert all(r["survivors"] == [0, 1, 3] and r["exact"] for r in results), results


def test_a_replacement_goes_to_a_spare_host_when_its_own_refuses_ssh(cluster, tmp_path):
    """--replace with a spare host: -H h0:2,h1:2,h2:2 -np 4 runs ranks 2 and 3 on h1 and keeps h2
    spare. Rank 2 dies (workers/grow.py) once h1's ssh server has stopped: its replacement cannot
    start there (ssh's 255), h1 counts as failed, and the launcher tries the spare at once, not
    counting it against --replace 1. The replacement joins on h2, as its only rank (local rank 0
    of 1), and the job ends at full size with the same weights everywhere."""
    hosts, servers = cluster
    h1, h2 = hosts.address(1), hosts.address(2)
    gate = tmp_path / "may-die"
    launcher = launch(
        cluster,
        ["--replace", "1", "-H", "{h0}:2,{h1}:2,{h2}:2", "-np", "4"],
        [str(WORKERS / "grow.py"), "replace", "2", "1"],
        env={"RINGCOMM_TIMEOUT": "20", "VICTIM_WAITS_FOR": str(gate)},
    )
    deadline = time.monotonic() + 60
    while not Path(f"{gate}.waiting").exists():  # every rank started; rank 2 about to die
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.stderr.read()
        time.sleep(0.05)
    with servers.stopped(1):
        gate.touch()  # rank 2 dies now; rank 3's session on h1 goes on
        out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, out[-3000:] + err[-3000:]
    assert f"process 4 (in place of rank 2) could not start on {h1} (status 255)" in err, err
    assert f"host {h1} counts as failed (status 255" in err, err
    assert f"process 5 on {h2} (local rank 0) replaces it (--replace)" in err, err
    results = results_of(out)
    assert [r["rank"] for r in results] == [0, 1, 2, 3], out + err[-3000:]
    assert {r["size"] for r in results} == {4}, results
    assert len({r["digest"] for r in results}) == 1 and len({r["step"] for r in results}) == 1
    (newcomer,) = [r for r in results if r["newcomer"]]
    members = [r for r in results if not r["newcomer"]]
    assert (newcomer["local_rank"], newcomer["local_size"]) == ("0", "1"), newcomer
    # Three hosts: h0 (ranks 0 and 1), h1 (rank 3, its session kept), h2 (the newcomer).
    assert len({r["namespace"] for r in members}) == 2, members
    assert newcomer["namespace"] not in {r["namespace"] for r in members}, results


def test_where_replacements_go():
    """ringcomm-run --replace's rule (_hostlist.Slots), without processes: h0:2,h1:2,h2:2 with
    -np 4 keeps h2's two slots spare."""

    def at(host, local_rank, local_size):
        return Placement(host, local_rank, local_size)

    slots = _hostlist.Slots([("h0", 2), ("h1", 2), ("h2", 2)], 4)
    assert slots.initial == [at("h0", 0, 2), at("h0", 1, 2), at("h1", 0, 2), at("h1", 1, 2)]
    # A rank lost on a host that still runs another: back to its own slot.
    assert slots.end([(at("h1", 0, 2), 137, True)]) == []
    assert slots.take(at("h1", 0, 2)) == at("h1", 0, 2)
    # Its replacement cannot start (ssh's 255): the host fails, the next goes to a spare.
    assert slots.end([(at("h1", 0, 2), 255, True)]) == ["h1"]
    assert slots.failed["h1"].startswith("status 255")
    assert slots.take(at("h1", 0, 2)) == at("h2", 0, 1)
    # A failed host gets nothing again, even its own rank's replacement; the spares fill up.
    assert slots.end([(at("h1", 1, 2), 1, True)]) == []
    assert slots.take(at("h1", 1, 2)) == at("h2", 1, 2)
    # Every rank of a host lost in one check: the host is avoided, but with no spare left its
    # own slots take its replacements back.
    assert slots.end([(at("h0", 0, 2), 137, False), (at("h0", 1, 2), 137, False)]) == ["h0"]
    assert "h0" in slots.avoided and "h0" not in slots.failed
    assert slots.take(at("h0", 1, 2)) == at("h0", 1, 2)
    assert slots.take(at("h0", 0, 2)) == at("h0", 0, 2)
    assert slots.take(at("h0", 0, 2)) is None  # every slot taken

    slots = _hostlist.Slots([("h0", 2), ("h1", 1), ("h2", 1), ("h3", 1)], 4)
    # This machine's 255 is the program's own status; a host whose processes ended well is
    # not avoided; a slot freed on a healthy host (its loss not replaced) is free to others.
    assert slots.end([(at("h0", 1, 2), 255, False)]) == []
    assert slots.end([(at("h2", 0, 1), 0, True)]) == []
    # A host whose only rank is lost is avoided while other hosts have free slots.
    assert slots.end([(at("h1", 0, 1), 137, True)]) == ["h1"]
    assert slots.avoided["h1"] == "no process of the job is left running there"
    assert slots.take(at("h1", 0, 1)) == at("h0", 1, 2)
    assert slots.take(at("h1", 0, 1)) == at("h2", 0, 1)
    assert slots.take(at("h1", 0, 1)) == at("h3", 0, 1)  # the spare
    assert slots.take(at("h1", 0, 1)) == at("h1", 0, 1)  # at last, its own
    assert slots.take(at("h1", 0, 1)) is None
    # An avoided host that then proves unreachable fails.
    assert slots.end([(at("h1", 0, 1), 255, True)]) == ["h1"]
    assert "h1" in slots.failed and "h1" not in slots.avoided
    assert slots.take(at("h1", 0, 1)) is None
