"""Rank 0's training state on every rank of the default group: after a shrink (survivors that
may be a step apart) and after a grow (newcomers with a freshly built model).

Survivors of a shrink almost always hold the same state already: a failure strikes inside a
step's all-reduce, and every survivor's step fails with it. Then only a hash of each rank's state
crosses the link (one small all-gather), not the state itself: at 8 ranks on two hosts at
1 Gbit/s that is the difference between 0.13-0.17 s and a few ms for bench/heal.py's 10.6 MB.
Where any rank differs, or newcomers have joined since the last broadcast, all of it is sent.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

# Set on every rank of a group that grew (members and newcomers alike: grow.py), cleared once the
# state reached everyone: while set, hashing is skipped, since a newcomer's state differs anyway.
# Only what a rank spends is decided by it; whether the state is sent is decided by what all ranks
# gathered, so ranks whose flags disagree (a failure between two broadcasts) still agree.
_newcomers_since_broadcast = False


def newcomers_joined() -> None:
    """The default group grew: the next broadcast_state() sends the whole state."""
    global _newcomers_since_broadcast
    _newcomers_since_broadcast = True


def broadcast_state(module=None, optimizer=None, extra: Any = None, root: int = 0) -> Any:
    """Rank ``root``'s state to every rank of the default group, in place: the module's
    parameters and buffers and the optimizer's state (a broadcast a tensor, at the link's speed;
    the optimizer's layout alone pickled), and ``extra`` (any picklable value, such as the
    step), which it returns. Where every rank already holds root's state (the same hash of its
    bytes), only the hashes and ``extra`` are exchanged.
    Every rank calls it, newcomers with freshly built module and optimizer."""
    import torch.distributed as dist

    global _newcomers_since_broadcast
    hashed = None if _newcomers_since_broadcast else _digest(module, optimizer)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (hashed, extra if dist.get_rank() == root else None))
    digests = [digest for digest, _ in gathered]
    if None in digests or len(set(digests)) > 1:
        _send_state(module, optimizer, root)
    _newcomers_since_broadcast = False
    return gathered[root][1]


def _send_state(module, optimizer, root: int) -> None:
    """The module's tensors and the optimizer's state, root's to everyone."""
    import torch
    import torch.distributed as dist

    # The optimizer's layout first, so that a receiver allocates its state while the module's
    # tensors arrive; then everything queued at once: the engine runs the broadcasts back to
    # back, with no round trip through Python between them.
    receive = _optimizer_layout(optimizer, root) if optimizer is not None else None
    works = []
    if module is not None:
        with torch.no_grad():
            tensors = list(module.state_dict().values())
            works = [dist.broadcast(t, src=root, async_op=True) for t in tensors]
    if receive is not None:
        state, tensors = receive()
        works += [dist.broadcast(tensor, src=root, async_op=True) for tensor in tensors]
    for work in works:
        work.wait()
    if receive is not None and state is not None:
        optimizer.load_state_dict(state)


def _digest(module, optimizer) -> bytes:
    """SHA-256 of a rank's state: every byte of the module's tensors, the optimizer's layout
    (pickled, its hyperparameters included) and every byte of its tensors. About 1.7 GB/s here,
    6 ms for 10.6 MB; the link moves the same bytes at 0.12 GB/s."""
    import torch

    digest = hashlib.sha256()

    def add(tensor) -> None:
        flat = tensor.detach().reshape(-1).contiguous().cpu()
        digest.update(flat.view(torch.uint8).numpy() if flat.numel() else b"")

    if module is not None:
        for tensor in module.state_dict().values():
            add(tensor)
    if optimizer is not None:
        tensors: list = []
        digest.update(pickle.dumps(_layout_of(optimizer.state_dict(), tensors)))
        for tensor in tensors:
            add(tensor)
    return digest.digest()


def _layout_of(value, tensors: list):
    """``value`` (an optimizer's state dict) with each tensor replaced by its shape and dtype,
    the tensors appended to ``tensors`` in order."""
    import torch

    if torch.is_tensor(value):
        tensors.append(value.detach().contiguous())
        return _TensorSlot(tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return {k: _layout_of(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_layout_of(v, tensors) for v in value)
    return value


def _optimizer_layout(optimizer, root: int):
    """Rank ``root``'s optimizer state's layout, pickled to every rank; returns a function that
    gives (the state to load, or None on root; the tensors to broadcast into, in order). The
    bulk (momentum, Adam's moments) never passes through pickle, and moves at the link's
    speed."""
    import torch
    import torch.distributed as dist

    tensors: list = []
    layout = [_layout_of(optimizer.state_dict(), tensors) if dist.get_rank() == root else None]
    dist.broadcast_object_list(layout, src=root)

    def filled(value):
        if isinstance(value, _TensorSlot):
            # Zeroed, not empty: the first touch of fresh memory costs a page fault a page (10 us
            # each on the 2-core VM, a second for 411 MB), paid here while the module's tensors
            # still arrive rather than by the receive itself.
            tensor = torch.zeros(value.shape, dtype=value.dtype)
            tensors.append(tensor)
            return tensor
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(filled(v) for v in value)
        return value

    def receive():
        if dist.get_rank() == root:
            return None, tensors
        return filled(layout[0]), tensors

    return receive


class _TensorSlot:
    """A tensor's place in an optimizer state's layout: what a receiver allocates for it."""

    def __init__(self, shape: tuple, dtype) -> None:
        self.shape = shape
        self.dtype = dtype
