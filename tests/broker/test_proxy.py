"""FaultProxy against the real broker: pass-through, then each fault on its own.

Two arrangements: ``proxy`` sits in front of the ``broker`` fixture (the broker advertises its
own port, so only connections made to ``proxy.port`` go through it); ``proxied`` starts the
proxy first on a chosen target port, then a broker on that port advertising the proxy, so a
real client (confluent-kafka) that follows Metadata stays behind the proxy.

Nothing here sleeps and hopes: the proxy's counters are waited on with deadlines
(``FaultProxy.wait_for``); timing is only ever asserted as a lower bound.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Producer

from kproducer import codec
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.testing import FaultProxy, TansuBroker, free_port
from kproducer.testing.client import BlockingClient
from kproducer.testing.readback import read_back

BASE_TS = 1_700_000_000_000
DEADLINE = 10.0


@pytest.fixture
def proxy(broker):
    with FaultProxy("127.0.0.1", broker.port) as p:
        yield p


@pytest.fixture
def proxied():
    """``(proxy, broker)`` with the broker advertising the proxy's port."""
    target = free_port()
    p = FaultProxy("127.0.0.1", target).start()
    b = TansuBroker(port=target, advertised_port=p.port)
    try:
        b.start()
        yield p, b
    finally:
        p.stop()
        b.stop()
    b.check_log()
    b.cleanup()


def _client(proxy: FaultProxy, **kwargs) -> BlockingClient:
    return BlockingClient("127.0.0.1", proxy.port, **kwargs)


def _batch(values, start_ts: int = BASE_TS) -> bytes:
    return codec.encode_batch([(b"k", v, start_ts + i, []) for i, v in enumerate(values)])


def _values(got) -> list:
    return [(msg.partition, msg.offset, msg.value) for p in sorted(got) for msg in got[p]]


