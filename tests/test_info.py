"""python -m ringcomm info: what a bug report needs, read from the core, never the secret."""

import json
import os
import re
import socket
import subprocess
import sys

from harness import REPO, worker_env

from ringcomm import _core, _info

_SECRET = "do-not-print-this-secret"


def info(*args, env=None):
    done = subprocess.run(
        [sys.executable, "-m", "ringcomm", "info", *args],
        env=worker_env(env), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_json_report_says_where_each_setting_came_from():
    out = info(
        "--json",
        env={
            "RINGCOMM_TIMEOUT": "42",
            "HOROVOD_FUSION_THRESHOLD": "1234",
            "RINGCOMM_TYPO_VARIABLE": "1",
            "RINGCOMM_SECRET": _SECRET,
            "RINGCOMM_API_TOKEN": _SECRET,
        },
    )
    assert _SECRET not in out
    report = json.loads(out)
    rows = {row["name"]: row for row in report["configuration"]}
    assert (rows["RINGCOMM_TIMEOUT"]["value"], rows["RINGCOMM_TIMEOUT"]["source"]) == (
        "42", "environment",
    )  # fmt: skip
    fusion = rows["RINGCOMM_FUSION_THRESHOLD"]
    assert (fusion["value"], fusion["source"]) == ("1234", "HOROVOD_FUSION_THRESHOLD")
    assert rows["RINGCOMM_SEGMENT_BYTES"]["source"] == "default"
    assert rows["RINGCOMM_SECRET"]["value"] == "(set)"
    assert rows["RINGCOMM_TYPO_VARIABLE"]["read_by"].startswith("nothing")
    tuning = rows["RINGCOMM_TUNING_DIR"]  # conftest.py turns tuning files off for the suite
    assert (tuning["value"], tuning["source"]) == ("off", "environment")
    build = report["build"]
    assert build["reduce_kernels"] in ("avx2", "portable") and build["cuda"] in (True, False)
    assert build["cuda"] == _core.built_with_cuda()
    assert report["launch"]["launcher"] == "single" and report["launch"]["size"] == 1
    assert report["transports"]["shm"]["available"] in (True, False)
    assert any(i["name"] == "lo" for i in report["transports"]["interfaces"])
    assert isinstance(report["gpus"]["devices"], list)
    assert report["mps"]["running"] in (True, False)


def test_plain_report_shows_a_malformed_variable_and_goes_on():
    out = info(env={"RINGCOMM_SEGMENT_BYTES": "lots"})  # piped: plain text
    assert "## configuration" in out and "## build" in out and "## launch" in out
    line = next(line for line in out.splitlines() if line.startswith("RINGCOMM_SEGMENT_BYTES"))
    assert "INVALID" in line and "lots" in line


def test_every_variable_the_core_reads_is_described():
    source = (REPO / "src" / "common" / "config.cc").read_text()
    read = set(re.findall(r'"((?:RINGCOMM|HOROVOD)_[A-Z_]+)"', source))
    described = {row["name"] for row in _core.Config.describe_environment()}
    horovod = {"HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD"}
    assert read - horovod <= described


def test_launch_as_a_launcher_sets_it(monkeypatch):
    monkeypatch.setenv("RINGCOMM_RANK", "2")
    monkeypatch.setenv("RINGCOMM_WORLD_SIZE", "4")
    monkeypatch.setenv("RINGCOMM_LOCAL_RANK", "2")
    monkeypatch.setenv("RINGCOMM_STORE", "127.0.0.1:1234")
    launch = _info._launch()
    assert (launch["launcher"], launch["rank"], launch["size"], launch["local_rank"]) == (
        "ringcomm", 2, 4, 2,
    )  # fmt: skip
    assert launch["store"] == "127.0.0.1:1234"
    for name in ("RINGCOMM_RANK", "RINGCOMM_WORLD_SIZE", "RINGCOMM_LOCAL_RANK", "RINGCOMM_STORE"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "3")
    monkeypatch.setenv("MPI_LOCALRANKID", "1")
    launch = _info._launch()
    assert (launch["launcher"], launch["rank"], launch["size"], launch["local_rank"]) == (
        "mpi", 1, 3, 1,
    )  # fmt: skip


def test_rendering_survives_a_failed_probe():
    report = _info.collect()
    report["gpus"] = {"error": "RuntimeError: no driver"}
    text = _info.render_plain(report)
    assert "no driver" in text and "## configuration" in text


def test_tuning_directory(monkeypatch, tmp_path):
    """RINGCOMM_TUNING_DIR, else the XDG cache directory's ringcomm/; "off" reads no file."""

    def effective():
        rows = {row["name"]: row for row in _core.Config.describe_environment()}
        return _core.Config.from_environment().tuning_directory, rows["RINGCOMM_TUNING_DIR"]

    monkeypatch.delenv("RINGCOMM_TUNING_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    directory, row = effective()
    assert directory == row["value"] == f"{tmp_path}/ringcomm" and row["source"] == "default"
    monkeypatch.setenv("RINGCOMM_TUNING_DIR", str(tmp_path / "mine"))
    assert effective()[0] == str(tmp_path / "mine")
    monkeypatch.setenv("RINGCOMM_TUNING_DIR", "off")
    directory, row = effective()
    assert directory == "" and row["value"] == "off"


def test_mps_is_seen_running_by_its_control_endpoint(tmp_path):
    # The MPS control daemon's endpoint is a socket (driver 580) or a named pipe (older drivers);
    # a socket must accept connections, since a daemon that quit leaves its file behind.
    assert not _core.mps_running(str(tmp_path))
    (tmp_path / "control").write_text("a plain file is no daemon")
    assert not _core.mps_running(str(tmp_path))
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")
    assert _core.mps_running(str(tmp_path))
    (tmp_path / "control").unlink()
    # A socket of each type (driver 580's refuses stream connections: EPROTOTYPE).
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET, socket.SOCK_DGRAM):
        (tmp_path / "control").unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX, kind) as endpoint:
            endpoint.bind(str(tmp_path / "control"))
            if kind != socket.SOCK_DGRAM:
                # A socket nobody accepts on: what a daemon that quit leaves behind.
                assert not _core.mps_running(str(tmp_path)), kind
                endpoint.listen()
            assert _core.mps_running(str(tmp_path)), kind
            if kind != socket.SOCK_DGRAM:
                # Asking sent the daemon nothing but a connection that closed.
                client, _ = endpoint.accept()
                with client:
                    assert client.recv(16) == b"", kind
        assert not _core.mps_running(str(tmp_path)), kind  # closed, the file still there


def test_busy_cores_is_auto_by_default_and_its_error_is_its_own():
    rows = {row["name"]: row for row in _core.Config.describe_environment()}
    assert rows["RINGCOMM_SHM_CMA_BUSY_CORES"]["value"] == "auto"
    out = info(env={"RINGCOMM_SHM_CMA_BUSY_CORES": "many"})
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("RINGCOMM_SHM")}
    assert "INVALID" in lines["RINGCOMM_SHM_CMA_BUSY_CORES"]
    assert "auto or a non-negative number" in lines["RINGCOMM_SHM_CMA_BUSY_CORES"]
    assert "INVALID" not in lines["RINGCOMM_SHM_CMA"]  # a prefix of the variable's name
