"""One rank of the training benchmark (ringcomm/bench/training.py): times optimizer steps of a
small CNN (or ResNet-50) on synthetic images, with ringcomm's DistributedOptimizer, or with DDP
on gloo or on the ringcomm backend; on the CPU or on a GPU (rank r on GPU r % count)."""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

# Each model's input images (channels, height, width) and classes.
INPUTS = {"cnn": ((3, 32, 32), 10), "resnet50": ((3, 224, 224), 1000)}


def make_model(name: str = "cnn") -> torch.nn.Module:
    """cnn: 2.7M parameters (10.8 MB of float32 gradients) for 3x32x32 images; resnet50:
    torchvision's, 25.6M parameters for 3x224x224 (Horovod's pytorch_synthetic_benchmark)."""
    if name == "resnet50":
        try:
            import torchvision
        except ImportError as error:
            raise SystemExit(
                "--model resnet50 needs torchvision: pip install torchvision"
            ) from error
        return torchvision.models.resnet50()
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(128 * 8 * 8, 320),
        torch.nn.ReLU(),
        torch.nn.Linear(320, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=("ringcomm", "gloo", "ringcomm-ddp"), required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", choices=sorted(INPUTS), default="cnn")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    if args.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RINGCOMM_LOCAL_RANK", "0")))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    model = make_model(args.model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    if args.impl == "ringcomm":
        import ringcomm.torch as hvd

        hvd.init()
        rank, size, barrier = hvd.rank(), hvd.size(), hvd.barrier
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=getattr(hvd.Compression, args.compression),
        )
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo" if args.impl == "gloo" else "ringcomm")
        rank, size, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
        device_ids = [device] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

    shape, classes = INPUTS[args.model]
    images = torch.randn(args.batch_size, *shape).to(device)
    labels = torch.randint(0, classes, (args.batch_size,)).to(device)

    def settle() -> None:
        """Every rank's steps so far done: the GPU's too, not only queued."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        barrier()

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    settle()
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    settle()
    elapsed = time.perf_counter() - started
    if rank == 0:
        per_rank = args.batch_size * args.steps / elapsed
        with open(args.out, "w") as f:
            json.dump(
                {
                    "images_per_second_per_rank": per_rank,
                    "images_per_second": per_rank * size,
                    "step_ms": 1000 * elapsed / args.steps,
                    "ranks": size,
                },
                f,
            )
    if args.impl == "ringcomm":
        hvd.shutdown()
    else:
        # DDP holds the process group: released first, gloo's threads end while Python is whole
        # (left to the interpreter's exit, one may abort the process: examples/train.py).
        del model, optimizer
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
