"""DistributedOptimizer against a single-process run on the concatenated batch.

Every rank trains the same model on its shard of a fixed batch; after each step the parameters
must equal those of one process that trained on the whole batch (the average of per-shard mean
gradients is the full batch's mean gradient when shards are equal), and be identical across ranks.
Also: a parameter that is unused on some ranks, backward_passes_per_step, groups, compression.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402
from ringcomm import _core  # noqa: E402
from ringcomm.torch import state as hvd_state  # noqa: E402
from ringcomm.torch.compression import Compressor, round_to_wire  # noqa: E402

torch.manual_seed(0)
hvd.init()
rank, size = hvd.rank(), hvd.size()
failures = Failures()
case = failures.case


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5)
        )
        self.sometimes = torch.nn.Linear(20, 5)  # used only when the flag says so

    def forward(self, x, use_sometimes=False):
        out = self.body(x)
        return out + self.sometimes(x) if use_sometimes else out


def data(steps, per_rank):
    g = torch.Generator().manual_seed(1234)
    return [
        (
            torch.randn(per_rank * size, 20, generator=g),
            torch.randint(0, 5, (per_rank * size,), generator=g),
        )
        for _ in range(steps)
    ]


def train(distributed, steps=4, per_rank=8, passes=1, sometimes=lambda step, r: False, **options):
    torch.manual_seed(7)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if distributed:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(
            opt,
            named_parameters=model.named_parameters(),
            backward_passes_per_step=passes,
            **options,
        )
    for step, (x, y) in enumerate(data(steps, per_rank * passes)):
        opt.zero_grad()
        shards = x.chunk(size * passes), y.chunk(size * passes)
        for k in range(passes):
            index = rank * passes + k if distributed else None
            if distributed:
                xs, ys = shards[0][index], shards[1][index]
                use = sometimes(step, rank)
            else:
                xs, ys, use = x, y, False
            loss = torch.nn.functional.cross_entropy(model(xs, use), ys)
            # As in Horovod, accumulated passes are summed, not averaged: scale the loss.
            (loss / passes).backward()
        opt.step()
    return model


def same(a, b, tolerance):
    return all(
        torch.allclose(p, q, atol=tolerance, rtol=tolerance)
        for p, q in zip(a.parameters(), b.parameters())
    )


def identical_across_ranks(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    return all(torch.equal(gathered[0], gathered[r]) for r in range(size))


def matches_single_process():
    reference = train(False)
    for options in (
        {},
        {"groups": 2},
        {"gradient_predivide_factor": 2.0},
    ):
        model = train(True, **options)
        if not same(model, reference, 1e-5):
            failures.append(f"{options}: differs from the single-process run")
        if not identical_across_ranks(model):
            failures.append(f"{options}: ranks disagree")


def unused_parameters_do_not_hang():
    # The extra layer is used on rank 0 only, on even steps: its gradient is missing elsewhere.
    model = train(True, sometimes=lambda step, r: r == 0 and step % 2 == 0)
    if not identical_across_ranks(model):
        failures.append("unused parameters: ranks disagree")


def accumulation():
    reference = train(False, passes=1, per_rank=8)
    model = train(True, passes=2, per_rank=4)  # two half-size passes per step: the same batch
    if not same(model, reference, 1e-5):
        failures.append("backward_passes_per_step=2: differs from the single-process run")


def compressed():
    reference = train(False)
    model = train(True, compression=hvd.Compression.fp16)
    if not same(model, reference, 2e-2) or not identical_across_ranks(model):
        failures.append("fp16 compression: too far from the single-process run, or ranks disagree")


def eight_bit_with_error_feedback():
    reference = train(False)
    for compression, tolerance in ((hvd.Compression.int8, 2e-2), (hvd.Compression.fp8, 5e-2)):
        name = compression.codec
        model = train(True, compression=compression)
        if not same(model, reference, tolerance) or not identical_across_ranks(model):
            failures.append(f"{name}: too far from the single-process run, or ranks disagree")
        # Each gradient's rounding error is kept for the next step, per parameter: after one
        # step, what rounding this rank's gradient lost (the gradient from a twin of the model:
        # the optimizer's hooks round and reduce the model's own during backward).
        x, y = data(1, 8)[0]
        torch.manual_seed(7)
        twin = Net()
        torch.nn.functional.cross_entropy(twin(x, False), y).backward()
        gradient = {n: p.grad.clone() for n, p in twin.named_parameters() if p.grad is not None}
        torch.manual_seed(7)
        net = Net()
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(net.parameters(), lr=0.1),
            named_parameters=net.named_parameters(),
            compression=compression,
        )
        torch.nn.functional.cross_entropy(net(x, False), y).backward()
        opt.step()
        kept = opt._residuals
        if size == 1:  # one rank alone reduces nothing, and rounds nothing
            if kept:
                failures.append(f"{name}: residuals kept at one rank: {sorted(kept)}")
            continue
        # Unused parameters were submitted as zeros: nothing lost.
        unused = [n for n in kept if n not in gradient]
        if sorted(set(kept) - set(unused)) != sorted(gradient) or any(
            kept[n].abs().max() != 0 for n in unused
        ):
            failures.append(
                f"{name}: residuals kept for {sorted(kept)}, gradients {sorted(gradient)}"
            )
            continue
        for n in gradient:
            rounded = gradient[n].contiguous().clone()
            round_to_wire(rounded, name)
            if not torch.equal(kept[n], gradient[n] - rounded):
                failures.append(f"{name}: the residual of {n} is not what rounding lost")


def optimizer_state():
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1))
    model(torch.randn(2, 20)).sum().backward()
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    if opt.param_groups[0]["lr"] != 0.01:
        failures.append(f"broadcast_optimizer_state: lr {opt.param_groups[0]['lr']}")


def state_of(opt) -> torch.Tensor:
    return torch.cat(
        [
            v.reshape(-1).double()
            for s in opt.state.values()
            for v in s.values()
            if torch.is_tensor(v)
        ]
    )


def optimizer_state_before_any_step():
    """Horovod's way: an optimizer with no state yet is stepped once with zero gradients, so
    that it has state to receive; frozen parameters and parameters without gradients work."""
    torch.manual_seed(rank)
    model = Net()
    model.sometimes.weight.requires_grad_(False)  # frozen: no state
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for name, make in (
        ("Adam", lambda ps: torch.optim.Adam(ps, lr=0.01 * (rank + 1))),
        ("SGD", lambda ps: torch.optim.SGD(ps, lr=0.1 * (rank + 1), momentum=0.9)),
    ):
        opt = hvd.DistributedOptimizer(
            make(model.parameters()), named_parameters=model.named_parameters()
        )
        hvd.broadcast_optimizer_state(opt, root_rank=size - 1)
        expected = 0.01 * size if name == "Adam" else 0.1 * size
        if abs(opt.param_groups[0]["lr"] - expected) > 1e-12:
            failures.append(f"fresh {name}: lr {opt.param_groups[0]['lr']}, expected {expected}")
        if len(opt.state) == 0:
            failures.append(f"fresh {name}: no state was created")
        gathered = hvd.allgather(state_of(opt).unsqueeze(0))
        if not all(torch.equal(gathered[0], gathered[r]) for r in range(size)):
            failures.append(f"fresh {name}: ranks' states differ")
        opt.zero_grad()
    stateless = torch.optim.SGD(model.parameters(), lr=0.1)
    hvd.broadcast_optimizer_state(stateless, root_rank=0)  # nothing to send: no error
    try:
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)
        failures.append("LBFGS: no error")
    except ValueError as error:
        if "LBFGS" not in str(error):
            failures.append(f"LBFGS: {error}")


class Bag(torch.nn.Module):
    """An embedding with sparse gradients, and a dense layer after it."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 8, sparse=True)
        self.out = torch.nn.Linear(8, 5)

    def forward(self, ids):
        return self.out(self.embedding(ids).mean(1))


