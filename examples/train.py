"""Train a small convolutional network on the UCI handwritten digits, data-parallel.

The data (1,797 8x8 images, 10 classes) ships inside scikit-learn: nothing is downloaded. Runs
unchanged as one process or many:

    python examples/train.py
    mpirun -np 4 python examples/train.py
    torchrun --nproc-per-node 4 examples/train.py
    ringcomm-run -np 4 examples/train.py

Each rank trains on its shard of every batch and the gradients are averaged while backward runs:
by Horovod's DistributedOptimizer (``--api horovod``, the default: ringcomm.torch) or by torch's
DistributedDataParallel on the "ringcomm" process-group backend (``--api ddp``; ``--backend gloo``
runs the same on gloo, to compare). Prints loss,
accuracy and throughput, and checks at the end that every rank holds the same parameters.

``--device cuda`` trains on GPUs, one per local rank (ranks share GPUs when there are fewer);
the default, ``auto``, does so when torch sees a GPU and ringcomm was built with CUDA.

Gradients on the wire: ``--compression`` none, fp16, bf16, int8 or fp8, in either API (the 8-bit
codecs with error feedback; under ``--api ddp`` fp16 is torch's fp16_compress_hook, the others
ringcomm's compress_hook, which needs the ringcomm backend); ``--powersgd RANK`` (``--api ddp``,
either backend) registers torch's PowerSGD hook instead. ``--model wide`` trains a 4.3M-parameter
MLP on the same images, whose 17 MB of float32 gradients a step make the all-reduce, not the
arithmetic, the cost of a step on a 1 Gbit/s link.

Time to accuracy: ``--target-accuracy 0.95`` evaluates the test set (360 images, split over the
ranks) every ``--eval-every`` steps and at each epoch's end, and records when it first reaches the
target: the training time to there (the clock stops while the test set is evaluated) and the
step. ``--json PATH`` writes that, the final accuracy, the time per step and the whole (time,
step, accuracy) curve for a driver (bench/time_to_accuracy.py).
"""

import argparse
import hashlib
import json
import os
import socket
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

import ringcomm.torch as hvd
from ringcomm import _devices
from ringcomm.c10d import hooks

# PowerSGD all-reduces gradients uncompressed for its first steps, which torch advises to get past
# the fast early changes that a low-rank approximation follows poorly. torch's default, 1000
# steps, is more than a whole run here (22 steps an epoch at the default batch); 10 steps let
# the compression carry nearly all of a run while the first, largest gradients go whole.
POWERSGD_START_STEP = 10
# With --target-accuracy or --json and no --eval-every: the test set every this many steps
# (a quarter of an epoch at the default batch; 360 images, split over the ranks, are cheap).
DEFAULT_EVAL_EVERY = 5

# Set by torchrun, MPICH / Open MPI / PMIx launchers: without them this is a one-process run.
_LAUNCHER_VARIABLES = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


class DigitNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.classifier = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(64 * 4 * 4, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 10),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class WideNet(torch.nn.Module):
    """An MLP of 4.3M parameters (64 -> 2048 -> 2048 -> 10) on the same images: 17 MB of float32
    gradients a step for little arithmetic, so that on a 1 Gbit/s link the all-reduce dominates
    a step, as in the communication-bound training compression is meant for."""

    def __init__(self, width: int = 2048):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(64, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 10),
        )

    def forward(self, x):
        return self.layers(x)


MODELS = {"digits": DigitNet, "wide": WideNet}


def load(seed: int):
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    images, labels = images[order], labels[order]
    split = int(0.8 * len(labels))
    return (images[:split], labels[:split]), (images[split:], labels[split:])


class HorovodTraining:
    """ringcomm.torch, used exactly as a Horovod script uses horovod.torch."""

    def __init__(self):
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def wrap(self, model, optimizer, compression: str, powersgd: int = 0):
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=getattr(hvd.Compression, compression),
        )
        return model, optimizer

    def average(self, value: float) -> float:
        return hvd.allreduce(torch.tensor(value)).item()

    def gather_object(self, obj) -> list:
        return hvd.allgather_object(obj)

    def shutdown(self) -> None:
        hvd.shutdown()


