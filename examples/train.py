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
"""

import argparse
import hashlib
import os
import socket
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import ringcomm.torch as hvd
from ringcomm import _devices

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

    def wrap(self, model, optimizer, compression: str):
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

    def wrap(self, model, optimizer, compression: str):
        on_gpu = next(model.parameters()).is_cuda
        device_ids = [torch.cuda.current_device()] if on_gpu else None
        # Broadcasts rank 0's parameters.
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        if compression == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif compression != "none":
            raise SystemExit("--api ddp supports --compression none or fp16")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch, split over ranks")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--compression", choices=("none", "fp16", "bf16"), default="none")
    parser.add_argument("--api", choices=("horovod", "ddp"), default="horovod")
    parser.add_argument(
        "--backend",
        choices=("ringcomm", "gloo"),
        default="ringcomm",
        help="the process-group backend of --api ddp (gloo: to compare against)",
    )
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args()
    if args.backend != "ringcomm" and args.api != "ddp":
        parser.error("--backend applies to --api ddp")

    torch.set_num_threads(1)  # ranks share the machine's cores
    torch.manual_seed(0)
    training = HorovodTraining() if args.api == "horovod" else DdpTraining(args.backend)
    rank, size = training.rank, training.size
    device = choose_device(args.device, training.local_rank)
    (train_x, train_y), (test_x, test_y) = load(seed=0)
    train_x, train_y, test_x, test_y = (t.to(device) for t in (train_x, train_y, test_x, test_y))
    model = DigitNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer = training.wrap(model, optimizer, args.compression)

    per_rank = args.batch_size // size
    steps = len(train_y) // args.batch_size
    first_loss = last_loss = None
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(epoch))
        order = order.to(device)
        started, total = time.perf_counter(), 0.0
        model.train()
        for step in range(steps):
            batch = order[step * args.batch_size : (step + 1) * args.batch_size]
            mine = batch[rank * per_rank : (rank + 1) * per_rank]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(train_x[mine]), train_y[mine])
            loss.backward()
            optimizer.step()
            total += loss.item()
        elapsed = time.perf_counter() - started
        epoch_loss = training.average(total / steps)
        first_loss = epoch_loss if first_loss is None else first_loss
        last_loss = epoch_loss
        model.eval()
        with torch.no_grad():
            accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        if rank == 0:
            images = steps * args.batch_size
            print(
                f"epoch {epoch + 1}: loss {epoch_loss:.4f}  test accuracy {accuracy:.3f}  "
                f"{images / elapsed:,.0f} images/s total, "
                f"{images / elapsed / size:,.0f} per rank",
                flush=True,
            )

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digests = training.gather_object(hashlib.sha256(flat.cpu().numpy().tobytes()).hexdigest())
    identical = len(set(digests)) == 1
    if rank == 0:
        print(
            f"loss {first_loss:.4f} -> {last_loss:.4f}; parameters identical on all "
            f"{size} ranks ({device.type}): {identical}",
            flush=True,
        )
    # The wrapped model holds the process group: released here, its threads end while Python is
    # still whole. Left to the interpreter's exit, a gloo worker thread that then asks for the GIL
    # is ended by Python mid-C++ and aborts the process (torch 2.13, about 1 run in 4 at 2 ranks).
    del model, optimizer
    training.shutdown()
    if not identical or not last_loss < first_loss:
        raise SystemExit("training did not converge identically on all ranks")


if __name__ == "__main__":
    main()
