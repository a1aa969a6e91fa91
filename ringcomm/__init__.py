"""ringcomm: collective communication for data-parallel training.

import ringcomm
comm = ringcomm.init()                      # under ringcomm-run, torchrun or mpirun
comm.allreduce(x)                           # in place, sum
comm.allreduce(x, op=ringcomm.MAX, algorithm="tree")
work = comm.allreduce(x, async_op=True); work.wait()
"""

from ringcomm._core import (
    CommunicatorClosed,
    MismatchError,
    PeerError,
    RingcommError,
    TimeoutError,
    TransportError,
)
from ringcomm.communicator import Communicator, Work, init
from ringcomm.ops import AVG, MAX, MIN, PROD, SUM

__version__ = "0.1.0"

__all__ = [
    "AVG",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "Communicator",
    "Work",
    "init",
    "RingcommError",
    "PeerError",
    "TimeoutError",
    "TransportError",
    "MismatchError",
    "CommunicatorClosed",
]