def _rendezvous_through_mpi() -> None:
    """Under mpirun, the env:// variables another backend (gloo) needs, agreed through MPI.

    ringcomm's backend finds its ranks under mpirun by itself; gloo reads RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT, which mpirun does not set.
    """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    address = None
    if world.Get_rank() == 0:
        with socket.socket() as probe:
            probe.bind(("", 0))
            address = (socket.gethostname(), probe.getsockname()[1])
    host, port = world.bcast(address, root=0)
    os.environ.update(
        RANK=str(world.Get_rank()),
        WORLD_SIZE=str(world.Get_size()),
        MASTER_ADDR=host,
        MASTER_PORT=str(port),
    )


class DdpTraining:
    """torch.distributed and DistributedDataParallel, on the "ringcomm" backend or another."""

    def __init__(self, backend: str):
        if any(name in os.environ for name in _LAUNCHER_VARIABLES):
            if backend != "ringcomm" and "MASTER_ADDR" not in os.environ:
                _rendezvous_through_mpi()
            dist.init_process_group(backend)  # env:// (or MPI, ringcomm under mpirun)
        else:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            dist.init_process_group(
                backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
            )
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    def wrap(self, model, optimizer, compression: str, powersgd: int = 0):
        on_gpu = next(model.parameters()).is_cuda
        device_ids = [torch.cuda.current_device()] if on_gpu else None
        buckets = {}
        if powersgd:
            # One bucket for all the gradients. PowerSGD's callbacks start all-reduces of their
            # own while backward still hands over later buckets, so with several buckets in
            # flight the ranks can start them in different orders: ringcomm stops on the mismatch
            # and gloo, which also matches collectives in call order, can hang or mix them up
            # (docs/guides/torch-backend.md). Given explicitly, the cap holds for the first
            # bucket too (torch's default caps that one at 1 MiB).
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            buckets["bucket_cap_mb"] = size // 2**20 + 1
        # Broadcasts rank 0's parameters.
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **buckets)
        if powersgd:
            state = powerSGD_hook.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=powersgd,
                start_powerSGD_iter=POWERSGD_START_STEP,
            )
            model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        elif compression == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif compression != "none":  # bf16, int8, fp8: ringcomm's codecs (its backend only)
            model.register_comm_hook(hooks.CompressionState(codec=compression), hooks.compress_hook)
        return model, optimizer

    def average(self, value: float) -> float:
        total = torch.tensor(value)
        dist.all_reduce(total)
        return total.item() / self.size

    def gather_object(self, obj) -> list:
        gathered = [None] * self.size
        dist.all_gather_object(gathered, obj)
        return gathered

    def shutdown(self) -> None:
        dist.destroy_process_group()


def choose_device(requested: str, local_rank: int) -> torch.device:
    """This rank's device: a GPU of its own where there are enough, shared where there are not."""
    usable = torch.cuda.is_available() and _devices.built_with_cuda()
    if requested == "cpu" or (requested == "auto" and not usable):
        return torch.device("cpu")
    if not usable:
        raise SystemExit(
            "--device cuda: torch sees no GPU, or ringcomm was built without CUDA "
            "(pip install -Ccmake.define.RINGCOMM_BUILD_CUDA=ON -e .)"
        )
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


class Progress:
    """Test accuracy along the run, against a clock that runs only while the ranks train: it
    stops while the test set is evaluated and between epochs, so that what evaluation costs
    (more, the more often it is done) counts in no row's time to accuracy."""

    def __init__(self, target):
        self.target = target
        self.seconds = 0.0
        self.curve = []  # (training seconds, step, test accuracy)
        self.reached = None  # (seconds, step) where the target was first met
        self._since = None

    def resume(self) -> None:
        self._since = time.perf_counter()

    def pause(self) -> None:
        self.seconds += time.perf_counter() - self._since

    def record(self, step: int, accuracy: float) -> None:
        if self.curve and self.curve[-1][1] == step:
            return  # evaluated already at this step
        self.curve.append((self.seconds, step, accuracy))
        if self.target is not None and self.reached is None and accuracy >= self.target:
            self.reached = (self.seconds, step)


