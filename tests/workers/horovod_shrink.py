"""The Horovod API survives a killed worker without an elastic driver: hvd.elastic.run shrinks the
job's communicator in place (tests/test_shrink.py).

argv: victim [uneven]
Trains a linear model with hvd.DistributedOptimizer under @hvd.elastic.run, committing every
step; the victim kills itself (SIGKILL) at step 3. The survivors restore the last commit, shrink,
synchronize the state from the new rank 0 and train to step 8. Reports the size after, the
resets seen, when the first step after the kill completed, and a hash of the parameters.
With "uneven", rank 2 commits once more than the others, with parameters of its own, as when a
failure lets some ranks commit a step and not others: the survivors must not take their states
for the same (they skip the broadcast only when every one went back to the same commit).
"""

import hashlib
import os
import signal
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402

victim = int(sys.argv[1])
uneven = sys.argv[2:] == ["uneven"]
torch.manual_seed(0)
torch.set_num_threads(1)
hvd.init()
first_rank = hvd.rank()
model = torch.nn.Linear(16, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model, optimizer, step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])
timing = {}


@hvd.elastic.run
def train(state):
    generator = torch.Generator().manual_seed(first_rank * 100 + state.step)
    while state.step < 8:
        if first_rank == victim and state.step == 3:
            print(f"KILLED_AT {time.time()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        model(torch.randn(8, 16, generator=generator)).square().mean().backward()
        optimizer.step()
        state.step += 1
        if resets and "recovered_at" not in timing:
            timing["recovered_at"] = time.time()
        state.commit()
        if uneven and first_rank == 2 and state.step == 2 and not resets:
            with torch.no_grad():
                model.weight.add_(1.0)
            state.save()
            state.commits += 1


train(state)
digest = hashlib.sha256()
for parameter in model.parameters():
    digest.update(parameter.detach().numpy().tobytes())
report(
    {"rank": first_rank, "size_after": hvd.size(), "resets": resets, "params": digest.hexdigest(),
     **timing}
)  # fmt: skip
hvd.shutdown()
