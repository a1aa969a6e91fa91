"""The Horovod API heals without an elastic driver: a killed worker's replacement (started by
ringcomm-run --replace, its hvd.init() asks to join) is admitted at a state.commit(), and the
job's communicator grows in place (tests/test_grow.py).

argv: victim
Trains a linear model with hvd.DistributedOptimizer under @hvd.elastic.run, committing every
step; the victim kills itself (SIGKILL) at step 3. The survivors shrink and go on; they train
until the job is back at its first size (and step 8 at least), at most 400 steps, so that the
replacement has time to start. Reports the size after, the sizes the reset callbacks saw, and a
hash of the parameters (every worker, the replacement included, must hold the same).
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
torch.manual_seed(0)
torch.set_num_threads(1)
hvd.init()
newcomer = bool(os.environ.get("RINGCOMM_JOIN"))
first_rank, first_size = hvd.rank(), int(os.environ["RINGCOMM_WORLD_SIZE"])
model = torch.nn.Linear(16, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model, optimizer, step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


@hvd.elastic.run
def train(state):
    generator = torch.Generator().manual_seed(hvd.rank() * 100 + state.step)
    while state.step < 8 or (hvd.size() < first_size and state.step < 400):
        if not newcomer and first_rank == victim and state.step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        model(torch.randn(8, 16, generator=generator)).square().mean().backward()
        optimizer.step()
        state.step += 1
        if state.step > 3:
            time.sleep(0.05)  # a step's work, while the replacement starts
        state.commit()


train(state)
digest = hashlib.sha256()
for parameter in model.parameters():
    digest.update(parameter.detach().numpy().tobytes())
report(
    {"rank": hvd.rank(), "newcomer": newcomer, "size": hvd.size(), "resets": resets,
     "step": state.step, "params": digest.hexdigest()}
)  # fmt: skip
hvd.shutdown()
