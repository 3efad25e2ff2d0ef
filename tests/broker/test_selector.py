"""The network Selector (csrc/kp_selector.c via kproducer._net).

Against the real broker: ApiVersions round trips, pipelining, many connections.
Against tiny loopback servers run in threads: byte-by-byte and coalesced
frames, bad frame sizes, a peer closing mid-frame, a slow reader taking an
8 MiB send while another connection keeps working. Every wait is a poll loop
with a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from kproducer import _net
from kproducer._disconnect import DisconnectKind as K
from kproducer.codec import frame
from kproducer.errors import KafkaError, NetworkError
from kproducer.protocol import API_VERSIONS, ApiVersionsRequest, decode_response, encode_request
from kproducer.protocol import peek_correlation_id

Selector = _net.Selector
PRODUCE = 0
DEADLINE = 10.0


# ---- helpers ------------------------------------------------------------------

class Seen:
    """Everything a series of polls reported."""

    def __init__(self):
        self.connected: list[int] = []
        self.disconnected: list[tuple[int, K, str]] = []
        self.sent: list[int] = []
        self.received: list[tuple[int, bytes]] = []
        self.woken = False
        self.polls = 0

    def add(self, r):
        self.connected += r.connected
        self.disconnected += r.disconnected
        self.sent += r.sent
        self.received += r.received
        self.woken |= r.woken
        self.polls += 1

    def frames(self, conn_id):
        return [b for i, b in self.received if i == conn_id]

    def reason(self, conn_id):
        return {i: detail for i, _, detail in self.disconnected}.get(conn_id)

    def __repr__(self):
        return (f"Seen(polls={self.polls}, connected={self.connected}, disconnected={self.disconnected}, "
                f"sent={self.sent}, received={[(i, len(b)) for i, b in self.received]})")


def poll_until(sel, cond, seen=None, timeout=DEADLINE, on_poll=None):
    """Polls until ``cond(seen)`` holds; fails when the deadline passes."""
    seen = seen if seen is not None else Seen()
    deadline = time.monotonic() + timeout
    while not cond(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"deadline passed: {seen!r}"
        seen.add(sel.poll(min(100, left * 1000)))
        if on_poll is not None:
            on_poll(seen)
    return seen


def api_versions_request(correlation_id: int, version: int = 3) -> bytes:
    """Header + body of an ApiVersions request (no size prefix)."""
    req = ApiVersionsRequest(client_software_name="kproducer-selector-test", client_software_version="0.1")
    return encode_request(req, version, correlation_id, "selector-test")


def check_api_versions(body: bytes, correlation_id: int, version: int = 3):
    resp = decode_response(API_VERSIONS, version, body)
    assert resp.correlation_id == correlation_id
    assert resp.error_code == 0
    keys = {k.api_key for k in resp.api_keys}
    assert {PRODUCE, API_VERSIONS} <= keys
    return resp


def connect_all(sel, conns, seen=None):
    """conns: {id: port} on 127.0.0.1; polls until every id is connected."""
    for cid, port in conns.items():
        sel.connect(cid, "127.0.0.1", port)
    seen = poll_until(sel, lambda s: set(conns) <= set(s.connected) or s.disconnected, seen)
    assert not seen.disconnected, seen
    return seen


class LocalServer:
    """A one-connection loopback server; ``handler(conn)`` runs in a thread.

    Exceptions in the handler are re-raised by :meth:`close` so a broken
    server fails the test instead of hanging it.
    """

    def __init__(self, handler, *, rcvbuf=None, family=socket.AF_INET, host="127.0.0.1"):
        self.handler = handler
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if rcvbuf:
            # Set before listen(): accepted sockets inherit it, and a fixed
            # SO_RCVBUF turns off receive-buffer autotuning (tcp(7)).
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind((host, 0))
        self.sock.listen(1)
        self.sock.settimeout(DEADLINE)
        self.port = self.sock.getsockname()[1]
        self.errors: list[BaseException] = []
        self.closing = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"local-server-{self.port}", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                # close() shut the listener down before this thread got to run its accept
                # (a connection still in the backlog is dropped: EINVAL): not the handler's
                # failure, and a test that needed the handler asserts on what it does.
                if self.closing:
                    return
                raise
            with conn:
                conn.settimeout(DEADLINE)
                self.handler(conn)
        except BaseException as exc:  # noqa: BLE001 - re-raised in close()
            self.errors.append(exc)
        finally:
            self.done.set()

    def close(self):
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept() on Linux
        except OSError:
            pass
        self.sock.close()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "local server thread did not finish"
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def server():
    servers = []

    def start(handler, **kw):
        s = LocalServer(handler, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def sel():
    s = Selector(max_connections=256)
    yield s
    s.close_all()


def recv_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 16))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


# ---- against the real broker ------------------------------------------------------------------

def test_api_versions_round_trip(broker, sel):
    seen = connect_all(sel, {0: broker.port})
    assert seen.connected == [0]
    assert sel.is_connected(0) and sel.state(0) == "connected" and len(sel) == 1
    sel.send(0, frame(api_versions_request(7)))
    assert sel.is_sending(0)
    seen = poll_until(sel, lambda s: s.received, seen)
    assert seen.sent == [0] and not sel.is_sending(0)
    [(cid, body)] = seen.received
    assert cid == 0
    check_api_versions(body, 7)
    stats = sel.stats(0)
    assert stats.bytes_sent == len(frame(api_versions_request(7)))
    assert stats.bytes_received == len(body) + 4
    assert stats.send_remaining == 0 and stats.send_total == 0


def test_poll_stamps_each_write_and_read_with_its_instant(broker, sel):
    # sent_us / received_us: the instants (time.monotonic's clock, in µs) the request's last
    # byte was written and the response's last byte read, inside the polls that did them.
    connect_all(sel, {0: broker.port})
    staged = time.monotonic_ns() // 1000
    sel.send(0, frame(api_versions_request(7)))
    written = read = None
    deadline = time.monotonic() + DEADLINE
    while read is None:
        assert time.monotonic() < deadline, "no response"
        before = time.monotonic_ns() // 1000
        r = sel.poll(100)
        after = time.monotonic_ns() // 1000
        assert len(r.sent_us) == len(r.sent) and len(r.received_us) == len(r.received)
        if r.sent:
            [written] = r.sent_us
            assert staged <= before <= written <= after
        if r.received:
            [read] = r.received_us
            assert written is not None and written <= read and before <= read <= after


def test_send_staged_while_connecting_and_send_frame(broker, sel):
    # Staged before the connect completes: written as soon as it does.
    sel.connect(3, "127.0.0.1", broker.port)
    assert sel.state(3) == "connecting" and not sel.is_connected(3)
    sel.send_frame(3, api_versions_request(1))  # the selector writes the size prefix
    seen = poll_until(sel, lambda s: s.received)
    assert seen.connected == [3] and seen.sent == [3]
    check_api_versions(seen.frames(3)[0], 1)


def test_pipelined_requests_come_back_in_order(broker, sel):
    seen = connect_all(sel, {0: broker.port})
    ids = list(range(100, 120))
    for n, cid in enumerate(ids):
        # One send in flight at a time; the next goes out as soon as the
        # previous is written, without waiting for responses.
        sel.send(0, frame(api_versions_request(cid)))
        poll_until(sel, lambda s, n=n: len(s.sent) == n + 1, seen)
    seen = poll_until(sel, lambda s: len(s.received) == len(ids), seen)
    bodies = seen.frames(0)
    assert [peek_correlation_id(b) for b in bodies] == ids
    for cid, body in zip(ids, bodies):
        check_api_versions(body, cid)
    # Several frames in one send are allowed too, and still answered in order.
    sel.send(0, b"".join(frame(api_versions_request(c)) for c in (200, 201, 202)))
    seen = poll_until(sel, lambda s: len(s.received) == len(ids) + 3, seen)
    assert [peek_correlation_id(b) for b in seen.frames(0)[-3:]] == [200, 201, 202]


def test_many_connections_at_once(broker):
    n = 200
    with Selector(max_connections=n) as sel:
        for cid in range(n):
            sel.connect(cid, "127.0.0.1", broker.port)
            sel.send(cid, frame(api_versions_request(1000 + cid)))
        assert len(sel) == n
        seen = poll_until(sel, lambda s: len(s.received) == n or s.disconnected, timeout=30)
        assert not seen.disconnected, seen
        assert sorted(seen.connected) == list(range(n))
        assert sorted(seen.sent) == list(range(n))
        for cid, body in seen.received:
            check_api_versions(body, 1000 + cid)
        assert sorted(cid for cid, _ in seen.received) == list(range(n))
        sel.close_all()
        assert len(sel) == 0 and not any(sel.is_connected(c) for c in range(n))


# ---- connect failures -----------------------------------------------------------

def test_connection_refused_is_a_disconnect_event(sel):
    # A bound but not listening socket: connects to it are refused, and
    # nobody else can grab the port meanwhile.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        sel.connect(5, "127.0.0.1", port)  # never raises for a refused connect
        seen = poll_until(sel, lambda s: s.disconnected)
    assert seen.connected == []
    assert seen.disconnected == [(5, K.CONNECT_FAILED, "connect failed: Connection refused (ECONNREFUSED)")]
    # The id is free again: nothing to close, and it can be reused.
    assert sel.state(5) == "disconnected" and len(sel) == 0
    assert sel.close(5) is False
    with pytest.raises(NetworkError, match="connection 5: send: no such connection") as ei:
        sel.send(5, b"\0\0\0\0")
    assert ei.value.conn_id == 5


def test_argument_errors(sel):
    with pytest.raises(ValueError, match="conn_id 256 out of range 0..255"):
        sel.connect(256, "127.0.0.1", 9092)
    with pytest.raises(ValueError, match="conn_id -1 out of range"):
        sel.is_connected(-1)
    with pytest.raises(ValueError, match="getaddrinfo"):
        sel.connect(0, "localhost", 9092)
    with pytest.raises(ValueError, match="not a numeric"):
        sel.connect(0, "127.0.0.1.5", 9092)
    with pytest.raises(ValueError, match="port must be 1..65535"):
        sel.connect(0, "127.0.0.1", 0)
    with pytest.raises(ValueError, match="timeout_ms must be >= 0"):
        sel.poll(-1)
    with pytest.raises(ValueError, match="max_connections"):
        Selector(max_connections=0)
    with pytest.raises(NetworkError, match="no such connection"):
        sel.send(1, b"\0\0\0\0")
    with pytest.raises(NetworkError, match="no such connection"):
        sel.stats(1)
    assert len(sel) == 0
    assert issubclass(NetworkError, KafkaError)


def test_second_send_while_one_is_in_flight(broker, sel):
    connect_all(sel, {2: broker.port})
    sel.send(2, frame(api_versions_request(1)))
    with pytest.raises(NetworkError, match="connection 2: send: a send is already in flight") as ei:
        sel.send(2, frame(api_versions_request(2)))
    assert ei.value.conn_id == 2
    with pytest.raises(NetworkError, match="already in flight"):
        sel.send_frame(2, api_versions_request(2))
    with pytest.raises(ValueError, match="empty data"):
        sel.send(2, b"")
    with pytest.raises(NetworkError, match="already has a connection"):
        sel.connect(2, "127.0.0.1", broker.port)
    seen = poll_until(sel, lambda s: s.received)
    assert seen.sent == [2]
    sel.send(2, frame(api_versions_request(2)))  # fine once the first is written
    seen = poll_until(sel, lambda s: len(s.received) == 2, seen)
    assert [peek_correlation_id(b) for b in seen.frames(2)] == [1, 2]


def test_ipv6_loopback(server, sel):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 support")
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("::1 not available")
    srv = server(lambda c: c.sendall(frame(b"hello6")), family=socket.AF_INET6, host="::1")
    sel.connect(0, "::1", srv.port)
    seen = poll_until(sel, lambda s: s.received)
    assert seen.connected == [0] and seen.frames(0) == [b"hello6"]


def _sndbuf_of_connection_to(port: int) -> int:
    """SO_SNDBUF of this process's socket connected to 127.0.0.1:``port`` (the selector's
    sockets are not exposed: found through /proc/self/fd)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            s = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        with s:
            try:
                if s.type == socket.SOCK_STREAM and s.getpeername()[1] == port:
                    return s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            except OSError:
                continue
    raise AssertionError(f"no socket connected to port {port}")


