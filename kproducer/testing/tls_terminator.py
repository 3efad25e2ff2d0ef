"""A TLS terminator in front of a plaintext port, run as a child process by
:class:`kproducer.testing.tls.TlsTerminator` (the tests' stand-in for a TLS listener,
which the test broker does not have).

``python -m kproducer.testing.tls_terminator CONFIG_JSON`` accepts TLS on
``host:port`` with ``cert``/``key`` (and, with ``require_client_cert``, only clients
whose certificate ``ca_file`` signed), opens a plaintext connection to
``host:target_port`` for each client and copies bytes both ways until either side
closes. It is Python's ``ssl`` module (OpenSSL), a thread per connection: nothing
to install beyond Python. Each accepted connection is logged to ``log`` as ``accepted connection
from HOST:PORT``; handshake failures as ``handshake failed``. SIGTERM closes the
listener and every connection; SIGKILL (``stop(kill=True)``) leaves the kernel to
reset them, as a crashed TLS server would.
"""

from __future__ import annotations

import json
import selectors
import signal
import socket
import ssl
import sys
import threading
import time

_CHUNK = 1 << 16


def _log(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def _context(cfg: dict) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg["cert"], cfg["key"])
    if cfg.get("require_client_cert"):
        ctx.load_verify_locations(cfg["ca_file"])
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _relay(tls: ssl.SSLSocket, plain: socket.socket) -> None:
    """Copies both ways until either side closes; one thread, non-blocking sockets (an SSL
    object must not be read and written from two threads at once)."""
    tls.setblocking(False)
    plain.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(tls, selectors.EVENT_READ)
    sel.register(plain, selectors.EVENT_READ)
    to_plain, to_tls = bytearray(), bytearray()
    try:
        while True:
            for key, _ in sel.select(1.0):
                if key.fileobj is tls:
                    while True:                  # drain what OpenSSL has decrypted
                        try:
                            data = tls.recv(_CHUNK)
                        except (ssl.SSLWantReadError, BlockingIOError):
                            break
                        if not data:
                            return
                        to_plain += data
                        if not tls.pending():
                            break
                else:
                    try:
                        data = plain.recv(_CHUNK)
                    except BlockingIOError:
                        data = None
                    if data == b"":
                        return
                    if data:
                        to_tls += data
            for buf, sock in ((to_plain, plain), (to_tls, tls)):
                while buf:
                    try:
                        n = sock.send(buf)
                    except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                        break
                    del buf[:n]
            # Wait for writability only while something is left to write.
            sel.modify(tls, selectors.EVENT_READ | (selectors.EVENT_WRITE if to_tls else 0))
            sel.modify(plain, selectors.EVENT_READ | (selectors.EVENT_WRITE if to_plain else 0))
    except (OSError, ssl.SSLError):
        return
    finally:
        sel.close()
        for s in (tls, plain):
            try:
                s.close()
            except OSError:
                pass


def _handle(conn: socket.socket, peer, ctx: ssl.SSLContext, cfg: dict) -> None:
    log = cfg["log"]
    _log(log, f"accepted connection from {peer[0]}:{peer[1]}")
    conn.settimeout(10)
    try:
        # Blocking handshake: a failure sends OpenSSL's alert (e.g. "certificate required")
        # to the client before the socket closes.
        tls = ctx.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError) as exc:
        _log(log, f"handshake failed: {exc}")
        conn.close()
        return
    try:
        plain = socket.create_connection((cfg["host"], cfg["target_port"]), timeout=10)
    except OSError as exc:
        _log(log, f"connect to {cfg['host']}:{cfg['target_port']} failed: {exc}")
        tls.close()
        return
    # No Nagle on either side, as a broker's own TLS listener: a small response held back
    # for the peer's delayed ACK would add 40 ms to a round trip.
    for sock in (tls, plain):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _relay(tls, plain)


def serve(cfg: dict) -> None:
    ctx = _context(cfg)
    listener = socket.create_server((cfg["host"], cfg["port"]))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    _log(cfg["log"], f"listening on {cfg['host']}:{cfg['port']} -> {cfg['target_port']}")
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, peer = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            break
        threading.Thread(target=_handle, args=(conn, peer, ctx, cfg), daemon=True).start()
    listener.close()
    _log(cfg["log"], "stopped")


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        serve(json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
