"""ringcomm as a torch.distributed backend: ``dist.init_process_group("ringcomm")``.

The backend registers itself with torch.distributed in two ways: on ``import ringcomm`` and,
without any import in the user's script, through torch's ``torch.backends`` entry point (torch
calls :func:`autoload` while it imports). Registration is cheap; the C++ backend is compiled
against the installed torch the first time a process group is created (see ``_build``), and
linked to the same ``libringcomm`` as ``ringcomm._core``.

Under ``mpirun``, ``init_process_group("ringcomm")`` needs no RANK or MASTER_ADDR: see
``_mpi_rendezvous``.
"""

from __future__ import annotations

from datetime import timedelta

BACKEND_NAME = "ringcomm"


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    from ringcomm.c10d._build import extension

    return extension().RingcommBackend(store, rank, size, timeout)


def _devices() -> list:
    """The devices to register for: CUDA too when this torch was built with it. A compile-time
    fact: asking the driver here (torch.cuda.is_available()) would initialise CUDA while torch
    imports, and a process that later forks could no longer use it."""
    import torch

    return ["cpu", "cuda"] if torch.version.cuda is not None else ["cpu"]


def register() -> None:
    """Makes "ringcomm" a torch.distributed backend for CPU tensors, and for CUDA tensors when
    torch has CUDA (idempotent). CUDA tensors need a ringcomm built with CUDA."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=_devices())
    from ringcomm.c10d import _mpi_rendezvous

    _mpi_rendezvous.install()


def autoload() -> None:
    """torch's ``torch.backends`` entry point: runs while ``import torch`` finishes."""
    register()
