"""When work.wait() returns, the Work's Future is complete: gloo's order, which torchft relies on.

Each round starts an operation, chains a callback on its Future and waits for the Work. After
wait() the Future must be done, hold the operation's value (or its error), and have run the
callback. Checked alone, that is a race the wrong order loses only now and then; the callback
makes it certain. It runs while the Future completes, on the thread that completes it, and asks
whether the Work has completed yet: that is what wakes wait(), so it must not have. Only a
callback chained before the operation completed can tell (one chained later runs at once, on this
thread), so one rank of each round chains its callback before the other starts its part, which
it waits for in torch's store.

Argument: rounds per operation. Two ranks.
"""

import os
import sys
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 2, "one rank chains its callback while the other waits for it"
peer = 1 - rank
store = dist.distributed_c10d._get_default_store()
failures = Failures()
ROUNDS = int(sys.argv[1])
MAIN_THREAD = threading.get_ident()


class Round:
    """One operation: a callback chained on its Future, and how things stand when wait() ends."""

    def __init__(self, work):
        self.work = work
        self.future = work.get_future()
        # What the callback saw, once it has run: (ran on the thread that completed the Future,
        # the Work had completed already, the Future's error or None).
        self.seen = None
        self.future.then(self.record)

    def record(self, future):
        try:
            future.value()
            error = None
        except Exception as raised:  # noqa: BLE001 - the error the Future was set with
            error = raised
        on_completing_thread = threading.get_ident() != MAIN_THREAD
        self.seen = (on_completing_thread, self.work.is_completed(), error)

    def wait(self):
        """work.wait(), then at once: (whether the Future is done, what the callback saw, what
        wait() raised or None)."""
        try:
            self.work.wait()
            raised = None
        except Exception as error:  # noqa: BLE001 - a failed operation's error
            raised = error
        return self.future.done(), self.seen, raised

    def told_the_order(self) -> bool:
        """Whether the callback ran as the Future completed (it was chained before)."""
        return self.seen is not None and self.seen[0]


def check_callback(where, seen, want_error):
    failures.check(f"{where}/callback ran before wait() ended", seen is not None)
    if seen is None:
        return
    on_completing_thread, work_completed, error = seen
    failures.check(f"{where}/Future's error", (error is not None) == want_error, repr(error))
    if on_completing_thread:
        failures.check(f"{where}/Future completed before the Work", not work_completed)


def in_turn(name, i, start):
    """Starts round i of `name` on both ranks: first the leader's part, whose callback is chained
    before the other rank starts, so before the operation can complete."""
    leader = i % 2
    key = f"order/{name}/{i}"
    if rank != leader:
        store.wait([key])
    round_ = Round(start())
    if rank == leader:
        store.set(key, "chained")
    return round_


def check_round(where, round_, expected):
    done, seen, raised = round_.wait()
    failures.check(f"{where}/wait", raised is None, repr(raised))
    failures.check(f"{where}/Future done after wait()", done)
    if done:
        value = round_.future.value()
        failures.check(f"{where}/value", expected(value), value)
    check_callback(where, seen, want_error=False)
    return round_.told_the_order()


def filled(value):
    return torch.full((4,), float(value))


def all_reduce(i):
    x = filled(rank + 1)
    round_ = in_turn("all_reduce", i, lambda: dist.all_reduce(x, async_op=True))
    return check_round(f"all_reduce/{i}", round_, lambda v: torch.equal(v[0], filled(3)))


def broadcast(i):
    root = (i // 2) % 2  # each rank leads as root and as receiver in turn
    x = filled(i if rank == root else -1)
    round_ = in_turn("broadcast", i, lambda: dist.broadcast(x, src=root, async_op=True))
    return check_round(f"broadcast/{i}", round_, lambda v: torch.equal(v[0], filled(i)))


def barrier(i):
    round_ = in_turn("barrier", i, lambda: dist.barrier(async_op=True))
    return check_round(f"barrier/{i}", round_, lambda v: v == [])


def send_recv(i):
    sender = (i // 2) % 2  # each rank leads as sender and as receiver in turn
    if rank == sender:
        x = filled(i)
        round_ = in_turn("send_recv", i, lambda: dist.isend(x, dst=peer))
        return check_round(f"send/{i}", round_, lambda v: v == [])
    x = filled(-1)
    round_ = in_turn("send_recv", i, lambda: dist.irecv(x, src=peer))
    return check_round(f"recv/{i}", round_, lambda v: torch.equal(v[0], filled(i)))


def failed_receive():
    """Each rank receives 8 elements where the other sends 4: the receive fails (and the group
    with it, so this comes last). Its Future must hold the error before wait() raises it."""
    round_ = Round(dist.irecv(torch.zeros(8), src=peer))
    store.set(f"order/error/{rank}", "chained")
    store.wait([f"order/error/{peer}"])
    try:
        dist.isend(torch.zeros(4), dst=peer)
    except RuntimeError:
        pass  # the other rank's receive failed first, and the group with it: nothing to send
    done, seen, raised = round_.wait()
    failures.check("error/wait raised", raised is not None, "wait() returned")
    failures.check("error/Future done when wait() raised", done)
    check_callback("error", seen, want_error=True)
    return round_.told_the_order()


# Rounds whose callback ran as the Future completed, by operation: those that test the order.
operations = (all_reduce, broadcast, barrier, send_recv)
told = {op.__name__: sum(op(i) for i in range(ROUNDS)) for op in operations}
told["failed_receive"] = int(failed_receive())
report({"rank": rank, "failures": failures[:20], "failed": len(failures), "told": told})
dist.destroy_process_group()
