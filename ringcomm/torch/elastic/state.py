"""Training state that survives workers coming and going (Horovod's ``hvd.elastic.State``,
``ObjectState`` and ``TorchState``).

A state keeps a committed copy of what it tracks in host memory. ``commit()`` saves a new copy
and checks for host changes; ``restore()`` goes back to the copy after a failed collective;
``sync()`` makes every rank's state rank 0's (rank 0 is always one of the oldest workers, so it
has the state). ``hvd.elastic.run`` calls them (ringcomm/torch/elastic/__init__.py).
"""

from __future__ import annotations

import copy
import queue

import torch

from ringcomm.elastic import worker as elastic_worker
from ringcomm.elastic.protocol import HostUpdateResult
from ringcomm.torch import objects, optimizer_state
from ringcomm.torch import state as job
from ringcomm.torch.elastic.sampler import ElasticSampler
from ringcomm.torch.errors import HostsUpdatedInterrupt


class State:
    """What is kept in step across workers. ``bcast_object(obj)`` returns rank 0's ``obj`` on
    every rank; ``get_rank()`` returns this worker's rank (Horovod's arguments)."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages: queue.Queue = queue.Queue()
        self._last_updated_timestamp = 0
        self._notices_seen = 0
        self._reset_callbacks: list = []
        self.commits = 0  # how many times this worker saved the state (commit())

    def register_reset_callbacks(self, callbacks) -> None:
        """Functions to call after every reset (workers added or removed), once ringcomm.torch
        is initialized again and before the state is synchronized: e.g. to scale the learning
        rate to the new ``hvd.size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by ``hvd.elastic.run`` after a reset, once ringcomm.torch is initialized
        again: forgets pending host notices, calls ``reset()``, then the reset callbacks."""
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res) -> None:
        """A host-change notice (the driver's number for it, and what changed)."""
        self._host_messages.put((timestamp, update_res))

    def commit(self) -> None:
        """Saves the state in host memory (what ``restore()`` returns to), then checks for host
        changes: raises HostsUpdatedInterrupt, on every rank, when the driver posted one."""
        self.save()
        self.commits += 1
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt on every rank when hosts were added or removed. A
        collective (rank 0's view is broadcast), so every rank must call it together. Without
        an elastic driver, workers that asked to join (a lost worker's replacement, started
        with RINGCOMM_JOIN) are admitted here: the job's communicator grows in place."""
        if not elastic_worker.active() and job.is_initialized():
            grown = job.comm().grow()
            if grown is not job.comm():
                raise HostsUpdatedInterrupt(False, grown)
        if self._rank() == 0:
            # The driver's notices reach rank 0 only, as in Horovod; the broadcast below
            # tells the others.
            for number, result in elastic_worker.notices_after(self._notices_seen):
                self._notices_seen = number
                self.on_hosts_updated(number, result)
        previous = last = self._last_updated_timestamp
        update = HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, result = self._host_messages.get()
            if timestamp > last:
                last = timestamp
                update |= result
        previous, self._last_updated_timestamp, update = self._bcast_object(
            (previous, last, int(update))
        )
        if self._last_updated_timestamp > previous:
            raise HostsUpdatedInterrupt(update == HostUpdateResult.removed)

    def save(self) -> None:
        """Saves the state to host memory."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Goes back to the last committed state, dropping what changed since."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Makes every rank's state rank 0's."""
        raise NotImplementedError()

    def sync_after_loss(self) -> None:
        """After workers were only lost and every survivor went back to the same commit: what
        may differ between ranks. Everything, unless a state knows better (TorchState)."""
        self.sync()

    def reset(self) -> None:
        """Adapts to the new job after a reset, before the state is synchronized."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and kept as attributes
    (``state.epoch``); synchronized with ``bcast_object``, so they must pickle."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, value)


class StateHandler:
    """Keeps one attribute of a TorchState whose type needs more than pickling."""

    def __init__(self, value):
        self.value = value

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        """The job changed (before sync)."""

    def set_value(self, value) -> None:
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """A value that has a ``state_dict()`` (models, optimizers, samplers): the saved state is a
    deep copy of it, taken at once, and restoring loads it back. The handlers below keep their
    own ``__init__`` for Horovod's argument names (``model``, ``optimizer``, ``sampler``)."""

    def __init__(self, value):
        super().__init__(value)
        self.save()

    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)


class ModelStateHandler(_StateDictHandler):
    def __init__(self, model: torch.nn.Module):
        super().__init__(model)

    def sync(self) -> None:
        objects.broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def __init__(self, optimizer: torch.optim.Optimizer):
        super().__init__(optimizer)

    def sync(self) -> None:
        optimizer_state.broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(_StateDictHandler):
    def __init__(self, sampler: ElasticSampler):
        super().__init__(sampler)

    def sync(self) -> None:
        # Indices recorded one by one differ between ranks: their union is what was processed.
        # The epoch and the count of processed samples are rank 0's.
        sampler = self.value
        gathered = objects.allgather_object(sampler.processed_indices)
        state_dict = objects.broadcast_object(sampler.state_dict())
        state_dict["processed_indices"] = set().union(*gathered)
        sampler.load_state_dict(state_dict)

    def reset(self) -> None:
        self.value.reset()


# (type, handler) pairs, first match wins (Horovod's registry, with its getter and setter).
_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]
# Handlers synchronize in this order of kinds. Optimizers go before models: an optimizer with
# no state yet (a new worker's) is stepped once to create it, and with weight decay that step
# moves the parameters, which the model's broadcast then puts right.
_SYNC_ORDER = (OptimizerStateHandler, ModelStateHandler)


def get_handler_registry() -> list:
    """The (type, handler class) pairs TorchState uses to save, restore and synchronize the values
    it is given (models, optimizers, anything else), first match wins; as Horovod's."""
    return _handler_registry


def set_handler_registry(registry) -> None:
    """Replaces the registry get_handler_registry() returns (Horovod's hook for values of
    types of your own)."""
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


def _sync_rank(handler) -> int:
    for index, kind in enumerate(_SYNC_ORDER):
        if isinstance(handler, kind):
            return index
    return len(_SYNC_ORDER)


class TorchState(ObjectState):
    """State of a PyTorch training process: ``model`` and ``optimizer`` (either may be None),
    and any keyword arguments, all kept as attributes. Modules, optimizers and ElasticSamplers
    among the keyword arguments get their handler too; other values are plain objects."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        self._handlers = {}
        plain = {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                self._handlers[name] = handler
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=objects.broadcast_object, get_rank=job.rank, **plain)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in sorted(self._handlers.values(), key=_sync_rank):
            handler.sync()
        super().sync()

    def sync_after_loss(self) -> None:
        # The model and the optimizer are what every survivor's same commit made them, as
        # Horovod skips sync() when hosts were only removed: their broadcast (a copy of the
        # model across the slowest link) was the largest part of recovering in place. What
        # differs between ranks still meets: samplers' processed indices, handlers of the
        # user's registry, the plain values (a small broadcast).
        for handler in sorted(self._handlers.values(), key=_sync_rank):
            if not isinstance(handler, (ModelStateHandler, OptimizerStateHandler)):
                handler.sync()
        super().sync()

    def reset(self) -> None:
        # Samplers reshard over the new ranks even when the reset skips sync() (hosts were
        # only removed). Horovod's leave that to sync(), so after such a reset they go on
        # sharding over the old number of ranks.
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def __setattr__(self, name, value):
        if name != "_handlers" and name in getattr(self, "_handlers", {}) and hasattr(self, name):
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
