"""The process-wide communicator and tensor queue behind ringcomm.torch, created by init().

Named operations (allreduce, allgather, broadcast, join, the optimizer's gradients) go through the
tensor queue: ranks may submit them in any order, and the queue's thread agrees with the other
ranks once per cycle on what is ready and fuses it (include/ringcomm/tensor_queue.h). The queue
runs on a communicator of its own, a duplicate of the main one, which serves everything else
(alltoall, reducescatter, barrier, the object helpers).
"""

from __future__ import annotations

import atexit
from typing import Optional

import ringcomm
from ringcomm import _core

_comm: Optional[ringcomm.Communicator] = None
_queue: Optional["_core.TensorQueue"] = None
_exit_hook_installed = False


def init(comm: Optional[ringcomm.Communicator] = None, **kwargs) -> None:
    """Joins the job (ringcomm.init(**kwargs)), unless already initialized or ``comm`` is given."""
    global _comm, _queue, _exit_hook_installed
    if _comm is not None:
        return
    created = comm if comm is not None else ringcomm.init(**kwargs)
    _queue = _core.TensorQueue.create(created._core.duplicate())
    _comm = created
    if not _exit_hook_installed:
        # Every rank's queue thread takes part in every cycle: one that exits without saying so
        # would leave the others to find out from a closed connection.
        atexit.register(shutdown)
        _exit_hook_installed = True


def shutdown() -> None:
    global _comm, _queue
    if _queue is not None:
        _queue.shutdown()
        _queue = None
    if _comm is not None:
        _comm.shutdown()
        _comm = None


def is_initialized() -> bool:
    return _comm is not None


def _not_initialized() -> ValueError:
    return ValueError("ringcomm.torch has not been initialized; call ringcomm.torch.init() first")


def comm() -> ringcomm.Communicator:
    if _comm is None:
        raise _not_initialized()
    return _comm


def queue() -> "_core.TensorQueue":
    if _queue is None:
        raise _not_initialized()
    return _queue
