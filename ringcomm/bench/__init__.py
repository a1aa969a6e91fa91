"""ringcomm-bench: measures ringcomm's collectives the way nccl-tests does, next to its peers.

    ringcomm-bench allreduce --size 1GB
    ringcomm-bench allreduce -b 8 -e 256M -f 2 -np 4 --compare gloo,mpi --check

The parent process (cli.py) measures the machine's memory bandwidth, writes a plan, launches each
implementation's ranks one after another (ringcomm through ringcomm.launch.spawn, gloo through
torch.distributed, MPI through mpirun + mpi4py), and prints one table per implementation plus a
comparison. Every implementation runs the same procedure (worker.py), so only the library calls
differ between them.

Modules, one purpose each:
    sizes.py            "4K", "1GiB" -> bytes; -b/-e/-f sweeps
    collectives.py      nccl-tests conventions: counts per size, algbw/busbw, single-host limit
    patterns.py         inputs whose reduction is exact in any order, and counting wrong elements
    timing.py           warmup, adaptive iteration count, timed trials
    plan.py             what every implementation runs (written to a file the workers read)
    worker.py           the per-size procedure shared by all implementations
    ringcomm_worker.py  a ringcomm rank;  peers/torch_worker.py (gloo, or ringcomm through
                        torch.distributed), peers/mpi_worker.py: the peers
    launchers.py        starting the ranks of each implementation, with deadlines
    memory_bandwidth.py B_mem: concurrent in-place updates
    machine.py          CPU model, cores, memory, versions, the command line
    compare.py          ratios between implementations and to the limit
    table.py            rich tables in nccl-tests' columns
"""
