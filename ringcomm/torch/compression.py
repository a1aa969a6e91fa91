"""Horovod's gradient compressors: classes with ``compress(tensor) -> (tensor, ctx)`` and
``decompress(tensor, ctx) -> tensor``, run around an all-reduce.

Any compressor of that shape works, yours included. The built-in 16-bit ones have a faster path
for all-reduces: instead of casting, a float32 (or float64) tensor travels as 16-bit floats
through the core's wire codec and is accumulated in float32 at every hop (src/codec) - the same
wire bytes as Horovod's cast, with a float32 sum instead of a 16-bit one. Elsewhere
(reducescatter, or a tensor the codec does not carry) they cast, as Horovod's do; so do CUDA
tensors, whose 16-bit all-reduce then stays in device memory where CUDA IPC carries it
(collectives/allreduce.py).

The 8-bit ones (int8, fp8: ringcomm's) travel through the core's codecs the same way, with a
scale per block of 32 values; the DistributedOptimizer feeds each gradient's rounding error back
into its next step (ringcomm/_error_feedback.py).
"""

from __future__ import annotations

from typing import Optional

import torch

from ringcomm._error_feedback import round_to_wire

__all__ = [
    "Compression",
    "Compressor",
    "NoneCompressor",
    "FP16Compressor",
    "BF16Compressor",
    "Int8Compressor",
    "FP8Compressor",
]


class Compressor:
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor and returns it with the context needed to decompress it."""

    @staticmethod
    def decompress(tensor, ctx):
        """Decompresses the tensor with the given context."""


class NoneCompressor(Compressor):
    """Default no-op compression."""

    @staticmethod
    def compress(tensor):
        """Returns ``tensor`` as it is, and no context."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Casts floating-point tensors to ``dtype`` and back."""

    dtype: torch.dtype

    @classmethod
    def compress(cls, tensor):
        compressed = tensor.type(cls.dtype) if tensor.dtype.is_floating_point else tensor
        return compressed, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx.is_floating_point else tensor


class FP16Compressor(_CastCompressor):
    """Compress all floating point gradients to 16-bit (float16)."""

    #: The type floating-point tensors travel as.
    dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """bfloat16 on the wire (ringcomm's; Horovod's torch API has no bf16 compressor)."""

    #: The type floating-point tensors travel as.
    dtype = torch.bfloat16


class _RoundingCompressor(Compressor):
    """An 8-bit wire codec of the core (ringcomm's; Horovod has none). In an all-reduce the
    values travel as 8 bits with a scale per block of 32 and are accumulated in float32. Where
    the codec cannot carry a tensor (reducescatter, CUDA tensors, other dtypes), its float32
    values are rounded to the format in place of a cast, and travel as float32: the same
    numbers, not fewer bytes."""

    codec: str

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype != torch.float32 or tensor.device.type != "cpu":
            return tensor, None
        rounded = tensor.detach().contiguous().clone()
        round_to_wire(rounded, cls.codec)
        return rounded, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class Int8Compressor(_RoundingCompressor):
    """int8 on the wire: a bfloat16 scale (the largest magnitude / 127) per block of 32 values.
    The DistributedOptimizer keeps each gradient's rounding error and adds it to the next step's
    gradient (error feedback)."""

    #: The core's wire codec that carries it.
    codec = "int8"


class FP8Compressor(_RoundingCompressor):
    """fp8 on the wire, as OCP's mxfp8: a power-of-two scale per block of 32 values, e4m3
    values. The DistributedOptimizer keeps each gradient's rounding error and adds it to the
    next step's gradient (error feedback)."""

    #: The core's wire codec that carries it.
    codec = "fp8"


class Compression:
    """Optional gradient compression algorithm used during allreduce."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
    int8 = Int8Compressor
    fp8 = FP8Compressor


# The compressors the core's codec can stand in for in an all-reduce: class -> codec name.
_WIRE_CODECS: dict[type, str] = {
    FP16Compressor: "fp16",
    BF16Compressor: "bf16",
    Int8Compressor: "int8",
    FP8Compressor: "fp8",
}
# Those whose rounding error the DistributedOptimizer feeds back into the next step.
_FED_BACK = ("int8", "fp8")


def is_none(compression) -> bool:
    """Whether ``compression`` is :class:`NoneCompressor` (the class or an instance)."""
    return compression is NoneCompressor or isinstance(compression, NoneCompressor)


def wire_codec(compression) -> Optional[str]:
    """The codec that carries an all-reduce for ``compression`` (a built-in 16-bit compressor,
    class or instance, not a subclass that may behave differently), else None."""
    cls = compression if isinstance(compression, type) else type(compression)
    return _WIRE_CODECS.get(cls)


def feeds_back(compression) -> bool:
    """Whether the DistributedOptimizer keeps ``compression``'s rounding error for the next step
    (the 8-bit codecs)."""
    return wire_codec(compression) in _FED_BACK
