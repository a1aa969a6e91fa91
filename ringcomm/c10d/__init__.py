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

import os
from datetime import timedelta

from ringcomm import _secret

BACKEND_NAME = "ringcomm"


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    from ringcomm import _core, _tuning
    from ringcomm.c10d._build import extension

    store = _per_attempt(store)
    secret, path = _job_secret(store, rank, size, timeout)
    # algorithm="auto" follows this host's tuning and link files, as under ringcomm.init().
    rules = _tuning.rules_for(_core.Config.from_environment(), size)
    latency, bandwidth = _tuning.load_link() or (0.0, 0.0)
    backend = extension().RingcommBackend(
        store, rank, size, timeout, secret, rules["shm"], rules["tcp"], latency, bandwidth
    )
    if path is not None:  # every rank of the group has met: the file has served its purpose
        _secret.remove_host_secret(path)
    return backend


def _per_attempt(store):
    """Under torchrun, a store of this attempt's own. torchrun's c10d rendezvous hands every
    attempt of the worker group (each restart) the same store, without a prefix of its own:
    the keys a restarted group meets under must differ from the failed attempt's, which are
    still there (its job key would name shared memory that is gone)."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None:
        return store
    import torch.distributed as dist

    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return dist.PrefixStore(f"ringcomm/run-{run}/attempt-{attempt}/", store)


def _job_secret(store, rank: int, size: int, timeout: timedelta):
    """(the secret the group's data links prove, the file rank 0 wrote or None).

    RINGCOMM_SECRET / RINGCOMM_SECRET_FILE when given (under mpirun the MPI rendezvous sets the
    former). Otherwise torch's store, which proves nothing, carries only the name of a file on
    this host that only this user can read; rank 0 writes a fresh secret there."""
    from ringcomm import _core

    given = _core.Config.from_environment().secret
    if given or size == 1:
        return given or _secret.new_secret(), None
    if rank == 0:
        name = f"c10d-{os.getpid()}-{_secret.new_secret()[:16].decode()}"
        path = _secret.host_file(name)
        secret = _secret.write_host_secret(path)
        store.set("ringcomm/secret-file", name)
        return secret, path
    name = store.get("ringcomm/secret-file").decode()
    return _secret.read_host_secret(_secret.host_file(name), timeout.total_seconds()), None


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
