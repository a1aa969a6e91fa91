"""allreduce and its forms, with Horovod's arguments: in place (trailing underscore),
asynchronous (``*_async``, a handle for poll() / synchronize()), grouped (tensors announced
together, so they travel fused), and differentiable (the Functions at the end).

Every form takes ``process_set=`` and, beyond Horovod, ``compression=`` (async and in-place forms
too). A built-in 16-bit compressor runs as the core's wire codec; any other runs around the
all-reduce as Horovod runs it (compression.py).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import torch

from ringcomm.torch import handles, requests
from ringcomm.torch.compression import Compression, is_none, wire_codec
from ringcomm.torch.process_sets import Member, global_process_set, member
from ringcomm.torch.reduce_ops import Adasum, Average, Sum, check_adasum, resolve_op
from ringcomm.torch.tensors import check_scalable, checked, contiguous_for_in_place

# What the built-in 16-bit compressors narrow on the wire (float64 is narrowed first).
_CODEC_TYPES = (torch.float32, torch.float64)


class Started:
    """One tensor's all-reduce, ready to submit: the queue request, the tensors it reads and
    writes (kept alive until it completes), and ``finish()``, which returns the result.
    ``op`` and ``reduced`` (the tensor the queue reduces) are for submit()'s checks."""

    def __init__(
        self,
        request,
        keepalive: tuple,
        finish: Callable[[], torch.Tensor],
        op=None,
        reduced: Optional[torch.Tensor] = None,
    ):
        self.request, self.keepalive, self.finish = request, keepalive, finish
        self.op, self.reduced = op, reduced


def start(
    tensor: torch.Tensor,
    in_place: bool,
    op,
    compression,
    prescale_factor: float,
    postscale_factor: float,
    name: str,
) -> Started:
    """The all-reduce of ``tensor`` (a contiguous CPU or CUDA tensor) into ``tensor`` itself
    (``in_place``) or a new tensor."""
    codec = wire_codec(compression)
    if op == Adasum:
        # The wire codecs carry sums: Adasum runs on what the compressor makes, as in Horovod.
        codec = None
    if codec is None and not is_none(compression):
        return _start_compressed(
            tensor, in_place, op, compression, prescale_factor, postscale_factor, name
        )
    _check_scaling(tensor, prescale_factor, postscale_factor)
    if tensor.dtype not in _CODEC_TYPES or op not in (Sum, Average):
        codec = None  # the codecs carry float sums; anything else travels as it is
    if codec in ("fp16", "bf16") and _casts_for_codec(tensor):  # 8 bits have no cast: staged
        return _start_cast_on_device(
            tensor, in_place, op, compression, prescale_factor, postscale_factor, name
        )
    if codec is not None and tensor.dtype == torch.float64:
        # The codec narrows float32: float64 is narrowed here first, as Horovod's cast does.
        narrowed = tensor.to(torch.float32)
        target = tensor if in_place else torch.empty_like(tensor)
        request = requests.allreduce(
            narrowed, None, op, codec, prescale_factor, postscale_factor, name
        )
        return Started(request, (narrowed,), lambda: target.copy_(narrowed), op, narrowed)
    output = None if in_place else torch.empty_like(tensor)
    request = requests.allreduce(tensor, output, op, codec, prescale_factor, postscale_factor, name)
    result = tensor if in_place else output
    return Started(request, (tensor, output), lambda: result, op, tensor)


def _start_compressed(tensor, in_place, op, compression, prescale, postscale, name) -> Started:
    """A compressor of the user's: compress, reduce the compressed tensor, decompress."""
    compressed, context = compression.compress(tensor)
    compressed = checked(compressed, "compress()'s result").contiguous()
    _check_scaling(compressed, prescale, postscale)
    if compressed is tensor and not in_place:
        compressed = compressed.clone()  # the caller's tensor is not to be written
    request = requests.allreduce(compressed, None, op, None, prescale, postscale, name)

    def finish():
        result = compression.decompress(compressed, context)
        return tensor.copy_(result) if in_place and result is not tensor else result

    return Started(request, (compressed,), finish, op, compressed)


def _casts_for_codec(tensor: torch.Tensor) -> bool:
    """Whether a built-in 16-bit compressor casts ``tensor`` rather than use the wire codec."""
    return tensor.is_cuda


