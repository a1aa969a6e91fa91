"""A rank that does nothing until it is stopped, for the launcher's signal tests: it writes its
pid to argv[1]/<rank>, and the last rank ignores SIGTERM (the launcher must kill it)."""

import os
import signal
import sys
import time

rank, size = int(os.environ["RINGCOMM_RANK"]), int(os.environ["RINGCOMM_WORLD_SIZE"])
if rank == size - 1:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
# Written whole or not at all: the test reads the file as soon as it appears.
with open(os.path.join(sys.argv[1], f".{rank}"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(sys.argv[1], f".{rank}"), os.path.join(sys.argv[1], str(rank)))
while True:
    time.sleep(1)
