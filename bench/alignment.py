"""All-reduce speed against the placement of the buffers, ringcomm and MPICH in one launch.

    mpirun -np 4 python bench/alignment.py

numpy's large arrays start 16 bytes into a page, torch's 64, and a slice of either anywhere. On AMD
Zen, `rep movsb` (glibc's memcpy from 4 KiB to about the L2 size, and the kernel's copies for
process_vm_readv/writev) runs at a third of its speed or less when the destination lies 1-31
bytes after the source modulo the page, so a library that copies through page-aligned shared
memory gets slow for some placements only. This times float32 sum all-reduces where rank 0's
input and rank 1's output start `shift` bytes later than the others' buffers, for ringcomm and
for MPI_Allreduce on the same buffers, and prints algbw (GB/s) per size and shift.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

import ringcomm

SIZES = (64 << 10, 1 << 20, 16 << 20)
SHIFTS = (0, 16, 32, 48)  # bytes


def placed(nbytes: int, shift: int, moved: bool) -> np.ndarray:
    """A float32 buffer of nbytes that starts `shift` bytes into its allocation if moved."""
    whole = np.ones(nbytes // 4 + 64, np.float32)
    start = shift // 4 if moved else 0
    return whole[start : start + nbytes // 4]


def algbw(allreduce, nbytes: int, barrier) -> float:
    for _ in range(3):
        allreduce()
    repeats = max(3, int(2e8 // nbytes))
    barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        allreduce()
    elapsed = (time.perf_counter() - start) / repeats
    return nbytes / elapsed / 1e9


def main() -> None:
    world = MPI.COMM_WORLD
    comm = ringcomm.init()
    rank, size = comm.rank, comm.size
    if rank == 0:
        print(f"# all-reduce, float32 sum, {size} ranks; algbw GB/s, ringcomm / MPI")
        print("| size | " + " | ".join(f"shift {s} B" for s in SHIFTS) + " |")
        print("|---" * (len(SHIFTS) + 1) + "|")
    for nbytes in SIZES:
        cells = []
        for shift in SHIFTS:
            x = placed(nbytes, shift, rank == 0)
            out = placed(nbytes, shift, rank == 1)
            ours = algbw(lambda x=x, out=out: comm.allreduce(x, out), nbytes, comm.barrier)
            if out[0] != size:
                raise SystemExit(f"rank {rank}: ringcomm gave {out[0]}, expected {size}")
            theirs = algbw(lambda x=x, out=out: world.Allreduce(x, out), nbytes, world.Barrier)
            cells.append(f"{ours:.2f} / {theirs:.2f}")
        if rank == 0:
            print(f"| {nbytes} | " + " | ".join(cells) + " |", flush=True)
    comm.shutdown()


if __name__ == "__main__":
    main()
