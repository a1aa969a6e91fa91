"""What torchft asks of a process group, asked of ringcomm.torchft.ProcessGroupRingcomm by three
ranks in one launch, on the route of whichever torchft imports: the nightly's reconfigure() (with
every member's handle, as the Manager passes them, and once through reconfigure_with_store) or
0.2.0's configure(store_addr, replica_id, rank, world_size).

Phases, every rank in each, meeting in a torch TCPStore the test serves (TEST_STORE, host:port):

  ops      every operation torchft's wrappers forward (all-reduce with options and with a bare
           ReduceOp, sum and average, coalesced; all-gather, into tensors coalesced;
           reduce-scatter coalesced; all-to-all even and split; broadcast; barrier with no
           options, as torchft passes it; send/recv with PGTransport's tags both ways around the
           ring; a PGTransport checkpoint), each Future done when wait() returns
  timeout  set_timeout(1 s) on rank 0, whose lone all-reduce then times out after about 1 s,
           not the group's TIMEOUT, and errored() names the timeout
  abort    rank 0's all-reduce and rank 1's receive wait for peers that never come; abort()
           from another thread ends each at once
  kill     rank 2 SIGKILLs itself; the survivors' next all-reduce raises long before TIMEOUT,
           errored() names the dead rank, abort() returns at once
  shrink   the survivors reconfigure as a group of 2, their ranks swapped
  cycles   CYCLES create-use-destroy cycles of the survivors: reconfiguring in place, a new
           wrapper dropped unaborted, abort() and shutdown() with an operation in flight, every
           Work and tensor kept referenced from Python until the end, when each Work must be
           complete

Arguments: cycles, and the seconds after which a rank still running prints where it is and exits.
"""

import faulthandler
import os
import signal
import sys
import threading
import time
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
import torchft
import torchft.process_group as tft_pg
from torch.distributed.distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    ReduceOp,
    ReduceScatterOptions,
)
from torchft.checkpointing.pg_transport import PGTransport

from ringcomm.torchft import ProcessGroupRingcomm

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

CYCLES, HANG_REPORT_AFTER = int(sys.argv[1]), float(sys.argv[2])
faulthandler.dump_traceback_later(HANG_REPORT_AFTER, exit=True)
RANK, SIZE = int(os.environ["RINGCOMM_RANK"]), int(os.environ["RINGCOMM_WORLD_SIZE"])
assert SIZE == 3, "rank 2 dies; the two others go on"
VICTIM = 2
TIMEOUT = timedelta(seconds=30)
SHORT = timedelta(seconds=1)
# How much sooner than TIMEOUT a failure must surface: a lost peer or an abort ends an operation
# in milliseconds here, a timeout set to SHORT in about a second; a third of TIMEOUT is far above
# both on any machine, and far below what waiting out TIMEOUT would take.
PROMPT = TIMEOUT.total_seconds() / 3
ROUTE = "reconfigure" if hasattr(tft_pg.ProcessGroup, "reconfigure") else "configure"
STORE = os.environ["TEST_STORE"]
host, port = STORE.rsplit(":", 1)
store = dist.TCPStore(host, int(port), is_master=False, timeout=TIMEOUT)
failures = Failures()
timings = {}


def meet(name, ranks=range(SIZE)):
    """Waits until every one of `ranks` got here (outside any process group)."""
    store.set(f"meet/{name}/{RANK}", "1")
    store.wait([f"meet/{name}/{r}" for r in ranks])


def configure(pg, name, rank, world_size):
    """Forms `pg` anew as `rank` of `world_size`, as torchft's Manager does on a quorum change:
    0.2.0's configure() on a store address of the quorum's own; the nightly's reconfigure() with
    every member's handle in rank order, which the Manager gets from the Lighthouse (here the
    test's store), or once through reconfigure_with_store, torchft's route without a Manager."""
    if ROUTE == "configure":
        pg.configure(f"{STORE}/{name}", f"replica_{RANK}", rank, world_size)
        return
    pg.set_rank_info(f"replica_{RANK}", 0, 1, RANK)
    if name == "ops":
        tft_pg.reconfigure_with_store(pg, f"{STORE}/{name}", rank, world_size, TIMEOUT)
        return
    store.set(f"{name}/handle/{rank}", pg.get_reconfigure_handle())
    keys = [f"{name}/handle/{r}" for r in range(world_size)]
    store.wait(keys)
    opts = tft_pg.ReconfigureOptions()
    opts.uuid = zlib.crc32(name.encode())  # the quorum's id, which every member knows
    opts.handles = [handle.decode() for handle in store.multi_get(keys)]
    opts.timeout = TIMEOUT
    pg.reconfigure(opts).wait()


