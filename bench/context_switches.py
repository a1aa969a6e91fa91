"""Where small all-reduces spend their time when ranks outnumber cores: microseconds per call and
context switches per call and rank (bench/RESULTS.md, "One wake-up per wait"). Not a comparison
with peers (ringcomm-bench is): a probe of ringcomm's own waiting.

    ringcomm-run -np 16 python bench/context_switches.py              # 8 B, 2,000 calls
    ringcomm-run -np 16 python bench/context_switches.py --elements 262144 --calls 1000
    ringcomm-run -np 16 python bench/context_switches.py --blocks 12  # the first calls, in blocks

Voluntary switches are sleeps (a futex wait); involuntary ones are mostly sched_yield() handing
the core to another rank. Counted over every thread of each rank (/proc/self/task).
"""

import argparse
import os
import time

import numpy as np

import ringcomm


def switches() -> np.ndarray:
    """[voluntary, involuntary] context switches of this process's threads so far."""
    counts = np.zeros(2)
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/status") as status:
            for line in status:
                if line.startswith("voluntary_ctxt_switches"):
                    counts[0] += int(line.split(":")[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    counts[1] += int(line.split(":")[1])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=2, help="float32 elements (2: 8 B)")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls first")
    parser.add_argument(
        "--blocks", type=int, default=0, help="time the first calls instead, in this many blocks"
    )
    args = parser.parse_args()
    comm = ringcomm.init()
    x = np.ones(args.elements, np.float32)
    y = np.empty_like(x)

    if args.blocks:
        per_block = []
        for _ in range(args.blocks):
            comm.barrier()
            start = time.perf_counter()
            for _ in range(args.calls // args.blocks):
                comm.allreduce(x, y)
            per_block.append((time.perf_counter() - start) / (args.calls // args.blocks))
        slowest = np.asarray(comm.allgather(np.array(per_block))).reshape(comm.size, -1).max(0)
        if comm.rank == 0:
            print("us per call, block by block:", " ".join(f"{t * 1e6:.0f}" for t in slowest))
        return

    for _ in range(args.warmup):
        comm.allreduce(x, y)
    comm.barrier()
    before = switches()
    start = time.perf_counter()
    for _ in range(args.calls):
        comm.allreduce(x, y)
    seconds = time.perf_counter() - start
    mine = np.concatenate([[seconds / args.calls], (switches() - before) / args.calls])
    every = np.asarray(comm.allgather(mine)).reshape(comm.size, 3)
    if comm.rank == 0:
        print(
            f"{comm.size} ranks, {x.nbytes} B: {every[:, 0].max() * 1e6:.1f} us per call "
            f"(slowest rank); per call and rank {every[:, 1].mean():.2f} voluntary and "
            f"{every[:, 2].mean():.2f} involuntary context switches"
        )


if __name__ == "__main__":
    main()
