"""A rank of a job across hosts (RINGCOMM_HOSTID): the network figures its communicator took.

argv: ["tune", args...] runs `ringcomm-bench tune args...` as this rank instead (under a launcher
it measures the job across hosts); either way the figures are reported.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from report import report  # noqa: E402

import ringcomm  # noqa: E402

if sys.argv[1:2] == ["tune"]:
    from ringcomm.bench import tune

    code = tune.main(sys.argv[2:])
    report({"code": code})
    sys.exit(0)

comm = ringcomm.init(timeout=60)
config = comm._core.config
report(
    {
        "rank": comm.rank,
        "latency": config.link_latency,
        "bandwidth": config.link_bandwidth,
        "chosen": comm.choose_algorithm(64 << 20),
    }
)
comm.shutdown()
