"""The implementations ringcomm is compared with: torch.distributed (gloo) and MPI (mpi4py)."""
