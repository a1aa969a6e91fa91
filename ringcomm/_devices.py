"""Which CUDA stream a collective on device arrays runs after.

A collective on CUDA arrays starts after the work already queued on a stream (the one that
produced the data) and makes that stream wait for its result, as NCCL does: no device-wide
synchronisation. By default the stream is the array library's current stream (torch's
``torch.cuda.current_stream()``, CuPy's ``cupy.cuda.get_current_stream()``), or the stream an
object's ``__cuda_array_interface__`` names; ``stream=`` overrides it (a ``torch.cuda.Stream``, a
``cupy.cuda.Stream``, or a raw ``cudaStream_t`` as an int; 0 is the legacy default stream).

The bindings find the CUDA arrays while decoding them (bindings/arrays.cc) and ask
:func:`current_stream` for the default, so host arrays never reach this module.
"""

from __future__ import annotations

from typing import Any

from ringcomm import _core


def stream_handle(stream: Any) -> int:
    """A cudaStream_t as an int, from a torch or CuPy stream object or an int."""
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(stream, attribute, None)
        if value is not None:
            return int(value)
    if isinstance(stream, int):
        return stream
    raise TypeError(
        "stream must be a torch.cuda.Stream, a cupy.cuda.Stream or a cudaStream_t as an int; "
        f"got {type(stream).__name__}"
    )


def current_stream(obj: Any) -> int:
    """The stream a CUDA array's library currently queues work on, as an int.

    Called by the bindings for the first CUDA array of a collective launched without
    ``stream=``; never for host arrays.
    """
    module = type(obj).__module__
    if module.startswith("torch"):
        import torch

        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    if module.startswith("cupy"):
        import cupy

        with obj.device:  # the current stream of the array's device, not the current device's
            return int(cupy.cuda.get_current_stream().ptr)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(interface, dict) and interface.get("stream") is not None:
        # v3: the producer's stream; 1 and 2 are cudaStreamLegacy and cudaStreamPerThread, which
        # the CUDA runtime takes as handles too.
        return int(interface["stream"])
    return 0  # the legacy default stream


def set_call_stream(stream: Any) -> None:
    """Starts a collective's call on this thread, with its ``stream=`` (None: the array
    library's current stream). Called by every collective, so that nothing a failed call left
    behind carries over."""
    _core._set_call_stream(None if stream is None else stream_handle(stream))


def built_with_cuda() -> bool:
    """Whether this ringcomm was built with CUDA (RINGCOMM_BUILD_CUDA=ON)."""
    return bool(_core.built_with_cuda())
