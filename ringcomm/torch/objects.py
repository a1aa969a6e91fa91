"""Python objects and model parameters across ranks: broadcast_object, allgather_object and
broadcast_parameters, with Horovod's names and arguments (and ``process_set=`` on each, which
Horovod 0.28.1 has on broadcast_object only).

Objects are serialized with cloudpickle where it is installed (as Horovod does, so lambdas and
local classes travel), else pickle, and move as named byte tensors through the tensor queue.
"""

from __future__ import annotations

import io
from typing import Any

import torch

from ringcomm.torch import handles, state
from ringcomm.torch.collectives import allgather, broadcast
from ringcomm.torch.process_sets import global_process_set, member

try:
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - cloudpickle comes with most torch installs
    import pickle as _pickle


def _dumps(obj: Any) -> torch.Tensor:
    buffer = io.BytesIO()
    _pickle.dump(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _loads(data: torch.Tensor) -> Any:
    return _pickle.loads(data.numpy().tobytes())


def broadcast_object(obj: Any, root_rank: int = 0, name=None, process_set=global_process_set):
    """The root's ``obj`` (anything picklable), on every rank of the set; ``root_rank`` is a
    global rank. (Horovod names an unnamed call after the object's type, which differs between
    the root's object and the others' placeholder, e.g. None; ringcomm counts unnamed calls.)"""
    name = name or member(process_set, "Broadcast").default_name("broadcast_object")
    is_root = state.rank() == root_rank
    data = _dumps(obj) if is_root else None
    length = torch.tensor([data.numel() if data is not None else 0], dtype=torch.int32)
    broadcast.broadcast_(length, root_rank, f"{name}.sz", process_set)
    if not is_root:
        data = torch.empty(int(length[0]), dtype=torch.uint8)
    broadcast.broadcast_(data, root_rank, f"{name}.t", process_set)
    return obj if is_root else _loads(data)


def allgather_object(obj: Any, name=None, process_set=global_process_set) -> list:
    """Every rank's ``obj``, in the set's rank order (unnamed calls are counted, as
    broadcast_object's are)."""
    name = name or member(process_set, "Allgather").default_name("allgather_object")
    data = _dumps(obj)
    lengths = allgather.allgather(
        torch.tensor([data.numel()], dtype=torch.int32), f"{name}.sz", process_set
    )
    gathered = allgather.allgather(data, f"{name}.t", process_set)
    ends = torch.cumsum(lengths, 0).tolist()
    starts = [0] + ends[:-1]
    return [_loads(gathered[start:end]) for start, end in zip(starts, ends)]


def broadcast_parameters(params, root_rank: int, process_set=global_process_set) -> None:
    """Overwrites parameters with the root's, in place: a ``state_dict()``, or a list or any
    iterable of ``(name, tensor)`` pairs (``named_parameters()``) or of tensors
    (``parameters()``)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        try:
            items = [p if isinstance(p, tuple) else (None, p) for p in params]
        except TypeError:
            raise ValueError(f"invalid params of type: {type(params)}") from None
    pending = []
    for name, value in items:
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"broadcast_parameters: {name} is a {type(value).__name__}, not a tensor"
            )
        pending.append(broadcast.broadcast_async_(value.data, root_rank, name, process_set))
    for handle in pending:
        handles.synchronize(handle)
