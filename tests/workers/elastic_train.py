"""An elastic training job (hvd.elastic, under ringcomm-run --host-discovery-script), for
tests/test_elastic.py. Usage: elastic_train.py WORKDIR SCENARIO.

It trains a linear model on a small synthetic dataset, with an ElasticSampler, and keeps in its
state every committed step's batches (each rank's indices, all-gathered), so that the test can
replay the training and compare. Rank 0 writes the last committed batch to WORKDIR/progress,
and every worker its pid to WORKDIR/pid-<host>-<slot>.

Scenarios (the discovery script prints WORKDIR/hosts):
  grow-shrink  at batch 4 with 2 ranks rank 0 offers a third slot, and at batch 12 with 3 ranks
               takes it away again; each time the ranks wait for the HostsUpdatedInterrupt.
  kill         commits every second batch; from batch 5, while it has 3 ranks, every step
               takes 0.3 s, for the test to kill -9 a worker.
  kill-return  the same, and once down to 2 ranks the ranks wait for the lost host to be used
               again (its blacklisting's cooldown over, it is still discovered).

The final ranks print RESULT lines: rank, size, batches, steps (with each one's size and epoch),
parameters, resets.
"""

import math
import os
import sys
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm.torch as hvd  # noqa: E402

SAMPLES, BATCH, EPOCHS = 48, 2, 2

workdir, scenario = Path(sys.argv[1]), sys.argv[2]
hosts_file = workdir / "hosts"


def sample(i: int):
    x = torch.tensor([math.sin(i), math.cos(i), i / SAMPLES, 1.0])
    y = torch.tensor([0.3 * math.sin(0.5 * i) + 0.1])
    return x, y


def new_model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


hvd.init()
me = f"{os.environ['RINGCOMM_ELASTIC_HOST']}-{os.environ['RINGCOMM_ELASTIC_SLOT']}"
(workdir / f"pid-{me}").write_text(str(os.getpid()))
model = new_model()
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
    named_parameters=model.named_parameters(),
)
sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=7)
state = hvd.elastic.TorchState(
    model, optimizer, sampler=sampler, epoch=0, batch=0, steps=[], sizes=[], epochs=[]
)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


def wait_for_interrupt(hosts: Optional[str]) -> None:
    """Rank 0 changes the hosts (if given); every rank checks until the driver's notice
    arrives."""
    if hvd.rank() == 0 and hosts is not None:
        hosts_file.write_text(hosts)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state.check_host_updates()
        time.sleep(0.1)
    raise RuntimeError("no HostsUpdatedInterrupt within 60 s")


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        indices = list(state.sampler)
        for start in range(0, len(indices), BATCH):
            batch = indices[start : start + BATCH]
            x = torch.stack([sample(i)[0] for i in batch])
            y = torch.stack([sample(i)[1] for i in batch])
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(state.model(x), y).backward()
            optimizer.step()
            # New lists, not append(): a commit keeps references (as Horovod's does), so
            # restore() brings back the committed lists only if they were not changed in place.
            state.steps = state.steps + [hvd.allgather_object(batch)]
            state.sizes = state.sizes + [hvd.size()]
            state.epochs = state.epochs + [state.epoch]
            state.sampler.record_batch(start // BATCH, len(batch))
            state.batch += 1
            killing = scenario in ("kill", "kill-return")
            if killing and state.batch >= 5 and hvd.size() == 3:
                time.sleep(0.3)
            if not killing or state.batch % 2 == 0:
                state.commit()
                if hvd.rank() == 0:
                    (workdir / "progress").write_text(str(state.batch))
            if scenario == "grow-shrink" and state.batch == 4 and hvd.size() == 2:
                wait_for_interrupt("localhost:3\n")
            if scenario == "grow-shrink" and state.batch == 12 and hvd.size() == 3:
                wait_for_interrupt("localhost:2\n")
            if scenario == "kill-return" and hvd.size() == 2 and state.batch % 2 == 0:
                wait_for_interrupt(None)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
report(
    {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "batches": state.batch,
        "steps": state.steps,
        "sizes": state.sizes,
        "epochs": state.epochs,
        "parameters": [p.detach().flatten().tolist() for p in model.parameters()],
        "resets": resets,
    }
)
hvd.shutdown()
