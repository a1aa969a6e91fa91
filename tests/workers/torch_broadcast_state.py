"""ringcomm.c10d.broadcast_state in its three cases, on 3 ranks: every rank holds rank 0's state
(only hashes cross: the state is not sent), one rank's differs (a parameter, a bfloat16 buffer
or Adam's moments: the state is sent, then every rank holds rank 0's), and the group grew (sent
without hashing). The step (``extra``) is root's in every case.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from report import Failures, report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

from ringcomm.c10d import state  # noqa: E402

use_harness_rendezvous()
torch.set_num_threads(1)
dist.init_process_group("ringcomm", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
failures = Failures()
calls = {"sent": 0, "hashed": 0}


def counted(function, name):
    def call(*args):
        calls[name] += 1
        return function(*args)

    return call


uncounted_digest = state._digest
state._send_state = counted(state._send_state, "sent")
state._digest = counted(state._digest, "hashed")


def new_model():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(12, 7), torch.nn.LayerNorm(7))
    module.register_buffer("scale", torch.arange(5, dtype=torch.bfloat16))
    module.register_buffer("nothing", torch.empty(0))
    optimizer = torch.optim.Adam(module.parameters(), lr=0.01)
    module(torch.ones(2, 12)).sum().backward()
    optimizer.step()  # Adam's moments and step count exist
    return module, optimizer


def digests_everywhere(module, optimizer) -> list:
    digests = [None] * size
    dist.all_gather_object(digests, uncounted_digest(module, optimizer))
    return digests


def broadcast(module, optimizer, perturb=None) -> tuple:
    calls.update(sent=0, hashed=0)
    if perturb is not None and rank == 2:
        with torch.no_grad():
            perturb(module, optimizer)
    step = state.broadcast_state(module, optimizer, extra=100 + rank)
    same = len(set(digests_everywhere(module, optimizer))) == 1
    return step, same, dict(calls)


def the_same_state_is_not_sent():
    module, optimizer = new_model()
    step, same, counts = broadcast(module, optimizer)
    failures.check("equal: root's step", step == 100, step)
    failures.check("equal: the same state", same)
    failures.check("equal: hashed, not sent", counts == {"sent": 0, "hashed": 1}, counts)


def a_different_state_is_sent(name, perturb):
    module, optimizer = new_model()
    step, same, counts = broadcast(module, optimizer, perturb)
    failures.check(f"{name}: root's step", step == 100, step)
    failures.check(f"{name}: the same state after", same)
    failures.check(f"{name}: sent", counts == {"sent": 1, "hashed": 1}, counts)


def after_a_grow_it_is_sent_unhashed():
    module, optimizer = new_model()
    state.newcomers_joined()
    step, same, counts = broadcast(module, optimizer)
    failures.check("grown: root's step", step == 100, step)
    failures.check("grown: sent without hashing", counts == {"sent": 1, "hashed": 0}, counts)
    step, same, counts = broadcast(module, optimizer)
    failures.check("grown, then: hashed, not sent", counts == {"sent": 0, "hashed": 1}, counts)


def weight(module, _):
    module[0].weight[3, 4] += 1e-6


def half_buffer(module, _):
    module.scale[1] = 7


def moments(_, optimizer):
    next(iter(optimizer.state.values()))["exp_avg_sq"][0] += 1


failures.case("equal", the_same_state_is_not_sent)
for name, perturb in [("weight", weight), ("bf16 buffer", half_buffer), ("Adam", moments)]:
    failures.case(name, lambda name=name, perturb=perturb: a_different_state_is_sent(name, perturb))
failures.case("grown", after_a_grow_it_is_sent_unhashed)
report({"failures": failures})
dist.destroy_process_group()
