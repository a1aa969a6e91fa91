"""Ratios per size: ringcomm (through each transport timed) against each peer, and each
implementation against the limit.

Absolute times on shared machines drift between runs; ratios measured in the same invocation
(same sizes, ranks, dtype, one run after another) are what carry over (DESIGN.md, "Measuring").
"""

from __future__ import annotations

from typing import Optional, Sequence


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def ringcomm_columns(transports: Sequence[str]) -> list[str]:
    """ringcomm's columns in the comparison, one per transport timed in turns: "ringcomm" for
    the first listed (whose results are the run's), "ringcomm[ucx]" for another."""
    return ["ringcomm"] + [f"ringcomm[{transport}]" for transport in transports[1:]]


def comparison_pairs(
    implementations: Sequence[str], references: Sequence[str]
) -> list[tuple[str, str]]:
    """(reference, peer) for each reference (ringcomm_columns) against each peer (every other
    implementation), reference by reference."""
    peers = [impl for impl in implementations if impl not in references]
    return [(reference, peer) for reference in references for peer in peers]


def comparison_rows(
    busbw_by_impl: dict[str, dict[int, float]],
    limit: Optional[float],
    references: Sequence[str] = ("ringcomm",),
) -> list[dict]:
    """One row per size that a reference measured: {"size", "busbw": {impl: GB/s or None},
    "vs": {"reference/peer": the ratio of their busbw}, "of_limit": {impl: x}}, every reference
    (ringcomm_columns) against every peer (the other implementations).
    ``busbw_by_impl`` maps implementation -> size (bytes) -> busbw (GB/s)."""
    pairs = comparison_pairs(list(busbw_by_impl), references)
    sizes = {size for reference in references for size in busbw_by_impl.get(reference, {})}
    rows = []
    for size in sorted(sizes):
        busbw = {impl: by_size.get(size) for impl, by_size in busbw_by_impl.items()}
        rows.append(
            {
                "size": size,
                "busbw": busbw,
                "vs": {f"{ref}/{peer}": ratio(busbw.get(ref), busbw[peer]) for ref, peer in pairs},
                "of_limit": {impl: ratio(bw, limit) for impl, bw in busbw.items()},
            }
        )
    return rows


def _by_size(variants: dict[str, list[dict]]) -> dict[int, dict[str, dict]]:
    """{variant: rows} -> {size: {variant: its row at that size}}."""
    by_size: dict[int, dict[str, dict]] = {}
    for name, rows in variants.items():
        for row in rows:
            by_size.setdefault(row["size"], {})[name] = row
    return by_size


def turn_rows(variants: dict[str, list[dict]]) -> list[dict]:
    """Variants timed in turns (worker.run_plan's "variants": {name: rows}: all-reduce schedules,
    or transports) -> one row per size: {"size", "time_us": {name: us}, "fastest"}."""
    by_size = _by_size(variants)
    result = []
    for size in sorted(by_size):
        cells = by_size[size]
        times = {name: cells[name]["time_us"] for name in variants if name in cells}
        result.append(
            {"size": size, "time_us": times, "fastest": min(times, key=times.__getitem__)}
        )
    return result


def algorithm_rows(variants: dict[str, list[dict]]) -> list[dict]:
    """All-reduce schedules timed in turns ({algorithm: rows}) -> turn_rows' rows and, when
    "auto" was timed beside forced ones: "best_forced", "auto_vs_best" (auto's time / the
    fastest forced one's), "auto_ran" (the schedule auto chose)."""
    auto_ran = {row["size"]: row.get("algorithm") for row in variants.get("auto", [])}
    result = turn_rows(variants)
    for entry in result:
        times = entry["time_us"]
        forced = {a: t for a, t in times.items() if a != "auto"}
        if "auto" in times and forced:
            best = min(forced, key=forced.__getitem__)
            entry["best_forced"] = best
            entry["auto_vs_best"] = ratio(times["auto"], forced[best])
            entry["auto_ran"] = auto_ran[entry["size"]]
    return result


# The wire formats the others are held against, where they ran: float32 and 16 bits.
_CODEC_REFERENCES = ("none", "fp16")


def codec_pairs(codecs: list[str]) -> list[tuple[str, str]]:
    """(codec, reference) for each compressed codec against each reference that ran."""
    return [
        (codec, reference)
        for reference in _CODEC_REFERENCES
        if reference in codecs
        for codec in codecs
        if codec not in (reference, "none")
    ]


def codec_rows(variants: dict[str, list[dict]]) -> list[dict]:
    """Wire formats timed in turns (worker.run_plan's "variants": {codec: rows}) -> one row per
    size: {"size", "algbw": {codec: GB/s}, "vs": {"codec/reference": the ratio of their algbw},
    "relerr": {codec: relative error, where measured}}."""
    by_size = _by_size(variants)
    pairs = codec_pairs(list(variants))
    result = []
    for size in sorted(by_size):
        cells = by_size[size]
        algbw = {codec: cells[codec]["algbw"] for codec in variants if codec in cells}
        result.append(
            {
                "size": size,
                "algbw": algbw,
                "vs": {f"{c}/{ref}": ratio(algbw.get(c), algbw.get(ref)) for c, ref in pairs},
                "relerr": {c: cells[c]["relerr"] for c in variants if "relerr" in cells.get(c, {})},
            }
        )
    return result