def _socket_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def _expect_closed(sock: socket.socket, timeout: float = DEADLINE) -> None:
    """The peer closed ``sock`` (EOF or reset), as opposed to a timeout."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(1 << 16)
    except ConnectionError:
        return
    assert data == b"", f"expected EOF or a reset, got {len(data)} bytes"


# -- construction ------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["10.0.0.1", "8.8.8.8", "192.168.1.10", "0.0.0.0", "::",
                                  "2001:db8::1", "169.254.1.1"])
def test_refuses_non_loopback_targets(host):
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy(host, 9092)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_accepts_loopback_targets(host):
    p = FaultProxy(host, 9092)
    assert p.port is None  # nothing bound before start()


@pytest.mark.parametrize("port", [0, -1, 65536, "9092", None])
def test_refuses_bad_target_ports(port):
    with pytest.raises(ValueError):
        FaultProxy("127.0.0.1", port)


def test_bad_fault_arguments_are_rejected():
    p = FaultProxy("127.0.0.1", 9092)
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError):
            p.cut_every_n_responses(bad)
        with pytest.raises(ValueError):
            p.drop_response_every(bad)
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            p.delay(bad)
    assert p.cut_all() == 0  # not running: nothing to cut


def test_bootstrap_address(proxy):
    assert proxy.bootstrap == f"127.0.0.1:{proxy.port}"
    assert proxy.running


# -- pass-through ------------------------------------------------------------------------------

def test_pass_through_blocking_client(broker, proxy):
    topic = "proxy-pass"
    broker.create_topic(topic, 2)
    sent = {0: [], 1: []}
    with _client(proxy) as c:
        md = c.metadata([topic])
        assert [t.name for t in md.topics] == [topic]
        for i in range(20):
            p = i % 2
            values = [b"value-%d-%d" % (i, j) * (j + 1) for j in range(i % 5 + 1)]
            err, base = c.produce(topic, p, _batch(values))
            assert err == 0
            assert base == len(sent[p])
            sent[p].extend(values)
    # ApiVersions + Metadata + 20 Produce, each answered once.
    stats = proxy.wait_for(lambda s: s["responses_forwarded"] == 22
                           and s["connections_active"] == 0)
    assert stats["requests_forwarded"] == 22
    assert stats["connections_accepted"] == 1
    assert stats["cuts"] == stats["responses_dropped"] == stats["framing_errors"] == 0
    got = read_back(broker.bootstrap, topic, timeout=30)  # straight from the broker
    assert {p: [msg.value for msg in msgs] for p, msgs in got.items()} == sent


def test_pass_through_pipelined_requests_stay_in_order(broker, proxy):
    with _client(proxy) as c:
        version = c.version_for(v.METADATA)
        ids = list(range(100, 150))
        for cid in ids:
            c.send_raw(m.encode_request(m.MetadataRequest(topics=None), version, cid, "pipe"))
        got = [m.peek_correlation_id(c.recv_raw()) for _ in ids]
    assert got == ids


def test_confluent_producer_through_proxy(proxied):
    proxy, broker = proxied
    topic = "proxy-ck"
    broker.create_topic(topic, 3)
    errors, delivered = [], []
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 30000})

    def on_delivery(err, msg):
        (errors if err is not None else delivered).append(err or msg.value())

    values = [b"ck-%05d" % i for i in range(3000)]
    for value in values:
        producer.produce(topic, value=value, key=value[-1:], on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    assert sorted(delivered) == values
    stats = proxy.stats()
    assert stats["connections_accepted"] >= 1
    assert stats["requests_forwarded"] >= 3  # ApiVersions, Metadata, Produce at least
    # The consumer bootstraps on the broker itself, then follows Metadata to the proxy.
    before = proxy.stats()["requests_forwarded"]
    got = read_back(broker.bootstrap, topic, timeout=30)
    assert sorted(msg.value for msgs in got.values() for msg in msgs) == values
    assert proxy.stats()["requests_forwarded"] > before


# -- cuts --------------------------------------------------------------------------------------

def test_cut_every_n_responses(proxy):
    proxy.cut_every_n_responses(2)
    for round_ in range(1, 4):  # counted per connection: every new connection gets 2 responses
        c = _client(proxy)      # response 1: ApiVersions
        try:
            assert c.metadata().brokers  # response 2 arrives whole, then the cut
            proxy.wait_for(lambda s, n=round_: s["cuts"] == n)
            with pytest.raises(ConnectionError):
                c.metadata()
        finally:
            c.close()
    stats = proxy.stats()
    assert stats["responses_forwarded"] == 6
    assert stats["connections_accepted"] == 3

    proxy.cut_every_n_responses(None)
    with _client(proxy) as c:
        for _ in range(5):
            c.metadata()
    assert proxy.stats()["cuts"] == 3


def test_cut_lets_a_slow_reader_have_the_last_response_whole(proxy):
    """The n-th response is far larger than the client's receive buffer: the proxy waits
    for it to leave its socket buffer before the RST (which would discard the tail)."""
    proxy.cut_every_n_responses(2)
    names = ["slow-reader-%03d-" % i + "x" * 230 for i in range(300)]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(DEADLINE)
        s.connect(("127.0.0.1", proxy.port))

        def roundtrip(req, api_key, version, cid):
            payload = m.encode_request(req, version, cid, "slow")
            s.sendall(struct.pack(">i", len(payload)) + payload)
            head = b""
            while len(head) < 4:
                chunk = s.recv(4 - len(head))
                assert chunk, "closed before the size prefix"
                head += chunk
            body = b""
            (size,) = struct.unpack(">i", head)
            while len(body) < size:
                chunk = s.recv(min(1024, size - len(body)))
                assert chunk, f"closed after {len(body)} of {size} bytes"
                body += chunk
            return m.decode_response(api_key, version, body)

        roundtrip(m.ApiVersionsRequest(), v.API_VERSIONS, 0, 1)
        md = roundtrip(m.MetadataRequest(topics=[m.MetadataRequestTopic(name=n) for n in names],
                                         allow_auto_topic_creation=False), v.METADATA, 4, 2)
        assert sorted(t.name for t in md.topics) == sorted(names)
        stats = proxy.wait_for(lambda st: st["cuts"] == 1 and st["connections_active"] == 0)
        assert stats["bytes_to_client"] > 50_000
        _expect_closed(s)


def test_cut_counter_restarts_when_set_on_an_open_connection(proxy):
    with _client(proxy) as c:
        for _ in range(3):
            c.metadata()
        proxy.cut_every_n_responses(1)  # counts from now, not from the connection's start
        c.metadata()
        proxy.wait_for(lambda s: s["cuts"] == 1)
        with pytest.raises(ConnectionError):
            c.metadata()


def test_cut_all(proxy):
    clients = [_client(proxy) for _ in range(3)]
    try:
        proxy.wait_for(lambda s: s["connections_active"] == 3)
        assert proxy.cut_all() == 3
        for c in clients:
            with pytest.raises(ConnectionError):
                c.metadata()
        stats = proxy.wait_for(lambda s: s["connections_active"] == 0)
        assert stats["cuts"] == 3
    finally:
        for c in clients:
            c.close()
    with _client(proxy) as c:  # the proxy itself carries on
        assert c.metadata().brokers


def test_confluent_idempotent_producer_survives_cuts(proxied):
    """Every 5th response cuts the connection; librdkafka reconnects and retries, and the
    idempotent producer still stores each record exactly once."""
    proxy, broker = proxied
    topic = "proxy-ck-cuts"
    broker.create_topic(topic, 2)
    proxy.cut_every_n_responses(5)
    errors = []
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": 50, "message.timeout.ms": 60000,
                         "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100,
                         "log_level": 2})
    values = [b"cut-%05d" % i for i in range(2000)]
    for value in values:
        producer.produce(topic, value=value, key=value[-2:],
                         on_delivery=lambda err, msg: err is not None and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    assert proxy.stats()["cuts"] >= 2
    proxy.cut_every_n_responses(None)
    got = read_back(broker.bootstrap, topic, timeout=30)
    stored = [msg.value for msgs in got.values() for msg in msgs]
    assert sorted(stored) == values  # no loss, no duplicates


# -- dropped responses -------------------------------------------------------------------------

def test_drop_response_makes_the_client_time_out(proxy):
    proxy.drop_response_every(2)
    c = _client(proxy, timeout=0.5)  # response 1 (ApiVersions) goes through
    try:
        with pytest.raises(TimeoutError):
            c.metadata()             # response 2 is swallowed; the connection stays open
        stats = proxy.wait_for(lambda s: s["responses_dropped"] == 1)
        assert stats["connections_active"] == 1
        assert stats["cuts"] == 0
    finally:
        c.close()
    proxy.drop_response_every(None)
    with _client(proxy, timeout=DEADLINE) as c:
        for _ in range(4):
            c.metadata()
    assert proxy.stats()["responses_dropped"] == 1


# -- byte by byte ------------------------------------------------------------------------------

def test_byte_by_byte_responses_are_correct(broker, proxy):
    topic = "proxy-bbb"
    broker.create_topic(topic, 1)
    proxy.byte_by_byte(True)
    with _client(proxy) as c:
        md = c.metadata([topic])
        assert [t.name for t in md.topics] == [topic]
        assert c.produce(topic, 0, _batch([b"a", b"b"])) == (0, 0)
        assert c.produce(topic, 0, _batch([b"c"])) == (0, 2)
    stats = proxy.wait_for(lambda s: s["responses_forwarded"] == 4)
    # Every byte that reached the client went in a send() of its own.
    assert stats["bytes_to_client"] > 100
    assert stats["single_byte_sends"] == stats["bytes_to_client"]
    got = read_back(broker.bootstrap, topic, timeout=30)
    assert [msg.value for msg in got[0]] == [b"a", b"b", b"c"]


def test_byte_by_byte_arrives_in_pieces(proxy):
    proxy.byte_by_byte(True)
    payload = m.encode_request(m.ApiVersionsRequest(), 0, 7, "raw")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=DEADLINE) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        buf, reads = b"", 0
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(1 << 16)
            assert chunk, "proxy closed the connection"
            buf += chunk
            reads += 1
    size = struct.unpack(">i", buf[:4])[0]
    assert len(buf) == 4 + size
    resp = m.decode_response(v.API_VERSIONS, 0, buf[4:])
    assert resp.correlation_id == 7 and resp.error_code == 0
    assert reads > 1  # the client really saw the response in pieces


def test_byte_by_byte_requests_too(broker, proxy):
    topic = "proxy-bbb-req"
    broker.create_topic(topic, 1)
    proxy.byte_by_byte(True, requests=True)
    with _client(proxy) as c:
        assert c.produce(topic, 0, _batch([b"slowly"])) == (0, 0)
    stats = proxy.wait_for(lambda s: s["responses_forwarded"] == 2)
    assert stats["single_byte_sends"] == stats["bytes_to_client"] + stats["bytes_to_target"]
    assert [msg.value for msg in read_back(broker.bootstrap, topic, timeout=30)[0]] == [b"slowly"]


# -- delay -------------------------------------------------------------------------------------

def test_delay_responses(proxy):
    with _client(proxy) as c:
        proxy.delay(0.3)
        t0 = time.monotonic()
        c.metadata()
        assert time.monotonic() - t0 >= 0.3
        proxy.delay(0.2, requests=0.2)
        t0 = time.monotonic()
        c.metadata()
        assert time.monotonic() - t0 >= 0.4
        proxy.delay(0)
        c.metadata()


def test_delay_keeps_pipelined_frames_in_order(proxy):
    with _client(proxy) as c:
        version = c.version_for(v.METADATA)
        proxy.delay(0.3)
        t0 = time.monotonic()
        for cid in (10, 11, 12):
            c.send_raw(m.encode_request(m.MetadataRequest(topics=None), version, cid, "d"))
        proxy.wait_for(lambda s: s["responses_received"] == 4)  # ApiVersions + 3 held
        proxy.delay(0)  # later frames never overtake the held ones
        c.send_raw(m.encode_request(m.MetadataRequest(topics=None), version, 13, "d"))
        got = [m.peek_correlation_id(c.recv_raw()) for _ in range(4)]
        assert time.monotonic() - t0 >= 0.3
    assert got == [10, 11, 12, 13]


# -- refuse and stall --------------------------------------------------------------------------

def test_refuse_new(proxy):
    with _client(proxy) as old:
        proxy.refuse_new(True)
        with pytest.raises(ConnectionError):
            _client(proxy, timeout=DEADLINE)
        stats = proxy.wait_for(lambda s: s["connections_refused"] == 1)
        assert stats["connections_accepted"] == 1
        assert old.metadata().brokers  # open connections are left alone
        proxy.refuse_new(False)
        with _client(proxy) as new:
            assert new.metadata().brokers


def test_stall_client_side_fills_the_buffers(broker, proxy):
    """With the client side stalled the proxy reads nothing: pipelined produce requests pile
    up until the client's send() blocks. After the stall every one of them is delivered."""
    topic = "proxy-stall"
    broker.create_topic(topic, 1)
    with _client(proxy) as c:
        version = c.version_for(v.PRODUCE)
        before = proxy.wait_for(lambda s: s["requests_forwarded"] == 1)["requests_forwarded"]
        proxy.stall(True, client=True, broker=False)
        c.sock.setblocking(False)
        values, pending, cid = [], b"", 1000
        while True:
            if not pending:
                value = b"%06d:" % cid + b"x" * 4000
                req = m.ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[m.TopicProduceData(
                    name=topic, partition_data=[m.PartitionProduceData(
                        index=0, records=_batch([value]))])])
                payload = m.encode_request(req, version, cid, "stall")
                pending = struct.pack(">i", len(payload)) + payload
                values.append(value)
                cid += 1
                assert len(values) < 100_000, "send() never blocked: the proxy kept reading"
            try:
                n = c.sock.send(pending)
            except BlockingIOError:
                break
            pending = pending[n:]
        assert len(values) > 10
        assert proxy.stats()["requests_forwarded"] == before  # nothing got through

        proxy.stall(False)
        c.sock.settimeout(30)
        c.sock.sendall(pending)
        for i in range(len(values)):
            resp = m.decode_response(v.PRODUCE, version, c.recv_raw())
            assert resp.correlation_id == 1000 + i
            part = resp.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, i)
    got = read_back(broker.bootstrap, topic, timeout=60)
    assert [msg.value for msg in got[0]] == values