def test_socket_send_buffer_is_the_os_default_unless_given(server, sel):
    """send.buffer.bytes=-1 (the default) leaves SO_SNDBUF to the kernel, which autotunes it
    (a fixed one held 1 MB requests to 128 KiB pieces); a given size is set (Linux doubles
    it for its bookkeeping, socket(7))."""
    release = threading.Event()
    servers = [server(lambda c: release.wait(DEADLINE)) for _ in range(3)]
    try:
        sel.connect(0, "127.0.0.1", servers[0].port)                      # the default: -1
        sel.connect(1, "127.0.0.1", servers[1].port, 65536)
        poll_until(sel, lambda s: {0, 1} <= set(s.connected))
        plain = socket.create_connection(("127.0.0.1", servers[2].port), timeout=DEADLINE)
        with plain:
            assert _sndbuf_of_connection_to(servers[0].port) == plain.getsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert _sndbuf_of_connection_to(servers[1].port) == 2 * 65536
    finally:
        release.set()


# ---- wakeup -------------------------------------------------------------------------

def test_wakeup_interrupts_a_long_poll_from_another_thread(sel):
    started = threading.Event()
    out = {}

    def poller():
        started.set()
        t0 = time.monotonic()
        out["result"] = sel.poll(10000)
        out["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=poller)
    t.start()
    assert started.wait(DEADLINE)
    # While the poll waits (GIL released), this thread keeps running: a poll
    # holding the GIL would block this call until its 10 s ran out. A wakeup
    # landing before epoll_wait is kept by the eventfd, so there is no race.
    with pytest.raises(RuntimeError, match="poll\\(\\) is running in another thread"):
        deadline = time.monotonic() + DEADLINE
        while "result" not in out and time.monotonic() < deadline:
            sel.close_all()  # raises once the poller has entered poll()
    sel.wakeup()
    t.join(5.0)
    assert not t.is_alive(), "wakeup did not interrupt poll(10000)"
    assert out["result"].woken and out["elapsed"] < 5.0


def test_wakeup_before_poll_is_kept_then_drained(sel):
    sel.wakeup()
    sel.wakeup()
    t0 = time.monotonic()
    assert sel.poll(10000).woken
    assert time.monotonic() - t0 < 5.0
    r = sel.poll(0)
    assert not r.woken and r == ([], [], [], [], False, [], [])


def test_poll_waits_for_its_timeout_when_idle(sel):
    t0 = time.monotonic()
    r = sel.poll(50)
    assert time.monotonic() - t0 >= 0.045
    assert r == ([], [], [], [], False, [], [])


# ---- framing against local servers --------------------------------------------------

def test_response_one_byte_at_a_time(server, sel):
    frames = [b"first response", b"", b"x" * 300]
    data = b"".join(frame(f) for f in frames)
    step = threading.Semaphore(0)

    def handler(conn):
        for i in range(len(data)):
            conn.sendall(data[i:i + 1])
            # Lockstep: the next byte goes out only after the client has read
            # this one, so every byte arrives in a separate read.
            assert step.acquire(timeout=DEADLINE), f"client did not read byte {i}"

    srv = server(handler)
    sel.connect(0, "127.0.0.1", srv.port)
    last = [0]
    deltas = []

    def on_poll(seen):
        if sel.is_connected(0):
            got = sel.stats(0).bytes_received
            if got > last[0]:
                deltas.append(got - last[0])
                for _ in range(got - last[0]):
                    step.release()
                last[0] = got

    seen = poll_until(sel, lambda s: len(s.received) == len(frames), on_poll=on_poll)
    assert seen.frames(0) == frames
    assert set(deltas) == {1} and sum(deltas) == len(data)


def test_several_frames_in_one_write_come_out_of_one_poll(server, sel):
    frames = [b"a" * 10, b"", b"b" * 70000, b"c"]
    sent = threading.Event()

    def handler(conn):
        conn.sendall(b"".join(frame(f) for f in frames))
        sent.set()
        conn.recv(1)  # hold the connection open until the client closes

    srv = server(handler)
    seen = connect_all(sel, {0: srv.port})
    assert sent.wait(DEADLINE)
    seen = poll_until(sel, lambda s: len(s.received) == len(frames), seen)
    assert seen.frames(0) == frames
    # 70 KiB in one loopback write is readable at once: one poll (within its
    # 256 KiB read budget) yields every frame of it.
    assert seen.polls <= 3, seen


def test_unsolicited_frames_are_read_within_the_per_poll_budget(server, sel):
    # Like acks=0 on Tansu: responses nobody waits for must still be drained.
    body = bytes(range(256)) * 4
    count = 2000
    payload = frame(body) * count

    def handler(conn):
        conn.sendall(payload)
        conn.recv(1)

    srv = server(handler)
    connect_all(sel, {0: srv.port})
    per_poll = []
    last = [0]

    def on_poll(seen):
        got = sel.stats(0).bytes_received
        per_poll.append(got - last[0])
        last[0] = got

    seen = poll_until(sel, lambda s: len(s.received) == count, on_poll=on_poll)
    assert all(b == body for _, b in seen.received)
    assert max(per_poll) <= _net.READ_BUDGET
    assert sum(per_poll) == len(payload)
    assert len([d for d in per_poll if d]) >= len(payload) // _net.READ_BUDGET


@pytest.mark.parametrize("size", [-1, -(2 ** 31), 1025, 2 ** 31 - 1])
def test_bad_frame_size_disconnects(server, size):
    def handler(conn):
        conn.sendall(frame(b"y" * 1024) + struct.pack(">i", size) + b"zz")
        conn.recv(1)

    srv = server(handler)
    with Selector(max_connections=4, max_frame_size=1024) as sel:
        sel.connect(1, "127.0.0.1", srv.port)
        seen = poll_until(sel, lambda s: s.disconnected)
        # The frame of exactly max_frame_size is fine and still delivered.
        assert seen.frames(1) == [b"y" * 1024]
        assert seen.disconnected == [
            (1, K.FRAME_SIZE, f"invalid frame size {size} (must be 0..1024); the stream is lost")]
        assert sel.state(1) == "disconnected" and len(sel) == 0


def test_peer_closing_mid_frame_disconnects(server, sel):
    def handler(conn):
        conn.sendall(frame(b"whole") + struct.pack(">i", 100) + b"0123456789")

    srv = server(handler)
    sel.connect(0, "127.0.0.1", srv.port)
    seen = poll_until(sel, lambda s: s.disconnected)
    assert seen.frames(0) == [b"whole"]
    assert seen.disconnected == [
        (0, K.PEER_CLOSED_MID_FRAME, "connection closed by peer mid-frame (14 bytes of an incomplete frame received)")]


def test_peer_closing_at_a_frame_boundary(server, sel):
    srv = server(lambda conn: conn.sendall(frame(b"last words")))
    sel.connect(0, "127.0.0.1", srv.port)
    seen = poll_until(sel, lambda s: s.disconnected)
    assert seen.frames(0) == [b"last words"]
    assert seen.disconnected == [(0, K.PEER_CLOSED, "connection closed by peer")]


def test_peer_reset_reports_errno(server, sel):
    def handler(conn):
        # SO_LINGER 0: close sends RST instead of FIN (socket(7)).
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    srv = server(handler)
    sel.connect(0, "127.0.0.1", srv.port)
    seen = poll_until(sel, lambda s: s.disconnected)
    [(cid, kind, reason)] = seen.disconnected
    assert cid == 0
    # The reset may come before the poll that sees the connect finish: then the connect
    # itself reports it (SO_ERROR).
    assert (kind in (K.IO_ERROR, K.CONNECT_FAILED) and "ECONNRESET" in reason) or (
        kind == K.PEER_CLOSED and reason == "connection closed by peer"), (kind, reason)


# ---- slow peers and caller-side closes -------------------------------------------

def test_large_send_to_a_slow_reader_does_not_block_other_connections(broker, server, sel):
    big = frame(bytes(range(256)) * (8 * 1024 * 1024 // 256))
    digest = hashlib.sha256(big).digest()
    gate = threading.Event()

    def slow_reader(conn):
        assert gate.wait(DEADLINE * 3), "gate never opened"
        h = hashlib.sha256()
        left = len(big)
        while left:
            chunk = conn.recv(min(left, 65536))
            if not chunk:
                raise ConnectionError(f"client closed with {left} bytes unsent")
            h.update(chunk)
            left -= len(chunk)
        conn.sendall(frame(h.digest()))
        conn.recv(1)

    srv = server(slow_reader, rcvbuf=65536)
    # A fixed 64 KiB send buffer: an autotuned one (megabytes) could take the rest of the
    # send in one write once the reader drains.
    sel.connect(0, "127.0.0.1", srv.port, 65536)
    seen = connect_all(sel, {1: broker.port}, poll_until(sel, lambda s: 0 in s.connected))
    sel.send(0, big)
    sel.send(1, frame(api_versions_request(42)))
    # The broker's answer arrives while the 8 MiB send is stuck on a reader
    # that reads nothing: the big send never stalls the poll.
    seen = poll_until(sel, lambda s: s.frames(1), seen)
    check_api_versions(seen.frames(1)[0], 42)
    assert 0 not in seen.sent and sel.is_sending(0)
    stuck = sel.stats(0)
    assert 0 < stuck.send_remaining < stuck.send_total == len(big)

    # Now the reader drains; the send completes over many polls.
    gate.set()
    progress = []

    def on_poll(s):
        progress.append(sel.stats(0).bytes_sent)

    seen = poll_until(sel, lambda s: s.frames(0), seen, timeout=30, on_poll=on_poll)
    assert 0 in seen.sent and not sel.is_sending(0)
    assert seen.frames(0) == [digest]
    assert sel.stats(0).bytes_sent == len(big)
    assert len(set(progress)) >= 3, "expected the send to finish over several polls"


def test_caller_close_between_polls_is_safe(broker, server, sel):
    def chatty(conn):
        try:
            while True:
                conn.sendall(frame(b"z" * 1000) * 50)
        except OSError:
            pass  # the client closed

    srv = server(chatty)
    seen = connect_all(sel, {0: srv.port})
    poll_until(sel, lambda s: s.received, seen)
    sel.send(0, b"\0\0\0\0")  # staged, maybe unwritten: dropped by close
    assert sel.close(0) is True
    assert sel.close(0) is False
    assert srv.done.wait(DEADLINE)
    # Nothing more is reported for the closed id ...
    after = Seen()
    for _ in range(3):
        after.add(sel.poll(20))
    assert after.received == [] and after.disconnected == [] and after.sent == []
    # ... and it can be reused for a new connection right away.
    sel.connect(0, "127.0.0.1", broker.port)
    sel.send(0, frame(api_versions_request(9)))
    seen = poll_until(sel, lambda s: s.received)
    assert seen.connected == [0]
    check_api_versions(seen.frames(0)[0], 9)


def test_close_while_connecting_reports_nothing(sel):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        sel.connect(0, "127.0.0.1", holder.getsockname()[1])
        sel.close(0)  # the refusal, if already known, is dropped with the connection
        r = sel.poll(50)
    assert r == ([], [], [], [], False, [], [])


def test_error_messages_name_the_errno():
    exc = NetworkError("x", conn_id=3, errno=errno.ECONNREFUSED)
    assert exc.conn_id == 3 and exc.errno == errno.ECONNREFUSED


# ---- system calls per request -----------------------------------------------------------------

_EPOLL_CTL_COUNTER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/epoll.h>
/* Counts this process's epoll_ctl calls (LD_PRELOAD), for the test to read with ctypes. */
static long calls;
long kp_test_epoll_ctl_calls(void) { return calls; }
int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    static int (*real)(int, int, int, struct epoll_event *);
    if (!real) real = (int (*)(int, int, int, struct epoll_event *))dlsym(RTLD_NEXT, "epoll_ctl");
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    return real(epfd, op, fd, ev);
}
"""

_ROUND_TRIPS = r"""
import ctypes, socket, sys, threading
from kproducer._net import Selector
from kproducer.codec import frame
N = int(sys.argv[1])
srv = socket.create_server(("127.0.0.1", 0))
def echo():
    conn, _ = srv.accept()
    with conn:
        f = conn.makefile("rb")
        for _ in range(N):
            head = f.read(4)
            conn.sendall(head + f.read(int.from_bytes(head, "big")))
threading.Thread(target=echo, daemon=True).start()
calls = ctypes.CDLL(None).kp_test_epoll_ctl_calls
sel = Selector(max_connections=4)
sel.connect(0, "127.0.0.1", srv.getsockname()[1], 1 << 20)   # room for a request, whatever the default
while 0 not in sel.poll(1000).connected:
    pass
before = calls()
first_poll_sent = 0
for i in range(N):
    sel.send(0, frame(b"%06d" % i * 2000))
    sent, received = [], []
    r = sel.poll(0)
    first_poll_sent += 0 in r.sent
    while True:
        sent += r.sent
        received += r.received
        if sent and received:
            break
        r = sel.poll(5000)
    assert received == [(0, b"%06d" % i * 2000)], received
print(calls() - before, first_poll_sent)
"""


def test_a_send_the_socket_takes_is_written_without_registering_for_writability(tmp_path):
    """Each request is written by the first poll after it is staged, without EPOLLOUT
    registered and removed again around it (two epoll_ctl calls per request before; and
    the epoll descriptor turned readable for the Sender's watcher asleep on it)."""
    lib = tmp_path / "count_epoll_ctl.so"
    (tmp_path / "count.c").write_text(_EPOLL_CTL_COUNTER)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "count.c"), "-ldl"],
                   check=True, capture_output=True)
    script = tmp_path / "round_trips.py"
    script.write_text(_ROUND_TRIPS)
    # After whatever is preloaded already (the sanitizer build's runtimes must come first).
    env = dict(os.environ, LD_PRELOAD=":".join(filter(None, [os.environ.get("LD_PRELOAD"), str(lib)])))
    out = subprocess.run([sys.executable, str(script), "200"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    ctl_calls, first_poll_sent = map(int, out.stdout.split())
    assert first_poll_sent == 200          # each 12 KB request went out in the poll after it
    assert ctl_calls == 0, f"{ctl_calls} epoll_ctl calls for 200 requests"
