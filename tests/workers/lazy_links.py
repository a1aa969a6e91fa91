"""TCP links made on first use (RINGCOMM_LINKS=on_first_use).
argv: any_source (rank 0 sends to the last rank, which receives from any source: the sender
dials) | crossing (ranks 0 and 1 send to each other first, both dialing at once) | aborted
(rank 1 aborts, then rank 0 sends to it) | ring (an all-reduce over the ring). Each rank
reports what it received and how many sockets it holds after the communicator was made and
after the exchange."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402


def sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


mode = sys.argv[1]
comm = ringcomm.init()
rank, size = comm.rank, comm.size
outcome = {"rank": rank, "sockets_at_start": sockets()}


def report_error_and_exit(action):
    """Runs `action`, reports the error it raised (its type and words) or none, and exits: the
    modes whose communicator fails on purpose end here."""
    try:
        action()
    except ringcomm.RingcommError as error:
        outcome["error"] = type(error).__name__
        outcome["message"] = str(error)
    report(outcome)
    sys.exit(0)


if mode == "any_source":
    if rank == 0:
        comm.send(np.full(1000, 7.0, np.float32), dest=size - 1, tag=5)
    elif rank == size - 1:
        got = np.zeros(1000, np.float32)
        comm.recv(got, source=-1, tag=5)
        outcome["received"] = float(got.sum())
elif mode == "crossing":
    if rank in (0, 1):
        other = 1 - rank
        got = np.zeros(100000, np.float32)
        work = comm.send(np.full(100000, rank + 1, np.float32), dest=other, async_op=True)
        comm.recv(got, source=other)
        work.wait()
        outcome["received"] = float(got[0])
elif mode == "no_descriptors":
    # Rank 0 runs out of descriptors (ulimit -n reached) before its first message to rank 1.
    if rank == 0:
        import resource

        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, hard))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass

    def exchange():
        if rank == 0:
            comm.send(np.ones(10, np.float32), dest=1)
        else:
            time.sleep(1.0)  # rank 0 dials first (a link this rank made would need no socket)
            comm.recv(np.zeros(10, np.float32), source=0)

    report_error_and_exit(exchange)
elif mode == "aborted":
    # Rank 1 aborts before any message; rank 0's first send then dials it.

    def abort_then_send():
        if rank == 1:
            comm.abort("the test's reason")
        time.sleep(0.5 if rank == 0 else 3.0)
        if rank == 0:
            comm.send(np.ones(10, np.float32), dest=1)

    report_error_and_exit(abort_then_send)
elif mode == "ring":
    x = np.full(4099, rank, np.float32)
    comm.allreduce(x)
    outcome["received"] = float(x[0])
outcome["sockets_after"] = sockets()
outcome["transports"] = [comm.transport_to(p) for p in range(size)]
comm.barrier() if mode != "ring" else None
comm.shutdown()
report(outcome)
