"""The core's layers hold by the build (cmake/check_layers.cmake): a file includes headers of its
own layer and the layers below it only. The check runs as a step of every build; here it runs
alone, on the tree as it is and on a copy where one file reaches upward."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "cmake" / "check_layers.cmake"


def check(source_dir: Path) -> subprocess.CompletedProcess:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not installed")
    return subprocess.run(
        [cmake, f"-DSOURCE_DIR={source_dir}", "-P", str(CHECK)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_layer_includes_one_above_it():
    done = check(REPO)
    assert done.returncode == 0, done.stderr


def test_an_upward_include_fails_naming_the_file_and_both_layers(tmp_path):
    shutil.copytree(REPO / "src", tmp_path / "src")
    floor = tmp_path / "src" / "common" / "log.cc"
    floor.write_text('#include "engine/engine.h"\n' + floor.read_text())
    done = check(tmp_path)
    assert done.returncode != 0
    assert "src/common/log.cc" in done.stderr, done.stderr
    assert "layer 'common' includes 'engine', which is above it" in done.stderr, done.stderr


def test_the_build_runs_the_check():
    cmakelists = (REPO / "CMakeLists.txt").read_text()
    assert "cmake/check_layers.cmake" in cmakelists
    assert "add_dependencies(ringcomm_objects ringcomm_layers)" in cmakelists
