"""The loop of Horovod's examples/pytorch/pytorch_synthetic_benchmark.py on DDP (gloo by default):
the same model, fixed random batch, SGD step and timing, so its images/s stand beside the
Horovod script's. Launch it with torchrun (bench/horovod_synthetic.py does).

    torchrun --nproc-per-node 4 bench/ddp_synthetic_benchmark.py --model resnet50 --backend gloo
"""

import argparse
import timeit

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 (the name Horovod's script uses)
from torchvision import models

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="resnet50")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--num-warmup-batches", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--backend", default="gloo")
args = parser.parse_args()

dist.init_process_group(args.backend)
rank, size = dist.get_rank(), dist.get_world_size()
model = torch.nn.parallel.DistributedDataParallel(getattr(models, args.model)())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size)
data = torch.randn(args.batch_size, 3, 224, 224)
target = torch.LongTensor(args.batch_size).random_() % 1000


def benchmark_step():
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()


timeit.timeit(benchmark_step, number=args.num_warmup_batches)
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_secs.append(args.batch_size * args.num_batches_per_iter / time)
    if rank == 0:
        print(f"Iter #{x}: {img_secs[-1]:.1f} img/sec per CPU")
if rank == 0:
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    print(f"Img/sec per CPU: {mean:.1f} +-{conf:.1f}")
    print(f"Total img/sec on {size} CPU(s): {size * mean:.1f} +-{size * conf:.1f}")
dist.destroy_process_group()