def finished(name, work, timeout=TIMEOUT):
    """work.wait(), then: its Future must be done, and a callback chained on it (as torchft's
    Manager chains its own after wait()) must run at once."""
    work.wait(timeout)
    future = work.get_future()
    failures.check(f"{name}/future done when wait() returned", future.done())
    chained = future.then(lambda done: "ran")
    failures.check(f"{name}/chained callback ran", chained.done() and chained.wait() == "ran")
    return work


def same(name, got, want):
    failures.check(name, torch.equal(got, want), f"{got.flatten()[:6]} != {want.flatten()[:6]}")


def wait_raises(name, work, bound):
    """work.wait(TIMEOUT) must raise within `bound` seconds: (the error's text, seconds)."""
    start = time.monotonic()
    try:
        work.wait(TIMEOUT)
        error = ""
    except Exception as raised:  # noqa: BLE001 - whatever torch raised
        error = f"{type(raised).__name__}: {raised}"
    seconds = time.monotonic() - start
    failures.check(f"{name}/raised", error, "wait() returned")
    failures.check(f"{name}/within {bound:.0f} s", seconds < bound, f"{seconds:.1f} s")
    return error, seconds


def abort_while_waiting(name, pg, start_operation):
    """abort() from another thread while the main thread waits on an operation that cannot
    complete: both return promptly. The thread aborts once the main thread is about to wait, and
    either order must work (an operation aborted before wait() raises there)."""
    waiting = threading.Event()
    aborted = {}

    def abort():
        waiting.wait()
        start = time.monotonic()
        pg.abort()
        aborted["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=abort, daemon=True)
    thread.start()
    work = start_operation()
    waiting.set()
    error, seconds = wait_raises(name, work, PROMPT)
    thread.join(PROMPT)
    failures.check(f"{name}/abort() returned", not thread.is_alive())
    timings[name] = {"wait": round(seconds, 3), "abort": round(aborted.get("seconds", -1), 3)}
    return error


def ops_phase(pg):
    n = 3
    failures.check("errored() while fine", pg.errored() is None, repr(pg.errored()))
    failures.check("size()", pg.size() == n, pg.size())
    failures.check("backend name", pg.getBackendName() == "torchft-ringcomm", pg.getBackendName())
    mine = float(RANK + 1)
    total = float(sum(range(1, n + 1)))

    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.SUM
    x = torch.full((1000,), mine)
    finished("allreduce opts", pg.allreduce([x], opts))
    same("allreduce opts/result", x, torch.full((1000,), total))

    x = torch.full((7,), mine)
    finished("allreduce ReduceOp", pg.allreduce([x], ReduceOp.SUM))
    same("allreduce ReduceOp/result", x, torch.full((7,), total))

    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.AVG
    x = torch.full((33,), mine)
    finished("allreduce avg", pg.allreduce([x], opts))
    same("allreduce avg/result", x, torch.full((33,), total / n))

    coalesced = AllreduceCoalescedOptions()
    coalesced.reduceOp = ReduceOp.SUM
    # One dtype, as under gloo, which coalesces the tensors into one buffer.
    a, b = torch.full((5,), mine), torch.full((3, 4), 2 * mine)
    finished("allreduce_coalesced", pg.allreduce_coalesced([a, b], coalesced))
    same("allreduce_coalesced/first", a, torch.full((5,), total))
    same("allreduce_coalesced/second", b, torch.full((3, 4), 2 * total))

    outputs = [[torch.zeros(4) for _ in range(n)]]
    finished("allgather", pg.allgather(outputs, [torch.full((4,), mine)], AllgatherOptions()))
    for r in range(n):
        same(f"allgather/from {r}", outputs[0][r], torch.full((4,), float(r + 1)))

    ins = [torch.full((3,), mine), torch.arange(2, dtype=torch.int64) + 10 * RANK]
    outs = [torch.zeros(3 * n), torch.zeros(2 * n, dtype=torch.int64)]
    finished(
        "allgather_into_tensor_coalesced",
        pg.allgather_into_tensor_coalesced(outs, ins, AllgatherOptions()),
    )
    same(
        "allgather_into_tensor_coalesced/first",
        outs[0],
        torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(3),
    )
    same(
        "allgather_into_tensor_coalesced/second",
        outs[1],
        torch.tensor([10 * r + i for r in range(n) for i in range(2)]),
    )

    ins = [torch.arange(n * 2, dtype=torch.float32) * mine, torch.ones(n * 5) * mine]
    outs = [torch.zeros(2), torch.zeros(5)]
    scatter_opts = ReduceScatterOptions()
    scatter_opts.reduceOp = ReduceOp.SUM
    finished(
        "reduce_scatter_tensor_coalesced",
        pg.reduce_scatter_tensor_coalesced(outs, ins, scatter_opts),
    )
    same(
        "reduce_scatter_tensor_coalesced/first",
        outs[0],
        torch.arange(RANK * 2, RANK * 2 + 2, dtype=torch.float32) * total,
    )
    same("reduce_scatter_tensor_coalesced/second", outs[1], torch.full((5,), total))

    sent = torch.arange(n * 2, dtype=torch.float32) + 100 * RANK
    received = torch.zeros(n * 2)
    finished("alltoall_base even", pg.alltoall_base(received, sent, [], [], AllToAllOptions()))
    same(
        "alltoall_base even/result",
        received,
        torch.tensor([100.0 * r + 2 * RANK + i for r in range(n) for i in range(2)]),
    )
    # Rank r sends r + 1 + d rows to rank d (one row: two int32s): uneven splits both ways.
    send_splits = [RANK + 1 + d for d in range(n)]
    recv_splits = [s + 1 + RANK for s in range(n)]
    sent = torch.full((sum(send_splits), 2), RANK, dtype=torch.int32)
    received = torch.full((sum(recv_splits), 2), -1, dtype=torch.int32)
    finished(
        "alltoall_base split",
        pg.alltoall_base(received, sent, recv_splits, send_splits, AllToAllOptions()),
    )
    want = torch.cat([torch.full((recv_splits[s], 2), s, dtype=torch.int32) for s in range(n)])
    same("alltoall_base split/result", received, want)

    opts = BroadcastOptions()
    opts.rootRank = 1
    x = torch.full((9,), mine)
    finished("broadcast", pg.broadcast([x], opts))
    same("broadcast/result", x, torch.full((9,), 2.0))
    x = torch.full((9,), mine, dtype=torch.bfloat16)
    finished("broadcast_one", pg.broadcast_one(x, 2))
    same("broadcast_one/result", x, torch.full((9,), 3.0, dtype=torch.bfloat16))

    finished("barrier, no options", pg.barrier())
    finished("barrier, options", pg.barrier(BarrierOptions()))

    # PGTransport's tags (1: a length, 2: a pickle, 3 + i: the tensors as bytes) around the
    # ring, both ways at once. Messages between two ranks match in the order they were posted,
    # not by tag (docs/guides/torch-backend.md): PGTransport posts them alike on both sides.
    right, left = (RANK + 1) % n, (RANK - 1) % n
    tags = (1, 2, 3, 4)

    def payload(sender, tag):
        return torch.full((1000 * tag,), sender * 10 + tag, dtype=torch.uint8)

    sends = [pg.send([payload(RANK, tag)], peer, tag) for tag in tags for peer in (right, left)]
    inbox = {
        (peer, tag): torch.zeros(1000 * tag, dtype=torch.uint8)
        for peer in (left, right)
        for tag in tags
    }
    receives = {key: pg.recv([inbox[key]], *key) for key in inbox}
    for (peer, tag), work in receives.items():
        finished(f"recv from {peer} tag {tag}", work)
        same(f"recv from {peer} tag {tag}/result", inbox[peer, tag], payload(peer, tag))
    for i, work in enumerate(sends):
        finished(f"send {i}", work)

    # A checkpoint from rank 0 to the others, as torchft heals a replica.
    transport = PGTransport(pg, timeout=TIMEOUT, device=torch.device("cpu"))
    state = {
        "weight": torch.arange(12.0).reshape(3, 4),
        "step": 7,
        "bias": torch.ones(3, dtype=torch.float16),
    }
    if RANK == 0:
        transport.send_checkpoint([1, 2], 7, state, TIMEOUT)
    else:
        got = transport.recv_checkpoint(0, transport.metadata(), 7, TIMEOUT)
        failures.check("PGTransport/step", got["step"] == 7, got)
        same("PGTransport/weight", got["weight"], state["weight"])
        same("PGTransport/bias", got["bias"], state["bias"])
    failures.check("errored() after the operations", pg.errored() is None, repr(pg.errored()))


def timeout_phase(pg):
    """Rank 0 alone: the others stay out until it is done."""
    if RANK == 0:
        pg.set_timeout(SHORT)
        start = time.monotonic()
        error = ""
        try:
            pg.allreduce([torch.ones(4)], ReduceOp.SUM).wait()
        except Exception as raised:  # noqa: BLE001 - whatever torch raised
            error = f"{type(raised).__name__}: {raised}"
        seconds = time.monotonic() - start
        timings["set_timeout"] = round(seconds, 3)
        failures.check("set_timeout/raised", error, "wait() returned")
        failures.check("set_timeout/timed out", "Timed out" in error, error)
        failures.check(
            "set_timeout/after the new timeout",
            SHORT.total_seconds() * 0.9 <= seconds < PROMPT,
            f"{seconds:.2f} s",
        )
        errored = pg.errored()
        failures.check(
            "set_timeout/errored()", isinstance(errored, dist.DistBackendError), repr(errored)
        )
        failures.check(
            "set_timeout/errored() names it", "timed out" in str(errored).lower(), str(errored)
        )
        pg.set_timeout(TIMEOUT)
    meet("timeout/done")


def abort_phase(pg):
    """Rank 0's all-reduce and rank 1's receive wait for peers that never come (alive, but not
    calling them): abort() from another thread ends each at once. One after the other: links are
    made on first use, so rank 0's all-reduce dials rank 1, which must not have aborted yet (a
    rank that aborted refuses the dial, and rank 0's wait ends naming it, not its own abort)."""
    if RANK == 0:
        error = abort_while_waiting(
            "abort, all-reduce", pg, lambda: pg.allreduce([torch.ones(4)], ReduceOp.SUM)
        )
        failures.check("abort, all-reduce/says aborted", "aborted" in error, error)
    meet("abort/all-reduce done")
    if RANK == 1:
        error = abort_while_waiting(
            "abort, recv", pg, lambda: pg.recv([torch.zeros(8, dtype=torch.uint8)], 2, 1)
        )
        failures.check("abort, recv/says aborted", "aborted" in error, error)
    if RANK in (0, 1):
        failures.check("abort() again", pg.abort() is None)
        failures.check("errored() after abort()", pg.errored() is None, repr(pg.errored()))
    meet("abort/done")


def kill_phase(pg):
    """The victim dies between two all-reduces: the survivors' second raises at once, naming
    it, and errored() says so until the group is aborted, which returns at once."""
    x = torch.ones(1 << 16)
    finished("before the kill", pg.allreduce([x], ReduceOp.SUM))
    meet("kill/ready")
    if RANK == VICTIM:
        os.kill(os.getpid(), signal.SIGKILL)
    error, seconds = wait_raises("lost peer", pg.allreduce([x], ReduceOp.SUM), PROMPT)
    timings["lost peer"] = round(seconds, 3)
    errored = pg.errored()
    failures.check("lost peer/errored()", isinstance(errored, dist.DistBackendError), repr(errored))
    failures.check(
        "lost peer/errored() is the failure", str(errored) in error, f"{errored} / {error}"
    )
    failures.check(
        "lost peer/errored() names the victim",
        # "rank 2 (pid N) died" over shared memory, "rank 2 closed its connection (it died or
        # aborted)" over TCP
        f"rank {VICTIM} " in str(errored) and "died" in str(errored),
        str(errored),
    )
    start = time.monotonic()
    pg.abort()
    timings["abort after the loss"] = round(time.monotonic() - start, 3)
    failures.check("lost peer/abort() returned promptly", time.monotonic() - start < PROMPT)


def shrink_phase(pg):
    survivors = [0, 1]
    rank = 1 - RANK
    configure(pg, "shrink", rank, 2)
    failures.check("shrink/size()", pg.size() == 2, pg.size())
    failures.check("shrink/errored() of the new group", pg.errored() is None, repr(pg.errored()))
    x = torch.full((100,), float(rank + 1))
    finished("shrink/allreduce", pg.allreduce([x], ReduceOp.SUM))
    same("shrink/result", x, torch.full((100,), 3.0))
    meet("shrink/done", survivors)


def cycles_phase(pg):
    """Each cycle forms a group of the two survivors (ranks swapped every other cycle), checks an
    all-reduce, and leaves an all-reduce in flight as it tears the group down in one of four ways.
    Every Work and tensor stays referenced until the end, when each must be completed."""
    kept = []
    took = []
    start = time.monotonic()
    for cycle in range(CYCLES):
        began = time.monotonic()
        way = ("reconfigure", "dropped", "abort", "shutdown")[cycle % 4]
        rank = RANK if cycle % 2 == 0 else 1 - RANK
        if way == "dropped":
            pg = ProcessGroupRingcomm(timeout=TIMEOUT)  # the previous one is dropped unaborted
        configure(pg, f"cycle/{cycle}", rank, 2)
        x = torch.full((1 << 10,), float(rank + 1))
        finished(f"cycle {cycle}/allreduce", pg.allreduce([x], ReduceOp.SUM))
        same(f"cycle {cycle}/result", x, torch.full((1 << 10,), 3.0))
        in_flight = torch.ones(1 << 12)
        kept.append((pg.allreduce([in_flight], ReduceOp.SUM), in_flight, x))
        if way == "abort":
            pg.abort()
        elif way == "shutdown":
            pg.shutdown()
        took.append(time.monotonic() - began)
    seconds = time.monotonic() - start
    incomplete = 0
    for work, _, _ in kept:
        try:
            work.wait(TIMEOUT)
        except Exception:  # noqa: BLE001 - an operation its group's teardown failed
            pass
        incomplete += not work.is_completed()
    failures.check("cycles/every kept Work completed", incomplete == 0, f"{incomplete} did not")
    took.sort()
    timings["cycles"] = {
        "count": CYCLES,
        "seconds": round(seconds, 2),
        "median": round(took[len(took) // 2], 4) if took else 0,
        "slowest": round(took[-1], 3) if took else 0,
        # Cycles over a second: on some machines torch's TCPStore client, which every
        # configure() connects, waits 5 s for a reverse DNS lookup now and then.
        "over_1s": sum(t > 1 for t in took),
    }
    return pg


def main():
    phases = timings["phases"] = {}
    began = time.monotonic()

    def phase(name, body):
        failures.case(name, body)
        phases[name] = round(time.monotonic() - began - sum(phases.values()), 2)

    pg = ProcessGroupRingcomm(timeout=TIMEOUT)
    failures.check("errored() before configure", pg.errored() is None, repr(pg.errored()))
    phase("form", lambda: configure(pg, "ops", RANK, SIZE))
    phase("ops", lambda: ops_phase(pg))
    meet("ops/done")
    phase("timeout", lambda: timeout_phase(pg))
    phase("abort", lambda: (configure(pg, "abort", RANK, SIZE), abort_phase(pg)))
    phase("kill", lambda: (configure(pg, "kill", RANK, SIZE), kill_phase(pg)))
    phase("shrink", lambda: shrink_phase(pg))
    pg = cycles_phase(pg)
    pg.shutdown()
    faulthandler.cancel_dump_traceback_later()
    report(
        {
            "rank": RANK,
            "route": ROUTE,
            "torchft": getattr(torchft, "__file__", ""),
            "seconds": round(time.monotonic() - began, 2),
            "timings": timings,
            "failures": failures[:20],
        }
    )


main()
