"""How long ringcomm's store server takes per request when many clients keep it busy: its
serial service time, the unit of a store that every rank of a large job asks (scale_model.py).

A client's own round trip (what one rank waits for one request) is longer, and is measured
by the ranks themselves (init_worker.py); this is the server's share alone, the one that adds
up when thousands of requests arrive at once: a server on the loopback, ``clients`` threads each
setting ``requests`` small keys as fast as it answers, the elapsed time over all requests.
"""

from __future__ import annotations

import secrets
import threading
import time

from ringcomm import _core

_VALUE = b"x" * 128  # about a rank's record (scale_model.RECORD_BYTES)


def service_seconds(clients: int = 4, requests: int = 2000) -> float:
    """Seconds of the server per request, with ``clients`` clients asking at once."""
    secret = secrets.token_bytes(16)
    server = _core.TcpStoreServer("127.0.0.1", 0, secret)
    try:
        stores = [_core.TcpStore("127.0.0.1", server.port, 30.0, secret) for _ in range(clients)]

        def ask(store, index: int) -> None:
            for request in range(requests):
                store.set(f"client/{index}/{request}", _VALUE)

        threads = [threading.Thread(target=ask, args=(store, i)) for i, store in enumerate(stores)]
        begin = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return (time.perf_counter() - begin) / (clients * requests)
    finally:
        server.stop()
