"""Faults (issue 6) against the real broker, through the FaultProxy where one is needed:
a broker restart (memory lost) in the middle of an idempotent stream, and brokers that cannot
be reached at start (no listener, DNS failure, a listener that never accepts, one that accepts
and never answers) or go silent mid-stream. Every wait has a deadline; the time bounds asserted
are correctness deadlines (the configured timeout plus generous slack), not performance.

The 10-million-record soak under random faults is in test_soak.py; garbage from hostile peers
in test_hostile.py.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from kproducer import KafkaError, KafkaTimeoutError, Producer
from kproducer.testing import FaultProxy
from kproducer.testing.broker import free_port
from kproducer.testing.readback import read_back

# Slack on top of a configured timeout before a wait counts as a hang: a loaded 2-core CI
# machine can delay a thread by seconds, a hang is forever.
SLACK = 5.0


def _wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


# -- broker restart ------------------------------------------------------------------------------

@pytest.mark.timeout(300)
def test_broker_restart_during_idempotent_stream(proxied_broker):
    """The broker restarts (memory storage: topics, data and producer ids lost) while records
    are in flight. The producer gets UNKNOWN_PRODUCER_ID, obtains a new producer id, renumbers
    what is unacknowledged and continues: every future resolves, records acknowledged after the
    restart are stored exactly once in send order, and no record reported failed was stored."""
    broker, proxy = proxied_broker
    topic, parts = "restart", 4
    broker.create_topic(topic, parts)
    acked_at: dict[int, float] = {}
    failed: dict[int, BaseException] = {}
    lock = threading.Lock()

    def on_delivery(i):
        def cb(err, md):
            with lock:
                if err is None:
                    acked_at[i] = time.monotonic()
                else:
                    failed[i] = err
        return cb

    stop = threading.Event()
    sent = []
    send_errors = []

    def stream(p):
        i = 0
        try:
            while not stop.is_set():
                sent.append(p.send(topic, b"%d" % i, key=b"k%d" % (i % 16), on_delivery=on_delivery(i)))
                i += 1
                if i % 200 == 0:
                    time.sleep(0.005)      # a steady stream, not one burst into the buffer
        except BaseException as exc:   # surfaced by the assertions below
            send_errors.append(exc)

    p = Producer(bootstrap_servers=proxy.bootstrap, acks="all", enable_idempotence=True,
                 linger_ms=2, request_timeout_ms=3000, delivery_timeout_ms=90_000,
                 retry_backoff_ms=20, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
                 max_block_ms=60_000)
    sender = threading.Thread(target=stream, args=(p,))
    try:
        sender.start()
        _wait_until(lambda: len(acked_at) >= 3000, 60, "3000 records acknowledged before the restart")
        pid_resets = p.metrics()["producer_id_resets"]
        # Hold the broker's responses so that requests are surely in flight (and stored by
        # the broker that is about to forget them) when it goes down.
        proxy.stall(True, client=False)
        _wait_until(lambda: p._sender._in_flight_batches() > 0, 30, "Produce requests in flight")
        t_restart = time.monotonic()
        # The new broker must have the topic before the producer reaches it: Tansu stores a
        # Produce for a topic it does not know where nobody can read it (TANSU.md). So the
        # proxy turns clients away until the topic exists again.
        proxy.refuse_new(True)
        broker.restart()
        proxy.stall(False)
        with broker.client() as c:
            forgot = c.metadata([topic], allow_auto_topic_creation=False).topics[0].error_code
        assert forgot != 0, "the restarted broker forgot the topic"
        broker.create_topic(topic, parts)
        t_open = time.monotonic()
        proxy.refuse_new(False)
        acked_before = len(acked_at)
        _wait_until(lambda: len(acked_at) >= acked_before + 3000, 90,
                    "3000 more records acknowledged after the restart")
        stop.set()
        sender.join(30)
        assert not sender.is_alive()
        assert not send_errors, send_errors
        p.flush(timeout=90)
        metrics = p.metrics()
    finally:
        stop.set()
        sender.join(30)
        p.close(timeout=10)

    assert all(f.done() for f in sent), "every future resolved"
    assert len(acked_at) + len(failed) == len(sent)
    assert not failed, f"{len(failed)} records failed, e.g. {next(iter(failed.values()))!r}"
    assert metrics["producer_id_resets"] > pid_resets, metrics

    got = read_back(broker.bootstrap, topic, timeout=60)
    stored = [int(m.value) for msgs in got.values() for m in msgs]
    assert len(stored) == len(set(stored)), "no record stored twice"
    for msgs in got.values():
        values = [int(m.value) for m in msgs]
        assert values == sorted(values), "send order kept within each partition"
    stored_set = set(stored)
    after = {i for i, t in acked_at.items() if t > t_open}
    before = {i for i, t in acked_at.items() if t < t_restart}
    assert after and before
    assert after <= stored_set, f"{len(after - stored_set)} records acknowledged after the restart are missing"
    assert not (before & stored_set), "records acknowledged before the restart survived a memory broker?"
    assert stored_set <= set(acked_at), "only acknowledged records were stored"


# -- unreachable brokers ---------------------------------------------------------------------------

class _Listener:
    """A loopback listener that is not a broker.

    ``never_accepts``: listen(0) with one connection already queued, so the kernel drops
    further SYNs (tcp_abort_on_overflow=0) and a connect() stays in SYN-SENT: the peer of a
    dropped SYN or a full backlog. Otherwise: accepts, reads and discards, never answers
    (a half-open or hung broker)."""

    def __init__(self, never_accepts: bool):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.received = 0
        self._stop = threading.Event()
        self._thread = None
        if never_accepts:
            self.sock.listen(0)
            self.conns.append(socket.create_connection(("127.0.0.1", self.port)))  # fills the queue
        else:
            self.sock.listen(16)
            self.sock.settimeout(0.05)
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
                c.settimeout(0.05)
                self.conns.append(c)
            except TimeoutError:
                pass
            for c in list(self.conns):
                try:
                    data = c.recv(65536)
                    self.received += len(data)
                except TimeoutError:
                    pass
                except OSError:
                    self.conns.remove(c)

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


def _closed_port() -> int:
    return free_port()   # bound, read and released: nothing listens there


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["no-listener", "dns-failure", "never-accepts", "never-answers"])
def test_unreachable_broker_at_start_fails_clearly_within_max_block_ms(case):
    listener = None
    if case == "no-listener":
        bootstrap, cause = f"127.0.0.1:{_closed_port()}", "Connection refused"
    elif case == "dns-failure":
        # RFC 6761: .invalid never resolves.
        bootstrap, cause = "nonexistent.invalid:9092", "cannot resolve nonexistent.invalid:9092"
    else:
        listener = _Listener(never_accepts=case == "never-accepts")
        bootstrap = f"127.0.0.1:{listener.port}"
        cause = "not established within socket.connection.setup.timeout.ms=500"
    max_block = 1.2
    p = Producer(bootstrap_servers=bootstrap, max_block_ms=int(max_block * 1000),
                 socket_connection_setup_timeout_ms=500, request_timeout_ms=800,
                 reconnect_backoff_ms=20, reconnect_backoff_max_ms=100)
    try:
        # send() and send_many() wait, then fail their records (Java's send()); partitions_for raises.
        calls = [("partitions_for", lambda: p.partitions_for("t")),
                 ("send", lambda: p.send("t", b"v").result(0)),
                 ("send_many", lambda: p.send_many("t", [b"v1", b"v2"]).raise_for_errors())]
        for name, call in calls:
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError) as info:
                call()
            took = time.monotonic() - t0
            msg = str(info.value)
            assert "max.block.ms=1200" in msg and cause in msg, f"{name}: {msg}"
            assert max_block - 0.05 <= took <= max_block + SLACK, f"{name} took {took:.2f}s"
        if case == "never-answers":
            assert listener.received > 0, "the producer did connect and send ApiVersions"
    finally:
        t0 = time.monotonic()
        p.close(timeout=2)
        took = time.monotonic() - t0
        if listener is not None:
            listener.close()
    assert took <= 2 + SLACK, f"close(timeout=2) took {took:.2f}s"
    assert not p._sender.alive, "the I/O thread stopped"


@pytest.mark.timeout(120)
def test_every_resolved_address_is_tried_before_backing_off(broker, monkeypatch):
    """client.dns.lookup=use_all_dns_ips: a name resolving to a dead address first (as
    localhost's ::1 is when a broker listens on IPv4 only) connects through the next one."""
    real = socket.getaddrinfo
    asked = []

    def two_addresses(host, port, *args, **kwargs):
        if host != "twice.example":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        # 127.0.0.2 is loopback too, but nothing listens on the broker's port there.
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in ("127.0.0.2", "127.0.0.1")]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    broker.create_topic("dns-all", 1)
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    with Producer(bootstrap_servers=f"twice.example:{port}", linger_ms=0, max_block_ms=10_000,
                  reconnect_backoff_ms=5_000, reconnect_backoff_max_ms=5_000) as p:
        t0 = time.monotonic()
        md = p.send("dns-all", b"through the second address").result(timeout=10)
        # Backoff is 5 s: connecting within it means the second address was tried at once.
        assert time.monotonic() - t0 < 4.5
    assert asked and md.offset == 0
    got = read_back(broker.bootstrap, "dns-all")
    assert [m.value for m in got[0]] == [b"through the second address"]


