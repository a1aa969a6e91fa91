"""The core's layers hold by the build (cmake/check_layers.cmake): a file includes headers of its
own layer and the layers below it only, the public headers (include/ringcomm/) among them, each of
which belongs to a layer too. The check runs as a step of every build; here it runs alone, on the
tree as it is and on copies where one file reaches upward."""

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


def copy_tree(to: Path) -> None:
    shutil.copytree(REPO / "src", to / "src")
    shutil.copytree(REPO / "include", to / "include")


def test_an_upward_include_fails_naming_the_file_and_both_layers(tmp_path):
    copy_tree(tmp_path)
    floor = tmp_path / "src" / "common" / "log.cc"
    floor.write_text('#include "engine/engine.h"\n' + floor.read_text())
    done = check(tmp_path)
    assert done.returncode != 0
    assert "src/common/log.cc" in done.stderr, done.stderr
    assert "layer 'common' includes 'engine', which is above it" in done.stderr, done.stderr


def test_a_public_header_of_a_layer_above_fails_like_a_private_one(tmp_path):
    copy_tree(tmp_path)
    engine = tmp_path / "src" / "engine" / "engine.cc"
    engine.write_text('#include "ringcomm/communicator.h"\n' + engine.read_text())
    done = check(tmp_path)
    assert done.returncode != 0
    assert "src/engine/engine.cc" in done.stderr, done.stderr
    expected = "layer 'engine' includes 'ringcomm/communicator.h' (layer 'core'), which is above it"
    assert expected in done.stderr, done.stderr


def test_public_headers_include_only_their_layer_and_below(tmp_path):
    copy_tree(tmp_path)
    types = tmp_path / "include" / "ringcomm" / "types.h"
    types.write_text('#include "ringcomm/work.h"\n' + types.read_text())
    done = check(tmp_path)
    assert done.returncode != 0
    expected = "layer 'common' includes 'ringcomm/work.h' (layer 'engine'), which is above it"
    assert "include/ringcomm/types.h" in done.stderr and expected in done.stderr, done.stderr


def test_a_public_header_without_a_layer_fails(tmp_path):
    copy_tree(tmp_path)
    (tmp_path / "include" / "ringcomm" / "extra.h").write_text("#pragma once\n")
    done = check(tmp_path)
    assert done.returncode != 0
    assert "include/ringcomm/extra.h: a public header with no layer" in done.stderr, done.stderr


def test_the_build_runs_the_check():
    cmakelists = (REPO / "CMakeLists.txt").read_text()
    assert "cmake/check_layers.cmake" in cmakelists
    assert "add_dependencies(ringcomm_objects ringcomm_layers)" in cmakelists
