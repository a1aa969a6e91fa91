"""What this build of ringcomm has, under Horovod's names (``hvd.nccl_built()`` ...).

Scripts ask these to choose code paths (e.g. a learning rate scaled by the local size when
``nccl_built()``), so they answer truthfully for ringcomm: its collectives are its own, over TCP
and shared memory (and CUDA when built with it); it links neither MPI, Gloo, NCCL, oneCCL nor
DDL. ``mpirun`` can still launch it: MPI then serves only to find the other ranks (through
mpi4py), never to move data.
"""

from __future__ import annotations

from ringcomm import _devices


def mpi_built() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def mpi_threads_supported() -> bool:
    # Horovod raises this for a job that does not use MPI.
    raise ValueError(
        "Horovod MPI is not enabled: ringcomm moves data without MPI (mpirun may launch it, "
        "but MPI only helps the ranks find each other)"
    )


def gloo_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def nccl_built() -> int:
    # Horovod returns NCCL's version code, or 0 without NCCL.
    return 0


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    return _devices.built_with_cuda()


def rocm_built() -> bool:
    return False
