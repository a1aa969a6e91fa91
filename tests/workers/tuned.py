"""init() on a host with a tuning file (RINGCOMM_TUNING_DIR): which all-reduce algorithm "auto"
picks at 8 B and 1 MiB, and that an all-reduce with it is right."""

import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    comm = ringcomm.init(timeout=60)
x = np.full(300_000, comm.rank + 1.0, np.float32)
comm.allreduce(x)
report(
    {
        "rank": comm.rank,
        "chosen": [comm.choose_algorithm(8), comm.choose_algorithm(1 << 20)],
        "warnings": [str(w.message) for w in caught],
        "ok": bool(np.all(x == comm.size * (comm.size + 1) / 2)),
    }
)
comm.shutdown()