@pytest.mark.timeout(120)
def test_a_hung_dns_lookup_stalls_neither_the_deadlines_nor_close(monkeypatch):
    """A resolver that never answers (a dead DNS server): the lookup runs off the I/O thread,
    so max.block.ms and close(timeout) hold and the error names the unresolved host."""
    release = threading.Event()
    real = socket.getaddrinfo

    def hung(host, *args, **kwargs):
        if host == "slow.example":
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hung)
    p = Producer(bootstrap_servers="slow.example:9092", max_block_ms=1200,
                 socket_connection_setup_timeout_ms=500, reconnect_backoff_ms=20,
                 reconnect_backoff_max_ms=100)
    try:
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError) as info:
            p.partitions_for("t")
        took = time.monotonic() - t0
        msg = str(info.value)
        assert "max.block.ms=1200" in msg and "slow.example not resolved within " \
            "socket.connection.setup.timeout.ms=500" in msg, msg
        assert took <= 1.2 + SLACK, took
    finally:
        t0 = time.monotonic()
        p.close(timeout=1)
        took = time.monotonic() - t0
        release.set()
    assert took <= 1 + SLACK, f"close(timeout=1) took {took:.2f}s with the lookup still hung"
    assert not p._sender.alive


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["silent", "gone"])
def test_broker_lost_mid_stream_fails_records_within_delivery_timeout(proxied_broker, how):
    """A broker that was working stops answering ("silent": the proxy stops reading both ways,
    a half-open peer) or goes away ("gone": stopped; reconnects are reset): queued and in-flight
    records fail through their futures within delivery.timeout.ms, with an error naming the
    timeout or the lost connection, and close() then returns at once."""
    broker, proxy = proxied_broker
    broker.create_topic("lost", 2)
    p = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, request_timeout_ms=1000,
                 delivery_timeout_ms=2500, retry_backoff_ms=20, reconnect_backoff_ms=20,
                 reconnect_backoff_max_ms=100)
    try:
        p.send("lost", b"warm").result(timeout=30)
        if how == "silent":
            proxy.stall(True)
        else:
            broker.stop()
        t0 = time.monotonic()
        futures = [p.send("lost", b"v%d" % i, key=b"k%d" % i) for i in range(500)]
        errors = [f.exception(timeout=2.5 + SLACK) for f in futures]
        took = time.monotonic() - t0
        assert all(isinstance(e, KafkaError) for e in errors), {type(e) for e in errors}
        names = ("delivery.timeout.ms=2500", "request.timeout.ms=1000", "connection to node")
        assert all(any(n in str(e) for n in names) for e in errors), {str(e) for e in errors}
        assert took <= 2.5 + SLACK
        assert p.metrics()["records_failed"] == 500
    finally:
        t0 = time.monotonic()
        p.close(timeout=2)
        assert time.monotonic() - t0 <= 2 + SLACK