def test_accuracy(model, test_x, test_y, training) -> float:
    """The accuracy on the test set, each rank evaluating every size-th image and the counts
    summed: every rank gets the same answer, for a share of the work."""
    rank, size = training.rank, training.size
    model.eval()
    with torch.no_grad():
        correct = (model(test_x[rank::size]).argmax(1) == test_y[rank::size]).sum().item()
    model.train()
    return round(training.average(float(correct)) * size) / len(test_y)


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch, split over ranks")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--model", choices=tuple(MODELS), default="digits")
    parser.add_argument(
        "--compression",
        choices=("none", "fp16", "bf16", "int8", "fp8"),
        default="none",
        help="gradients on the wire (int8, fp8: with error feedback); under --api ddp, bf16, "
        "int8 and fp8 need --backend ringcomm",
    )
    parser.add_argument(
        "--powersgd",
        type=int,
        default=0,
        metavar="RANK",
        help=f"--api ddp: torch's PowerSGD hook, of this matrix rank (from step "
        f"{POWERSGD_START_STEP}; before it, whole gradients)",
    )
    parser.add_argument("--api", choices=("horovod", "ddp"), default="horovod")
    parser.add_argument(
        "--backend",
        choices=("ringcomm", "gloo"),
        default="ringcomm",
        help="the process-group backend of --api ddp (gloo: to compare against)",
    )
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        metavar="A",
        help="record the training time and step at which the test accuracy first reaches A",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        help=f"evaluate the test set every N steps (default: {DEFAULT_EVAL_EVERY} with "
        "--target-accuracy or --json, else at each epoch's end only)",
    )
    parser.add_argument("--json", metavar="PATH", help="rank 0 writes the run's results here")
    args = parser.parse_args()
    if args.backend != "ringcomm" and args.api != "ddp":
        parser.error("--backend applies to --api ddp")
    if args.powersgd < 0:
        parser.error("--powersgd RANK: a matrix rank of 1 or more")
    if args.powersgd and args.api != "ddp":
        parser.error("--powersgd is a DDP comm hook: add --api ddp")
    if args.powersgd and args.compression != "none":
        parser.error("--powersgd and --compression are two comm hooks: choose one")
    if args.api == "ddp" and args.compression in hooks.CODECS and args.compression != "fp16":
        if args.backend != "ringcomm":
            parser.error(
                f"--compression {args.compression} under --api ddp is ringcomm's comm hook, which "
                f"needs --backend ringcomm ({args.backend} has fp16, through torch's hook, and "
                "--powersgd)"
            )
    if args.eval_every is None:
        wanted = args.target_accuracy is not None or args.json
        args.eval_every = DEFAULT_EVAL_EVERY if wanted else 0
    return args


