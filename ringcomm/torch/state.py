"""The process-wide communicator behind ringcomm.torch, created by init()."""

from __future__ import annotations

from typing import Optional

import ringcomm

_comm: Optional[ringcomm.Communicator] = None


def init(comm: Optional[ringcomm.Communicator] = None, **kwargs) -> None:
    """Joins the job (ringcomm.init(**kwargs)), unless already initialized or ``comm`` is given."""
    global _comm
    if _comm is None:
        _comm = comm if comm is not None else ringcomm.init(**kwargs)


def shutdown() -> None:
    global _comm
    if _comm is not None:
        _comm.shutdown()
        _comm = None


def is_initialized() -> bool:
    return _comm is not None


def comm() -> ringcomm.Communicator:
    if _comm is None:
        raise ValueError(
            "ringcomm.torch has not been initialized; call ringcomm.torch.init() first"
        )
    return _comm
