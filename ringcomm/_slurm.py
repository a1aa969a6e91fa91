"""What a task started by Slurm's ``srun`` knows from its environment: rank, size, local rank, the
step's nodes, and where the job's store is.

srun sets, for every task of a job step:
    SLURM_PROCID            the task's rank in the step
    SLURM_STEP_NUM_TASKS    the step's task count (SLURM_NTASKS too, which salloc and sbatch
                            also set)
    SLURM_LOCALID           the task's rank on its node
    SLURM_NODEID            its node's index in the step's node list
    SLURM_STEP_NODELIST     the step's nodes, in Slurm's compressed hostlist syntax: node[01-03,7]
    SLURM_STEP_TASKS_PER_NODE  tasks on each node, compressed: 4(x2),3
    SLURM_JOB_ID, SLURM_STEP_ID

A batch script or an salloc shell sets SLURM_PROCID and SLURM_NTASKS as well, for the whole
allocation, but no step: a process there is not one of N tasks (``python train.py`` in a batch
script is one process), so only a process with SLURM_STEP_ID, in a step of more than one task, is
taken for a task of srun.

The store is served by the first task on the step's first node (node 0, local id 0), on a port
derived from the job and step ids so that every task computes the same one without talking;
MASTER_ADDR and MASTER_PORT override the host and the port, as in Slurm scripts written for
torch.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Optional

# The derived store port lies in [_PORT_BASE, _PORT_BASE + _PORT_SPAN): below Linux's ephemeral
# range (32768-60999, where outgoing connections take their local ports) and above the well-known
# services.
_PORT_BASE = 15000
_PORT_SPAN = 15000


def is_step(env=os.environ) -> bool:
    """Whether this process is one of several tasks of an srun job step. A step of one task
    (``srun --pty bash``, and what is started from that shell) is a single process."""
    if "SLURM_PROCID" not in env or not ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        return False
    size = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1"
    return not size.isdigit() or int(size) > 1


def expand_hostlist(text: str) -> list:
    """Slurm's compressed hostlist as the host names it stands for, in order:
    ``node[01-03,7],gpu1`` -> node01 node02 node03 node7 gpu1 (zero padding kept; several
    bracket groups in a name multiply out: ``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2)."""
    hosts: list = []
    for name in _split_top_level(text.strip()):
        if name:
            hosts.extend(_expand_name(name))
    return hosts


def _split_top_level(text: str) -> list:
    """Splits at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for index, character in enumerate(text):
        if character == "[":
            depth += 1
        elif character == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"Slurm hostlist {text!r}: ']' without '['")
        elif character == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth != 0:
        raise ValueError(f"Slurm hostlist {text!r}: '[' without ']'")
    parts.append(text[start:])
    return parts


def _expand_name(name: str) -> list:
    match = re.search(r"\[([^\[\]]*)\]", name)
    if match is None:
        return [name]
    prefix, rest = name[: match.start()], name[match.end() :]
    tails = _expand_name(rest)
    hosts: list[str] = []
    for item in match.group(1).split(","):
        for number in _expand_range(item, name):
            hosts.extend(prefix + number + tail for tail in tails)
    return hosts


def _expand_range(item: str, name: str) -> list:
    low, dash, high = item.strip().partition("-")
    if not low.isdigit() or (dash and not high.isdigit()):
        raise ValueError(f"Slurm hostlist {name!r}: {item!r} is not a number or a range a-b")
    if not dash:
        return [low]
    if int(high) < int(low):
        raise ValueError(f"Slurm hostlist {name!r}: range {item!r} runs backwards")
    width = len(low)  # node[01-10]: node01 ... node10
    return [str(n).zfill(width) for n in range(int(low), int(high) + 1)]


def expand_tasks_per_node(text: str) -> list:
    """SLURM_STEP_TASKS_PER_NODE (``4(x2),3``) as one count per node: [4, 4, 3]."""
    counts = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if match is None:
            raise ValueError(f"SLURM tasks per node {text!r}: cannot read {item!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def derived_port(job_id: str, step_id: str) -> int:
    """The store's port for a job step, the same on every task (a hash of the ids, so that two
    steps or jobs sharing a node rarely meet on one port)."""
    digest = hashlib.sha256(f"ringcomm-slurm-{job_id}.{step_id}".encode()).digest()
    return _PORT_BASE + int.from_bytes(digest[:4], "big") % _PORT_SPAN


def _integer(env, *names) -> Optional[int]:
    for name in names:
        if name in env:
            try:
                return int(env[name])
            except ValueError:
                raise ValueError(f"{name} must be an integer; got {env[name]!r}") from None
    return None


@dataclass
class SlurmStep:
    rank: int
    size: int
    local_rank: int
    local_size: Optional[int]
    node_index: int
    nodes: list  # the step's hosts, in node-index order
    job_id: str
    step_id: str
    store_host: str  # where the store is: the first node, 127.0.0.1 for a one-node step
    store_port: int

    @property
    def serves_store(self) -> bool:
        """The first task on the first node serves the store (whatever its rank)."""
        return self.node_index == 0 and self.local_rank == 0

    @property
    def one_node(self) -> bool:
        return len(self.nodes) <= 1

    @property
    def secret_name(self) -> str:
        """The host-local secret file's name for a one-node step."""
        return f"slurm-{self.job_id}.{self.step_id}"


def step(env=os.environ) -> SlurmStep:
    """The srun task this process is (is_step() must hold)."""
    rank = _integer(env, "SLURM_PROCID")
    if rank is None:
        raise RuntimeError("launched by srun, but SLURM_PROCID is not set")
    size = _integer(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    if size is None:
        raise RuntimeError(
            "launched by srun, but neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set"
        )
    local_rank = _integer(env, "SLURM_LOCALID")
    node_index = _integer(env, "SLURM_NODEID") or 0
    names = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    nodelist = next((env[n] for n in names if n in env), "")
    nodes = expand_hostlist(nodelist) if nodelist else []
    local_size = None
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if per_node:
        counts = expand_tasks_per_node(per_node)
        if node_index < len(counts):
            local_size = counts[node_index]
    if local_rank is None:
        raise RuntimeError("launched by srun, but SLURM_LOCALID is not set")
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "0"
    step_id = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "0"
    if env.get("MASTER_ADDR"):
        host = env["MASTER_ADDR"]
    elif len(nodes) <= 1:
        host = "127.0.0.1"  # one node: the store stays off the network
    else:
        host = nodes[0]
    port = _integer(env, "MASTER_PORT")
    if port is None:
        port = derived_port(job_id, step_id)
    return SlurmStep(
        rank, size, local_rank, local_size, node_index, nodes, job_id, step_id, host, port
    )
