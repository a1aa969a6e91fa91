"""Compiles the C++ backend against the torch this process imported, once per torch build.

The extension's name carries a hash of the torch version and of every source and header it is
built from, so a different torch (or a changed ringcomm) gets a build of its own instead of a
module with undefined symbols. torch's cpp_extension does the compiling, with its own lock, so
ranks starting together build it once and the others wait for it. ``python -m ringcomm.c10d``
builds it ahead of time and shows the compiler's output.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path
from typing import Optional

# Parsing torch's headers takes most of each file's compile time (15-30 s on a 2-core VM): the
# backend's files compile as one translation unit (_UNITY, generated in the build directory),
# beside module.cc, which brings in torch's Python headers as well. Two units on two cores: about
# 35 s on that VM, where the five files apart took 70.
_UNITY = (
    "backend.cc",
    "reductions.cc",
    "data_movement.cc",
    "point_to_point.cc",
    "growth.cc",
    "sparse.cc",
    "tensors.cc",
    "work.cc",
)
_PYTHON_MODULE = "module.cc"


def _unity_source(source_dir: Path, build_dir: Path) -> Path:
    """The file that includes the backend's sources, written only when it changes (ninja
    would rebuild it otherwise)."""
    unity = build_dir / "backend_unity.cc"
    text = "".join(f'#include "{source_dir / name}"\n' for name in _UNITY)
    if not unity.exists() or unity.read_text() != text:
        unity.write_text(text)
    return unity


def _core_dir() -> Path:
    """Where libringcomm.so and its public headers were installed (beside ringcomm._core)."""
    from ringcomm import _core

    return Path(_core.__file__).resolve().parent


def _build_key(torch_module) -> str:
    digest = hashlib.sha256()
    digest.update(torch_module.__version__.encode())
    digest.update(str(torch_module.version.git_version).encode())
    digest.update(str(_core_dir()).encode())
    # This file too: it holds the compiler and linker flags.
    digest.update(Path(__file__).read_bytes())
    source_dir = Path(__file__).resolve().parent / "csrc"
    header_dir = _core_dir() / "include" / "ringcomm"
    for path in sorted(source_dir.glob("*")) + sorted(header_dir.glob("*.h")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def built_module(torch_module) -> Optional[Path]:
    """The backend already compiled for ``torch_module`` (the imported torch), or None; builds
    nothing (``python -m ringcomm info`` asks)."""
    from torch.utils import cpp_extension

    name = f"ringcomm_c10d_{_build_key(torch_module)}"
    build_dir = Path(cpp_extension.get_default_build_root()) / name
    return next(iter(sorted(build_dir.glob(f"{name}*.so"))), None)


@functools.lru_cache(maxsize=None)
def extension(verbose: bool = False):
    """The compiled backend module (builds it on first use for this torch)."""
    import torch
    from torch.utils import cpp_extension

    core_dir = _core_dir()
    library = core_dir / "libringcomm.so"
    if not library.exists():
        raise RuntimeError(f"ringcomm: {library} is missing; reinstall ringcomm (pip install .)")
    source_dir = Path(__file__).resolve().parent / "csrc"
    name = f"ringcomm_c10d_{_build_key(torch)}"
    build_dir = Path(cpp_extension.get_default_build_root()) / name
    build_dir.mkdir(parents=True, exist_ok=True)
    loaded = _load_built(name, build_dir)
    if loaded is not None:
        return loaded
    if not any(build_dir.glob(f"{name}*.so")):
        print(
            f"ringcomm: compiling the torch.distributed backend against torch {torch.__version__} "
            f"in {build_dir} (once per torch version; about half a minute)",
            file=sys.stderr,
            flush=True,
        )
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(_unity_source(source_dir, build_dir)), str(source_dir / _PYTHON_MODULE)],
            extra_include_paths=[str(core_dir / "include"), str(source_dir)],
            extra_cflags=["-O2"],
            # For a compiler that links libstdc++ and libgcc statically (as libringcomm's build
            # does, cmake/runtime_libraries.cmake): --exclude-libs keeps this module's copy of
            # libstdc++ from interposing on the one torch loads, and libgcc_s gives it the
            # process's one unwinder, which the errors libringcomm throws at it need.
            extra_ldflags=[
                f"-L{core_dir}",
                "-lringcomm",
                f"-Wl,-rpath,{core_dir}",
                "-Wl,--exclude-libs,ALL",
                "-Wl,--push-state,--no-as-needed,-lgcc_s,--pop-state",
            ],
            build_directory=str(build_dir),
            verbose=verbose,
        )
    except Exception as error:
        raise RuntimeError(
            f"ringcomm: could not build the torch.distributed backend against torch "
            f"{torch.__version__} ({error}). It needs a C++17 compiler and ninja "
            "(pip install ninja); run `python -m ringcomm.c10d` to see the compiler's output."
        ) from error


def _load_built(name: str, build_dir: Path):
    """The module built already, imported as it is, or None. Its name hashes torch's version and
    every source and header it is built from, so a build of that name is this one: asking ninja
    (cpp_extension.load) only costs each process a second, which a replacement that joins a
    running job (ringcomm.c10d.join_process_group) spends while every member waits. Not while
    another process builds it (torch's lock file is there), nor where it cannot be imported."""
    import importlib.util

    built = next(iter(sorted(build_dir.glob(f"{name}*.so"))), None)
    if built is None or (build_dir / "lock").exists():
        return None
    try:
        spec = importlib.util.spec_from_file_location(name, built)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        return module
    except ImportError:
        return None


def main() -> None:
    module = extension(verbose=True)
    print(f"ringcomm: torch.distributed backend ready: {module.__file__}")
