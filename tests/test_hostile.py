"""A hostile or broken peer: garbage frames, oversized sizes, truncated responses, DNS
failure. The process survives, the connection is closed and retried, send() fails with a
clear timeout within max.block.ms, and close() does not hang."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from kproducer import KafkaTimeoutError, Producer


class HostileServer:
    """Loopback server answering every request according to ``mode``; counts connections."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.1)
        rng = random.Random(self.mode)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(2)
                try:
                    size = struct.unpack(">i", conn.recv(4))[0]
                    while size > 0:
                        size -= len(conn.recv(min(size, 65536)) or b"x" * size)
                    if self.mode == "garbage-body":        # a valid size, nonsense inside
                        body = rng.randbytes(rng.randrange(0, 64))
                        conn.sendall(struct.pack(">i", len(body)) + body)
                    elif self.mode == "random-bytes":      # not even framing
                        conn.sendall(rng.randbytes(rng.randrange(1, 512)))
                    elif self.mode == "huge-size":         # a 2 GiB frame announced
                        conn.sendall(struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 10)
                    elif self.mode == "truncated":         # half a response, then close
                        conn.sendall(struct.pack(">i", 100) + b"\x00" * 20)
                    time.sleep(0.05)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["garbage-body", "random-bytes", "huge-size", "truncated"])
def test_hostile_server_is_survived(mode):
    server = HostileServer(mode)
    try:
        p = Producer(bootstrap_servers=f"127.0.0.1:{server.port}", max_block_ms=1500,
                     reconnect_backoff_ms=20, reconnect_backoff_max_ms=100)
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="max.block.ms=1500"):
            p.send("t", b"v")
        assert time.monotonic() - t0 < 10
        assert server.connections >= 2, "the connection was closed and tried again"
        assert p._sender.alive, "the I/O thread survived"
        t0 = time.monotonic()
        p.close(5)
        assert time.monotonic() - t0 < 6
    finally:
        server.close()


@pytest.mark.timeout(60)
def test_dns_failure_and_refused_connection_raise_clear_timeouts():
    for bootstrap in ("no-such-host.invalid:9092", f"127.0.0.1:{_closed_port()}"):
        with Producer(bootstrap_servers=bootstrap, max_block_ms=700) as p:
            with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
                p.send("t", b"v")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