def test_stall_broker_side_holds_responses(proxy):
    with _client(proxy) as c:
        proxy.stall(True, client=False, broker=True)
        c.send_raw(m.encode_request(m.MetadataRequest(topics=None), c.version_for(v.METADATA),
                                    77, "s"))
        proxy.wait_for(lambda s: s["requests_forwarded"] == 2)  # the request went through
        c.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            c.recv_raw()  # ...but its response is not read from the broker
        assert proxy.stats()["responses_forwarded"] == 1
        proxy.stall(False)
        c.sock.settimeout(DEADLINE)
        assert m.peek_correlation_id(c.recv_raw()) == 77


# -- robustness and shutdown -------------------------------------------------------------------

def test_dead_target_and_client_resets_do_not_hurt_the_proxy(proxy):
    dead = FaultProxy("127.0.0.1", free_port()).start()  # nothing listens on its target
    try:
        try:
            s = socket.create_connection(("127.0.0.1", dead.port), timeout=DEADLINE)
        except ConnectionResetError:
            pass  # the proxy's RST overtook connect()'s return
        else:
            with s:
                _expect_closed(s)
        assert dead.wait_for(lambda s: s["connect_failures"] == 1)["connections_active"] == 0
        assert dead.running
    finally:
        dead.stop()

    # A client that resets in the middle of a frame, several times.
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=DEADLINE)
        s.sendall(struct.pack(">i", 1000) + b"half a frame")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    proxy.wait_for(lambda s: s["connections_accepted"] == 5 and s["connections_active"] == 0)
    assert proxy.running
    with _client(proxy) as c:
        assert c.metadata().brokers


