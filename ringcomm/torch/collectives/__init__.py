"""Horovod's collectives, one family per module (allreduce, allgather, broadcast, alltoall,
reducescatter, barrier, join, and the all-reduce of sparse tensors).

Each module's blocking calls are differentiable: torch.autograd Functions at its end give the
gradients as Horovod's torch/mpi_ops.py defines them.

- allreduce: the same all-reduce (op, scaling, process set) of the incoming gradient.
- allgather: the incoming gradient averaged over the ranks, of which each rank keeps its own
  rows.
- broadcast: the incoming gradient averaged over the ranks, on the root; zeros elsewhere.
- alltoall: the incoming gradient sent back where it came from (an all-to-all with the splits
  this rank received).
- reducescatter: the incoming gradient all-gathered, times the set's size for Sum and times the
  scale factors. (Horovod's convention, kept so gradients match its own.)

Every forward runs the asynchronous form and waits, so the blocking collectives are these
functions' apply(); torch skips the graph when no input needs a gradient. The gradient of one
family may use another's collectives (allgather's and broadcast's use allreduce, reducescatter's
allgather), never the other way round.
"""