def _start_cast_on_device(tensor, in_place, op, compression, prescale, postscale, name) -> Started:
    """A built-in 16-bit compressor on a CUDA tensor: cast on the device, as Horovod does. Over
    CUDA IPC (the ranks of one host) the 16-bit tensor is then reduced in device memory, each
    rank's slice accumulated in float32 and rounded once (src/cuda/kernels.h, reduceMany), where
    the wire codec would stage it through host memory. Staged (ranks on several hosts, a GPU
    shared without MPS), half the bytes cross the host link, and the host schedule reduces 16-bit
    floats: a ring rounds its partial sums to 16 bits at each hop, as the codec's wire does.
    Scaling is done in the tensor's own precision: before the cast, and after the cast back."""
    scaled = tensor * prescale if prescale != 1.0 else tensor
    compressed = scaled.to(compression.dtype)  # a new tensor: the caller's is not written
    request = requests.allreduce(compressed, None, op, None, 1.0, 1.0, name)

    def finish():
        result = compressed.to(tensor.dtype)
        if postscale != 1.0:
            result.mul_(postscale)
        return tensor.copy_(result) if in_place else result

    return Started(request, (compressed,), finish, op, compressed)


def _check_scaling(tensor: torch.Tensor, prescale: float, postscale: float) -> None:
    """The core scales every type as Horovod does (src/codec/codec.h): integers in float64,
    truncated; 16-bit floats in float32; the others in their own precision. Not bool."""
    check_scalable(tensor, prescale, postscale)


def submit(target: Member, started: Sequence[Started], results) -> int:
    """Submits the all-reduces to the set's queue in one cycle; the handle's result is
    ``results([finish, ...])``."""
    adasum = [s.reduced for s in started if s.op == Adasum]
    if adasum:
        check_adasum(target.size, adasum)
    keepalive = tuple(t for s in started for t in s.keepalive if t is not None)
    works = requests.submit(target.queue, [s.request for s in started], keepalive)
    finishes = [s.finish for s in started]
    return handles.register(works, lambda: results(finishes))


def _submit_each(
    target: Member,
    tensors: Iterable[torch.Tensor],
    names: Sequence[str],
    in_place: bool,
    reduction: tuple,
    results,
) -> int:
    """Starts the all-reduce of each tensor (contiguous and detached) under its name, with
    ``reduction`` = (op, compression, prescale, postscale), and submits them in one cycle; the
    handle's result is ``results([finish, ...])``."""
    op, compression, prescale, postscale = reduction
    started = [
        start(t, in_place, op, compression, prescale, postscale, tensor_name)
        for t, tensor_name in zip(tensors, names)
    ]
    return submit(target, started, results)


def allreduce_async(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
) -> int:
    """Starts the all-reduce of ``tensor`` into a new tensor and returns a handle;
    synchronize() returns that tensor. Arguments as allreduce()'s."""
    target = member(process_set, "Allreduce")
    tensor = checked(tensor).detach().contiguous()
    reduction = (resolve_op(op, average), compression, prescale_factor, postscale_factor)
    names = [name or target.default_name("allreduce")]
    return _submit_each(target, [tensor], names, False, reduction, lambda finishes: finishes[0]())


def allreduce_async_(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
) -> int:
    """Starts the all-reduce of ``tensor`` in place and returns a handle; synchronize() returns
    ``tensor``."""
    target = member(process_set, "Allreduce")
    contiguous_for_in_place(tensor, "allreduce_")
    reduction = (resolve_op(op, average), compression, prescale_factor, postscale_factor)
    names = [name or target.default_name("allreduce")]
    return _submit_each(
        target,
        [tensor.detach()],
        names,
        True,
        reduction,
        lambda finishes: (finishes[0](), tensor)[1],
    )


def allreduce(
    tensor,
    average=None,
    name=None,
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
):
    """A new tensor holding the reduction of ``tensor`` over the set's ranks (default op:
    Average). Differentiable: the gradient is the same all-reduce of the incoming gradient."""
    op = resolve_op(op, average)
    checked(tensor)
    if wire_codec(compression) is None and not is_none(compression):
        compressed, context = compression.compress(tensor)
        reduced = Allreduce.apply(
            compressed, op, Compression.none, prescale_factor, postscale_factor, name, process_set
        )
        return compression.decompress(reduced, context)
    return Allreduce.apply(
        tensor, op, compression, prescale_factor, postscale_factor, name, process_set
    )


