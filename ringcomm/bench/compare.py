"""Ratios per size: ringcomm against each peer, and each implementation against the limit.

Absolute times on shared machines drift between runs; ratios measured in the same invocation
(same sizes, ranks, dtype, one run after another) are what carry over (DESIGN.md, "Measuring").
"""

from __future__ import annotations

from typing import Optional


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def comparison_rows(
    busbw_by_impl: dict[str, dict[int, float]], limit: Optional[float], reference: str = "ringcomm"
) -> list[dict]:
    """One row per size that ``reference`` measured:
    {"size", "busbw": {impl: GB/s or None}, "vs": {peer: reference/peer}, "of_limit": {impl: x}}.
    ``busbw_by_impl`` maps implementation -> size (bytes) -> busbw (GB/s)."""
    rows = []
    for size in sorted(busbw_by_impl.get(reference, {})):
        busbw = {impl: by_size.get(size) for impl, by_size in busbw_by_impl.items()}
        ours = busbw[reference]
        rows.append(
            {
                "size": size,
                "busbw": busbw,
                "vs": {impl: ratio(ours, bw) for impl, bw in busbw.items() if impl != reference},
                "of_limit": {impl: ratio(bw, limit) for impl, bw in busbw.items()},
            }
        )
    return rows
