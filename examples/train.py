"""Train a small convolutional network on the UCI handwritten digits, data-parallel.

The data (1,797 8x8 images, 10 classes) ships inside scikit-learn: nothing is downloaded. Runs
unchanged as one process or many:

    python examples/train.py
    mpirun -np 4 python examples/train.py
    torchrun --nproc-per-node 4 examples/train.py
    ringcomm-run -np 4 examples/train.py

Each rank trains on its shard of every batch; DistributedOptimizer averages the gradients while
backward runs. Prints loss, accuracy and throughput, and checks at the end that every rank holds
the same parameters.
"""

import argparse
import hashlib
import time

import torch
from sklearn.datasets import load_digits

import ringcomm.torch as hvd


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch, split over ranks")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--compression", choices=("none", "fp16", "bf16"), default="none")
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)  # ranks share the machine's cores
    torch.manual_seed(0)
    (train_x, train_y), (test_x, test_y) = load(seed=0)
    model = DigitNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=getattr(hvd.Compression, args.compression),
    )

    per_rank = args.batch_size // hvd.size()
    steps = len(train_y) // args.batch_size
    first_loss = last_loss = None
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(epoch))
        started, total = time.perf_counter(), 0.0
        model.train()
        for step in range(steps):
            batch = order[step * args.batch_size : (step + 1) * args.batch_size]
            mine = batch[hvd.rank() * per_rank : (hvd.rank() + 1) * per_rank]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(train_x[mine]), train_y[mine])
            loss.backward()
            optimizer.step()
            total += loss.item()
        elapsed = time.perf_counter() - started
        epoch_loss = hvd.allreduce(torch.tensor(total / steps)).item()
        first_loss = epoch_loss if first_loss is None else first_loss
        last_loss = epoch_loss
        model.eval()
        with torch.no_grad():
            accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        if hvd.rank() == 0:
            images = steps * args.batch_size
            print(
                f"epoch {epoch + 1}: loss {epoch_loss:.4f}  test accuracy {accuracy:.3f}  "
                f"{images / elapsed:,.0f} images/s total, "
                f"{images / elapsed / hvd.size():,.0f} per rank",
                flush=True,
            )

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digests = hvd.allgather_object(hashlib.sha256(flat.numpy().tobytes()).hexdigest())
    identical = len(set(digests)) == 1
    if hvd.rank() == 0:
        print(
            f"loss {first_loss:.4f} -> {last_loss:.4f}; parameters identical on all "
            f"{hvd.size()} ranks: {identical}",
            flush=True,
        )
    hvd.shutdown()
    if not identical or not last_loss < first_loss:
        raise SystemExit("training did not converge identically on all ranks")


if __name__ == "__main__":
    main()
