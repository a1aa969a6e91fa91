"""Large all-reduces beside busy processes, with the ranks in sessions of their own or in one
(bench/RESULTS.md, "Ranks in sessions of their own").

    python bench/scheduling_groups.py                       # 16 ranks, 8 MiB, 4 busy processes
    python bench/scheduling_groups.py --busy 1,2,4,8,16 --np 16 --calls 20

Where the kernel schedules by session (/proc/sys/kernel/sched_autogroup_enabled = 1), the ranks
of one session share one group's CPU time against each busy process's group. ringcomm-run,
mpiexec and torchrun start every rank in a session of its own; ranks that one shell or one Python
process starts share one. For each count of busy processes (each in a session of its own, as
`ringcomm-bench --background-load` starts them) this times ringcomm with its ranks arranged both
ways, with the single copy forced (RINGCOMM_SHM_CMA=1), staging forced (0) and the automatic
choice, and MPI_Allreduce under MPICH's mpiexec: milliseconds per call of the slowest rank.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

import numpy as np

from ringcomm import launch
from ringcomm.bench.background_load import running
from ringcomm.bench.launchers import clean_environment, find_mpirun


def worker(implementation: str, elements: int, calls: int, out: str) -> None:
    """One rank: `calls` float32 sum all-reduces of `elements`; rank 0 writes ms per call."""
    x = np.ones(elements, np.float32)
    y = np.empty_like(x)
    if implementation == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()

        def allreduce():
            comm.Allreduce(x, y, op=MPI.SUM)

        comm.Barrier()
    else:
        import ringcomm

        comm = ringcomm.init()
        rank = comm.rank

        def allreduce():
            comm.allreduce(x, y)

        comm.barrier()
    for _ in range(3):
        allreduce()
    start = time.perf_counter()
    for _ in range(calls):
        allreduce()
    mine = np.array([(time.perf_counter() - start) / calls])
    if implementation == "mpi":
        slowest = comm.allreduce(mine[0], op=MPI.MAX)
    else:
        slowest = np.asarray(comm.allgather(mine)).max()
    if rank == 0:
        with open(out, "w") as file:
            file.write(f"{slowest * 1e3:.1f}")


def in_one_session(command, env):
    """As launch.start_rank, but in the launcher's own session, as a shell's `&` starts them."""
    return subprocess.Popen(list(command), env=dict(env))


def timed(command: list[str], env: dict, one_session: bool = False) -> str:
    """What rank 0 wrote: under mpiexec, or through ringcomm-run's spawn with its ranks in
    sessions of their own or, with `one_session`, in the launcher's."""
    with tempfile.NamedTemporaryFile("r", suffix=".ms") as out:
        command = [*command, "--out", out.name]
        if command[0] != sys.executable:  # mpiexec
            status = subprocess.run(command, env=env, timeout=600).returncode
        else:
            own_sessions = launch.start_rank
            launch.start_rank = in_one_session if one_session else own_sessions
            try:
                status = launch.spawn(args.np, command, env=env)
            finally:
                launch.start_rank = own_sessions
        return out.read().strip() or f"failed ({status})"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=16)
    parser.add_argument("--bytes", type=int, default=8 << 20)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--busy", default="4", help="counts of busy processes, comma-separated")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.bytes // 4, args.calls, args.out)
        sys.exit(0)
    me = [sys.executable, __file__, "--bytes", str(args.bytes), "--calls", str(args.calls)]
    mpirun = find_mpirun()
    print(f"{args.np} ranks, {args.bytes} B float32 sum, ms per call (slowest rank)")
    print("| busy | ranks' sessions | single copy | staged | auto | MPICH (mpiexec) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for busy in (int(n) for n in args.busy.split(",")):
        with running(busy):
            time.sleep(1.0)
            mpi = "-"
            if mpirun:
                mpi = timed(
                    [mpirun, "-np", str(args.np), *me, "--worker", "mpi"], clean_environment()
                )
            for one_session in (False, True):
                row = []
                for path in ("1", "0", "auto"):
                    env = dict(clean_environment(), RINGCOMM_SHM_CMA=path)
                    row.append(timed([*me, "--worker", "ringcomm"], env, one_session))
                arrangement = "one" if one_session else "own"
                print(f"| {busy} | {arrangement} | {' | '.join(row)} | {mpi} |", flush=True)
