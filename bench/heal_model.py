"""What bench/heal.py's workers share, so that ringcomm's heal and torchft's rejoin train the same
model: the MLP (bench/recovery.py's 1.3M parameters at 256 -> 1024 -> 1024 -> 10), its SGD, and
a digest of a rank's state to prove every rank holds the same one.

bench/heal_worker.py (DDP on ringcomm) and bench/torchft_worker.py (torchft's DDP) import it from
their own folder (a script's folder is first on sys.path)."""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def mlp(inputs: int = 256, width: int = 1024, layers: int = 2, outputs: int = 10) -> nn.Module:
    """``layers`` hidden layers of ``width``; every rank builds the same one (seed 0)."""
    torch.manual_seed(0)
    modules: list = [nn.Linear(inputs, width), nn.ReLU()]
    for _ in range(layers - 1):
        modules += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*modules, nn.Linear(width, outputs))


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    """The optimizer of bench/heal.py: SGD with momentum (a state as large as the model)."""
    return torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)


def digest(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> str:
    """A hash of the parameters, and of the optimizer's tensors where given: two ranks with the
    same digest hold the same state."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    if optimizer is not None:
        for state in optimizer.state_dict()["state"].values():
            for value in state.values():
                if torch.is_tensor(value):
                    h.update(value.detach().numpy().tobytes())
    return h.hexdigest()[:16]
