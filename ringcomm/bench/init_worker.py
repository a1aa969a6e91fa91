"""One rank of ``ringcomm-bench init`` (init_scale.py): starts a communicator, all-reduces once,
and writes what it saw as one JSON file; optionally the last rank then kills itself and the
others time their way back to a collective.

    python -m ringcomm.bench.init_worker ringcomm|gloo OUT [--kill] [--timeout S]

writes OUT.<rank> (JSON) and its output to OUT.<rank>.log.

Started with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (env://). Times are wall-clock
(time.time()), so that the parent can line up the ranks' milestones, all on one kernel:

    started    the first line of this file ran (the interpreter is up)
    imported   ringcomm (or torch) imported: what follows is the library's own start-up
    met        ringcomm: this rank left the rendezvous (its read of every rank's records)
    ready      the communicator is made (ringcomm.init(), or init_process_group("gloo"))
    reduced    the first all-reduce (4 KiB of float32) returned

ringcomm's store requests are counted here, by wrapping the store ringcomm.init() meets through
in one that counts (the store server keeps no count): each rank's count is what the server
answered for it, so the ranks' sum is every request the store served. ``--kill``: after a
barrier the last rank writes its file and kills itself (SIGKILL); the survivors' next all-reduce
fails, they shrink the communicator (Communicator.shrink, as docs/guides/recovery.md tells) and
all-reduce again; each writes when its failed call raised, when the shrink returned and when
the all-reduce after it did. (The victim's time is taken before it writes its file and dies:
a millisecond early. Counting costs each store request a call into Python: microseconds.)
"""

from __future__ import annotations

import time

started = time.time()  # before anything else: the imports below are part of what is timed

import argparse  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

_ELEMENTS = 1024  # the first all-reduce's float32 elements: small, so latency is what is timed


def _counting_store(inner):
    """``inner`` (a ringcomm store) behind one that logs each request: (op, key, start, end)."""
    from ringcomm import _core

    class CountingStore(_core.Store):
        def __init__(self) -> None:
            super().__init__()
            self.requests: list = []

        def _timed(self, op: str, key: str, call):
            begin = time.time()
            try:
                return call()
            finally:
                self.requests.append((op, key, begin, time.time()))

        def set(self, key, value):
            return self._timed("set", key, lambda: inner.set(key, value))

        def get(self, key, timeout):
            return self._timed("get", key, lambda: inner.get(key, timeout))

        def add(self, key, delta):
            return self._timed("add", key, lambda: inner.add(key, delta))

        def try_get_many(self, keys, within):
            # One request to a TcpStore, logged under its first key.
            first = keys[0] if keys else ""
            return self._timed("get_many", first, lambda: inner.try_get_many(keys, within))

    return CountingStore()


def _rendezvous_end(requests: list, rank: int) -> float:
    """When this rank left the rendezvous: rank 0 posted every record as one value ("ranks"),
    every other rank read it (src/bootstrap/rendezvous.cc)."""
    op = "set" if rank == 0 else "get"
    ends = [end for kind, key, _, end in requests if kind == op and key.split("/")[-1] == "ranks"]
    return ends[0] if ends else float("nan")


def _by_key(requests: list) -> dict:
    """How many requests of each kind: "get rank/#" for every get of a rank's record."""
    counts: dict = {}
    for op, key, _, _ in requests:
        kind = f"{op} {re.sub(r'[0-9]+', '#', key)}"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def run_ringcomm(args) -> dict:
    import numpy as np

    import ringcomm
    from ringcomm import communicator

    imported = time.time()
    stores: list = []
    detect = communicator.detect

    def detect_counted(timeout, secret=b""):
        environment = detect(timeout, secret)
        environment.store = _counting_store(environment.store)
        stores.append(environment.store)
        return environment

    communicator.detect = detect_counted  # ringcomm.init() itself, its store counted
    # ringcomm takes its listening address from the store's connection when the store is its own
    # TcpStore; behind the counting store it would take the loopback's, which no other host
    # reaches. The host's link, by name, as cluster.py gives it to gloo.
    if "GLOO_SOCKET_IFNAME" in os.environ:
        os.environ.setdefault("RINGCOMM_SOCKET_IFNAME", os.environ["GLOO_SOCKET_IFNAME"])
    comm = ringcomm.init(timeout=args.timeout * 0.8)
    ready = time.time()
    requests = list(stores[0].requests)
    from ringcomm.bench import footprint

    held = footprint.measure()  # after init, before any collective
    x = np.ones(_ELEMENTS, dtype=np.float32)
    comm.allreduce(x)
    reduced = time.time()
    # TCP links are made on first use: those of the first all-reduce's schedule are made by now,
    # and the second pays for none.
    linked = footprint.measure()
    comm.allreduce(x)
    reduced_again = time.time()
    result = {
        "rank": comm.rank,
        "size": comm.size,
        "started": started,
        "imported": imported,
        "met": _rendezvous_end(requests, comm.rank),
        "ready": ready,
        "reduced": reduced,
        "reduced_again": reduced_again,
        "store_requests": len(requests),
        "store_request_seconds": [end - begin for kind, _, begin, end in requests if kind == "set"],
        "store_requests_by_key": _by_key(requests),
        "footprint": held.as_dict(),
        "footprint_after_first": linked.as_dict(),
        "remote_peers": sum(
            1 for peer in range(comm.size) if comm.transport_to(peer) not in ("self", "shm")
        ),
    }
    if args.kill:
        result.update(_recover(comm, x))
    else:
        comm.shutdown()
    return result


def _recover(comm, x) -> dict:
    """The last rank dies; the others shrink and all-reduce again."""
    from ringcomm import RingcommError

    comm.barrier()
    if comm.rank == comm.size - 1:
        return {"victim": True, "killed": time.time()}  # main() writes, then kills
    try:
        comm.allreduce(x)
        return {"victim": False, "error": "the all-reduce after the kill did not fail"}
    except RingcommError:
        failed = time.time()
    smaller = comm.shrink()
    shrunk = time.time()
    smaller.allreduce(x)
    recovered = time.time()
    smaller.shutdown()
    return {"victim": False, "failed": failed, "shrunk": shrunk, "recovered": recovered}


def run_gloo(args) -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    from ringcomm.bench import footprint

    imported = time.time()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    ready = time.time()
    held = footprint.measure()
    dist.all_reduce(torch.ones(_ELEMENTS))
    reduced = time.time()
    result = {
        "rank": dist.get_rank(),
        "size": dist.get_world_size(),
        "started": started,
        "imported": imported,
        "ready": ready,
        "reduced": reduced,
        "footprint": held.as_dict(),
    }
    dist.destroy_process_group()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", choices=("ringcomm", "gloo"))
    parser.add_argument("out")
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    path = f"{args.out}.{os.environ['RANK']}"
    with open(path + ".log", "w") as log:  # the parent shows it if this rank writes no record
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    # A rank that hangs leaves its stack in its log and exits, for the parent to show.
    faulthandler.dump_traceback_later(args.timeout * 0.9, exit=True)  # before the parent gives up
    result = run_ringcomm(args) if args.library == "ringcomm" else run_gloo(args)
    with open(path + ".tmp", "w") as out:
        json.dump(result, out)
    os.replace(path + ".tmp", path)  # whole or absent
    if result.get("victim"):
        os.kill(os.getpid(), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
