"""Newcomers join a running communicator (Communicator.grow, ringcomm.join), and get their state
from a member.

argv: mode [victims] [newcomers]
  replace  the victims kill themselves (SIGKILL) in a stream of all-reduces; the survivors shrink,
           then grow(expect=newcomers) to admit the replacements, which the test starts with
           RINGCOMM_JOIN=1 (they find the members on the launcher's store)
  add      nobody fails: the members grow(expect=newcomers) after a few steps
  idle     nobody knocks: grow() must hand back the same communicator, at the cost of one
           all-reduce
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
            os.kill(os.getpid(), signal.SIGKILL)
        grads = np.full_like(weights, 1.0) * (1 + np.arange(weights.size) % 7)
        comm.allreduce(grads, op=ringcomm.AVG)
        weights -= 0.01 * grads
        step += 1
    return step


def share_state(comm, weights: np.ndarray, step: int) -> int:
    """Rank 0's weights and step to every rank: the newcomers' state, from a peer."""
    comm.broadcast(weights, root=0)
    counter = np.array([step], np.int64)
    comm.broadcast(counter, root=0)
    return int(counter[0])


weights = np.zeros(1 << 16, np.float32)
outcome = {}
joining = bool(os.environ.get("RINGCOMM_JOIN"))
comm = ringcomm.init()
if joining:
    outcome.update(newcomer=True, join_seconds=time.monotonic() - imported,
                   import_seconds=imported - started)
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
    if mode == "idle":
        began = time.monotonic()
        same = comm.grow()
        outcome.update(same=same is comm, grow_seconds=time.monotonic() - began)
    else:
        began = time.monotonic()
        comm = comm.grow(expect=newcomers)
        outcome["grow_seconds"] = time.monotonic() - began
        step = share_state(comm, weights, step)
step = train(comm, weights, STEPS_AFTER, step)
outcome.update(rank=comm.rank, size=comm.size, step=step,
               digest=hashlib.sha256(weights.tobytes()).hexdigest())
report(outcome)
comm.shutdown()
