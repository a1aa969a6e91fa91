"""A task of a simulated `srun -n N python train.py`: init() with no arguments, then what ringcomm
made of Slurm's variables."""

import os
import socket
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402
from ringcomm import _environment, _secret, _slurm  # noqa: E402

identity = _environment.identify()
comm = ringcomm.init(timeout=60)
x = np.full(100_003, comm.rank + 1, np.float64)
comm.allreduce(x)
expected = comm.size * (comm.size + 1) / 2
task = _slurm.step()
secret_file = _secret.host_file(task.secret_name)
comm.barrier()
report(
    {
        "rank": comm.rank,
        "size": comm.size,
        "local_rank": comm.local_rank,
        "local_size": comm.local_size,
        "host_count": comm.cross_size,
        "launcher": comm._environment.launcher,
        "identity": [identity.launcher, identity.rank, identity.size, identity.local_rank],
        "store": identity.store,
        "host": socket.gethostname(),
        # The serving task removed its secret file once every task had met.
        "secret_file_left": secret_file.exists(),
        "ok": bool(np.all(x == expected)),
    }
)
comm.shutdown()
