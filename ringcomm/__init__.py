"""ringcomm: collective communication for data-parallel training.

import ringcomm
comm = ringcomm.init()                      # under ringcomm-run, torchrun or mpirun
comm.allreduce(x)                           # in place, sum
comm.allreduce(x, op=ringcomm.MAX, algorithm="tree")
work = comm.allreduce(x, async_op=True); work.wait()
"""

import sys as _sys

from ringcomm._core import (
    CommunicatorClosed,
    MembershipError,
    MismatchError,
    PeerError,
    RingcommError,
    TimeoutError,
    TransportError,
)
from ringcomm._version import __version__
from ringcomm.communicator import Communicator, Work, init, join
from ringcomm.ops import ADASUM, AVG, MAX, MIN, PROD, SUM
from ringcomm.shared_arrays import empty, zeros

# torch.distributed backend "ringcomm": torch registers it through its entry point when it is
# imported after us; when torch came first, register it here.
if "torch" in _sys.modules:
    from ringcomm.c10d import register as _register_torch_backend

    _register_torch_backend()

__all__ = [
    "ADASUM",
    "AVG",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "Communicator",
    "Work",
    "init",
    "join",
    "RingcommError",
    "PeerError",
    "TimeoutError",
    "TransportError",
    "MismatchError",
    "CommunicatorClosed",
    "MembershipError",
    "empty",
    "zeros",
]
