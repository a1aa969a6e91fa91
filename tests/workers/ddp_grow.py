"""DDP on the ringcomm backend that heals: a killed rank's replacement joins the default group in
place and gets the model and optimizer from a member (ringcomm.c10d.grow_group).

argv: victim [steps]
Ranks train; the victim kills itself (SIGKILL) at step 3, after leaving a word in TEST_DIR. The
survivors shrink the default group (the loop of docs/guides/recovery.md), and admit newcomers
at the end of every step (grow_group: cheap where nobody waits; after a shrink it waits for as
many as were lost, whom a launcher that replaces ranks starts). A process started with
RINGCOMM_JOIN=1 waits for the victim's word (as a launcher would start it once the rank is
lost), joins (join_process_group), and gets the state (broadcast_state, which every rank runs
where it builds the model's DDP). Everyone reports its rank and size after, the times, and a hash
of the parameters and of the optimizer's state (all must agree).
"""

import time

started = time.monotonic()  # the newcomer's first line of user code

import hashlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402
from torch_rendezvous import use_harness_rendezvous  # noqa: E402

import ringcomm.c10d  # noqa: E402

imported = time.monotonic()
victim = int(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
# Under the test's harness every process starts at once, and the newcomer waits for the kill;
# under ringcomm-run --replace the launcher starts it once the rank is lost.
killed_file = os.path.join(os.environ.get("TEST_DIR", ""), "killed")
torch.manual_seed(0)
torch.set_num_threads(1)
module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
outcome = {}
step = 0
if ringcomm.c10d.joining():
    while os.environ.get("TEST_DIR") and not os.path.exists(killed_file):
        time.sleep(0.01)
    began = time.monotonic()
    ringcomm.c10d.join_process_group()
    outcome.update(
        newcomer=True, import_seconds=imported - started, join_seconds=time.monotonic() - began
    )
else:
    use_harness_rendezvous()
    dist.init_process_group("ringcomm")
    outcome.update(newcomer=False, rank_before=dist.get_rank())
rank = dist.get_rank()
generator = torch.Generator().manual_seed(1000 + rank)
model = None
replacements = 0  # lost ranks whose replacement the launcher starts: wait for them to knock
while step < steps:
    if not outcome["newcomer"] and rank == victim and step == 3:
        if os.environ.get("TEST_DIR"):
            open(killed_file, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        if model is None:  # at the start, after a shrink or a grow: rank 0's state everywhere
            step = ringcomm.c10d.broadcast_state(module, optimizer, step)
            model = DistributedDataParallel(module, init_sync=False)  # in sync already
        data = torch.randn(32, 64, generator=generator)
        loss = model(data).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        # At the end of a step, where a newcomer's join_process_group() meets it.
        if ringcomm.c10d.grow_group(expect=replacements, timeout=60):
            replacements = 0
            outcome.setdefault("grew_at", time.time())
            model = None
    except RuntimeError as error:
        outcome.setdefault("errors", []).append(str(error).splitlines()[0][:200])
        lost = ringcomm.c10d.lost_ranks()
        dist.shrink_group(lost)
        replacements += len(lost)
        model = None
params = hashlib.sha256()
for parameter in module.parameters():
    params.update(parameter.detach().numpy().tobytes())
momentum = hashlib.sha256()
for state in optimizer.state.values():
    momentum.update(state["momentum_buffer"].numpy().tobytes())
outcome.update(
    rank=dist.get_rank(),
    size=dist.get_world_size(),
    step=step,
    params=params.hexdigest(),
    momentum=momentum.hexdigest(),
)
dist.destroy_process_group()
report(outcome)
