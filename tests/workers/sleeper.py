"""A rank that does nothing until it is stopped, for the launcher's signal tests: it writes its
pid to argv[1]/<rank>, and the last rank ignores SIGTERM (the launcher must kill it)."""

import os
import signal
import sys
import time

rank, size = int(os.environ["RINGCOMM_RANK"]), int(os.environ["RINGCOMM_WORLD_SIZE"])
if rank == size - 1:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.path.join(sys.argv[1], str(rank)), "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(1)
