"""Collectives whatever room /dev/shm has (tests/test_failures.py runs this in a mount namespace
with a small /dev/shm): results must be right, and the transport between local ranks says which
way the job went (shm with smaller slots, or TCP). After shutdown() no segment stays mapped."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402

import ringcomm  # noqa: E402

comm = ringcomm.init(timeout=60)
rank, size = comm.rank, comm.size
failures = Failures()
check = failures.check
for count in (1, 1009, 1 << 20):
    x = np.full(count, rank + 1, np.float32)
    comm.allreduce(x)
    check(f"allreduce {count}", np.all(x == size * (size + 1) / 2))
blocks = np.concatenate([np.full(4096, 100 * rank + j, np.int64) for j in range(size)])
received = comm.alltoall(blocks)
expected = np.concatenate([np.full(4096, 100 * j + rank, np.int64) for j in range(size)])
check("alltoall", np.array_equal(received, expected))
y = np.arange(1 << 18, dtype=np.float64) + rank
comm.broadcast(y, root=size - 1)
check("broadcast", np.array_equal(y, np.arange(1 << 18) + size - 1))
transports = sorted({comm.transport_to(peer) for peer in range(size) if peer != rank})
comm.shutdown()
# shutdown() unmaps the segments; it does not wait for the object to be released.
with open("/proc/self/maps") as maps:
    mapped = [line for line in maps if "/ringcomm-" in line]
check("segments unmapped at shutdown", not mapped, mapped[:2])
report({"failures": failures, "transports": transports})
