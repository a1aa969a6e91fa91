"""One process of a chaos job (bench/chaos.py): trains a toy model through the core API under
``ringcomm-run --replace``, shrinking after every loss, admitting the launcher's replacements
with grow() and giving them the state, while deaths strike at the moments CHAOS_DIR's tokens
name.

A token is a file ``<n>-<moment>[-rank<r>]`` in CHAOS_DIR; the first process that reaches its
moment (as rank r of its communicator, where one is named) claims it by renaming it, and dies
(SIGKILL) there, or a few milliseconds into it for the moments that run a while:

    step<k>   before the all-reduce of step k
    shrink    during the survivors' agreement or the forming of their communicator
    grow      during the members' grow (agreement, forming)
    transfer  during the state's broadcast to newcomers
    joined    a replacement, right after it joined

Every process reports (RESULT line) its rank and size at the end, the steps, and a digest of the
weights; a side that lost its quorum reports that and exits 3.
"""

import hashlib
import json
import os
import random
import signal
import sys
import threading
import time

import numpy as np

import ringcomm

STEPS = int(os.environ.get("CHAOS_STEPS", "20"))
MOST_STEPS = STEPS + 400  # a bound on the wait for replacements, in steps
CHAOS_DIR = os.environ["CHAOS_DIR"]
joined = bool(os.environ.get("RINGCOMM_JOIN"))
jitter = random.Random(os.getpid())


def claim(moment: str, rank: int):
    """The token for `moment` this process may claim (renamed to mark it claimed), or None."""
    for name in sorted(os.listdir(CHAOS_DIR)):
        parts = name.split("-")
        if len(parts) < 2 or parts[1] != moment or parts[0] == "claimed":
            continue
        if len(parts) == 3 and parts[2] != f"rank{rank}":
            continue
        try:
            os.rename(
                os.path.join(CHAOS_DIR, name),
                os.path.join(CHAOS_DIR, f"claimed-{name}-by-{os.getpid()}"),
            )
        except OSError:
            continue  # another process claimed it first
        return name
    return None


def die_at(moment: str, rank: int, within_ms: int = 0) -> None:
    """Dies here if a token names this moment: at once, or within `within_ms` ms (a thread
    kills the process while the moment runs)."""
    if not claim(moment, rank):
        return
    if within_ms == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    delay = jitter.uniform(0, within_ms) / 1000
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()


def gradients(step: int, weights: np.ndarray) -> np.ndarray:
    return np.full_like(weights, 1.0) * ((step % 5) + 1) - 0.01 * weights


def share(comm, weights: np.ndarray, counters: np.ndarray) -> None:
    """Rank 0's weights and counters (step, replacements still expected) to every rank."""
    comm.broadcast(weights, root=0)
    comm.broadcast(counters, root=0)


def main() -> int:
    comm = ringcomm.init(timeout=30)
    weights = np.zeros(1 << 15, np.float32)
    counters = np.zeros(2, np.int64)  # step, replacements expected
    if joined:
        die_at("joined", comm.rank)
    # After a shrink or a grow (and in a newcomer, first): rank 0's state is everyone's. Inside
    # the loop, so that a death while it moves is one more failure to recover from.
    changed, shrinks, grows = joined, 0, 0
    while counters[0] < STEPS or (counters[1] > 0 and counters[0] < MOST_STEPS):
        try:
            if changed:
                die_at("transfer", comm.rank, within_ms=5)
                share(comm, weights, counters)
                changed = False
            die_at(f"step{counters[0]}", comm.rank)
            grads = gradients(int(counters[0]), weights)
            comm.allreduce(grads, op=ringcomm.AVG)
            weights -= 0.01 * grads
            counters[0] += 1
            if counters[1] > 0:
                die_at("grow", comm.rank, within_ms=20)
                before = comm.size
                try:
                    grown = comm.grow(expect=1, timeout=30)
                except ringcomm.TimeoutError:
                    counters[1] = 0  # no replacement came (every member gives up alike)
                    continue
                if grown is not comm:
                    former = grown._core.former_ranks
                    kept = sum(1 for r in former if r >= 0)
                    comm, changed = grown, True
                    grows += 1
                    counters[1] += (before - kept) - (len(former) - kept)
        except ringcomm.MembershipError as error:
            report(comm, weights, counters, shrinks, grows, quorum_lost=str(error))
            return 3
        except ringcomm.RingcommError:
            try:
                before = comm.size
                die_at("shrink", comm.rank, within_ms=20)
                comm = comm.shrink()
            except ringcomm.MembershipError as error:
                report(comm, weights, counters, shrinks, grows, quorum_lost=str(error))
                return 3
            shrinks += 1
            counters[1] += before - comm.size  # the launcher starts a replacement for each
            changed = True
    report(comm, weights, counters, shrinks, grows)
    comm.shutdown()
    return 0


def report(comm, weights, counters, shrinks, grows, quorum_lost=None) -> None:
    result = {
        "rank": comm.rank, "size": comm.size, "step": int(counters[0]),
        "expected": int(counters[1]), "newcomer": joined, "shrinks": shrinks, "grows": grows,
        "digest": hashlib.sha256(weights.tobytes()).hexdigest(), "ended": time.time(),
    }  # fmt: skip
    if quorum_lost:
        result["quorum_lost"] = quorum_lost
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
