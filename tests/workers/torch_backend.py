"""Every torch.distributed operation on backend "ringcomm", checked against values each rank can
compute alone. Deliberately no `import ringcomm`: torch finds the backend through its entry point.

Argument: the world size is the harness's; torch's env:// variables come from torch_rendezvous.
"""

import os
import sys
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import AllgatherOptions, ReduceScatterOptions

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

use_harness_rendezvous()
dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
failures = Failures()
check, case = failures.check, failures.case
COUNTS = [0, 1, 7, 1009]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def value_of(r, count, dtype, offset=0):
    """Rank r's input: small integers, exact in every dtype and under every reduction."""
    base = (torch.arange(count, dtype=torch.int64) + 3 * r + offset) % 5 + 1
    return base % 2 == 0 if dtype == torch.bool else base.to(dtype)


def expected_reduction(op, count, dtype):
    inputs = torch.stack([value_of(r, count, torch.float64) for r in range(size)])
    result = {
        dist.ReduceOp.SUM: inputs.sum(0),
        dist.ReduceOp.PRODUCT: inputs.prod(0),
        dist.ReduceOp.MIN: inputs.min(0).values if count else inputs.sum(0),
        dist.ReduceOp.MAX: inputs.max(0).values if count else inputs.sum(0),
        dist.ReduceOp.AVG: inputs.sum(0) / size,
    }[op]
    if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
        result = inputs.sum(0).div(size, rounding_mode="trunc")
    return result.to(dtype)


def all_reduce():
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    for dtype in FLOATS + INTS:
        for op in ops + ([dist.ReduceOp.AVG] if dtype.is_floating_point else []):
            if (
                op == dist.ReduceOp.PRODUCT
                and not dtype.is_floating_point
                and 5**size > torch.iinfo(dtype).max
            ):
                continue  # wraps around, where the float64 reference does not
            for count in COUNTS:
                x = value_of(rank, count, dtype)
                dist.all_reduce(x, op=op)
                want = expected_reduction(op, count, dtype)
                check(
                    f"all_reduce/{dtype}/{op}/{count}",
                    torch.equal(x, want),
                    f"{x[:5]} != {want[:5]}",
                )


def flags_of(r, count, op):
    """Rank r's bools: mostly false for the ors (SUM, MAX), mostly true for the ands (PRODUCT,
    MIN), so that either result varies by element."""
    v = (torch.arange(count) * 3 + r * 7) % 11
    return v != 0 if op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN) else v == 0


def bool_reductions():
    # As gloo: SUM and MAX are logical or, PRODUCT and MIN logical and; results stay 0/1.
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN):
        is_and = op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN)
        for count in COUNTS:
            everyone = torch.stack([flags_of(r, count, op) for r in range(size)])
            want = everyone.all(0) if is_and else everyone.any(0)
            # Rank 0 holds its trues as the byte 2: still true, and the results are bytes 0 and
            # 1 (one rank alone keeps its bytes).
            x = flags_of(rank, count, op).to(torch.uint8) * (2 if rank == 0 else 1)
            dist.all_reduce(x.view(torch.bool), op=op)
            got = x if size > 1 else x.clamp(max=1)
            check(
                f"all_reduce/bool/{op}/{count}",
                torch.equal(got, want.to(torch.uint8)),
                f"{got[:8]} != {want[:8]}",
            )
        chunks = [flags_of(rank, 7, op) for _ in range(size)]
        out = torch.empty(7, dtype=torch.bool)
        dist.reduce_scatter_tensor(out, torch.cat(chunks), op=op)
        everyone = torch.stack([flags_of(r, 7, op) for r in range(size)])
        want = everyone.all(0) if is_and else everyone.any(0)
        check(f"reduce_scatter_tensor/bool/{op}", torch.equal(out, want), f"{out} != {want}")


def all_reduce_async_and_future():
    x = torch.ones(1 << 20)
    work = dist.all_reduce(x, async_op=True)
    chained = work.get_future().then(lambda fut: fut.value()[0] * 2)
    work.wait()
    check("async/is_completed", work.is_completed())
    check("async/value", torch.equal(x, torch.full((1 << 20,), float(size))))
    check("async/then", torch.equal(chained.wait(), torch.full((1 << 20,), 2.0 * size)))


