"""Checks of the arguments that Communicator's methods hand to _core, each refusal naming the
argument and what it takes. Without them pybind11 answers a number beyond a C int with
"incompatible function arguments" and no name, int() quietly takes a color of 1.9 as 1, and a
single rank where a list belongs fails as "'int' object is not iterable"."""

from __future__ import annotations

import numbers
import operator
from collections.abc import Iterable
from typing import Any, Optional

# The core takes ranks, colors, keys and counts as C ints.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def whole_number(
    value: Any, name: str, low: int = INT_MIN, high: int = INT_MAX, meaning: str = ""
) -> int:
    """`value` as an int from `low` to `high`: TypeError for what is not a whole number (a float,
    a str; a bool too, which is one only by accident), ValueError outside the range. `meaning`
    follows the range in the message: what the argument is, or what its values mean."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)  # ints and NumPy's integers, never a float
    except TypeError:
        raise TypeError(f"{name} must be an int{meaning}; got {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be in [{low}, {high}]{meaning}; got {number}")
    return number


def ranks(value: Any, name: str, size: int) -> list[int]:
    """`value` (None: none) as a list of ranks of a communicator of `size`, e.g. shrink()'s
    `exclude`: a list, tuple, set or array of ints from 0 to size - 1."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a list of ranks (ints from 0 to {size - 1}); got {value!r}"
        )
    meaning = f" (a rank of this communicator of {size})"
    return [
        whole_number(rank, f"{name}[{i}]", 0, size - 1, meaning) for i, rank in enumerate(value)
    ]


def seconds(value: Any, name: str = "timeout") -> float:
    """`value` as a positive number of seconds (inf: no deadline). NaN is refused as not > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds (or None); got {value!r}")
    number = float(value)
    if not number > 0:
        raise ValueError(f"{name} must be positive seconds; got {value}")
    return number


def optional_seconds(value: Optional[Any], name: str = "timeout") -> float:
    """seconds(value), or 0.0 for None: the core's "the communicator's own timeout"."""
    return 0.0 if value is None else seconds(value, name)
