"""Message sizes: parsing "8", "4K", "1MB", "1GiB", "256M" (K/M/G are powers of 1024) and sweeps."""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# A number, an optional unit letter, then optionally "B" or "iB": 8, 8B, 4K, 4KB, 4KiB, 1.5M.
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in ``text``. "1MB" and "1MiB" both mean 2**20, as in nccl-tests."""
    match = _SIZE.fullmatch(str(text).strip())
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 8, 4K, 1MB, 1GiB, 256M)")
    number, unit = match.groups()
    value = float(number) * _UNITS[unit.upper()]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    if value < 1:
        raise ValueError(f"size must be at least 1 byte; got {text!r}")
    return int(value)


def sweep(begin: int, end: int, factor: int) -> list[int]:
    """begin, begin*factor, ... up to and including end (as nccl-tests' -b/-e/-f)."""
    if begin > end:
        raise ValueError(f"begin size {begin} is larger than end size {end}")
    if factor < 2:
        raise ValueError(f"step factor must be at least 2; got {factor}")
    sizes = []
    size = begin
    while size <= end:
        sizes.append(size)
        size *= factor
    return sizes


def human(nbytes: int) -> str:
    """2**30 -> "1 GiB"; 1536 -> "1.5 KiB"."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} B"
