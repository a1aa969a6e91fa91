"""Horovod's collectives, one family per module (allreduce, allgather, broadcast, alltoall,
reducescatter, barrier, join, and the all-reduce of sparse tensors)."""
