"""A loop of mixed collectives in which one rank fails at a random point; every other rank reports
the error it got and when (tests/test_fault_injection.py draws the faults).

argv: seed victim fault at_iteration delay_ms directory
  fault kill   the victim SIGKILLs itself delay_ms into collective number at_iteration (a timer
               thread fires while the collective runs, or between two)
        stop   the same with SIGSTOP: a late peer, alive but silent, until the launcher kills it
        exit   the victim leaves the loop before collective at_iteration and exits normally, its
               communicator never shut down (a script that returned early)
The victim writes the wall-clock time of its fault to <directory>/fault. Every rank writes its pid
to <directory>/pid.<rank> once connected. Survivors print RESULT with the error, then exit 1 as an
uncaught error would (the launcher then stops the rest after its grace period).
"""

import os
import signal
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

seed, victim, fault = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
at_iteration, delay = int(sys.argv[4]), float(sys.argv[5]) / 1000
directory = sys.argv[6]
comm = ringcomm.init()
rank, size = comm.rank, comm.size
with open(os.path.join(directory, f"pid.{rank}"), "w") as file:
    file.write(str(os.getpid()))


def strike() -> None:
    with open(os.path.join(directory, "fault"), "w") as file:
        file.write(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)


rng = np.random.default_rng(seed)  # the same collectives on every rank
outcome = {"rank": rank, "error": None, "iterations": 0}
try:
    for iteration in range(at_iteration + 100000):
        if rank == victim and iteration == at_iteration:
            if fault == "exit":
                with open(os.path.join(directory, "fault"), "w") as file:
                    file.write(repr(time.time()))
                sys.exit(0)
            threading.Timer(delay, strike).start()
        kind = int(rng.integers(6))
        count = int(rng.choice([0, 1, 7, 4099, 65537, 262147]))
        x = np.full(count * (size if kind in (3, 4) else 1), rank + 1, np.float32)
        if kind == 0:
            comm.allreduce(x)
        elif kind == 1:
            comm.allgather(x)
        elif kind == 2:
            comm.broadcast(x, root=int(rng.integers(size)))
        elif kind == 3:
            comm.reduce_scatter(x)
        elif kind == 4:
            comm.alltoall(x)
        else:
            comm.barrier()
        outcome["iterations"] = iteration + 1
except ringcomm.RingcommError as error:
    outcome.update(
        error=type(error).__name__,
        message=str(error),
        peer=getattr(error, "peer", None),
        at=time.time(),
    )
report(outcome)
sys.exit(1 if outcome["error"] else 0)