@pytest.mark.timeout(120)
def test_close_with_timeout_while_requests_hang_fails_them_promptly(proxied_broker):
    """close(timeout) with requests stuck on a silent connection and a long
    delivery.timeout.ms: close gives up after its timeout and fails every pending record."""
    broker, proxy = proxied_broker
    broker.create_topic("hang", 1)
    p = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, request_timeout_ms=60_000,
                 delivery_timeout_ms=120_000)
    p.send("hang", b"warm").result(timeout=30)
    proxy.stall(True)
    futures = [p.send("hang", b"v%d" % i) for i in range(100)]
    _wait_until(lambda: p._sender._in_flight_batches() > 0, 10, "a Produce request in flight")
    t0 = time.monotonic()
    p.close(timeout=1)
    took = time.monotonic() - t0
    assert 0.9 <= took <= 1 + SLACK, f"close(timeout=1) took {took:.2f}s"
    for f in futures:
        assert isinstance(f.exception(timeout=SLACK), KafkaError)
    assert not p._sender.alive


# -- the FaultProxy's random faults and corrupt responses ------------------------------------------

def _metadata_frame(cid: int) -> bytes:
    from kproducer.protocol import messages as m
    payload = m.encode_request(m.MetadataRequest(topics=[]), 1, cid, "t")
    return len(payload).to_bytes(4, "big") + payload


