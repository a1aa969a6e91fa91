"""Horovod's exception, and ringcomm's errors made into it.

Horovod raises ``HorovodInternalError`` (a RuntimeError) when a collective fails: ranks that
disagree, a timeout, a peer that went away. Elastic training catches it to recover. ringcomm
raises its own typed errors (``ringcomm.MismatchError``, ``TimeoutError``, ``TransportError``,
``CommunicatorClosed``) with the rank, peer and time waited. A collective of ringcomm.torch that
fails raises an error of both kinds: its class derives from ``HorovodInternalError`` and from the
ringcomm error's class, and it keeps that error's fields (``.peer``, ``.operation``,
``.elapsed``). So ``except hvd.HorovodInternalError`` and ``except ringcomm.MismatchError`` both
catch it. Bad arguments stay ValueError / TypeError, as in Horovod.
"""

from __future__ import annotations

import contextlib

from ringcomm import _core


class HorovodInternalError(RuntimeError):
    """A collective failed (Horovod's name): ranks disagreed, timed out, or a peer went away."""


class HostsUpdatedInterrupt(RuntimeError):  # noqa: N818 (Horovod's name)
    """Elastic training: the driver added or removed hosts. ``state.commit()`` or
    ``state.check_host_updates()`` raises it on every rank at once; ``hvd.elastic.run`` resets
    without restoring the committed state. ``skip_sync``: only hosts were removed, so the
    remaining ranks' state needs no broadcast."""

    def __init__(self, skip_sync: bool):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


class NotInitializedError(HorovodInternalError, ValueError):
    """ringcomm.torch has not been initialized (or has been shut down). Horovod raises a
    HorovodInternalError for a collective and a ValueError for ``hvd.rank()`` and the like; this
    is both."""

    def __init__(self, message: str = "Horovod has not been initialized; use hvd.init()."):
        super().__init__(message)


# ringcomm error class -> its subclass that is also a HorovodInternalError
_both_kinds: dict = {}


def _horovod_kind_of(cls: type) -> type:
    both = _both_kinds.get(cls)
    if both is None:
        both = type(cls.__name__, (HorovodInternalError, cls), {"__module__": __name__})
        _both_kinds[cls] = both
    return both


def as_horovod_error(error: BaseException) -> BaseException:
    """``error`` as Horovod raises it: a ringcomm error becomes also a HorovodInternalError
    (anything else, e.g. a ValueError for bad arguments, is returned as it is)."""
    if not isinstance(error, _core.RingcommError) or isinstance(error, HorovodInternalError):
        return error
    both = _horovod_kind_of(type(error))(*error.args)
    both.__dict__.update(error.__dict__)  # .operation, .rank, .peer, .elapsed
    return both


@contextlib.contextmanager
def horovod_errors():
    """Re-raises a ringcomm error from the body as :func:`as_horovod_error` makes it."""
    try:
        yield
    except _core.RingcommError as error:
        raise as_horovod_error(error) from error
