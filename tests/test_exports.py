"""The installed libringcomm.so exports ringcomm's API and nothing else.

Everything else, the core's internals and above all any std:: symbol, stays inside: a library
that exports std:: symbols (a copy of libstdc++ linked in statically, or std:: templates it
instantiated) can take them over from the libstdc++ that torch and numpy load, or have its own
taken over, and two copies of libstdc++'s locale and iostream state then mix (CMakeLists.txt,
docs/guides/building.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest

from ringcomm import _core

PACKAGE = Path(_core.__file__).resolve().parent
LIBRARY = PACKAGE / "libringcomm.so"
# What a C++ user of include/ringcomm (the Python module, the torch backend) links against.
OWN_NAME = re.compile(r"^(ringcomm::|(typeinfo|typeinfo name|vtable) for ringcomm::)")
# The errors the bindings and the torch backend catch by type, and the classes they derive from.
MUST_EXPORT_TYPEINFO = [
    "Error",
    "InvalidArgument",
    "PeerError",
    "TransportError",
    "TimeoutError",
    "MismatchError",
    "CommunicatorClosed",
    "Store",
    "Communicator",
]


def exported(path: Path) -> List[str]:
    """Demangled names of the dynamic symbols the file defines."""
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("nm (binutils) not installed")
    done = subprocess.run(
        [nm, "-D", "--defined-only", "--demangle", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    # "<address> <type> <name>"; the name may contain spaces.
    return [line.split(" ", 2)[2] for line in done.stdout.splitlines() if line.count(" ") >= 2]


def test_library_exports_only_ringcomm_api():
    symbols = exported(LIBRARY)
    foreign = [name for name in symbols if not OWN_NAME.match(name)]
    assert not foreign, f"{len(foreign)} exported symbols are not ringcomm's: {foreign[:40]}"
    standard = [name for name in symbols if "std::" in name.split("(")[0]]
    assert not standard, standard[:40]
    for entry in ["ringcomm::Communicator::create(", "ringcomm::Config::fromEnvironment()"]:
        assert any(name.startswith(entry) for name in symbols), entry
    missing = [
        name for name in MUST_EXPORT_TYPEINFO if f"typeinfo for ringcomm::{name}" not in symbols
    ]
    assert not missing, f"typeinfo not exported, so a catch outside the library may miss: {missing}"
