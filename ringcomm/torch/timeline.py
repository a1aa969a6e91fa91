"""Horovod's timeline: ``start_timeline`` / ``stop_timeline`` and ``HOROVOD_TIMELINE``.

Not a second recorder: the core's trace (RINGCOMM_TRACE's events, src/common/trace.h) records
the tensor queue's phases, and the timeline is a view of them in Horovod's format, written by
rank 0 when it stops (stop_timeline(), or shutdown() for HOROVOD_TIMELINE): one row per tensor
name with NEGOTIATE_<OP> (a tick per rank as its announcement arrived), then <OP> with QUEUE,
MEMCPY_IN_FUSION_BUFFER, RINGCOMM_<OP> and MEMCPY_OUT_FUSION_BUFFER, and CYCLE_START markers
with ``mark_cycles``. Unlike Horovod's, the file is written at the end, not as it goes.
HOROVOD_TIMELINE starts one at init() (ringcomm/torch/state.py).
"""

from __future__ import annotations

from ringcomm import _core
from ringcomm.torch import state


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Creates a timeline file at ``file_path`` (on rank 0) and begins recording. A timeline
    already recording is written out first. Raises ValueError if not initialized."""
    if not state.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    if not file_path:
        raise ValueError("start_timeline: file_path must not be empty")
    _core.start_horovod_timeline(str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops recording; rank 0 writes the file. Raises ValueError if not initialized."""
    if not state.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    _core.stop_horovod_timeline()
