"""broadcast_optimizer_state: every rank's optimizer state (and hyperparameters) made the root's,
as Horovod does it.

An optimizer that has not stepped yet has no state to broadcast: it is first stepped once with
zero gradients (the wrapped optimizer's own step, never the DistributedOptimizer's, which would
wait for the other ranks' gradients), so that every rank builds the state the root's will
overwrite. Parameters without gradients get zero ones for that step. Tensors are broadcast in
place, under names taken from the state's keys; scalars (step counts, learning rates...) travel
together as one object.
"""

from __future__ import annotations

import collections

import torch

from ringcomm.torch import objects
from ringcomm.torch.process_sets import global_process_set


def _step_without_synchronizing(optimizer: torch.optim.Optimizer) -> None:
    # A DistributedOptimizer's wrapped optimizer steps alone (DistributedOptimizerMixin).
    getattr(optimizer, "_ringcomm_local_step", optimizer.step)()


def _sparse_parameter_ids(model) -> set:
    if model is None:
        return set()
    return {
        id(p)
        for module in model.modules()
        if isinstance(module, torch.nn.Embedding) and module.sparse
        for p in module.parameters()
    }


def _initialize_state(optimizer: torch.optim.Optimizer, model) -> None:
    """Steps an optimizer with no state once, with zero gradients, to create its state."""
    sparse = _sparse_parameter_ids(model)
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not p.requires_grad:
                continue
            p.grad = torch.zeros_like(p.data)
            if isinstance(optimizer, torch.optim.SparseAdam) or (
                isinstance(optimizer, torch.optim.SGD) and id(p) in sparse
            ):
                p.grad = p.grad.to_sparse()
    _step_without_synchronizing(optimizer)


def broadcast_optimizer_state(
    optimizer: torch.optim.Optimizer, root_rank: int, model=None, process_set=global_process_set
) -> None:
    """Makes this rank's optimizer state and hyperparameters the root's. ``model`` (optional)
    tells which parameters are sparse (``nn.Embedding(sparse=True)``)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        _initialize_state(optimizer, model)
        state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        return  # a stateless optimizer: only hyperparameters... which it has none of to differ

    tensors = []
    scalars = {}
    assign = {}
    occurrences: collections.defaultdict[str, int] = collections.defaultdict(int)
    for index, group in enumerate(state_dict["param_groups"]):
        for option, value in group.items():
            if option == "params":
                continue
            key = f"{option}.{index}"
            scalars[key] = value
            assign[key] = _option_setter(optimizer, index, option)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue  # a parameter that does not require a gradient has no state
            for name, value in state_dict["state"][pid].items():
                # Names repeat across parameters: their order makes them unique.
                occurrences[name] += 1
                key = f"{name}.{occurrences[name]}"
                if torch.is_tensor(value):
                    tensors.append((key, value))
                else:
                    scalars[key] = value
                    assign[key] = _state_setter(optimizer, pid, name)

    objects.broadcast_parameters(tensors, root_rank, process_set=process_set)
    scalars = objects.broadcast_object(scalars, root_rank, process_set=process_set)
    for key, value in scalars.items():
        assign[key](value)


def _option_setter(optimizer, index, option):
    def assign(value):
        optimizer.param_groups[index][option] = value

    return assign


def _state_setter(optimizer, pid, name):
    # state_dict() numbers the parameters in param_groups order; write the optimizer's own state.
    params = [p for group in optimizer.param_groups for p in group["params"]]

    def assign(value):
        optimizer.state[params[pid]][name] = value

    return assign
