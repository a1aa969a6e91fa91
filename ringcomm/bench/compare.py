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


def algorithm_rows(variants: dict[str, list[dict]]) -> list[dict]:
    """All-reduce schedules timed in turns (worker.run_plan's "variants": {algorithm: rows}) ->
    one row per size: {"size", "time_us": {algorithm: us}, "fastest", and, when "auto" was timed
    beside forced ones: "best_forced", "auto_vs_best" (auto's time / the fastest forced one's),
    "auto_ran" (the schedule auto chose)}."""
    by_size: dict[int, dict[str, dict]] = {}
    for algorithm, rows in variants.items():
        for row in rows:
            by_size.setdefault(row["size"], {})[algorithm] = row
    result = []
    for size in sorted(by_size):
        cells = by_size[size]
        times = {a: cells[a]["time_us"] for a in variants if a in cells}
        entry = {"size": size, "time_us": times, "fastest": min(times, key=times.__getitem__)}
        forced = {a: t for a, t in times.items() if a != "auto"}
        if "auto" in times and forced:
            best = min(forced, key=forced.__getitem__)
            entry["best_forced"] = best
            entry["auto_vs_best"] = ratio(times["auto"], forced[best])
            entry["auto_ran"] = cells["auto"].get("algorithm")
        result.append(entry)
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
    by_size: dict[int, dict[str, dict]] = {}
    for codec, rows in variants.items():
        for row in rows:
            by_size.setdefault(row["size"], {})[codec] = row
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