def sparse_gradients():
    """nn.Embedding(sparse=True): gradients all-gathered (Horovod's default) or made dense
    (sparse_as_dense=True); either way the same as one process on the whole batch."""
    g = torch.Generator().manual_seed(5)
    batches = [
        (
            torch.randint(0, 50, (4 * size, 3), generator=g),
            torch.randint(0, 5, (4 * size,), generator=g),
        )
        for _ in range(3)
    ]

    def run(distributed, **options):
        torch.manual_seed(11)
        model = Bag()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        if distributed:
            opt = hvd.DistributedOptimizer(
                opt, named_parameters=model.named_parameters(), **options
            )
            hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
        for ids, labels in batches:
            opt.zero_grad()
            if distributed:
                ids, labels = ids[4 * rank : 4 * rank + 4], labels[4 * rank : 4 * rank + 4]
            torch.nn.functional.cross_entropy(model(ids), labels).backward()
            opt.step()
        return model

    reference = run(False)
    for options in ({}, {"sparse_as_dense": True}):
        model = run(True, **options)
        if not same(model, reference, 1e-5):
            failures.append(f"sparse gradients {options}: differ from the single-process run")
        if not identical_across_ranks(model):
            failures.append(f"sparse gradients {options}: ranks disagree")


class Doubled(Compressor):
    """A compressor of the user's: float64, doubled on the wire, halved back."""

    @staticmethod
    def compress(tensor):
        return tensor.double() * 2, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return (tensor / 2).to(ctx)


