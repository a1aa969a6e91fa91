"""Elastic training (Horovod's ``hvd.elastic``): training goes on while workers come and go.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    train(state)

``run`` synchronizes the state from rank 0, then calls the function. When a collective fails
(HorovodInternalError: a worker died), every surviving rank restores the last committed
state; when the driver posts a host change (HostsUpdatedInterrupt, at ``state.commit()`` or
``state.check_host_updates()``), they keep their state. Either way ringcomm.torch is shut down
and initialized again, which under an elastic ``ringcomm-run`` meets the driver's next
generation of workers (new ranks, new size), the reset callbacks run, the state is synchronized
(new workers get it; skipped when hosts were only removed) and the function is called again.
Without a driver (any other launcher that lets the survivors live), the survivors of a failure
shrink the job's communicator in place instead, and go on as the next generation; a worker that
joins (a replacement ``ringcomm-run --replace`` starts, whose ``hvd.init()`` asks to join) is
admitted at the next ``state.commit()``, which grows the communicator in place and synchronizes
the state to it.
"""

from __future__ import annotations

import functools
import warnings

from ringcomm import RingcommError
from ringcomm.elastic import worker
from ringcomm.torch import objects
from ringcomm.torch import state as job
from ringcomm.torch.elastic.sampler import ElasticSampler
from ringcomm.torch.elastic.state import (
    ObjectState,
    State,
    TorchState,
    get_handler_registry,
    set_handler_registry,
)
from ringcomm.torch.errors import HorovodInternalError, HostsUpdatedInterrupt

__all__ = [
    "ElasticSampler",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "ObjectState",
    "State",
    "TorchState",
    "get_handler_registry",
    "run",
    "set_handler_registry",
]


def run(func):
    """Decorates the training function, whose first argument is a :class:`State`.

    No collective may run between ``hvd.init()`` and the call of the decorated function: new
    workers synchronize the state there, while the others do it inside the decorator after a
    reset, and both must run the same collectives.
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                skip_sync = False
                if not worker.active():
                    _shrink_in_place()
                    state.on_reset()
                    if _same_commit_everywhere(state):
                        state.sync_after_loss()
                        skip_sync = True
                    continue
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
                if interrupt.grown is not None:
                    _go_on_with(interrupt.grown)
                    state.on_reset()
                    continue
            _reset()
            state.on_reset()

    return wrapper


def _shrink_in_place() -> None:
    """Without an elastic driver (ringcomm-run --keep-survivors, mpirun, torchrun's env:// or a
    launcher of one's own), the survivors of a lost worker go on in place: they shrink the job's
    communicator (Communicator.shrink: they agree on who is left) and start a ringcomm.torch
    session on it, with the arguments of the last init() (docs/guides/recovery.md)."""
    _go_on_with(job.comm().shrink())


def _go_on_with(comm) -> None:
    """A ringcomm.torch session on `comm` (shrunk, or grown with workers that joined: their
    hvd.init() started the same session on it), with the arguments of the last init()."""
    job.shutdown()
    job.init(comm=comm, **job.last_arguments())


def _same_commit_everywhere(state) -> bool:
    """Whether every survivor went back to the same commit (a failure in the middle of a step
    may have let some commit it and not others): then their states are the same, as after a
    commit that found hosts only removed."""
    return len(set(objects.allgather_object(state.commits))) == 1


# Consecutive failed attempts to meet the next generation before a reset gives up.
_RESET_ATTEMPTS = 3


def _reset() -> None:
    """A new ringcomm.torch session, with the arguments of the last init() (but no static
    process sets: their ranks may not exist any more).

    Meeting the next generation fails when one of its workers dies on the way (the others
    time out after RINGCOMM_TIMEOUT): the survivors then meet the generation after it, which
    the driver forms without the dead worker. Horovod gives up at the first failure."""
    for attempt in range(1, _RESET_ATTEMPTS + 1):
        job.shutdown()
        try:
            job.reinit()
            return
        except (RingcommError, HorovodInternalError) as error:
            if attempt == _RESET_ATTEMPTS:
                raise
            warnings.warn(
                f"ringcomm.torch.elastic: meeting the next generation failed ({error}); "
                "meeting the one after it",
                stacklevel=2,
            )
