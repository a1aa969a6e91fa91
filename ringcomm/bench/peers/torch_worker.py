"""A torch.distributed rank of the benchmark, on CPU tensors (or CUDA ones with --device cuda):
backend gloo, or ringcomm's own backend (peer "torch-ringcomm", which measures what going through
torch.distributed costs).

    MASTER_ADDR=127.0.0.1 MASTER_PORT=... RANK=r WORLD_SIZE=p \
        python -m ringcomm.bench.peers.torch_worker --backend gloo --plan P --out R
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from ringcomm.bench import device as bench_device
from ringcomm.bench.dtypes import torch_tensor
from ringcomm.bench.worker import finish, progress_path, run_plan, start

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "prod": dist.ReduceOp.PRODUCT,
}

# torch 2.13 renamed the flat-tensor collectives; older releases only have the *_tensor names.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class TorchGroup:
    def __init__(self, name: str, device: str = "cpu"):
        self.name = name
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.cuda = device == "cuda"

    def barrier(self) -> None:
        dist.barrier()

    def allgather_float(self, value: float) -> list[float]:
        slots = torch.zeros(self.size, dtype=torch.float64)
        slots[self.rank] = value
        dist.all_reduce(slots)
        return slots.tolist()

    def array(self, count: int, dtype: str):
        return bench_device.tensor(count, dtype) if self.cuda else torch_tensor(count, dtype)

    def _done(self) -> None:
        if self.cuda:  # a call is timed until its result is on the device
            bench_device.synchronize()

    def allreduce(self, x, op: str) -> None:
        dist.all_reduce(x, op=_OPS[op])
        self._done()

    def allgather(self, x, out) -> None:
        _all_gather(out, x)
        self._done()

    def reduce_scatter(self, x, out, op: str) -> None:
        _reduce_scatter(out, x, op=_OPS[op])
        self._done()

    def broadcast(self, x, root: int) -> None:
        dist.broadcast(x, src=root)
        self._done()

    def reduce(self, x, op: str, root: int) -> None:
        dist.reduce(x, dst=root, op=_OPS[op])
        self._done()

    def alltoall(self, x, out) -> None:
        dist.all_to_all_single(out, x)
        self._done()

    def gather(self, x, out, root: int) -> None:
        # Into views of one buffer: the blocks land where the other implementations put them.
        blocks = list(out.chunk(self.size)) if self.rank == root else None
        dist.gather(x, gather_list=blocks, dst=root)
        self._done()

    def scatter(self, x, out, root: int) -> None:
        blocks = list(x.chunk(self.size)) if self.rank == root else None
        dist.scatter(out, scatter_list=blocks, src=root)
        self._done()

    def unsupported(self, collective: str, dtype: str, op: str) -> Optional[str]:
        if self.name == "gloo" and dtype == "int16":
            return "gloo has no int16 (torch 2.13: 'Invalid scalar type')"
        if op == "avg" and dtype == "bool":
            return f"{self.name} has no avg of bool"
        if self.name == "gloo" and op == "avg" and dtype.startswith(("int", "uint")):
            return f"gloo has no avg for {dtype}"
        return None

    def details(self, collective: str, nbytes: int) -> dict:
        return {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--backend", choices=("gloo", "ringcomm"), default="gloo")
    chosen, rest = parser.parse_known_args(argv)
    plan, out = start(rest, __doc__)
    # The backends reduce on their own threads; torch's intra-op threads only fill and check
    # buffers, and p ranks sharing the cores should not each start one per core.
    torch.set_num_threads(1)
    if plan.device == "cuda":
        bench_device.use_rank_device(int(os.environ["RANK"]))
    dist.init_process_group(chosen.backend, timeout=timedelta(seconds=plan.op_timeout))
    name = "gloo" if chosen.backend == "gloo" else "torch-ringcomm"
    try:
        report = run_plan(plan, TorchGroup(name, plan.device), progress_path(out))
    finally:
        dist.destroy_process_group()
    return finish(report, out)


if __name__ == "__main__":
    raise SystemExit(main())
