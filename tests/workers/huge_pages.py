"""The single-copy all-reduce collapses a buffer that comes back into huge pages
(src/transport/shm/huge_pages.h), with its values intact, and leaves it alone when
RINGCOMM_SHM_CMA_HUGE_PAGES=0. The buffer is an anonymous mapping that nobody advised, so it starts
in small pages where transparent huge pages are "madvise" (the default). Private: shared
anonymous memory is shmem, which has huge pages of its own settings."""

import ctypes
import mmap
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402

MADV_COLLAPSE = 25
HUGE_PAGE = 2 << 20


def huge_kilobytes(address: int, length: int) -> int:
    """AnonHugePages of the mappings that overlap [address, address + length), from
    /proc/self/smaps (a kernel may split the buffer's mapping where its huge pages begin)."""
    total, overlapping = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                overlapping = start < address + length and address < end
            elif overlapping and head == "AnonHugePages:":
                total += int(line.split()[1])
    return total


def kernel_can_collapse() -> bool:
    """Whether madvise(MADV_COLLAPSE) works here (Linux 6.1, huge pages not turned off)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    region = mmap.mmap(-1, 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE)
    region.write(b"\1" * len(region))
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    start = (address + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
    return libc.madvise(start, HUGE_PAGE, MADV_COLLAPSE) == 0


comm = ringcomm.init(timeout=60)
rank, size = comm.rank, comm.size
failures = Failures()
count = (6 << 20) // 4
region = mmap.mmap(-1, count * 4, flags=mmap.MAP_PRIVATE)
x = np.frombuffer(region, np.float32, count=count)
address = x.ctypes.data
x[:] = rank + 1
before = huge_kilobytes(address, count * 4)
for call in range(3):
    x[:] = np.arange(count, dtype=np.float32) % 1000 + rank
    comm.allreduce(x)
    expected = (np.arange(count, dtype=np.float32) % 1000) * size + size * (size - 1) / 2
    failures.check(f"allreduce {call}", np.array_equal(x, expected))
report(
    {
        "rank": rank,
        "failures": failures,
        "before": before,
        "after": huge_kilobytes(address, count * 4),
        "can_collapse": kernel_can_collapse(),
    }
)
comm.shutdown()
