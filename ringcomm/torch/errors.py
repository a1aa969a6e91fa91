"""Horovod's exception, and ringcomm's errors made into it.

Horovod raises ``HorovodInternalError`` (a RuntimeError) when a collective fails: ranks that
disagree, a timeout, a peer that went away. Elastic training catches it to recover. ringcomm
raises its own typed errors (``ringcomm.MismatchError``, ``TimeoutError``, ``TransportError``,
``CommunicatorClosed``) with the rank, peer and time waited. A collective of ringcomm.torch that
fails raises an error of both kinds: its class derives from ``HorovodInternalError`` and from the
ringcomm error's class, and it keeps that error's fields (``.peer``, ``.operation``,
``.elapsed``). So ``except hvd.HorovodInternalError`` and ``except ringcomm.MismatchError`` both
catch it. Bad arguments stay ValueError / TypeError, as in Horovod; where Horovod raises another
type for a request (a RuntimeError for one it cannot run, a ValueError for a tensor it does not
take), ringcomm.torch raises a class deriving from both its old type and Horovod's, so that code
written for either catches it. docs/errors.md lists them.
"""

from __future__ import annotations

import contextlib

from ringcomm import _core

__all__ = [
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "NotInitializedError",
    "UnsupportedRequestError",
    "UnsupportedTensorError",
]


class HorovodInternalError(RuntimeError):
    """A collective failed (Horovod's name): ranks disagreed, timed out, or a peer went away."""


class HostsUpdatedInterrupt(RuntimeError):  # noqa: N818 (Horovod's name)
    """Elastic training: the driver added or removed hosts. ``state.commit()`` or
    ``state.check_host_updates()`` raises it on every rank at once; ``hvd.elastic.run`` resets
    without restoring the committed state. ``skip_sync``: only hosts were removed, so the
    remaining ranks' state needs no broadcast. ``grown``: without a driver, the job's
    communicator grown in place with the workers that joined (``Communicator.grow``), which the
    next session runs on."""

    def __init__(self, skip_sync: bool, grown=None):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync
        self.grown = grown


class NotInitializedError(HorovodInternalError, ValueError):
    """ringcomm.torch has not been initialized (or has been shut down). Horovod raises a
    HorovodInternalError for a collective and a ValueError for ``hvd.rank()`` and the like; this
    is both."""

    def __init__(self, message: str = "Horovod has not been initialized; use hvd.init()."):
        super().__init__(message)


class UnsupportedRequestError(HorovodInternalError, ValueError):
    """A request Horovod refuses with a HorovodInternalError (a RuntimeError): reducescatter with
    Adasum, Adasum of integer tensors, an unknown reduction, a request the queue's thread could
    not run. Also a ValueError, as ringcomm raised before."""


class UnsupportedTensorError(TypeError, ValueError):
    """A tensor ringcomm.torch does not take (another device, a sparse tensor given to a dense
    collective, a dtype it does not carry): Horovod's ValueError ("Tensor type ... is not
    supported."), and the TypeError ringcomm raised before."""


# ringcomm error class -> its subclass that is also a HorovodInternalError
_both_kinds: dict = {}


def _horovod_kind_of(cls: type) -> type:
    both = _both_kinds.get(cls)
    if both is None:
        both = type(cls.__name__, (HorovodInternalError, cls), {"__module__": __name__})
        _both_kinds[cls] = both
    return both


def as_horovod_error(error: BaseException, from_queue: bool = False) -> BaseException:
    """``error`` as Horovod raises it: a ringcomm error becomes also a HorovodInternalError.
    With ``from_queue`` (it came from a collective the queue's thread ran, or from a queue that
    such a failure closed) a ValueError becomes an UnsupportedRequestError, as every failure of
    Horovod's background thread is a HorovodInternalError. Anything else, e.g. a ValueError for
    bad arguments at the call, is returned as it is."""
    if isinstance(error, HorovodInternalError):
        return error
    if from_queue and type(error) is ValueError:
        return UnsupportedRequestError(*error.args)
    if not isinstance(error, _core.RingcommError):
        return error
    both = _horovod_kind_of(type(error))(*error.args)
    both.__dict__.update(error.__dict__)  # .operation, .rank, .peer, .elapsed
    return both


@contextlib.contextmanager
def horovod_errors(from_queue: bool = False):
    """Re-raises a ringcomm error from the body as :func:`as_horovod_error` makes it."""
    try:
        yield
    except (_core.RingcommError, ValueError) as error:
        converted = as_horovod_error(error, from_queue)
        if converted is error:
            raise
        raise converted from error
