"""What a size means for each collective, and how bandwidth is reported: nccl-tests' conventions.

nccl-tests (doc/PERFORMANCE.md) reports, for a message of ``size`` bytes and ``count`` elements:
  * allreduce, broadcast: size = the per-rank buffer (input = output).
  * allgather: size = the whole output, count * elemsize, of which each rank contributes
    size / nranks; reduce_scatter: size = the whole input, of which each rank receives
    size / nranks. So -b/-e give the total, rounded down to a multiple of nranks elements.
  * reduce: size = the per-rank buffer, as allreduce.
  * alltoall: size = each rank's whole input (= its whole output), a block of size / nranks for
    every rank. gather: size = the root's whole output; scatter: size = the root's whole input;
    each rank sends (gather) or receives (scatter) size / nranks.
  * algbw = size / time.
  * busbw = algbw * 2(p-1)/p for allreduce, * (p-1)/p for allgather, reduce_scatter, alltoall,
    gather and scatter, * 1 for broadcast and reduce: the factor turns algbw into the bandwidth of
    the busiest link of an optimal algorithm, so that it can be compared with the hardware's and
    across rank counts.
GB/s means 1e9 bytes per second there, and here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, overload

COLLECTIVES = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "broadcast",
    "alltoall",
    "reduce",
    "gather",
    "scatter",
)
REDUCING = ("allreduce", "reduce_scatter", "reduce")  # the ones that take --op
ROOTED = ("broadcast", "reduce", "gather", "scatter")  # root 0
# (p-1)/p: each rank must move all but its own share of ``size`` over its busiest link.
_SHARE_MOVED = ("allgather", "reduce_scatter", "alltoall", "gather", "scatter")


@dataclass(frozen=True)
class ElementCounts:
    count: int  # nccl-tests' "count" column: elements in ``size``
    in_count: int  # elements in each rank's input buffer
    out_count: int  # elements in each rank's output buffer (allreduce, broadcast: the same buffer)
    nbytes: int  # nccl-tests' "size" column


def element_counts(collective: str, nbytes: int, itemsize: int, nranks: int) -> ElementCounts:
    """Buffer sizes for a requested size; at least one element (per rank) so every size runs."""
    count = max(1, nbytes // itemsize)
    if collective in ("allreduce", "broadcast", "reduce"):
        return ElementCounts(count, count, count, count * itemsize)
    per_rank = max(1, count // nranks)
    total = per_rank * nranks
    if collective in ("allgather", "gather"):
        return ElementCounts(total, per_rank, total, total * itemsize)
    if collective in ("reduce_scatter", "scatter"):
        return ElementCounts(total, total, per_rank, total * itemsize)
    if collective == "alltoall":
        return ElementCounts(total, total, total, total * itemsize)
    raise ValueError(f"unknown collective {collective!r}; choose from {', '.join(COLLECTIVES)}")


def bus_factor(collective: str, nranks: int) -> float:
    p = nranks
    if collective == "allreduce":
        return 2 * (p - 1) / p
    if collective in _SHARE_MOVED:
        return (p - 1) / p
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def bandwidths(collective: str, nbytes: int, time_us: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for ``nbytes`` (nccl-tests' size) moved in ``time_us``."""
    algbw = nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return algbw, algbw * bus_factor(collective, nranks)


def memory_traffic(collective: str, nranks: int) -> float:
    """Least bytes of memory traffic on one host per byte of nccl-tests' size.

    Each input byte must be read once and each output byte written once, wherever the work is
    done (DESIGN.md, "Measuring"):
      allreduce       p inputs of N read + p outputs of N written      = 2p N
      allgather       inputs total S read, p outputs of S written      = (p+1) S
      reduce_scatter  p inputs of S read, outputs total S written      = (p+1) S
      broadcast       the root's N read, p-1 other outputs written     = p N
      reduce          p inputs of N read, the root's output written    = (p+1) N
      alltoall        p inputs of S read, p outputs of S written       = 2p S
      gather          inputs total S read, the root's S written        = 2 S
      scatter         the root's S read, outputs total S written       = 2 S
    """
    p = nranks
    if collective in ("allreduce", "alltoall"):
        return 2.0 * p
    if collective in ("allgather", "reduce_scatter", "reduce"):
        return p + 1.0
    if collective == "broadcast":
        return float(p)
    if collective in ("gather", "scatter"):
        return 2.0
    raise ValueError(f"unknown collective {collective!r}")


@overload
def limit_busbw(collective: str, nranks: int, memory_gbps: float) -> float: ...
@overload
def limit_busbw(collective: str, nranks: int, memory_gbps: Optional[float]) -> Optional[float]: ...


def limit_busbw(collective: str, nranks: int, memory_gbps: Optional[float]) -> Optional[float]:
    """The single-host upper bound on busbw (GB/s) given read+write memory bandwidth B_mem.

    time >= traffic * size / B_mem, so algbw <= B_mem / traffic and busbw <= B_mem * factor /
    traffic. For allreduce that is B_mem (p-1)/p^2; allgather and reduce_scatter
    B_mem (p-1) / (p(p+1)); broadcast B_mem / p. None when B_mem is unknown.
    """
    if memory_gbps is None:
        return None
    return memory_gbps * bus_factor(collective, nranks) / memory_traffic(collective, nranks)


def limit_formula(collective: str) -> str:
    return {
        "allreduce": "B_mem*(p-1)/p^2",
        "allgather": "B_mem*(p-1)/(p*(p+1))",
        "reduce_scatter": "B_mem*(p-1)/(p*(p+1))",
        "broadcast": "B_mem/p",
        "reduce": "B_mem/(p+1)",
        "alltoall": "B_mem*(p-1)/(2*p^2)",
        "gather": "B_mem*(p-1)/(2*p)",
        "scatter": "B_mem*(p-1)/(2*p)",
    }[collective]