def allreduce_(
    tensor,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
):
    """Reduces ``tensor`` in place over the set's ranks and returns it."""
    return handles.synchronize(
        allreduce_async_(
            tensor, average, name, op, prescale_factor, postscale_factor, process_set, compression
        )
    )


def _grouped_names(target: Member, name: Optional[str], count: int) -> list:
    base = name or target.default_name("grouped_allreduce")
    return [f"{base}.{i}" for i in range(count)]


def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
) -> int:
    """Reduces every tensor; they are announced together, so they travel fused."""
    target = member(process_set, "Allreduce")
    reduction = (resolve_op(op, average), compression, prescale_factor, postscale_factor)
    # Each tensor is checked as it is started, in order.
    prepared = (checked(t, "tensors[i]").detach().contiguous() for t in tensors)
    names = _grouped_names(target, name, len(tensors))
    return _submit_each(
        target, prepared, names, False, reduction, lambda finishes: [f() for f in finishes]
    )


def grouped_allreduce_async_(
    tensors: Sequence[torch.Tensor],
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
) -> int:
    """Starts the in-place all-reduce of every tensor, announced together so they travel fused,
    and returns a handle; synchronize() returns the list of ``tensors``."""
    target = member(process_set, "Allreduce")
    for t in tensors:
        contiguous_for_in_place(t, "grouped_allreduce_")
    reduction = (resolve_op(op, average), compression, prescale_factor, postscale_factor)
    names = _grouped_names(target, name, len(tensors))
    return _submit_each(
        target,
        [t.detach() for t in tensors],
        names,
        True,
        reduction,
        lambda finishes: ([f() for f in finishes], list(tensors))[1],
    )


def grouped_allreduce(
    tensors,
    average=None,
    name=None,
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
):
    """New tensors holding the reductions; differentiable, as allreduce is."""
    op = resolve_op(op, average)
    if wire_codec(compression) is None and not is_none(compression):
        compressed, contexts = zip(*[compression.compress(t) for t in tensors])
        reduced = GroupedAllreduce.apply(
            op, Compression.none, prescale_factor, postscale_factor, name, process_set, *compressed
        )
        return [compression.decompress(r, c) for r, c in zip(reduced, contexts)]
    return list(
        GroupedAllreduce.apply(
            op, compression, prescale_factor, postscale_factor, name, process_set, *tensors
        )
    )


def grouped_allreduce_(
    tensors,
    average=None,
    name=None,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    compression=Compression.none,
):
    """Reduces every tensor in place, announced together so they travel fused, and returns the
    list of them."""
    return handles.synchronize(
        grouped_allreduce_async_(
            tensors, average, name, op, prescale_factor, postscale_factor, process_set, compression
        )
    )


# ---- the gradients (Horovod's torch/mpi_ops.py: see ringcomm/torch/collectives/__init__.py) ----


def _remember(ctx, op, prescale_factor, postscale_factor, process_set) -> dict:
    """The forward's arguments that backward reduces the gradients with (not its compression:
    Horovod's gradients travel uncompressed), kept on ``ctx``."""
    ctx.kwargs = dict(
        op=op,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
        process_set=process_set,
    )
    return ctx.kwargs


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, compression, prescale_factor, postscale_factor, name, process_set):
        kwargs = _remember(ctx, op, prescale_factor, postscale_factor, process_set)
        return handles.synchronize(
            allreduce_async(tensor, name=name, compression=compression, **kwargs)
        )

    @staticmethod
    def backward(ctx, grad):
        return (allreduce(grad, **ctx.kwargs),) + (None,) * 6


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, op, compression, prescale_factor, postscale_factor, name, process_set, *tensors
    ):
        kwargs = _remember(ctx, op, prescale_factor, postscale_factor, process_set)
        return tuple(
            handles.synchronize(
                grouped_allreduce_async(list(tensors), name=name, compression=compression, **kwargs)
            )
        )

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 6 + tuple(grouped_allreduce(list(grads), **ctx.kwargs))
