"""A relay on the path between two hosts, as an attacker who controls a router would place one:
an iptables DNAT rule in this host's namespace sends its connections to the other host here
(tests/test_multihost.py sets it up); each is forwarded to where it was going (SO_ORIGINAL_DST).
The store's connections and every handshake pass unchanged, so the ranks prove the secret to each
other through it; then, on a data link, it adds 1 to one byte of every 64 KiB going from the
caller to the listener. It prints "relay <port>" once it listens, and "tampered <n>" each time.

Usage: relay.py MARK (the firewall mark on its own outgoing connections, which the DNAT rule
leaves alone).
"""

import socket
import struct
import sys
import threading
import time

SO_ORIGINAL_DST = 80
SO_MARK = 36
HELLO_BYTES = 38  # auth::kHelloBytes: the listener speaks first
REPLY_BYTES = 78  # auth::kReplyBytes: the caller's answer
PURPOSE_DATA = 2  # hello[5]: auth::Purpose::Data
EVERY = 64 * 1024

mark = int(sys.argv[1])
lock = threading.Lock()


def say(text):
    with lock:
        print(text, flush=True)


def pump(source, sink, tamper):
    """Copies until either side closes; `tamper(chunk, offset)` may change what passes."""
    offset = 0
    try:
        while True:
            chunk = source.recv(1 << 16)
            if not chunk:
                break
            sink.sendall(tamper(bytearray(chunk), offset))
            offset += len(chunk)
    except OSError:
        pass
    for end in (source, sink):
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client):
    address = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", address)
    # Patient where the other side is not listening yet (the store starts with rank 0), as the
    # caller itself would retry a refused connection.
    for _ in range(200):
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
        try:
            server.connect((socket.inet_ntoa(packed), port))
            break
        except ConnectionRefusedError:
            server.close()
            time.sleep(0.05)
    else:
        client.close()
        return
    data_link = threading.Event()

    def watch_hello(chunk, offset):
        if offset <= 5 < offset + len(chunk) and chunk[5 - offset] == PURPOSE_DATA:
            data_link.set()
        return chunk

    def rewrite(chunk, offset):
        if not data_link.is_set():
            return chunk
        start = max(offset, REPLY_BYTES + 4096)
        for at in range(start + (-start) % EVERY, offset + len(chunk), EVERY):
            chunk[at - offset] = (chunk[at - offset] + 1) % 256
            say(f"tampered {at}")
        return chunk

    threading.Thread(target=pump, args=(server, client, watch_hello), daemon=True).start()
    pump(client, server, rewrite)


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", 0))
listener.listen(64)
say(f"relay {listener.getsockname()[1]}")
while True:
    connection, _ = listener.accept()
    threading.Thread(target=serve, args=(connection,), daemon=True).start()