def custom_compressor():
    reference = train(False)
    model = train(True, compression=Doubled)
    if not same(model, reference, 1e-5) or not identical_across_ranks(model):
        failures.append("custom compressor: differs from the single-process run, or ranks disagree")


def zero_grad_in_flight_is_refused():
    if size == 1:
        return  # one rank has no hooks: nothing is in flight before step()
    model = Net()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    model(torch.randn(2, 20)).sum().backward()
    try:
        opt.zero_grad()
        failures.append("zero_grad() in flight: no error")
    except AssertionError as error:
        if "race condition" not in str(error):
            failures.append(f"zero_grad() in flight: {error}")
    opt.synchronize()
    opt.zero_grad()


def uneven_data_with_join():
    torch.manual_seed(7)
    model = Net()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters(),
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for x, y in data(5 - rank, 4):  # rank r runs out of data r steps early
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[:4]), y[:4]).backward()
        opt.step()
    last = hvd.join()
    if last != 0:
        failures.append(f"join returned {last}, expected 0 (the rank with the most data)")
    contributors = hvd_state.join_policy() == _core.JoinPolicy.contributors
    if not contributors:
        # Horovod's join leaves the ranks that joined early behind: the script catches them up.
        hvd.broadcast_parameters(model.state_dict(), root_rank=last)
        hvd.broadcast_optimizer_state(opt, root_rank=last)
    if not identical_across_ranks(model):
        failures.append(f"join ({hvd_state.join_policy()}): replicas differ")
    x, y = data(1, 4)[0]  # all ranks train together again afterwards
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x[:4]), y[:4]).backward()
    opt.step()
    if not identical_across_ranks(model):
        failures.append("join: replicas differ after training resumed")


def gradient_computed_twice_is_refused():
    model = Net()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    x, y = data(1, 4)[0]
    torch.nn.functional.cross_entropy(model(x[:4]), y[:4]).backward()
    try:
        torch.nn.functional.cross_entropy(model(x[:4]), y[:4]).backward()
        if size > 1:  # one rank alone registers no hooks and accumulates, as in Horovod
            failures.append("second backward before step(): no error")
    except AssertionError as error:
        if "more than backward_passes_per_step times" not in str(error):
            failures.append(f"second backward before step(): {error}")
    opt.synchronize()  # the first pass's all-reduces complete on every rank
    opt.zero_grad()


def under_contributors_policy(body):
    hvd.shutdown()
    hvd.init(join_policy="contributors")
    try:
        body()
    finally:
        hvd.shutdown()
        hvd.init()


for name, body in [
    ("matches", matches_single_process),
    ("join", uneven_data_with_join),
    ("join/contributors", lambda: under_contributors_policy(uneven_data_with_join)),
    ("unused", unused_parameters_do_not_hang),
    ("accumulation", accumulation),
    ("compressed", compressed),
    ("8-bit with error feedback", eight_bit_with_error_feedback),
    ("optimizer_state", optimizer_state),
    ("fresh optimizer state", optimizer_state_before_any_step),
    ("sparse", sparse_gradients),
    ("custom compressor", custom_compressor),
    ("zero_grad in flight", zero_grad_in_flight_is_refused),
    ("twice", gradient_computed_twice_is_refused),
]:
    case(name, body)
report({"rank": rank, "failures": failures})
hvd.shutdown()