def test_broker_going_away_closes_the_client(broker, proxy):
    c = _client(proxy)
    try:
        proxy.wait_for(lambda s: s["connections_active"] == 1)
        broker.stop()
        _expect_closed(c.sock)
        proxy.wait_for(lambda s: s["connections_active"] == 0)
        assert proxy.running
    finally:
        c.close()


def test_bad_size_prefix_is_forwarded_raw():
    """A size prefix no Kafka frame can have: the rest of that direction passes untouched."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(DEADLINE)

    def echo():
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    try:
        with FaultProxy("127.0.0.1", server.getsockname()[1]) as p:
            junk = b"\xff\xff\xff\xfe not a kafka frame" * 10
            with socket.create_connection(("127.0.0.1", p.port), timeout=DEADLINE) as s:
                s.sendall(junk)
                got = b""
                while len(got) < len(junk):
                    chunk = s.recv(65536)
                    assert chunk
                    got += chunk
            assert got == junk
            stats = p.wait_for(lambda s: s["framing_errors"] == 2)
            assert stats["requests_forwarded"] == stats["responses_forwarded"] == 0
    finally:
        t.join(DEADLINE)
        server.close()


def test_stop_with_connections_open_is_prompt_and_leaves_nothing(broker):
    baseline_fds = _socket_fds()
    baseline_threads = set(threading.enumerate())
    proxy = FaultProxy("127.0.0.1", broker.port).start()
    socks = []
    try:
        idle = _client(proxy)
        socks.append(idle.sock)
        held = _client(proxy)           # a response held back by a long delay
        socks.append(held.sock)
        proxy.delay(60)
        held.send_raw(m.encode_request(m.MetadataRequest(topics=None), held.version_for(v.METADATA),
                                       5, "h"))
        proxy.wait_for(lambda s: s["requests_forwarded"] == 3)
        proxy.stall(True)               # a connection whose client data is never read
        stuck = socket.create_connection(("127.0.0.1", proxy.port), timeout=DEADLINE)
        socks.append(stuck)
        stuck.sendall(b"\0\0\0\x10partial")
        proxy.wait_for(lambda s: s["connections_active"] == 3)

        t0 = time.monotonic()
        proxy.stop(timeout=DEADLINE)    # raises if the thread is still alive at the deadline
        assert time.monotonic() - t0 < DEADLINE
        assert not proxy.running
        for s in socks:
            _expect_closed(s)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=DEADLINE).close()
        proxy.stop()                    # idempotent
    finally:
        proxy.stop()
        for s in socks:
            s.close()
    assert set(threading.enumerate()) <= baseline_threads
    assert _socket_fds() == baseline_fds
