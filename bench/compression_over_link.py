"""fp16/bf16 wire compression across a rate-limited network link (needs root and iproute2).

    python bench/compression_over_link.py --rate 5gbit

Two network namespaces joined by a veth pair whose egress is shaped with tc's token bucket to
``--rate`` act as two hosts on a real link (loopback TCP on a 2-core VM is bound by kernel copies,
not by a wire). One rank per namespace; all-reduces of 64 and 128 MiB float32 are timed with no
compression, fp16 and bf16, and the algbw ratios to fp32 printed. Namespaces are removed at exit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from ringcomm.bench import netns

SUBNET = "10.231.78"
SIZES = (64 << 20, 128 << 20)

WORKER = r"""
import json, sys, time
import numpy as np
import ringcomm
comm = ringcomm.init(timeout=300)
results = {}
for nbytes in SIZES:
    x = np.ones(nbytes // 4, np.float32)
    for compression in (None, "fp16", "bf16"):
        comm.allreduce(x, compression=compression)  # warm-up
        comm.barrier()
        start = time.perf_counter()
        for _ in range(ITERS):
            comm.allreduce(x, compression=compression)
        elapsed = (time.perf_counter() - start) / ITERS
        results[f"{nbytes}/{compression or 'none'}"] = nbytes / elapsed / 1e9
if comm.rank == 0:
    print("RESULT " + json.dumps(results), flush=True)
comm.shutdown()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="5gbit", help="tc rate of the link, e.g. 10gbit, 5gbit")
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    code = WORKER.replace("SIZES", repr(SIZES)).replace("ITERS", str(args.iters))
    with netns.two_hosts(SUBNET, rate=args.rate, tag="rcl") as hosts:
        procs = []
        for rank in range(2):
            env = dict(
                os.environ,
                RANK=str(rank),
                WORLD_SIZE="2",
                MASTER_ADDR=hosts.address(0),
                MASTER_PORT="29631",
            )
            procs.append(
                subprocess.Popen(
                    hosts.command(rank, [sys.executable, "-c", code]),
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=900)[0] for p in procs]
    results = next(
        json.loads(line[7:]) for line in outputs[0].splitlines() if line.startswith("RESULT ")
    )
    print(f"# python bench/compression_over_link.py --rate {args.rate} --iters {args.iters}")
    print("| size | fp32 algbw (GB/s) | fp16 algbw | bf16 algbw | fp16 / fp32 | bf16 / fp32 |")
    print("|---|---|---|---|---|---|")
    for nbytes in SIZES:
        none, fp16, bf16 = (results[f"{nbytes}/{c}"] for c in ("none", "fp16", "bf16"))
        print(
            f"| {nbytes >> 20} MiB | {none:.3f} | {fp16:.3f} | {bf16:.3f} | {fp16 / none:.2f} | "
            f"{bf16 / none:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
