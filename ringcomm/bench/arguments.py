"""What the benchmarks' command lines share (ringcomm-bench, its ``tune`` and ``init``, and
``python -m ringcomm.bench.ddp``): the parser, whose help is the module's docstring, and the
argument type of a list of rank counts."""

from __future__ import annotations

import argparse
from typing import Callable


def command_line(prog: str, docstring: str) -> argparse.ArgumentParser:
    """A benchmark's parser. Its help shows the module's docstring as written: the examples there
    are laid out by hand."""
    return argparse.ArgumentParser(
        prog=prog, description=docstring, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def rank_counts(least: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated rank counts (``2,4,8``), each ``least`` or more, in the
    order given; one job is run for each."""

    def parse(text: str) -> list[int]:
        try:
            counts = [int(word) for word in text.split(",") if word.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"rank counts, comma-separated; got {text!r}"
            ) from None
        if not counts or min(counts) < least:
            raise argparse.ArgumentTypeError(f"rank counts of {least} or more; got {text!r}")
        return counts

    return parse
