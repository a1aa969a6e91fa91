"""Writes ringcomm/_core.pyi, the type stubs of the C++ core, from the built module's signatures
(pybind11-stubgen), so that editors and mypy see the core's API.

    python tools/stubs.py            # after a change to bindings/: regenerate, and commit it
    python tools/stubs.py --check    # 1 where the checked-in stubs differ (tests/test_typing.py),
                                     # 2 where other versions of the generator would make them

The core's exceptions are made at run time under the name ``ringcomm.X`` (bindings/errors.cc), so
the generator would import them from the package, which imports them from the core: a circle
that no checker resolves. They are written out here instead, with their bases. And DataType's
member ``bool`` hides the builtin inside that class: annotations say ``builtins.bool``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STUBS = REPO / "ringcomm" / "_core.pyi"
# Enums whose defaults appear in signatures as <ReduceOp.SUM: 0>.
ENUMS = ["ReduceOp", "JoinPolicy", "Compression"]
EXCEPTIONS = '''
class RingcommError(RuntimeError):
    """Base class of ringcomm's errors."""

class PeerError(RingcommError):
    """A collective failed because of a peer; see .peer, .rank, .operation, .elapsed."""

    peer: int
    rank: int
    operation: str
    elapsed: float

class TimeoutError(PeerError, builtins.TimeoutError):
    """A deadline passed while waiting for the peer named in the message."""

class TransportError(PeerError, ConnectionError):
    """A peer died, aborted or closed its connection."""

class MismatchError(PeerError):
    """Ranks called different collectives, or with different sizes or types."""

class CommunicatorClosed(RingcommError, ValueError):
    """The communicator was shut down or poisoned by an earlier failure."""

class MembershipError(RingcommError):
    """shrink() on a side that may not go on."""
'''


def made_with() -> str:
    """The versions that decide the stubs' text: pybind11 (the signatures it writes) and
    pybind11-stubgen. A build with others may differ without anything having changed."""
    from importlib.metadata import version

    generator = version("pybind11-stubgen")
    return f"# made with pybind11 {version('pybind11')}, pybind11-stubgen {generator}"


def recorded_with() -> str:
    """What the checked-in stubs say they were made with ("" if nothing)."""
    if not STUBS.exists():
        return ""
    return next(
        (line for line in STUBS.read_text().splitlines() if line.startswith("# made with")), ""
    )


def generate() -> str:
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "pybind11_stubgen", "ringcomm._core", "-o", out]
        for enum in ENUMS:
            command += ["--enum-class-locations", f"{enum}:ringcomm._core"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0 or "ERROR" in done.stderr:
            raise SystemExit(f"pybind11-stubgen failed:\n{done.stdout}{done.stderr}")
        text = (Path(out) / "ringcomm" / "_core.pyi").read_text()
    # DataType has a member named bool, which hides the builtin inside its class.
    text = re.sub(r"(->|:) bool\b", r"\1 builtins.bool", text)
    lines = [line for line in text.splitlines() if not line.startswith("from ringcomm import ")]
    first_class = next(i for i, line in enumerate(lines) if line.startswith("class "))
    lines[first_class:first_class] = EXCEPTIONS.strip("\n").splitlines() + [""]
    imports = next(i for i, line in enumerate(lines) if line.startswith("import "))
    lines.insert(imports, "import builtins")
    lines.insert(imports, made_with())
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    if args.check and recorded_with() != made_with():
        print(f"not compared: the stubs were {recorded_with()[2:]}; this is {made_with()[2:]}")
        return 2
    made = generate()
    if not args.check:
        STUBS.write_text(made)
        return 0
    kept = STUBS.read_text() if STUBS.exists() else ""
    if kept == made:
        return 0
    diff = difflib.unified_diff(
        kept.splitlines(), made.splitlines(), "checked in", "built", lineterm=""
    )
    print("\n".join(list(diff)[:80]))
    print("ringcomm/_core.pyi is out of date: run python tools/stubs.py and commit it")
    return 1


if __name__ == "__main__":
    sys.exit(main())
