"""A hostile or broken peer: a loopback server answering the first request with garbage, an
oversized size prefix or a truncated frame, and a real broker whose responses are corrupted
mid-stream by the FaultProxy. The process survives, the connection is closed and retried,
send() fails with a clear timeout within max.block.ms (nothing usable ever answers) or every
record is delivered exactly once (the broker is real), and close() does not hang.

DNS failures, refused and silent connections are in test_faults.py."""

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
                    head = conn.recv(4)
                    if len(head) < 4:   # the client gave up on this connection: serve the next
                        continue
                    size = struct.unpack(">i", head)[0]
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
            p.send("t", b"v").result(0)     # the wait, then a failed future (Java's send())
        assert time.monotonic() - t0 < 10
        assert server.connections >= 2, "the connection was closed and tried again"
        assert p._sender.alive, "the I/O thread survived"
        t0 = time.monotonic()
        p.close(5)
        assert time.monotonic() - t0 < 6
    finally:
        server.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["garbage", "truncated", "wrong-id", "oversize"])
def test_corrupt_responses_mid_stream_are_survived_without_loss_or_duplicates(proxied_broker, kind):
    """A real broker behind a proxy that replaces every 5th response of each connection with a
    bad one (a garbage body behind the right correlation id, half a frame then a reset, another
    correlation id, a 2 GiB size prefix): the producer closes the connection, reconnects and
    resends; idempotence makes the resends of batches the broker already stored harmless, so
    every record is acknowledged and stored exactly once, in order."""
    from kproducer.testing.readback import read_back

    broker, proxy = proxied_broker
    broker.create_topic("hostile", 2)
    proxy.corrupt_response_every(5, kinds=[kind], seed=5)
    n = 3000
    with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=2, batch_size=2000, batch_max_size=2000,
                  request_timeout_ms=2000, retry_backoff_ms=20, reconnect_backoff_ms=20,
                  reconnect_backoff_max_ms=100) as p:
        futures = [p.send("hostile", b"%d" % i, key=b"k%d" % (i % 8)) for i in range(n)]
        p.flush(timeout=180)
        errors = [f.exception(timeout=0) for f in futures]
        assert errors.count(None) == n, [e for e in errors if e is not None][:3]
        assert p._sender.alive, "the I/O thread survived"
    stats = proxy.stats()
    proxy.reset_faults()
    assert stats["responses_corrupted"] >= 3, stats
    assert stats["connections_accepted"] >= 3, "connections were closed and made again"
    got = read_back(broker.bootstrap, "hostile", timeout=60)
    values = [int(m.value) for msgs in got.values() for m in msgs]
    assert sorted(values) == list(range(n)), "each record stored exactly once"
    for msgs in got.values():
        last = {}
        for m in msgs:
            i = int(m.value)
            assert i > last.get(m.key, -1), "per-key order kept"
            last[m.key] = i
