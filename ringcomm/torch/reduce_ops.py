"""Horovod's reduction operators (``hvd.Average`` ...) and its deprecated ``average=`` flag."""

from __future__ import annotations

import warnings

import ringcomm

Average = ringcomm.AVG
Sum = ringcomm.SUM
Min = ringcomm.MIN
Max = ringcomm.MAX
Product = ringcomm.PROD


def resolve_op(op, average):
    """The operator a call asked for: ``op``, else the old ``average`` flag (with Horovod's
    deprecation warning), else Average; both at once is an error, as in Horovod."""
    if op is not None:
        if average is not None:
            raise ValueError(
                "The op parameter supersedes average. Please provide only one of them."
            )
        return op
    if average is not None:
        warnings.warn(
            "Parameter `average` has been replaced with `op` and will be removed in v1.0",
            DeprecationWarning,
            stacklevel=3,
        )
        return Average if average else Sum
    return Average
