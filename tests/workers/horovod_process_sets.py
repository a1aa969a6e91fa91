"""Horovod's process sets: declared at init() or added later, every collective and helper on a
set, Horovod's errors for ranks outside a set, and sets that negotiate independently of each
other. Every check reports a failure; each case runs in this one launch."""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402

failures = Failures()
check, case = failures.check, failures.case


def raises(name, error_type, body, message=""):
    try:
        body()
    except error_type as error:
        check(f"{name}/message", message in str(error), str(error))
        return
    except Exception as error:  # noqa: BLE001 (reported)
        check(name, False, f"raised {type(error).__name__}: {error}")
        return
    check(name, False, f"no {error_type.__name__}")


# ---- declared at init() ---------------------------------------------------------------------
hvd.init()
rank, size = hvd.rank(), hvd.size()
hvd.shutdown()
evens = hvd.ProcessSet([r for r in range(size) if r % 2 == 0])
last = hvd.ProcessSet([size - 1])
declared = [] if size == 1 else [evens, last]  # at one rank, each would be every rank
hvd.init(process_sets=declared)


def collectives_on(ps, label):
    """Every collective and helper on set ``ps``, on its members."""
    members = ps.ranks
    me = ps.rank()
    n = ps.size()
    check(f"{label}/rank", me == members.index(rank) and n == len(members), (me, n))
    x = torch.full((3,), float(rank))
    got = hvd.allreduce(x, op=hvd.Sum, process_set=ps)
    check(f"{label}/allreduce", torch.equal(got, torch.full((3,), float(sum(members)))), got)
    got = hvd.grouped_allreduce([x, x + 1], op=hvd.Max, process_set=ps)
    check(f"{label}/grouped_allreduce", torch.equal(got[1], torch.full((3,), max(members) + 1.0)))
    got = hvd.allgather(torch.full((rank + 1, 2), float(rank)), process_set=ps)
    expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in members])
    check(f"{label}/allgather", torch.equal(got, expected), got)
    got = hvd.broadcast(x, root_rank=members[-1], process_set=ps)
    check(f"{label}/broadcast", torch.equal(got, torch.full((3,), float(members[-1]))), got)
    got = hvd.alltoall(torch.arange(2.0 * n) + 100 * rank, process_set=ps)
    expected = torch.cat([torch.tensor([2.0 * me, 2.0 * me + 1]) + 100 * r for r in members])
    check(f"{label}/alltoall", torch.equal(got, expected), got)
    got = hvd.reducescatter(torch.ones(2 * n, 2) * (rank + 1), op=hvd.Sum, process_set=ps)
    expected = torch.full((2, 2), float(sum(r + 1 for r in members)))
    check(f"{label}/reducescatter", torch.equal(got, expected), got)
    hvd.barrier(process_set=ps)
    got = hvd.broadcast_object({"from": rank}, root_rank=members[0], process_set=ps)
    check(f"{label}/broadcast_object", got == {"from": members[0]}, got)
    got = hvd.allgather_object(rank, process_set=ps)
    check(f"{label}/allgather_object", got == members, got)
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, float(rank))
    hvd.broadcast_parameters(model.state_dict(), root_rank=members[0], process_set=ps)
    check(f"{label}/broadcast_parameters", bool((model.weight == members[0]).all()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.5)
    hvd.broadcast_optimizer_state(opt, root_rank=members[0], process_set=ps)
    check(f"{label}/broadcast_optimizer_state", opt.param_groups[0]["lr"] == 0.1 * (members[0] + 1))


def outside(ps, label):
    """Horovod's errors for a rank outside ``ps``."""
    raises(
        f"{label}/allreduce outside",
        ValueError,
        lambda: hvd.allreduce(torch.ones(1), process_set=ps),
        f"Allreduce: Rank {rank} is not a member of the provided process set.",
    )
    for operation, body in (
        ("Allgather", lambda: hvd.allgather(torch.ones(1), process_set=ps)),
        ("Broadcast", lambda: hvd.broadcast(torch.ones(1), ps.ranks[0], process_set=ps)),
        ("Alltoall", lambda: hvd.alltoall(torch.ones(len(ps.ranks)), process_set=ps)),
        ("Reducescatter", lambda: hvd.reducescatter(torch.ones(1), process_set=ps)),
        ("Barrier", lambda: hvd.barrier(process_set=ps)),
    ):
        raises(f"{label}/{operation} outside", ValueError, body, f"{operation}: Rank {rank}")
    raises(f"{label}/rank() outside", ValueError, ps.rank, "not part of provided process set")
    check(f"{label}/included", ps.included() is False)
    check(f"{label}/size outside", ps.size() == len(ps.ranks))


def declared_sets():
    check("global/ranks", hvd.global_process_set.ranks == list(range(size)))
    check("global/id", hvd.global_process_set.process_set_id == 0)
    ids = [ps.process_set_id for ps in declared]
    check("declared/ids", ids == list(range(1, len(declared) + 1)), ids)
    for ps, label in zip(declared, ("evens", "last") if size > 1 else ("last",)):
        if rank in ps.ranks:
            collectives_on(ps, label)
        else:
            outside(ps, label)
    raises(
        "add without dynamic",
        ValueError,
        lambda: hvd.add_process_set([0]),
        "HOROVOD_DYNAMIC_PROCESS_SETS",
    )


def broadcast_root_outside_the_set():
    if size < 2 or rank not in evens.ranks:
        return
    raises(
        "broadcast/root outside",
        ValueError,
        lambda: hvd.broadcast(torch.ones(1), root_rank=1, process_set=evens),
        "broadcast received invalid root rank 1 for provided process set",
    )


def sets_negotiate_independently():
    """A request pending on one set never holds up another set's."""
    if size < 3:
        return
    low, high = pairs
    if rank == 2:
        time.sleep(2.0)  # rank 1's request on `high` waits for this rank meanwhile
    pending = None
    if rank in high.ranks and rank == 1:
        pending = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="late", process_set=high)
    if rank in low.ranks:
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="prompt", process_set=low)
        check("independent/prompt", torch.equal(got, torch.full((2,), 2.0)), got)
    if pending is not None:
        check("independent/still pending", not hvd.poll(pending))
    if rank == 2:
        hvd.allreduce(torch.ones(2), op=hvd.Sum, name="late", process_set=high)
    if pending is not None:
        got = hvd.synchronize(pending)
        check("independent/late", torch.equal(got, torch.full((2,), 2.0)), got)


