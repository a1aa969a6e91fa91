"""DDP communication hooks that send gradients through ringcomm's wire codecs.

torch's own hooks (``fp16_compress_hook``, ``powerSGD_hook``) compress above the library: the
all-reduce they call moves full tensors of the narrow type. These hand the bucket to ringcomm's
all-reduce with a codec, which is narrow on the wire only: every hop widens to float32 and
accumulates there, and every rank ends with the same bits::

    from ringcomm.c10d import hooks
    state = hooks.CompressionState(codec="int8")
    model = DistributedDataParallel(model)
    model.register_comm_hook(state, hooks.compress_hook)

``int8`` (a bfloat16 scale per block of 32 values) and ``fp8`` (OCP mxfp8) keep each bucket's
rounding error and add it to the bucket's next gradient (error feedback, as 1-bit Adam and
PowerSGD do), so that what a step rounds away reaches the model in later steps. The error fed
back is this rank's own rounding of its gradient to the wire format, the first and largest of
the errors; the reduction's later roundings (each partial sum narrowed again on its way) are not
compensated. ``fp16`` and ``bf16`` carry gradients without feedback, as torch's hooks do.

A gradient that holds an inf or a NaN (a step torch's GradScaler skips) arrives non-finite at
that place alone, on every rank with the same bits (``int8`` keeps an infinity, ``fp8`` makes it
NaN: e4m3 has none), so GradScaler skips the step on every rank. The error fed back keeps 0
where the gradient was not finite: the next steps go ahead.

The state pickles without its process group (``torch.save(state)``, as PowerSGD's does) and has
``state_dict()``/``load_state_dict()``: the residuals survive a checkpoint.
"""

from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from ringcomm._error_feedback import feed_back

__all__ = ["CODECS", "CompressionState", "compress_hook"]

#: The wire formats :class:`CompressionState` takes: 16-bit floats, or 8 bits with a scale per
#: block of 32 values (int8: a bfloat16 scale; fp8: OCP mxfp8).
CODECS = ("fp16", "bf16", "int8", "fp8")
# The codecs whose rounding error is fed back (the 16-bit ones lose little enough).
_FED_BACK = ("int8", "fp8")


class CompressionState:
    """What :func:`compress_hook` keeps between steps: the codec, the process group (None: the
    default group), and each bucket's residual where the codec feeds its error back."""

    def __init__(
        self,
        process_group: Optional[dist.ProcessGroup] = None,
        codec: str = "int8",
        error_feedback: Optional[bool] = None,
    ) -> None:
        if codec not in CODECS:
            raise ValueError(
                f"CompressionState: codec must be one of {', '.join(CODECS)}; got {codec!r}"
            )
        self.process_group = process_group
        self.codec = codec
        self.error_feedback = codec in _FED_BACK if error_feedback is None else bool(error_feedback)
        self.residuals: Dict[int, torch.Tensor] = {}

    def state_dict(self) -> Dict[str, Any]:
        """The codec, whether it feeds back, and copies of the residuals, for a checkpoint."""
        return {
            "codec": self.codec,
            "error_feedback": self.error_feedback,
            "residuals": {index: r.clone() for index, r in self.residuals.items()},
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned; the codec must be this state's."""
        if state["codec"] != self.codec:
            raise ValueError(
                f"CompressionState.load_state_dict: the state is of codec {state['codec']!r}, "
                f"this one of {self.codec!r}"
            )
        self.error_feedback = bool(state["error_feedback"])
        self.residuals = {int(index): r.clone() for index, r in state["residuals"].items()}

    def __getstate__(self) -> Dict[str, Any]:
        # A process group does not pickle: the one restored is the default group's, unless set.
        return self.state_dict()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.process_group = None
        self.codec = state["codec"]
        self.residuals = {}
        self.load_state_dict(state)


def _ringcomm_backend(group: Optional[dist.ProcessGroup]):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    if not hasattr(backend, "allreduce_compressed"):
        raise RuntimeError(
            "ringcomm.c10d.hooks.compress_hook needs a process group on the ringcomm backend "
            f"(init_process_group('ringcomm')); this one's is {type(backend).__name__}"
        )
    return backend


# No `from __future__ import annotations` in this module: DDP's register_comm_hook compares the
# hook's annotations with dist.GradBucket and Future themselves, not their names.
def compress_hook(
    state: CompressionState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """The average of the bucket's gradients over the group, through ``state.codec`` on the
    wire (with error feedback for int8 and fp8). Float32 CPU gradients."""
    grad = bucket.buffer()
    if grad.dtype != torch.float32 or grad.device.type != "cpu":
        raise TypeError(
            f"ringcomm.c10d.hooks.compress_hook: {state.codec} carries float32 CPU gradients; "
            f"this bucket holds {grad.dtype} on {grad.device}"
        )
    if state.error_feedback:
        feed_back(grad, state.residuals, bucket.index(), state.codec)
    work = _ringcomm_backend(state.process_group).allreduce_compressed(grad, state.codec, True)
    return work.get_future().then(lambda done: done.value()[0])
