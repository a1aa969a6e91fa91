"""Horovod's Compression names, mapped onto ringcomm's wire codecs.

Compression.fp16 / .bf16 are not Python casts: float32 tensors travel as 16-bit floats through
the core's codec and are accumulated in float32 at every hop (src/codec). float64 tensors are
reduced as float32 with the codec, then widened back, as Horovod's fp16 compressor would narrow
them.
"""

from __future__ import annotations


class Compressor:
    """A wire format for all-reduce; ``wire`` is the codec name ringcomm's core takes."""

    def __init__(self, name: str, wire):
        self.name, self.wire = name, wire

    def __repr__(self) -> str:
        return f"Compression.{self.name}"


class Compression:
    none = Compressor("none", None)
    fp16 = Compressor("fp16", "fp16")
    bf16 = Compressor("bf16", "bf16")