def all_reduce_special_tensors():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    strided = base.t()  # not contiguous
    dist.all_reduce(strided)
    check("all_reduce/non-contiguous", torch.equal(base, torch.arange(12.0).reshape(3, 4) * size))
    flags = torch.tensor([rank == 0, False, True])
    dist.all_reduce(flags, op=dist.ReduceOp.SUM)
    check("all_reduce/bool sum is or", flags.tolist() == [True, False, True])
    z = torch.tensor([1 + 2j, rank * 1j], dtype=torch.complex64)
    dist.all_reduce(z)
    want = torch.tensor([size * (1 + 2j), sum(range(size)) * 1j], dtype=torch.complex64)
    check("all_reduce/complex", torch.equal(z, want), f"{z}")
    scalar = torch.tensor(float(rank))
    dist.all_reduce(scalar, op=dist.ReduceOp.MAX)
    check("all_reduce/0-d", scalar.item() == size - 1)


def sparse_all_reduce():
    """Sparse COO tensors, as gloo reduces them: every rank's non-zeros added up, coalesced, in
    the caller's tensor. Ranks hold different numbers of non-zeros (rank 0 none)."""
    for dtype in (torch.float32, torch.float64, torch.int64):
        indices = torch.tensor([[i % 4 for i in range(rank)], [(i * 3) % 5 for i in range(rank)]])
        values = torch.arange(1, rank + 1).to(dtype)
        x = torch.sparse_coo_tensor(indices.reshape(2, rank), values, (4, 5))
        expected = torch.zeros(4, 5, dtype=dtype)
        for r in range(size):
            for i in range(r):
                expected[i % 4, (i * 3) % 5] += i + 1
        work = dist.all_reduce(x, async_op=True)
        work.wait()
        check(f"sparse/{dtype}", torch.equal(x.to_dense(), expected), x.to_dense())
        check(f"sparse/{dtype}/coalesced", x.is_coalesced())
    # Values with dense dimensions of their own ("hybrid" tensors).
    hybrid = torch.sparse_coo_tensor(
        torch.tensor([[rank % 3]]), torch.ones(1, 2) * (rank + 1), (3, 2)
    )
    dist.all_reduce(hybrid)
    expected = torch.zeros(3, 2)
    for r in range(size):
        expected[r % 3] += r + 1
    check("sparse/hybrid", torch.equal(hybrid.to_dense(), expected), hybrid.to_dense())
    try:
        dist.all_reduce(hybrid, op=dist.ReduceOp.MAX)
        failures.append("sparse/MAX: no error")
    except (ValueError, RuntimeError) as error:
        check("sparse/MAX", "SUM" in str(error), str(error))
    if size > 1:
        try:
            dist.all_reduce(
                torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), [], (3 + rank,))
            )
            failures.append("sparse/sizes differ: no error")
        except (ValueError, RuntimeError) as error:
            check("sparse/sizes differ", "different sizes" in str(error), str(error))
        after = torch.ones(2)
        dist.all_reduce(after)
        check("sparse/after an error", torch.equal(after, torch.full((2,), float(size))))


def errors_name_the_problem():
    def raises(name, body, *fragments):
        try:
            body()
        except (ValueError, TypeError, RuntimeError) as error:
            text = str(error)
            check(name, all(f in text for f in fragments), text)
            return
        failures.append(f"{name}: no error")

    raises(
        "error/BAND",
        lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND),
        "all_reduce",
        "BAND",
    )
    raises(
        "error/uint16",
        lambda: dist.all_reduce(torch.ones(3, dtype=torch.uint16)),
        "all_reduce",
        "UInt16",
    )
    raises(
        "error/bool AVG",
        lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG),
        "all_reduce",
        "AVG",
        "bool",
    )
    raises(
        "error/all_gather_into_tensor size",
        lambda: dist.all_gather_into_tensor(torch.empty(size * 3 + 1), torch.ones(3)),
        "all_gather_into_tensor",
        "world size",
    )


