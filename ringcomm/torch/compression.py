"""Horovod's gradient compressors: classes with ``compress(tensor) -> (tensor, ctx)`` and
``decompress(tensor, ctx) -> tensor``, run around an all-reduce.

Any compressor of that shape works, yours included. The built-in 16-bit ones have a faster path
for all-reduces: instead of casting, a float32 (or float64) tensor travels as 16-bit floats
through the core's wire codec and is accumulated in float32 at every hop (src/codec) - the same
wire bytes as Horovod's cast, with a float32 sum instead of a 16-bit one. Elsewhere
(reducescatter, or a tensor the codec does not carry) they cast, as Horovod's do; so do CUDA
tensors, whose 16-bit all-reduce then stays in device memory where CUDA IPC carries it
(collectives/allreduce.py).
"""

from __future__ import annotations

from typing import Optional

import torch


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

    dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """bfloat16 on the wire (ringcomm's; Horovod's torch API has no bf16 compressor)."""

    dtype = torch.bfloat16


class Compression:
    """Optional gradient compression algorithm used during allreduce."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


# The compressors the core's codec can stand in for in an all-reduce: class -> codec name.
_WIRE_CODECS = {FP16Compressor: "fp16", BF16Compressor: "bf16"}


def is_none(compression) -> bool:
    return compression is NoneCompressor or isinstance(compression, NoneCompressor)


def wire_codec(compression) -> Optional[str]:
    """The codec that carries an all-reduce for ``compression`` (a built-in 16-bit compressor,
    class or instance, not a subclass that may behave differently), else None."""
    cls = compression if isinstance(compression, type) else type(compression)
    return _WIRE_CODECS.get(cls)
