"""A job in which one rank misbehaves; every other rank reports the error it got and when.

argv: mode victim
  kill      the victim kills itself (SIGKILL) in the middle of a stream of 4 MiB all-reduces
  idlekill  the victim kills itself between two all-reduces, which the others start 0.5 s later
  late      the victim arrives long after the others' rendezvous timeout
  stall     the victim stops calling collectives after the first few
  mismatch  the victim calls all-reduce with a different element count
  none      nobody misbehaves: the test breaks something from outside (a network link)
  root      the victim broadcasts from another root than everyone else
  splitroot the upper half of the ranks broadcasts 8 floats from its first rank, the lower half
            from rank 0 (each root has receivers that agree with it); the victim is unused
  bcount    the victim broadcasts 1000 elements where the others broadcast the whole vector
  dtype     the victim reduces int32 where the others reduce float32 (same byte count)
  allgather the victim all-gathers where the others all-reduce
  scatter   the victim (the root) scatters where the others gather
  tree      the victim's all-reduce runs the tree schedule, the others' the ring
  fp16      the victim compresses its all-reduce to fp16, the others do not
  longer    the victim's all-reduce has one element more, beyond the first 512 KiB rounds
  p2p       rank 0 sends int32 to the victim, which receives float32 of the same byte length
"""

import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

mode, victim = sys.argv[1], int(sys.argv[2])
rank = int(os.environ.get("RINGCOMM_RANK", os.environ.get("RANK", "0")))
timeout = float(os.environ.get("RINGCOMM_TIMEOUT", "5"))

# A late or stalled victim stays away 3 s past the others' timeout: they must have given up on it
# by then, naming it, while it was alive.
AWAY = timeout + 3.0

if mode == "late" and rank == victim:
    time.sleep(AWAY)
    sys.exit(0)

started = time.monotonic()
outcome = {"rank": rank, "error": None}


def size_of(communicator) -> int:
    return communicator.size


try:
    comm = ringcomm.init()
    x = np.ones(1 << 20, np.float32)
    for iteration in range(100000 if mode == "none" else 1000):
        if rank == victim and iteration == 3:
            if mode in ("kill", "idlekill"):
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "stall":
                time.sleep(AWAY)
                sys.exit(0)
            if mode == "mismatch":
                x = np.ones((1 << 20) + 1, np.float32)
        if mode == "idlekill" and iteration == 3:
            time.sleep(0.5)  # the victim is dead (a zombie, where the test leaves it unreaped)
        if mode == "none" and iteration == 10 and os.environ.get("TEST_READY_DIR"):
            # Connected and streaming: the test may break the link now.
            open(os.path.join(os.environ["TEST_READY_DIR"], str(rank)), "w").close()
        failed_at = time.monotonic()
        odd = rank == victim and iteration == 3
        if mode == "allgather" and odd:
            comm.allgather(x)
            continue
        if mode == "scatter" and iteration == 3:
            # Root 0 in both: the victim (rank 0) scatters, the others gather.
            if rank == victim:
                comm.scatter(
                    np.ones(size_of(comm) * 1024, np.float32),
                    out=np.empty(1024, np.float32),
                    root=0,
                )
            else:
                comm.gather(np.ones(1024, np.float32), root=0)
            continue
        if mode in ("tree", "fp16", "longer") and iteration == 3:
            y = np.ones((1 << 20) + (1 if mode == "longer" and odd else 0), np.float32)
            if mode == "tree":
                comm.allreduce(y, algorithm="tree" if odd else "ring")
            elif mode == "fp16":
                comm.allreduce(y, algorithm="ring", compression="fp16" if odd else None)
            else:
                comm.allreduce(y, algorithm="direct")
            continue
        if mode == "p2p" and iteration == 3:
            if rank == 0:
                comm.send(np.arange(256, dtype=np.int32), dest=victim)
            elif rank == victim:
                comm.recv(np.empty(256, np.float32), source=0)
            continue
        if mode == "bcount" and iteration == 3:
            comm.broadcast(x[:1000] if odd else x, root=0)
            continue
        if mode == "splitroot" and iteration == 3:
            half = size_of(comm) // 2
            comm.broadcast(np.full(8, rank, np.float32), root=half if rank >= half else 0)
            continue
        if mode == "root":
            comm.broadcast(x, root=1 if rank == victim and iteration == 3 else 0)
        elif mode == "dtype" and rank == victim and iteration == 3:
            comm.allreduce(x.view(np.int32))
        else:
            comm.allreduce(x, name="weights")
    outcome["completed"] = True
except Exception as error:  # report whatever surfaced, the test judges it
    outcome.update(
        error=type(error).__name__,
        message=str(error),
        peer=getattr(error, "peer", None),
        waited=time.monotonic() - failed_at if "failed_at" in dir() else None,
        since_start=time.monotonic() - started,
        iteration=iteration if "iteration" in dir() else None,
    )
    # After a failure the communicator is poisoned: the next call must fail at once.
    if "comm" in dir():
        try:
            comm.allreduce(np.ones(4, np.float32))
            outcome["after"] = "no error"
        except Exception as after:
            outcome["after"] = type(after).__name__
report(outcome)