def all_reduce_coalesced():
    tensors = [value_of(rank, n, torch.float32) for n in (3, 0, 17)]
    dist.all_reduce_coalesced(tensors)
    for n, t in zip((3, 0, 17), tensors):
        check(
            f"all_reduce_coalesced/{n}",
            torch.equal(t, expected_reduction(dist.ReduceOp.SUM, n, torch.float32)),
        )


def broadcast_and_reduce():
    for root in range(size):
        for dtype in (torch.float32, torch.int64, torch.bool, torch.int16):
            for count in COUNTS:
                x = (
                    value_of(rank, count, dtype)
                    if rank == root
                    else torch.zeros(count, dtype=dtype)
                )
                dist.broadcast(x, root)
                check(
                    f"broadcast/{root}/{dtype}/{count}",
                    torch.equal(x, value_of(root, count, dtype)),
                )
        y = value_of(rank, 1009, torch.float32)
        dist.reduce(y, root, op=dist.ReduceOp.MAX)
        if rank == root:
            check(
                f"reduce/{root}",
                torch.equal(y, expected_reduction(dist.ReduceOp.MAX, 1009, torch.float32)),
            )
        else:
            check(f"reduce/{root}/input kept", torch.equal(y, value_of(rank, 1009, torch.float32)))


def gathers():
    for dtype in (torch.float32, torch.int8, torch.int16, torch.bool):
        for count in COUNTS:
            mine = value_of(rank, count, dtype)
            everyone = [value_of(r, count, dtype) for r in range(size)]
            outs = [torch.empty(count, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, mine)
            check(
                f"all_gather/{dtype}/{count}",
                all(torch.equal(a, b) for a, b in zip(outs, everyone)),
            )
            flat = torch.empty(size * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, mine)
            check(f"all_gather_into_tensor/{dtype}/{count}", torch.equal(flat, torch.cat(everyone)))
            root = count % size
            gathered = (
                [torch.empty(count, dtype=dtype) for _ in range(size)] if rank == root else None
            )
            dist.gather(mine, gathered, dst=root)
            if rank == root:
                check(
                    f"gather/{dtype}/{count}",
                    all(torch.equal(a, b) for a, b in zip(gathered, everyone)),
                )
            piece = torch.empty(count, dtype=dtype)
            dist.scatter(piece, everyone if rank == root else None, src=root)
            check(f"scatter/{dtype}/{count}", torch.equal(piece, everyone[rank]))
    lists = [[torch.empty(2), torch.empty(3, dtype=torch.float32)] for _ in range(size)]
    dist.all_gather_coalesced(lists, [torch.full((2,), float(rank)), torch.full((3,), rank + 0.5)])
    check(
        "all_gather_coalesced",
        all(
            torch.equal(lists[r][0], torch.full((2,), float(r)))
            and torch.equal(lists[r][1], torch.full((3,), r + 0.5))
            for r in range(size)
        ),
    )


def reduce_scatters():
    for dtype in (torch.float32, torch.int32, torch.int16, torch.bfloat16):
        for count in COUNTS:
            inputs = [value_of(rank, count, dtype, offset=r) for r in range(size)]
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter(out, inputs)
            want = sum(value_of(s, count, torch.float64, offset=rank) for s in range(size)).to(
                dtype
            )
            check(
                f"reduce_scatter/{dtype}/{count}", torch.equal(out, want), f"{out[:4]} {want[:4]}"
            )
            out2 = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(out2, torch.cat(inputs), op=dist.ReduceOp.SUM)
            check(f"reduce_scatter_tensor/{dtype}/{count}", torch.equal(out2, want))


# The pairs (dtype, elements a rank) of one coalesced call: a prime count, an empty pair and a
# one-element pair, float32 and int64.
PAIRS = [(torch.float32, 1009), (torch.int64, 7), (torch.float32, 0), (torch.int64, 1)]
LAYOUTS = ("contiguous", "non-contiguous")


def laid_out(t, layout, whole=False):
    """t's values in a fresh tensor: contiguous, or (more than one element a rank) not: every
    other element of a tensor twice as long, or for an all-gather's output (world size x count)
    the (size, count) transpose of a (count, size) tensor, whose row-major order is the flat one."""
    if layout == "contiguous" or (t.numel() // size if whole else t.numel()) <= 1:
        return t.clone()
    if whole and size > 1:
        view = torch.empty(t.numel() // size, size, dtype=t.dtype).t()
    else:
        view = torch.empty(2 * t.numel(), dtype=t.dtype)[::2]
    view.copy_(t.reshape(view.shape))
    assert not view.is_contiguous()
    return view


def run_coalesced(way, one, by_group, outs, ins, group=None):
    """One coalesced call on the pairs (outs[k], ins[k]): `way` is torch's coalescing manager
    (`one(output, input, group)` for each pair inside it), blocking or async, or the
    ProcessGroup's own method (`by_group(process_group, outputs, inputs)`, a Work)."""
    if way == "process group":
        by_group(group or dist.distributed_c10d._get_default_group(), outs, ins).wait()
        return
    with dist._coalescing_manager(group=group, async_ops=way == "manager async") as cm:
        for o, i in zip(outs, ins):
            one(o, i, group)
    if way == "manager async":
        cm.wait()


WAYS = ("manager", "manager async", "process group")


def coalesced_on_gloo(one, by_group, wants, ins):
    """The same coalesced call on a gloo group, through the process group's own method: the
    outputs to compare ringcomm's with, bit for bit."""
    gloo = dist.new_group(backend="gloo")
    by_gloo = [torch.zeros_like(w) for w in wants]
    run_coalesced("process group", one, by_group, by_gloo, ins, group=gloo)
    dist.destroy_process_group(gloo)
    return by_gloo


def bits(t):
    return t.contiguous().view(torch.uint8)


def all_gather_into_tensor_coalesced():
    """all_gather_into_tensor_coalesced: several pairs of two dtypes in one call, and random floats
    in one more, contiguous or not (inputs and outputs): every rank's outputs are the ranks'
    inputs end to end, and bitwise gloo's."""
    noise = [torch.randn(31, generator=torch.Generator().manual_seed(50 + r)) for r in range(size)]
    ins = [value_of(rank, n, dtype, offset=k) for k, (dtype, n) in enumerate(PAIRS)] + [noise[rank]]
    wants = [
        torch.cat([value_of(r, n, dtype, offset=k) for r in range(size)])
        for k, (dtype, n) in enumerate(PAIRS)
    ] + [torch.cat(noise)]

    def one(o, i, group):
        dist.all_gather_into_tensor(o, i, group=group)

    def by_group(pg, outs, ins):
        return pg.allgather_into_tensor_coalesced(outs, ins, AllgatherOptions())

    by_gloo = coalesced_on_gloo(one, by_group, wants, ins)
    for layout in LAYOUTS:
        for way in WAYS:
            outs = [laid_out(torch.zeros_like(w), layout, whole=True) for w in wants]
            run_coalesced(way, one, by_group, outs, [laid_out(i, layout) for i in ins])
            for k, (out, want) in enumerate(zip(outs, wants)):
                name = f"all_gather_into_tensor_coalesced/{layout}/{way}/pair {k}"
                flat = out.reshape(-1)
                check(name, torch.equal(flat, want), f"{flat[:6]} != {want[:6]}")
                check(f"{name}/gloo", torch.equal(bits(flat), bits(by_gloo[k])))


def reduce_scatter_tensor_coalesced():
    """reduce_scatter_tensor_coalesced: several pairs of two dtypes in one call (SUM, MAX, and AVG
    on the floats), contiguous or not (inputs and outputs): each rank's outputs are its block of
    the reduction of every rank's inputs, and gloo's (SUM, MAX; gloo has no AVG)."""
    references = {
        dist.ReduceOp.SUM: lambda stacked: stacked.sum(0),
        dist.ReduceOp.MAX: lambda stacked: stacked.max(0).values,
        dist.ReduceOp.AVG: lambda stacked: stacked.sum(0) / size,
    }
    for op, reduced in references.items():
        kinds = [p for p in PAIRS if op != dist.ReduceOp.AVG or p[0].is_floating_point]
        # Rank s's input k: block r is value_of(s, offset=r + k), so that the blocks differ.
        ins = [
            torch.cat([value_of(rank, n, dtype, offset=r + k) for r in range(size)])
            for k, (dtype, n) in enumerate(kinds)
        ]
        wants = [
            reduced(
                torch.stack([value_of(s, n, torch.float64, offset=rank + k) for s in range(size)])
            ).to(dtype)
            for k, (dtype, n) in enumerate(kinds)
        ]

        def one(o, i, group, op=op):
            dist.reduce_scatter_tensor(o, i, op=op, group=group)

        def by_group(pg, outs, ins, op=op):
            opts = ReduceScatterOptions()
            opts.reduceOp = op
            return pg.reduce_scatter_tensor_coalesced(outs, ins, opts)

        by_gloo = None
        if op != dist.ReduceOp.AVG:
            by_gloo = coalesced_on_gloo(one, by_group, wants, ins)
        for layout in LAYOUTS:
            for way in WAYS:
                outs = [laid_out(torch.zeros_like(w), layout) for w in wants]
                run_coalesced(way, one, by_group, outs, [laid_out(i, layout) for i in ins])
                for k, (out, want) in enumerate(zip(outs, wants)):
                    name = f"reduce_scatter_tensor_coalesced/{op}/{layout}/{way}/pair {k}"
                    check(name, torch.equal(out, want), f"{out[:6]} != {want[:6]}")
                    if by_gloo is not None:
                        check(f"{name}/gloo", torch.equal(bits(out), bits(by_gloo[k])))


def third(values):
    """values (1-d) in every third element (from the second) of a vector of -1s: (it, the view)."""
    backing = torch.full((3 * values.numel(),), -1, dtype=values.dtype)
    backing[1::3] = values
    return backing, backing[1::3]


def gaps_kept(backing):
    """Whether the elements of third()'s vector around the view still hold -1."""
    return bool((backing[0::3] == -1).all() and (backing[2::3] == -1).all())


def in_place_non_contiguous():
    """broadcast, all_reduce (blocking and async), reduce and recv into tensors that are not
    contiguous (every third element of a longer vector, a transposed matrix): the result lands in
    the view's elements, the elements around them are untouched, and random floats reduce to the
    same bits as on a contiguous copy, on every rank."""
    for dtype in (torch.float32, torch.int64):
        for count in (7, 1009):
            for root in range(size):
                mine = (
                    value_of(rank, count, dtype)
                    if rank == root
                    else torch.zeros(count, dtype=dtype)
                )
                backing, view = third(mine)
                dist.broadcast(view, root)
                name = f"broadcast/non-contiguous/{root}/{dtype}/{count}"
                check(name, torch.equal(view, value_of(root, count, dtype)), f"{view[:6]}")
                check(f"{name}/gaps", gaps_kept(backing))
                backing, view = third(value_of(rank, count, dtype))
                dist.reduce(view, root, op=dist.ReduceOp.MAX)
                want = (
                    expected_reduction(dist.ReduceOp.MAX, count, dtype)
                    if rank == root
                    else value_of(rank, count, dtype)
                )
                name = f"reduce/non-contiguous/{root}/{dtype}/{count}"
                check(name, torch.equal(view, want), f"{view[:6]} != {want[:6]}")
                check(f"{name}/gaps", gaps_kept(backing))
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN):
                backing, view = third(value_of(rank, count, dtype))
                dist.all_reduce(view, op=op)
                want = expected_reduction(op, count, dtype)
                name = f"all_reduce/non-contiguous/{op}/{dtype}/{count}"
                check(name, torch.equal(view, want), f"{view[:6]} != {want[:6]}")
                check(f"{name}/gaps", gaps_kept(backing))
            backing, view = third(value_of(rank, count, dtype))
            work = dist.all_reduce(view, async_op=True)
            work.wait()
            want = expected_reduction(dist.ReduceOp.SUM, count, dtype)
            name = f"all_reduce/non-contiguous/async/{dtype}/{count}"
            check(name, torch.equal(view, want), f"{view[:6]} != {want[:6]}")
            check(f"{name}/future", torch.equal(work.get_future().value()[0], want))
            check(f"{name}/gaps", gaps_kept(backing))
        # A transposed (11, 7) matrix, whose row-major order is not its memory's.
        for root in range(size):
            matrix = value_of(rank, 77, dtype).reshape(7, 11) if rank == root else None
            view = (matrix if matrix is not None else torch.zeros(7, 11, dtype=dtype)).t()
            dist.broadcast(view, root)
            want = value_of(root, 77, dtype).reshape(7, 11).t()
            check(f"broadcast/transposed/{root}/{dtype}", torch.equal(view, want), f"{view}")
        view = value_of(rank, 77, dtype).reshape(7, 11).t()
        dist.all_reduce(view, op=dist.ReduceOp.MAX)
        want = expected_reduction(dist.ReduceOp.MAX, 77, dtype).reshape(7, 11).t()
        check(f"all_reduce/transposed/{dtype}", torch.equal(view, want), f"{view}")
        if size > 1:
            nxt, prev = (rank + 1) % size, (rank - 1) % size
            backing, view = third(torch.zeros(1009, dtype=dtype))
            receive = dist.irecv(view, src=prev, tag=21)
            dist.isend(value_of(rank, 1009, dtype), nxt, tag=21).wait()
            receive.wait()
            name = f"recv/non-contiguous/{dtype}"
            check(name, torch.equal(view, value_of(prev, 1009, dtype)), f"{view[:6]}")
            check(f"{name}/gaps", gaps_kept(backing))
    # Random floats, whose sum's rounding depends on the order of the additions: the transposed
    # tensor's result has the bits of the same all-reduce on a contiguous copy, on every rank.
    noise = torch.randn(103, 101, generator=torch.Generator().manual_seed(rank))
    view, copy = noise.t(), noise.t().contiguous()
    dist.all_reduce(view)
    dist.all_reduce(copy)
    check("all_reduce/transposed/bits", torch.equal(bits(view), bits(copy)))
    digest = torch.tensor([zlib.crc32(bits(view).numpy().tobytes())], dtype=torch.int64)
    everyone = torch.zeros(size, dtype=torch.int64)
    dist.all_gather_into_tensor(everyone, digest)
    check("all_reduce/transposed/same bits everywhere", bool((everyone == everyone[0]).all()))


def all_to_all():
    for count in (0, 1, 5):
        inp = torch.arange(size * count, dtype=torch.float32) + 1000 * rank
        out = torch.empty(size * count)
        dist.all_to_all_single(out, inp)
        want = torch.cat(
            [
                torch.arange(rank * count, (rank + 1) * count, dtype=torch.float32) + 1000 * s
                for s in range(size)
            ]
        )
        check(f"all_to_all_single/even/{count}", torch.equal(out, want))
    # Uneven: rank r sends (r + j + 1) rows of width 2 to rank j.
    send = [rank + j + 1 for j in range(size)]
    recv = [s + rank + 1 for s in range(size)]
    inp = torch.cat([torch.full((n, 2), float(100 * rank + j)) for j, n in enumerate(send)])
    out = torch.empty(sum(recv), 2)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
    want = torch.cat([torch.full((n, 2), float(100 * s + rank)) for s, n in enumerate(recv)])
    check("all_to_all_single/uneven", torch.equal(out, want))
    outs = [torch.empty(s + 1, dtype=torch.int64) for s in range(size)]
    dist.all_to_all(
        outs, [torch.full((rank + 1,), 10 * rank + j, dtype=torch.int64) for j in range(size)]
    )
    check(
        "all_to_all/list",
        all(
            torch.equal(outs[s], torch.full((s + 1,), 10 * s + rank, dtype=torch.int64))
            for s in range(size)
        ),
    )


def point_to_point():
    if size < 2:
        return
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    got = torch.empty(1000)
    ops = [
        dist.P2POp(dist.isend, torch.full((1000,), float(rank)), nxt),
        dist.P2POp(dist.irecv, got, prev),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    check("batch_isend_irecv", torch.equal(got, torch.full((1000,), float(prev))))
    if rank == 0:
        seen = set()
        for _ in range(size - 1):
            x = torch.empty(3)
            source = dist.recv(x, tag=7)
            seen.add(source)
            check("recv any source/value", torch.equal(x, torch.full((3,), float(source))))
        check("recv any source/senders", seen == set(range(1, size)), str(seen))
    else:
        dist.send(torch.full((3,), float(rank)), 0, tag=7)
    # Receives posted before the sends they wait for, and exchanges larger than any buffer: the
    # engine must not run a receive to completion before the send queued behind it starts.
    for count in (16, 4 << 20):
        inbox = torch.empty(count)
        receive = dist.irecv(inbox, src=prev, tag=11)
        send = dist.isend(torch.full((count,), float(rank)), nxt, tag=11)
        receive.wait()
        send.wait()
        check(f"irecv before isend/{count}", torch.equal(inbox, torch.full((count,), float(prev))))
        ops = [
            dist.P2POp(dist.irecv, inbox, prev),
            dist.P2POp(dist.isend, torch.full((count,), rank + 0.5), nxt),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        check(f"batch recv first/{count}", torch.equal(inbox, torch.full((count,), prev + 0.5)))
    if rank == 0:
        work = dist.irecv(torch.empty(2), src=size - 1, tag=3)
        work.wait()
    elif rank == size - 1:
        dist.isend(torch.ones(2), 0, tag=3).wait()


def objects():
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * rank})
    check("all_gather_object", objs == [{"rank": r, "pad": "x" * r} for r in range(size)])
    box = [("hello", rank)] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    check("broadcast_object_list", box == [("hello", 0)])
    gathered = [None] * size if rank == 0 else None
    dist.gather_object(rank * 2, gathered, dst=0)
    if rank == 0:
        check("gather_object", gathered == [r * 2 for r in range(size)])
    out = [None]
    dist.scatter_object_list(out, [f"to {r}" for r in range(size)] if rank == 0 else None, src=0)
    check("scatter_object_list", out == [f"to {rank}"])


def subgroups():
    if size < 3:
        return
    members = [0, 2]
    group = dist.new_group(members, backend="ringcomm")
    if rank in members:
        x = torch.full((4,), float(rank))
        dist.all_reduce(x, group=group)
        check("subgroup/all_reduce", torch.equal(x, torch.full((4,), 2.0)))
        check("subgroup/backend", dist.get_backend(group) == "ringcomm")
    # Every rank still talks on the default group afterwards.
    y = torch.ones(2)
    dist.all_reduce(y)
    check("subgroup/default after", torch.equal(y, torch.full((2,), float(size))))
    odd = dist.new_group([r for r in range(size) if r % 2 == 1] or [0])
    if rank % 2 == 1:
        z = torch.ones(1)
        dist.all_reduce(z, group=odd)
        check("subgroup/odd", z.item() == len([r for r in range(size) if r % 2 == 1]))


def mixed_backends():
    """One group, a backend per device: CPU tensors go to ringcomm. (The CPU torch wheel has no
    NCCL, so gloo stands in for the CUDA side.)"""
    group = dist.new_group(list(range(size)), backend="cpu:ringcomm,cuda:gloo")
    x = torch.full((3,), float(rank))
    dist.all_reduce(x, group=group)
    check("mixed/all_reduce", torch.equal(x, torch.full((3,), float(sum(range(size))))))
    check("mixed/backend", "ringcomm" in str(dist.get_backend(group)), str(dist.get_backend(group)))


def barrier():
    for _ in range(3):
        dist.barrier()


def identical_bits():
    """A float sum whose rounding depends on order: every rank must hold the same bits."""
    torch.manual_seed(rank)
    x = torch.randn(100_003)
    dist.all_reduce(x)
    digest = torch.tensor([zlib.crc32(x.numpy().tobytes())], dtype=torch.int64)
    everyone = [torch.empty(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(everyone, digest)
    check("identical bits", all(torch.equal(e, everyone[0]) for e in everyone))


for body in (
    all_reduce,
    all_reduce_async_and_future,
    all_reduce_special_tensors,
    bool_reductions,
    errors_name_the_problem,
    all_reduce_coalesced,
    sparse_all_reduce,
    broadcast_and_reduce,
    gathers,
    reduce_scatters,
    all_gather_into_tensor_coalesced,
    reduce_scatter_tensor_coalesced,
    in_place_non_contiguous,
    all_to_all,
    point_to_point,
    objects,
    subgroups,
    mixed_backends,
    barrier,
    identical_bits,
):
    case(body.__name__, body)

report({"failures": failures, "backend": dist.get_backend()})
dist.destroy_process_group()
