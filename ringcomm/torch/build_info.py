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
    """Whether this build links MPI: always False. ``mpirun`` may still launch ringcomm, but MPI
    then only helps the ranks find each other."""
    return False


def mpi_enabled() -> bool:
    """Whether this job moves data through MPI: always False, as ringcomm never does."""
    return False


def mpi_threads_supported() -> bool:
    """Whether MPI supports multiple threads (Horovod, in a job that uses MPI). Always raises
    ValueError, as Horovod does in a job that does not: ringcomm moves no data through MPI."""
    raise ValueError(
        "Horovod MPI is not enabled: ringcomm moves data without MPI (mpirun may launch it, "
        "but MPI only helps the ranks find each other)"
    )


def gloo_built() -> bool:
    """Whether this build links Gloo: always False (ringcomm's collectives are its own)."""
    return False


def gloo_enabled() -> bool:
    """Whether this job runs its collectives over Gloo: always False."""
    return False


def nccl_built() -> int:
    """NCCL's version code, or 0 for a build without NCCL, as in Horovod: always 0 (ringcomm's
    collectives on CUDA tensors are its own)."""
    return 0


def ddl_built() -> bool:
    """Whether this build links IBM's DDL: always False."""
    return False


def ccl_built() -> bool:
    """Whether this build links oneCCL: always False."""
    return False


def cuda_built() -> bool:
    """Whether ringcomm was built with CUDA, and so runs collectives on CUDA tensors."""
    return _devices.built_with_cuda()


def rocm_built() -> bool:
    """Whether this build supports ROCm: always False."""
    return False
