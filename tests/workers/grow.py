"""Newcomers join a running communicator (Communicator.grow, ringcomm.join), and get their state
from a member.

argv: mode [victims] [newcomers]
  replace  the victims kill themselves (SIGKILL) in a stream of all-reduces; the survivors shrink,
           then grow(expect=newcomers) to admit the replacements, which the test starts with
           RINGCOMM_JOIN=1 (they find the members on the launcher's store)
  add      nobody fails: the members grow(expect=newcomers) after a few steps
  idle     nobody knocks: grow() must hand back the same communicator, at the cost of one
           all-reduce
  stranger the newcomer holds another secret and knocks at rank 0's address (TEST_DIR): it
           must be refused at once, the members' log must name it, and the members, calling
           grow() every step meanwhile, go on unchanged
  misuse   no newcomer: grow() on a closed communicator, two grows at once, bad arguments
VICTIM_WAITS_FOR: a victim waits for that file before it dies (wait_for_leave).
Members train a toy model (weights updated by an averaged all-reduce each step); after a grow,
rank 0 broadcasts the weights and the step to the newcomers, and everyone trains on. Each reports
its rank and size after, how long the shrink and the grow took, and a digest of the weights (all
must agree).
"""

import hashlib
import os
import signal
import sys
import time

started = time.monotonic()  # the newcomer's first line of user code

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

imported = time.monotonic()
mode = sys.argv[1]
victims = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if v]
newcomers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
STEPS_BEFORE, STEPS_AFTER = 5, 5


def train(comm, weights: np.ndarray, steps: int, step: int, kill_at=None) -> int:
    for _ in range(steps):
        if kill_at is not None and step == kill_at:
            wait_for_leave()
            if os.environ.get("VICTIM_EXITS"):  # under mpirun, whose hydra ends a host's ranks
                os._exit(1)  # when one is killed by a signal (docs/guides/recovery.md)
            os.kill(os.getpid(), signal.SIGKILL)
        grads = np.full_like(weights, 1.0) * (1 + np.arange(weights.size) % 7)
        comm.allreduce(grads, op=ringcomm.AVG)
        weights -= 0.01 * grads
        step += 1
    return step


def wait_for_leave() -> None:
    """Where VICTIM_WAITS_FOR names a file: says it is about to die (that name + ".waiting"), and
    waits for the test to make the file (the test changes the world first: stops a host's sshd)."""
    gate = os.environ.get("VICTIM_WAITS_FOR")
    if not gate:
        return
    open(gate + ".waiting", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.02)


def share_state(comm, weights: np.ndarray, step: int) -> int:
    """Rank 0's weights and step to every rank: the newcomers' state, from a peer."""
    comm.broadcast(weights, root=0)
    counter = np.array([step], np.int64)
    comm.broadcast(counter, root=0)
    return int(counter[0])


def stranger() -> None:
    """A newcomer with another secret knocks at rank 0's address."""
    address_file = os.path.join(os.environ["TEST_DIR"], "address")
    while not os.path.exists(address_file):
        time.sleep(0.02)
    with open(address_file) as f:
        address = f.read()
    began = time.monotonic()
    try:
        ringcomm.join(address=address, timeout=10)
        outcome = {"joined": True}
    except ringcomm.RingcommError as error:
        outcome = {"joined": False, "error": type(error).__name__, "message": str(error)}
    outcome["seconds"] = time.monotonic() - began
    open(os.path.join(os.environ["TEST_DIR"], "stranger_done"), "w").close()
    report(outcome)


