"""``--plot busbw.png``: busbw against size for ringcomm and every peer, with the single-host
limit as a line. matplotlib is optional (pip install 'ringcomm[plot]')."""

from __future__ import annotations

import textwrap
from typing import Optional, Sequence

from ringcomm.bench.collectives import limit_formula
from ringcomm.bench.launchers import Outcome
from ringcomm.bench.sizes import human

_TITLE_WIDTH = 110  # characters of the command line per line of the title
MISSING = "--plot needs matplotlib: pip install 'ringcomm[plot]' (or pip install matplotlib)"


def available() -> Optional[str]:
    """None when plotting can work; else what to install."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return MISSING
    return None


def plot_busbw(
    path: str,
    outcomes: Sequence[Outcome],
    collective: str,
    nranks: int,
    limit: Optional[float],
    title: str,
    limit_label: Optional[str] = None,
) -> None:
    """``limit_label``: what the limit's line is called (default: the single-host limit)."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    sizes = sorted({row["size"] for o in outcomes for row in o.rows})
    for outcome in outcomes:
        rows = sorted(outcome.rows, key=lambda row: row["size"])
        if rows:
            axes.plot(
                [row["size"] for row in rows],
                [row["busbw"] for row in rows],
                marker="o",
                label=outcome.implementation,
            )
    if limit is not None:
        axes.axhline(
            limit,
            color="gray",
            linestyle="--",
            label=limit_label
            or f"single-host limit {limit_formula(collective)} = {limit:.2f} GB/s",
        )
    axes.set_xscale("log", base=2)
    if sizes:
        axes.set_xticks(sizes)
        axes.set_xticklabels([human(s).replace(" ", "") for s in sizes], rotation=45, ha="right")
        axes.minorticks_off()
    axes.set_xlabel("size (bytes)")
    axes.set_ylabel("busbw (GB/s)")
    # The command line can be long: wrapped, so that it stays inside the figure.
    heading = textwrap.fill(title, _TITLE_WIDTH)
    axes.set_title(f"{heading}\n{collective}, {nranks} ranks", fontsize=8)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
