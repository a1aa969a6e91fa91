"""Survivors of a lost rank shrink the communicator and go on (Communicator.shrink).

argv: mode victims [store_port]
  kill      the victims kill themselves (SIGKILL) in the middle of a stream of 1 MiB all-reduces
  exit      the victims exit there instead (status 1, as a rank that fails with an error)
  during    the first victim is killed as above; the second kills itself SECOND_DEATH_MS (5)
            into the shrink: during the agreement, while the new communicator forms, or in the
            collectives after it (the survivors shrink again)
  exclude   nobody fails: every rank but the victims shrinks with exclude=victims, the victims
            exit after the stream
  split     nobody fails: the ranks split by parity of rank, numbered backwards (key = -rank)
  partition nobody fails: the ranks stream all-reduces until the test cuts the link between
            their hosts (they say when they stream: TEST_READY_DIR), then shrink
  squat     as kill, but another process holds each victim's mailbox port when it dies (the
            victim forks a child that keeps only the listening socket, as a helper process that
            inherited it would): the kernel accepts connections there, nobody proves the secret
            (issue 48); the child leaves once TEST_DONE exists
victims: comma-separated ranks. store_port: given, rank 0 serves the job's store itself
(env://, as under mpirun), so that a killed rank 0 takes the store with it.

Each survivor shrinks after every failure and goes on, as a training loop would; it reports each
shrink's time, its new rank and size, and a digest of what the last communicator's collectives
gave (every survivor must agree).
"""

import hashlib
import os
import signal
import socket
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

mode, victims = sys.argv[1], [int(v) for v in sys.argv[2].split(",") if v]
rank = int(os.environ.get("RINGCOMM_RANK", os.environ.get("RANK", "0")))
size = int(os.environ.get("RINGCOMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
if len(sys.argv) > 3:  # env://: rank 0 serves the store
    for variable in ("RINGCOMM_STORE", "RINGCOMM_RANK", "RINGCOMM_WORLD_SIZE"):
        os.environ.pop(variable)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3], RANK=str(rank), WORLD_SIZE=str(size)
    )

import ringcomm  # noqa: E402

comm = ringcomm.init()
rank = comm.rank  # under mpirun the launcher's variables say it: ringcomm.init() read them
outcome = {"rank": rank}
if mode == "split":
    part = comm.split(rank % 2, key=-rank)
    x = np.full(1000, rank, np.float64)
    part.allreduce(x)
    mine = [r for r in range(size) if r % 2 == rank % 2]
    outcome.update(rank_after=part.rank, size_after=part.size, sum=float(x[0]), members=mine)
    report(outcome)
    sys.exit(0)

x = np.ones(1 << 18, np.float32)
DELAY = float(os.environ.get("SECOND_DEATH_MS", "5")) / 1000


def checks(new) -> dict:
    """Every collective at once on the new communicator: values that depend on the old rank, so
    that a renumbering mistake shows."""
    digest = hashlib.sha256()
    y = np.arange(100003, dtype=np.float32) * (rank + 1)
    new.allreduce(y)
    digest.update(y.tobytes())
    gathered = new.allgather(np.full(3, rank, np.int64))
    digest.update(gathered.tobytes())
    z = np.full(7, rank, np.int32)
    new.broadcast(z, root=new.size - 1)
    digest.update(z.tobytes())
    new.barrier()
    survivors = sorted(int(r) for r in gathered[::3])
    expected = np.arange(100003, dtype=np.float32) * sum(r + 1 for r in survivors)
    return dict(
        rank_after=new.rank,
        size_after=new.size,
        survivors=survivors,
        exact=bool(np.array_equal(y, expected)),
        digest=digest.hexdigest(),
        broadcast_from=int(z[0]),
    )


def die_with_a_squatter() -> None:
    """Forks a child that keeps this rank's mailbox port listening (it closes every other
    descriptor: the data links must break as at a kill), then dies by SIGKILL."""
    mailbox_port = int(comm.address.rpartition(":")[2])
    done = os.environ["TEST_DONE"]
    if os.fork() == 0:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd <= 2:
                continue
            try:
                with socket.socket(fileno=os.dup(fd)) as probe:  # closes the copy only
                    keep = probe.getsockname()[1] == mailbox_port and probe.getsockopt(
                        socket.SOL_SOCKET, socket.SO_ACCEPTCONN
                    )
            except OSError:
                keep = False
            if not keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        deadline = time.monotonic() + 30
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(0)
    os.kill(os.getpid(), signal.SIGKILL)


# A training loop that survives: any failure, in the stream or in the checks after it, and the
# survivors shrink and go on. `shrinks` records each: when it started after the failure, and
# how long it took.
shrinks, failed_at, iteration, agreed_after = [], None, 0, 0
while True:
    try:
        if len(shrinks) > agreed_after and mode != "partition":
            # A failure can strike after some survivors' collective completed and before
            # others' did: they agree where the stream stands, as a training loop agrees on its
            # step, or every collective after would mismatch and shrink again, for ever.
            position = np.array([iteration], np.int64)
            comm.allreduce(position, op=ringcomm.MIN)
            iteration, agreed_after = int(position[0]), len(shrinks)
        if mode == "partition" and not shrinks:
            comm.allreduce(x)
            iteration += 1
            if iteration == 10:
                open(os.path.join(os.environ["TEST_READY_DIR"], str(rank)), "w").close()
            continue
        if iteration < 6:
            if rank in victims and iteration == 3 and mode == "exit":
                os._exit(1)
            if rank in victims and iteration == 3 and mode == "squat":
                die_with_a_squatter()
            if rank in victims and iteration == 3 and mode in ("kill", "during"):
                if mode == "kill" or rank == victims[0]:
                    os.kill(os.getpid(), signal.SIGKILL)
            if mode == "exclude" and iteration == 5 and not shrinks:
                raise StopIteration  # the victims leave here; the others drop them
            comm.allreduce(x)
            iteration += 1
            continue
        outcome.update(checks(comm))
        break
    except (ringcomm.RingcommError, StopIteration) as error:
        failed_at = time.monotonic()
        outcome.setdefault("errors", []).append(type(error).__name__)
        outcome.setdefault("failed_at", time.time())
    if mode == "exclude" and rank in victims:
        break  # leaves without shrinking
    if mode == "during" and rank in victims and not shrinks:
        # Dies while the survivors agree, or just after.
        threading.Timer(DELAY, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    started = time.monotonic()
    try:
        comm = comm.shrink(exclude=victims if mode == "exclude" else None)
    except ringcomm.RingcommError as error:
        outcome.update(shrink_error=type(error).__name__, message=str(error))
        break
    outcome["shrunk_at"] = time.time()  # wall clock: the test compares it with its own
    shrinks.append(
        {"seconds": time.monotonic() - started, "after_failure": time.monotonic() - failed_at}
    )
outcome["shrinks"] = shrinks
report(outcome)
if os.environ.get("EXIT_WITHOUT_FINALIZE"):
    # Under MPICH's mpirun, MPI_Finalize (mpi4py's, at exit) waits for the lost rank for ever.
    os._exit(0)