def misuse(comm) -> dict:
    """What grow() says to a caller's mistakes: each error's type and message."""
    import threading

    said = {}

    def attempt(name, call):
        try:
            call()
            said[name] = "no error"
        except (ringcomm.RingcommError, ValueError, TypeError) as error:
            said[name] = f"{type(error).__name__}: {error}"

    attempt("negative expect", lambda: comm.grow(expect=-1))
    attempt("expect not a count", lambda: comm.grow(expect=1.5))
    # Two grows at once on one rank: the second is refused while the first waits.
    first = threading.Thread(target=attempt, args=("first grow", lambda: comm.grow(1, 1.0)))
    first.start()
    time.sleep(0.3)
    attempt("second grow", lambda: comm.grow())
    first.join()
    comm.barrier()
    closed = comm.split(0)
    closed.abort("the test closes it")
    attempt("closed", lambda: closed.grow())
    os.environ.pop("RINGCOMM_STORE")  # no board to find the members on either
    attempt("join without a way", lambda: ringcomm.join(address=[]))
    attempt("join a bad address", lambda: ringcomm.join(address="no-port-here"))
    return said


if mode == "stranger" and os.environ.get("RINGCOMM_JOIN"):
    stranger()
    sys.exit(0)

weights = np.zeros(1 << 16, np.float32)
outcome = {}
joining = bool(os.environ.get("RINGCOMM_JOIN"))
comm = ringcomm.init()
if joining:
    outcome.update(
        newcomer=True, join_seconds=time.monotonic() - imported, import_seconds=imported - started
    )
    step = share_state(comm, weights, 0)
else:
    outcome.update(newcomer=False, rank_before=comm.rank)
    old = comm
    step = 0
    try:
        kill_at = 3 if comm.rank in victims else None
        step = train(comm, weights, STEPS_BEFORE, step, kill_at)
        if mode == "replace":  # the survivors wait in a collective for the victims' loss
            comm.barrier()
    except ringcomm.RingcommError:
        began = time.monotonic()
        comm = comm.shrink()
        outcome["shrink_seconds"] = time.monotonic() - began
        # The survivors may have stopped at different steps: rank 0's state is everyone's.
        step = share_state(comm, weights, step)
    if mode == "stranger":
        if comm.rank == 0:
            with open(os.path.join(os.environ["TEST_DIR"], "address.tmp"), "w") as f:
                f.write(comm.address)
            os.rename(
                os.path.join(os.environ["TEST_DIR"], "address.tmp"),
                os.path.join(os.environ["TEST_DIR"], "address"),
            )
        done = os.path.join(os.environ["TEST_DIR"], "stranger_done")
        deadline = time.monotonic() + 30
        while True:  # a training loop that admits newcomers every step
            seen = np.array([os.path.exists(done)], np.int32)
            comm.allreduce(seen, op=ringcomm.MIN)
            if seen[0] or time.monotonic() > deadline:
                break
            assert comm.grow() is comm
            step = train(comm, weights, 1, step)
        outcome["same"] = comm.grow() is comm
    elif mode == "misuse":
        outcome["said"] = misuse(comm)
    elif mode == "idle":
        began = time.monotonic()
        same = comm.grow()
        outcome.update(same=same is comm, grow_seconds=time.monotonic() - began)
    else:
        began = time.monotonic()
        comm = comm.grow(expect=newcomers)
        outcome["grow_seconds"] = time.monotonic() - began
        step = share_state(comm, weights, step)
step = train(comm, weights, STEPS_AFTER, step)
outcome.update(
    rank=comm.rank, size=comm.size, step=step, digest=hashlib.sha256(weights.tobytes()).hexdigest()
)
# Where it ran: its network namespace (a host, in the tests across namespace hosts) and what
# the launcher said of its place there.
outcome.update(
    namespace=os.readlink("/proc/self/ns/net"),
    local_rank=os.environ.get("RINGCOMM_LOCAL_RANK"),
    local_size=os.environ.get("RINGCOMM_LOCAL_WORLD_SIZE"),
)
report(outcome)
comm.shutdown()
if os.environ.get("EXIT_WITHOUT_FINALIZE"):
    # Under MPICH's mpirun, MPI_Finalize (mpi4py's, at exit) waits for the lost rank for ever.
    os._exit(0)
