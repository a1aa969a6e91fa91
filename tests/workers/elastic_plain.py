"""An elastic worker without torch (tests/test_elastic.py): ringcomm.init() takes its rank from
the driver, and a failed collective makes it meet the next generation by calling init() again.
The worker on host 127.0.0.2 exits with status 3 after its first all-reduce (with argument
"early": before it meets the others, who time out meeting it and try the next generation); the
others print RESULT once a generation they meet completes an all-reduce without it."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

failing = os.environ["RINGCOMM_ELASTIC_HOST"] == "127.0.0.2"
if failing and sys.argv[1:] == ["early"]:
    sys.exit(3)


def meet():
    while True:
        try:
            return ringcomm.init()
        except ringcomm.RingcommError:
            pass  # a worker of that generation never came: the driver forms the next one


comm = meet()
while True:
    x = np.ones(4, np.float32)
    try:
        comm.allreduce(x)
        if failing:
            sys.exit(3)
        if comm.size == 1:  # the generation without the failed worker
            break
        comm.barrier()
    except ringcomm.RingcommError:
        comm.shutdown()
        comm = meet()  # the next generation
report({"rank": comm.rank, "size": comm.size, "sum": float(x[0])})
comm.shutdown()
