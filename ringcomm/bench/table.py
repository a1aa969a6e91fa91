"""Tables in nccl-tests' columns, drawn with rich as Markdown so they paste into RESULTS.md.

The cell formatting is pure (rows in, strings out), so it is tested without a terminal.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from rich import box
from rich.table import Table

from ringcomm.bench.compare import codec_pairs, comparison_pairs

RESULT_COLUMNS = (
    "size",
    "count",
    "type",
    "redop",
    "time(us)",
    "algbw(GB/s)",
    "busbw(GB/s)",
    "#wrong",
)


def format_bw(gbps: Optional[float]) -> str:
    """GB/s with two decimals, as nccl-tests; tiny values keep two significant digits instead of
    printing 0.00, so that ratios between small messages stay readable."""
    if gbps is None:
        return "-"
    return f"{gbps:.2f}" if gbps >= 0.01 or gbps == 0 else f"{gbps:.1e}"


def format_ratio(value: Optional[float]) -> str:
    return format_bw(value)  # the same rule: two decimals, or two significant digits if tiny


def result_cells(row: dict) -> list[str]:
    """One worker result row (worker._run_size) -> the cells of RESULT_COLUMNS (+ algorithm)."""
    wrong = "N/A" if row.get("wrong") is None else str(row["wrong"])
    cells = [
        str(row["size"]),
        str(row["count"]),
        row["type"],
        row["redop"],
        f"{row['time_us']:.2f}",
        format_bw(row["algbw"]),
        format_bw(row["busbw"]),
        wrong,
    ]
    if "algorithm" in row:
        cells.append(row["algorithm"])
    if "relerr" in row:
        cells.append("-" if row["relerr"] is None else f"{row['relerr']:.1e}")
    return cells


def markdown_table(columns: Sequence[str]) -> Table:
    table = Table(box=box.MARKDOWN, show_edge=True, pad_edge=True)
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    return table


def results_table(rows: Sequence[dict]) -> Table:
    """One implementation's results; ringcomm's all-reduce adds the algorithm that ran, and with
    a wire codec the error it made (worker._Case.relative_error)."""
    extra = tuple(column for column in ("algorithm", "relerr") if rows and column in rows[0])
    table = markdown_table(RESULT_COLUMNS + extra)
    for row in rows:
        table.add_row(*result_cells(row))
    return table


def comparison_columns(
    implementations: Sequence[str], has_limit: bool, references: Sequence[str] = ("ringcomm",)
) -> list[str]:
    """Each implementation's busbw (ringcomm's ``references``: one per transport timed), each
    reference against each peer, and each implementation against the limit."""
    columns = ["size"] + [f"{impl} busbw" for impl in implementations]
    columns += [f"{ref}/{peer}" for ref, peer in comparison_pairs(implementations, references)]
    if has_limit:
        columns += [f"{impl}/limit" for impl in implementations]
    return columns


def comparison_cells(
    row: dict,
    implementations: Sequence[str],
    has_limit: bool,
    references: Sequence[str] = ("ringcomm",),
) -> list[str]:
    """One compare.comparison_rows row -> cells in comparison_columns' order."""
    cells = [str(row["size"])] + [format_bw(row["busbw"].get(impl)) for impl in implementations]
    pairs = comparison_pairs(implementations, references)
    cells += [format_ratio(row["vs"].get(f"{ref}/{peer}")) for ref, peer in pairs]
    if has_limit:
        cells += [format_ratio(row["of_limit"].get(impl)) for impl in implementations]
    return cells


def _filled(columns: list[str], rows: Iterable[dict], cells) -> Table:
    """A markdown table of ``columns`` with ``cells(row)`` for each row."""
    table = markdown_table(columns)
    for row in rows:
        table.add_row(*cells(row))
    return table


def comparison_table(
    rows: Iterable[dict],
    implementations: Sequence[str],
    has_limit: bool,
    references: Sequence[str] = ("ringcomm",),
) -> Table:
    return _filled(
        comparison_columns(implementations, has_limit, references),
        rows,
        lambda row: comparison_cells(row, implementations, has_limit, references),
    )


def turn_columns(names: Sequence[str]) -> list[str]:
    """compare.turn_rows' columns: each variant's time, and the fastest."""
    return ["size"] + [f"{name} (us)" for name in names] + ["fastest"]


def turn_cells(row: dict, names: Sequence[str]) -> list[str]:
    times = row["time_us"]
    cells = [str(row["size"])]
    cells += [f"{times[name]:.2f}" if name in times else "-" for name in names]
    cells.append(row["fastest"])
    return cells


def turn_table(rows: Iterable[dict], names: Sequence[str]) -> Table:
    """Variants timed in turns (transports), side by side."""
    return _filled(turn_columns(names), rows, lambda row: turn_cells(row, names))


def algorithm_columns(algorithms: Sequence[str]) -> list[str]:
    """compare.algorithm_rows' columns: turn_columns, and auto's standing."""
    columns = turn_columns(algorithms)
    if "auto" in algorithms and len(algorithms) > 1:
        columns += ["best forced", "auto/best", "auto ran"]
    return columns


def algorithm_cells(row: dict, algorithms: Sequence[str]) -> list[str]:
    cells = turn_cells(row, algorithms)
    if "auto" in algorithms and len(algorithms) > 1:
        cells += [row.get("best_forced", "-"), format_ratio(row.get("auto_vs_best"))]
        cells.append(row.get("auto_ran") or "-")
    return cells


def algorithm_table(rows: Iterable[dict], algorithms: Sequence[str]) -> Table:
    return _filled(algorithm_columns(algorithms), rows, lambda r: algorithm_cells(r, algorithms))


def codec_columns(codecs: Sequence[str]) -> list[str]:
    """compare.codec_rows' columns: each format's algbw, the ratios, each compressed one's error."""
    columns = ["size"] + [f"{c} algbw" for c in codecs]
    columns += [f"{c}/{reference}" for c, reference in codec_pairs(list(codecs))]
    return columns + [f"{c} relerr" for c in codecs if c != "none"]


def codec_cells(row: dict, codecs: Sequence[str]) -> list[str]:
    cells = [str(row["size"])] + [format_bw(row["algbw"].get(c)) for c in codecs]
    cells += [format_ratio(row["vs"].get(f"{c}/{ref}")) for c, ref in codec_pairs(list(codecs))]
    errors = row["relerr"]
    compressed = [c for c in codecs if c != "none"]
    cells += [f"{errors[c]:.1e}" if errors.get(c) is not None else "-" for c in compressed]
    return cells


def codec_table(rows: Iterable[dict], codecs: Sequence[str]) -> Table:
    return _filled(codec_columns(codecs), rows, lambda row: codec_cells(row, codecs))