def objects_and_errors():
    raises("ProcessSet of strings", ValueError, lambda: hvd.ProcessSet(["a"]), "list of process")
    raises("ProcessSet of a comm", ValueError, lambda: hvd.ProcessSet(object()), "MPI")
    fresh = hvd.ProcessSet([0])
    check("unregistered", fresh.size() is None and fresh.rank() is None)
    check("unregistered/included", fresh.included() is (rank == 0))
    raises(
        "unregistered/allreduce",
        ValueError,
        lambda: hvd.allreduce(torch.ones(1), process_set=fresh),
        "Process set provided does not exist, or has not been registered.",
    )
    check("remove global", hvd.remove_process_set(hvd.global_process_set) is False)


# ---- added after init() ---------------------------------------------------------------------
def dynamic_sets():
    global pairs
    hvd.shutdown()
    check("declared sets invalidated", all(ps.process_set_id is None for ps in declared))
    raises(
        "declared duplicate of global",
        ValueError,
        lambda: hvd.init(process_sets=[hvd.ProcessSet(range(size))]),
        "process_sets entry number 0 is a duplicate",
    )
    check("failed init leaves nothing", not hvd.is_initialized())
    hvd.init(process_sets="dynamic")
    raises(
        "duplicate of global",
        ValueError,
        lambda: hvd.add_process_set(list(range(size))),
        "Attempted to add a duplicate process set",
    )
    raises("invalid rank", ValueError, lambda: hvd.add_process_set([0, size]), "invalid rank")
    if size == 1:
        return  # every other set would duplicate the global one
    first = hvd.add_process_set([0])
    raises("duplicate", ValueError, lambda: hvd.add_process_set(hvd.ProcessSet([0])), "duplicate")
    check("added/id", first.process_set_id == 1, first.process_set_id)
    if rank == 0:
        collectives_on(first, "added")
    else:
        outside(first, "added")
    check("removed", hvd.remove_process_set(first) is True)
    check("removed/invalidated", first.process_set_id is None)
    check("removed twice", hvd.remove_process_set(first) is False)
    raises(
        "removed/allreduce",
        ValueError,
        lambda: hvd.allreduce(torch.ones(1), process_set=first),
        "does not exist",
    )
    again = hvd.add_process_set(hvd.ProcessSet([0]))
    check("ids are reused", again.process_set_id == 1, again.process_set_id)
    hvd.remove_process_set(again)
    if size >= 3:
        pairs = (hvd.add_process_set([0, 1]), hvd.add_process_set([1, 2]))
        sets_negotiate_independently()
        for ps in pairs:
            hvd.remove_process_set(ps)


def optimizer_on_a_set():
    """DistributedOptimizer(process_set=): members average among themselves only."""
    if size < 2:
        return
    ps = hvd.add_process_set([0, 1]) if size > 2 else hvd.add_process_set([0])
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.constant_(model.weight, 1.0)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0),
        named_parameters=model.named_parameters(),
        process_set=ps,
    )
    (model(torch.ones(1, 2)) * (rank + 1)).sum().backward()
    opt.step()
    if rank in ps.ranks:
        mean = sum(r + 1 for r in ps.ranks) / len(ps.ranks)
        expected = torch.full((1, 2), 1.0 - mean)
    else:  # outside the set: its own gradient, unreduced, as in Horovod
        expected = torch.full((1, 2), 1.0 - (rank + 1))
    check("optimizer/process set", torch.equal(model.weight.detach(), expected), model.weight)
    hvd.remove_process_set(ps)


pairs = ()
for name, body in [
    ("declared", declared_sets),
    ("broadcast root", broadcast_root_outside_the_set),
    ("objects and errors", objects_and_errors),
    ("dynamic", dynamic_sets),
    ("optimizer", optimizer_on_a_set),
]:
    case(name, body)
report({"rank": rank, "failures": failures})
hvd.shutdown()