def main() -> None:
    args = parse_arguments()
    torch.set_num_threads(1)  # ranks share the machine's cores
    torch.manual_seed(0)
    training = HorovodTraining() if args.api == "horovod" else DdpTraining(args.backend)
    rank, size = training.rank, training.size
    device = choose_device(args.device, training.local_rank)
    (train_x, train_y), (test_x, test_y) = load(seed=0)
    train_x, train_y, test_x, test_y = (t.to(device) for t in (train_x, train_y, test_x, test_y))
    model = MODELS[args.model]().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer = training.wrap(model, optimizer, args.compression, args.powersgd)

    per_rank = args.batch_size // size
    steps = len(train_y) // args.batch_size
    first_loss = last_loss = first_step_loss = None
    progress = Progress(args.target_accuracy)
    done = 0  # optimizer steps, over all epochs
    if args.eval_every:  # where the curve starts
        progress.record(0, test_accuracy(model, test_x, test_y, training))
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(epoch))
        order = order.to(device)
        started, total, evaluating = time.perf_counter(), 0.0, 0.0
        model.train()
        progress.resume()
        for step in range(steps):
            batch = order[step * args.batch_size : (step + 1) * args.batch_size]
            mine = batch[rank * per_rank : (rank + 1) * per_rank]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(train_x[mine]), train_y[mine])
            loss.backward()
            optimizer.step()
            total += loss.item()
            first_step_loss = loss.item() if first_step_loss is None else first_step_loss
            done += 1
            if args.eval_every and done % args.eval_every == 0 and step + 1 < steps:
                progress.pause()
                paused = time.perf_counter()
                progress.record(done, test_accuracy(model, test_x, test_y, training))
                evaluating += time.perf_counter() - paused
                progress.resume()
        progress.pause()
        elapsed = time.perf_counter() - started - evaluating
        epoch_loss = training.average(total / steps)
        first_loss = epoch_loss if first_loss is None else first_loss
        last_loss = epoch_loss
        model.eval()
        with torch.no_grad():
            accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        progress.record(done, accuracy)
        if rank == 0:
            images = steps * args.batch_size
            print(
                f"epoch {epoch + 1}: loss {epoch_loss:.4f}  test accuracy {accuracy:.3f}  "
                f"{images / elapsed:,.0f} images/s total, "
                f"{images / elapsed / size:,.0f} per rank",
                flush=True,
            )
    if args.epochs == 1:  # one epoch: did its loss fall below the first step's?
        first_loss = training.average(first_step_loss)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digests = training.gather_object(hashlib.sha256(flat.cpu().numpy().tobytes()).hexdigest())
    identical = len(set(digests)) == 1
    if rank == 0:
        if args.target_accuracy is not None:
            reached = (
                f"reached at step {progress.reached[1]} after {progress.reached[0]:.2f} s of "
                "training"
                if progress.reached
                else "not reached"
            )
            print(
                f"target accuracy {args.target_accuracy:.3f} {reached}; final accuracy "
                f"{accuracy:.3f} after {done} steps, {progress.seconds:.2f} s",
                flush=True,
            )
        print(
            f"loss {first_loss:.4f} -> {last_loss:.4f}; parameters identical on all "
            f"{size} ranks ({device.type}): {identical}",
            flush=True,
        )
        if args.json:
            write_results(args.json, args, progress, accuracy, done, size, identical)
    # The wrapped model holds the process group: released here, its threads end while Python is
    # still whole. Left to the interpreter's exit, a gloo worker thread that then asks for the GIL
    # is ended by Python mid-C++ and aborts the process (torch 2.13, about 1 run in 4 at 2 ranks).
    del model, optimizer
    training.shutdown()
    if not identical or not last_loss < first_loss:
        raise SystemExit("training did not converge identically on all ranks")


def write_results(path, args, progress: Progress, accuracy: float, steps: int, size: int,
                  identical: bool) -> None:  # fmt: skip
    """What a driver reads: the run's settings, the time and step to the target accuracy (None
    where it was not reached), the final accuracy, and the curve."""
    reached = progress.reached
    results = {
        "model": args.model,
        "api": args.api,
        "backend": args.backend,
        "compression": args.compression,
        "powersgd": args.powersgd,
        "ranks": size,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "target_accuracy": args.target_accuracy,
        "target_reached": reached is not None,
        "seconds_to_target": reached[0] if reached else None,
        "steps_to_target": reached[1] if reached else None,
        "final_accuracy": accuracy,
        "train_seconds": progress.seconds,
        "steps": steps,
        "ms_per_step": 1000 * progress.seconds / steps if steps else None,
        "identical": identical,
        "curve": [list(point) for point in progress.curve],
    }
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