def _read_frame(sock: socket.socket, timeout: float):
    """One whole frame, or "closed" (EOF/reset) or "silent" (nothing within ``timeout``)."""
    sock.settimeout(timeout)
    buf = b""
    try:
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big", signed=True):
            chunk = sock.recv(65536)
            if not chunk:
                return "closed", buf
            buf += chunk
            if int.from_bytes(buf[:4], "big", signed=True) > 1 << 20:
                return "oversize", buf
    except ConnectionError:
        return "closed", buf
    except TimeoutError:
        return "silent", buf
    return "frame", buf


def test_chaos_and_corrupt_arguments_are_checked(broker):
    with FaultProxy("127.0.0.1", broker.port) as proxy:
        for bad in [dict(seed="1"), dict(seed=1, cut=0, stall=0, drop=0), dict(seed=1, cut=-1),
                    dict(seed=1, interval=(1, 0.5)), dict(seed=1, interval=(0, 0)),
                    dict(seed=1, stall_seconds=(-1, 1)), dict(seed=1, interval="x")]:
            with pytest.raises(ValueError):
                proxy.chaos(**bad)
        for bad in [dict(n=0), dict(n=3, kinds=[]), dict(n=3, kinds=["nope"]), dict(n=3, seed=1.5)]:
            with pytest.raises(ValueError):
                proxy.corrupt_response_every(**bad)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["cut", "stall", "drop"])
def test_chaos_injects_each_kind_of_fault(broker, kind):
    """With one kind of fault weighted in, a client pinging through the proxy meets it: its
    connection is reset (cut), a response comes late (stall) or never (drop)."""
    weights = dict(cut=0.0, stall=0.0, drop=0.0)
    weights[kind] = 1.0
    with FaultProxy("127.0.0.1", broker.port) as proxy:
        # Stalls end long before the next fault (overlapping ones would never end).
        proxy.chaos(7, interval=(1.0, 1.2), stall_seconds=(0.3, 0.5), **weights)
        seen = set()
        deadline = time.monotonic() + 20
        cid = 0
        while len(seen) < 1 and time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                while time.monotonic() < deadline:
                    cid += 1
                    t0 = time.monotonic()
                    try:
                        sock.sendall(_metadata_frame(cid))
                    except ConnectionError:
                        seen.add("closed")
                        break
                    what, data = _read_frame(sock, 0.25)
                    if what == "closed":
                        seen.add("closed")
                        break
                    if what == "silent":
                        what, data = _read_frame(sock, 2.0)    # a stall ends, a drop does not
                        if what == "frame" and int.from_bytes(data[4:8], "big") == cid:
                            seen.add("late")
                        else:
                            seen.add("never")
                        break
                    assert int.from_bytes(data[4:8], "big") == cid
                    time.sleep(max(0.0, 0.05 - (time.monotonic() - t0)))
        expected = {"cut": ("closed", "chaos_cuts"), "stall": ("late", "chaos_stalls"),
                    "drop": ("never", "chaos_drops")}[kind]
        # Counters are published after the loop iteration that acted: wait for them.
        stats = proxy.wait_for(lambda s: s[expected[1]] >= 1, timeout=5)
    assert seen == {expected[0]}, (seen, stats)
    assert stats["chaos_events"] >= stats[expected[1]], stats


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["garbage", "truncated", "wrong-id", "oversize"])
def test_corrupt_response_every_replaces_the_chosen_response(broker, kind):
    with FaultProxy("127.0.0.1", broker.port) as proxy:
        proxy.corrupt_response_every(2, kinds=[kind], seed=3)
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            sock.sendall(_metadata_frame(1))
            what, good = _read_frame(sock, 10)
            assert what == "frame" and int.from_bytes(good[4:8], "big") == 1
            sock.sendall(_metadata_frame(2))
            what, data = _read_frame(sock, 10)
            if kind == "garbage":
                assert what == "frame" and data[4:8] == (2).to_bytes(4, "big")
                assert data[8:] != good[8:]
            elif kind == "wrong-id":
                assert what == "frame" and int.from_bytes(data[4:8], "big") != 2
                assert data[8:] == good[8:]
            elif kind == "truncated":
                assert what == "closed" and 4 <= len(data) < len(good)
            else:
                assert what == "oversize"
                assert _read_frame(sock, 10)[0] == "closed"
        stats = proxy.wait_for(lambda s: s["responses_corrupted"] >= 1, timeout=5)
        assert stats["responses_corrupted"] == 1
