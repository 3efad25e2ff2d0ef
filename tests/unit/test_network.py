"""NetworkClient without a broker (Java's NetworkClientTest with MockSelector and MockTime).

A scripted selector stands in for kproducer._net.Selector: each NetworkClient.poll takes
the next scripted PollResult (connects, sends, frames, disconnects with their kind), and
everything the client asked of the selector (connects, sends, closes) is recorded. Time is
a MockTime: every wait and timeout below is in its milliseconds, nothing sleeps.
"""

from __future__ import annotations

import collections
import socket
import struct
import time as real_time

import pytest

from kproducer._disconnect import Disconnect
from kproducer._disconnect import DisconnectKind as K
from kproducer._net import PollResult
from kproducer.clock import MockTime
from kproducer.errors import (KafkaTimeoutError, NetworkError, ProtocolError,
                              SslAuthenticationError)
from kproducer.network import NetworkClient
from kproducer.protocol import (API_VERSIONS, METADATA, RESPONSES, STRUCTS, ApiVersionsResponse,
                                MetadataRequest, MetadataResponse, Writer, response_header_version)
from kproducer.protocol import versions as v

pytestmark = pytest.mark.unit

REFUSED = "connect failed: Connection refused (ECONNREFUSED)"


class ScriptedSelector:
    """The Selector API NetworkClient uses; poll() returns what the test scripted."""

    def __init__(self, clock):
        self.clock = clock              # stamps the scripted writes and reads not given
        self.connects: list = []        # (slot, host, port, server_hostname)
        self.sent: list = []            # (slot, framed bytes)
        self.closed: list = []
        self.open: set = set()
        self.script: collections.deque = collections.deque()
        self.poll_timeouts: list = []
        self.wakeups = 0

    # -- scripting --
    def then(self, connected=(), disconnected=(), sent=(), received=(), woken=False,
             received_us=None, sent_us=None):
        self.script.append(PollResult(list(connected), list(disconnected), list(sent),
                                      list(received), woken, received_us, sent_us))

    def last_request(self):
        """(api_key, version, correlation_id) of the last request written."""
        return request_header(self.sent[-1][1])

    # -- Selector API --
    def connect(self, slot, host, port, send_buffer=-1, receive_buffer=-1, *, tls=None,
                server_hostname=None):
        self.connects.append((slot, host, port, server_hostname))
        self.open.add(slot)

    def send(self, slot, data):
        if slot not in self.open:
            raise NetworkError(f"connection {slot}: send: no such connection", conn_id=slot)
        self.sent.append((slot, bytes(data)))

    def close(self, slot):
        self.closed.append(slot)
        was = slot in self.open
        self.open.discard(slot)
        return was

    def close_all(self):
        self.open.clear()

    def poll(self, timeout_ms):
        self.poll_timeouts.append(timeout_ms)
        r = self.script.popleft() if self.script else PollResult([], [], [], [], False, None, None)
        now_us = self.clock.mono_us()
        r = r._replace(received_us=r.received_us or [now_us] * len(r.received),
                       sent_us=r.sent_us or [now_us] * len(r.sent))
        for d in r.disconnected:
            self.open.discard(d.id)
        return r

    def wakeup(self):
        self.wakeups += 1

    def fileno(self):
        return -1

    def needs_poll(self):
        return False


def request_header(framed: bytes):
    api_key, version, cid = struct.unpack(">hhi", framed[4:12])
    return api_key, version, cid


def encode_response(api_key, version, obj, correlation_id):
    w = Writer()
    w.int32(correlation_id)
    if response_header_version(api_key, version) >= 1:
        w.empty_tagged_fields()
    schema = RESPONSES[api_key].SCHEMA
    schema.encode_into(w, obj, version, schema.is_flexible(version))
    return w.getvalue()


def api_versions_response(versions=v.SUPPORTED_VERSIONS):
    return ApiVersionsResponse(error_code=0, api_keys=[
        STRUCTS["ApiVersion"](api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in versions.items()])


@pytest.fixture
def clock():
    return MockTime(mono_ms=1_000_000, wall_ms=1_700_000_000_000)


@pytest.fixture
def sel(clock):
    return ScriptedSelector(clock)


def new_client(clock, sel, **kw):
    return NetworkClient(time=clock, selector=sel, **kw)


def make_ready(client, sel, clock, node=0, host="10.0.0.1", port=9092):
    """Connect and answer ApiVersions; returns the node's selector slot."""
    client.set_node(node, host, port)
    assert not client.ready(node, clock.mono_ms())
    slot = client.nodes[node].slot
    assert sel.connects[-1][:3] == (slot, host, port)
    assert client.state(node) == "CONNECTING"
    sel.then(connected=[slot])
    client.poll(0, clock.mono_ms())
    assert client.state(node) == "CHECKING_API_VERSIONS"
    api_key, version, cid = sel.last_request()
    assert api_key == API_VERSIONS
    sel.then(sent=[slot], received=[(slot, encode_response(API_VERSIONS, version, api_versions_response(), cid))])
    client.poll(0, clock.mono_ms())
    assert client.state(node) == "READY"
    return slot


def metadata_request(client, clock, node=0):
    """Sends an empty Metadata request; returns the list its callback fills."""
    got = []
    client.send(node, METADATA, MetadataRequest(topics=[], allow_auto_topic_creation=False),
                lambda resp, err: got.append((resp, err)), clock.mono_ms())
    return got


def test_api_versions_handshake_makes_the_node_ready(clock, sel):
    client = new_client(clock, sel)
    slot = make_ready(client, sel, clock)
    assert client.ready(0, clock.mono_ms()) and client.is_ready(0)
    # The versions used are the highest both sides support.
    for api, (_, ours) in v.SUPPORTED_VERSIONS.items():
        if api in (v.PRODUCE, v.METADATA):
            assert client.api_version(0, api) == ours
    # A request goes out, its response comes back to its callback, matched by correlation id.
    got = metadata_request(client, clock)
    api_key, version, cid = sel.last_request()
    assert api_key == METADATA and version == client.api_version(0, METADATA)
    resp = MetadataResponse(brokers=[], cluster_id="c", controller_id=0, topics=[])
    sel.then(sent=[slot], received=[(slot, encode_response(METADATA, version, resp, cid))])
    assert client.poll(0, clock.mono_ms()) >= 2
    [(r, err)] = got
    assert err is None and r.cluster_id == "c" and r.correlation_id == cid
    assert client.in_flight_count(0) == 0 and not sel.closed


def test_unsupported_api_versions_version_is_retried_lower(clock, sel):
    client = new_client(clock, sel)
    client.set_node(0, "10.0.0.1", 9092)
    client.ready(0, clock.mono_ms())
    sel.then(connected=[0])
    client.poll(0, clock.mono_ms())
    _, version, cid = sel.last_request()
    bad = ApiVersionsResponse(error_code=35, api_keys=[])   # UNSUPPORTED_VERSION, no range given
    sel.then(sent=[0], received=[(0, encode_response(API_VERSIONS, version, bad, cid))])
    client.poll(0, clock.mono_ms())
    # v4 refused: the client retries ApiVersions at the broker's highest (0 here), still connected.
    api_key, retry_version, _ = sel.last_request()
    assert api_key == API_VERSIONS and retry_version == 0
    assert client.state(0) == "CHECKING_API_VERSIONS"


def test_request_timeout_disconnects_and_fails_in_flight_requests(clock, sel):
    client = new_client(clock, sel, request_timeout_ms=30_000)
    slot = make_ready(client, sel, clock)
    first = metadata_request(client, clock)
    sel.then(sent=[slot])
    client.poll(0, clock.mono_ms())
    second = metadata_request(client, clock)     # queued behind the first (one staged send)
    assert client.in_flight_count(0) == 2
    clock.sleep(29_999)
    assert client.poll_timeout(clock.mono_ms()) == 1
    client.poll(0, clock.mono_ms())
    assert not first and client.state(0) == "READY"
    clock.sleep(1)
    client.poll(0, clock.mono_ms())
    for got in (first, second):
        [(resp, err)] = got
        assert resp is None and isinstance(err, KafkaTimeoutError)
        assert "request to node 0 timed out after request.timeout.ms=30000" in str(err)
    assert client.state(0) == "DISCONNECTED" and slot in sel.closed
    assert client.in_flight_count(0) == 0
    # The selector was asked to wait no longer than the next timeout.
    assert sel.poll_timeouts[-1] == 0


def test_a_request_the_courier_wrote_is_reserved_then_adopted_in_order(clock, sel):
    """reserve_requests names the connection, version, a block of correlation ids and the
    room in flight only while a request staged now would be written at once (the courier
    reads the responses when nothing else is in flight, and gets more ids than room then);
    adopt() tracks the courier's request as if send() had staged it: marked sent by the
    next poll (or already, when the courier saw it written whole), answered in order."""
    from kproducer.network import COURIER_IDS
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel, max_in_flight=2)
    assert client.reserve_requests(0, PRODUCE) is None              # no such node
    slot = make_ready(client, sel, clock)
    conn, version, cid, count, max_in_flight, prior = client.reserve_requests(0, PRODUCE)
    assert conn == slot and version == client.api_version(0, PRODUCE)
    assert (count, max_in_flight, prior) == (COURIER_IDS, 2, [])
    first = metadata_request(client, clock)                         # a later request
    assert client.reserve_requests(0, PRODUCE) is None              # staged, not written yet
    _, mversion, mcid = request_header(sel.sent[-1][1])
    assert mcid == cid + count                                      # past the block
    sel.then(sent=[slot])
    client.poll(0, clock.mono_ms())
    # The metadata request is in flight: the courier is told, to read its response first.
    assert client.reserve_requests(0, PRODUCE)[5] == [(mcid, METADATA, mversion)]
    adopted = []
    client.adopt(0, PRODUCE, version, cid, "req", lambda r, e: adopted.append((r, e)),
                 clock.mono_ms(), decoder=lambda ver, payload: ("decoded", ver))
    assert client.in_flight_count(0) == 2
    second = metadata_request(client, clock)                        # waits behind the unsent one
    assert len(sel.sent) == 2                                       # ApiVersions, Metadata
    sel.then(sent=[slot])                                           # the courier's, reported
    client.poll(0, clock.mono_ms())
    assert len(sel.sent) == 3                                       # now the second is staged
    sel.then(received=[(slot, encode_response(METADATA, mversion, MetadataResponse(
        throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[]), mcid)),
        (slot, struct.pack(">i", cid))])
    client.poll(0, clock.mono_ms())
    assert first and first[0][1] is None
    assert adopted == [(("decoded", version), None)]
    assert not second
    # A node that is gone by the time its request is taken fails the request at once.
    lost = []
    client.adopt(9, PRODUCE, version, 77, "req", lambda r, e: lost.append(e), clock.mono_ms())
    assert isinstance(lost[0], NetworkError) and "node 9" in str(lost[0])


def test_the_client_owns_the_courier_s_correlation_ids(clock, sel):
    """reserve_courier_requests reserves a block of ids per node that can take requests (the
    client remembers the whole block); release_courier_ids gives back the ids after the last
    one the courier used, or the whole block when it used none, but not when other ids were
    reserved since: the next request's id would not follow them."""
    from kproducer.network import COURIER_IDS
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel)
    assert client.reserve_courier_requests(PRODUCE) == {}           # no node: nothing reserved
    client.release_courier_ids([])
    make_ready(client, sel, clock)
    before = client.reserve_correlation_id() + 1
    [(node, (_, _, first, count, _, _))] = client.reserve_courier_requests(PRODUCE).items()
    assert (node, first, count) == (0, before, COURIER_IDS)
    client.release_courier_ids([first, first + 1, 99_999])          # the last one it used: first + 1
    assert client.reserve_correlation_id() == first + 2
    # Unused: the whole block comes back.
    [(_, (_, _, first, _, _, _))] = client.reserve_courier_requests(PRODUCE).items()
    client.release_courier_ids([])
    assert client.reserve_correlation_id() == first
    # An id reserved meanwhile (a step's request): nothing comes back; released once only.
    [(_, (_, _, first, count, _, _))] = client.reserve_courier_requests(PRODUCE).items()
    other = client.reserve_correlation_id()
    assert other == first + count
    client.release_courier_ids([first])
    client.release_courier_ids([first])
    assert client.reserve_correlation_id() == other + 1


def test_a_request_the_courier_wrote_whole_needs_no_sent_report(clock, sel):
    """The courier settles a request it saw written whole (to stage its next): adopted as
    sent, the request behind it is staged at once, and the responses match in order."""
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel, max_in_flight=5)
    slot = make_ready(client, sel, clock)
    _, version, cid, _, _, _ = client.reserve_requests(0, PRODUCE)
    answers = []
    for k in range(2):
        client.adopt(0, PRODUCE, version, cid + k, "req", lambda r, e: answers.append((r, e)),
                     clock.mono_ms(), decoder=lambda ver, payload: payload[:4], sent=k == 0)
    staged = len(sel.sent)
    metadata_request(client, clock)
    assert len(sel.sent) == staged              # waits: the second is not reported sent yet
    sel.then(sent=[slot])
    client.poll(0, clock.mono_ms())
    assert len(sel.sent) == staged + 1          # the report was the second's
    sel.then(received=[(slot, struct.pack(">i", cid)), (slot, struct.pack(">i", cid + 1))])
    client.poll(0, clock.mono_ms())
    assert answers == [(struct.pack(">i", cid), None), (struct.pack(">i", cid + 1), None)]


def test_request_latency_is_each_round_trip_from_its_write_to_its_read(clock, sel):
    """Producer.metrics()'s request_latency_*: from the instant the request's last byte was
    written (the selector's stamp, or the courier's) to the instant its response was read
    (likewise), not the polls that stage and handle them."""
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel, max_in_flight=5)
    slot = make_ready(client, sel, clock)
    rtt = client.request_latency
    assert rtt.count == 1 and rtt.max_us == 0     # ApiVersions: the same MockTime instant
    got = metadata_request(client, clock)
    staged_us = clock.mono_us()
    _, mversion, mcid = sel.last_request()
    clock.sleep(9)          # written 1 ms after staging, read 3 ms after that, handled 9 ms on
    sel.then(sent=[slot], received=[(slot, encode_response(METADATA, mversion, MetadataResponse(
        throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[]), mcid))],
        sent_us=[staged_us + 1_000], received_us=[staged_us + 4_000])
    client.poll(0, clock.mono_ms())
    assert got and got[0][1] is None
    assert (rtt.count, rtt.max_us, rtt.total_us) == (2, 3_000, 3_000)
    # The courier's: one it wrote and read (answer_us), one it wrote and a poll read.
    _, version, cid, _, _, _ = client.reserve_requests(0, PRODUCE)
    sent_us = clock.mono_us()
    client.adopt(0, PRODUCE, version, cid, "req", lambda r, e: None, clock.mono_ms(), sent=True,
                 answer="read by the courier", send_us=sent_us, answer_us=sent_us + 1_250)
    client.adopt(0, PRODUCE, version, cid + 1, "req", lambda r, e: None, clock.mono_ms(),
                 decoder=lambda ver, payload: "polled", sent=True, send_us=sent_us + 100)
    client.settle_answered()
    sel.then(received=[(slot, struct.pack(">i", cid + 1))], received_us=[sent_us + 5_100])
    client.poll(0, clock.mono_ms())
    assert client.in_flight_count(0) == 0
    assert (rtt.count, rtt.max_us, rtt.total_us) == (4, 5_000, 3_000 + 1_250 + 5_000)
    summary = rtt.summary_ms("request_latency")
    assert summary["request_latency_max_ms"] == 5.0 and summary["request_latency_count"] == 4
    assert summary["request_latency_avg_ms"] == pytest.approx(9.25 / 4)


def test_a_response_the_courier_read_completes_in_order(clock, sel):
    """A request adopted with the response the courier read waits for the responses ahead of
    it: it completes right after them, in the same poll, and before any behind it."""
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel, max_in_flight=5)
    slot = make_ready(client, sel, clock)
    _, version, cid, _, _, _ = client.reserve_requests(0, PRODUCE)
    order = []
    for k, answer in enumerate([{}, {"answer": "read by the courier"}, {}]):
        client.adopt(0, PRODUCE, version, cid + k, "req",
                     lambda r, e, k=k: order.append((k, r)), clock.mono_ms(),
                     decoder=lambda ver, payload: "polled", sent=True, **answer)
    client.settle_answered()
    assert order == []                          # the first has not been answered yet
    sel.then(received=[(slot, struct.pack(">i", cid)), (slot, struct.pack(">i", cid + 2))])
    client.poll(0, clock.mono_ms())
    assert order == [(0, "polled"), (1, "read by the courier"), (2, "polled")]
    assert client.in_flight_count(0) == 0
    # At the head, it completes at once.
    client.adopt(0, PRODUCE, version, cid + 3, "req", lambda r, e: order.append((3, r)),
                 clock.mono_ms(), sent=True, answer="at once")
    client.settle_answered()
    assert order[-1] == (3, "at once") and client.in_flight_count(0) == 0



def test_an_acks0_request_the_courier_wrote_completes_once_written(clock, sel):
    """acks=0: the courier reads nothing, so answers to drop may be on their way and the node
    can still take its requests; one it saw written whole completes as it is adopted, one
    still being written when the poll reports it sent; a broker's answer to either is
    dropped (Tansu answers acks=0)."""
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel, max_in_flight=5)
    slot = make_ready(client, sel, clock)
    _, version, first, _, _, _ = client.reserve_requests(0, PRODUCE)
    done = []
    client.adopt(0, PRODUCE, version, first, "req", lambda r, e: done.append((0, r, e)),
                 clock.mono_ms(), sent=True, expect_response=False)
    assert done == [(0, None, None)] and client.in_flight_count(0) == 0
    # An answer to drop may come: the courier is only offered the node when it reads nothing.
    assert client.reserve_requests(0, PRODUCE) is None
    cid = client.reserve_requests(0, PRODUCE, reads=False)[2]
    client.adopt(0, PRODUCE, version, cid, "req", lambda r, e: done.append((1, r, e)),
                 clock.mono_ms(), sent=False, expect_response=False)
    assert len(done) == 1 and client.in_flight_count(0) == 1
    sel.then(sent=[slot])
    client.poll(0, clock.mono_ms())
    assert done[1] == (1, None, None) and client.in_flight_count(0) == 0
    sel.then(received=[(slot, struct.pack(">i", first)), (slot, struct.pack(">i", cid))])
    client.poll(0, clock.mono_ms())
    assert client.state(0) == "READY" and len(done) == 2     # dropped, not a protocol error

def test_reconnect_backoff_grows_and_is_reset_once_ready(clock, sel):
    client = new_client(clock, sel, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000)
    client.set_node(0, "10.0.0.1", 9092)
    delays = []
    for attempt in range(7):
        assert not client.ready(0, clock.mono_ms())
        assert len(sel.connects) == attempt + 1
        sel.then(disconnected=[Disconnect(0, K.CONNECT_FAILED, REFUSED)])
        client.poll(0, clock.mono_ms())
        assert client.state(0) == "DISCONNECTED"
        delay = client.connection_delay(0, clock.mono_ms())
        delays.append(delay)
        # 50 ms doubling per failure up to 1000, +/-20 % jitter, never above the cap.
        expected = min(50 * 2 ** attempt, 1000)
        assert int(expected * 0.8) - 1 <= delay <= min(expected * 1.2, 1000), (attempt, delay)
        # No new attempt before the backoff has passed ...
        clock.sleep(delay - 1)
        assert not client.ready(0, clock.mono_ms()) and len(sel.connects) == attempt + 1
        clock.sleep(1)
    assert delays[3] > delays[1] > 0
    err = client.last_connect_error
    assert isinstance(err, NetworkError)
    assert str(err) == f"connection to node 0 (10.0.0.1:9092) lost: {REFUSED}"
    # ... and a connection that gets READY starts over at reconnect.backoff.ms.
    client.ready(0, clock.mono_ms())
    sel.then(connected=[0])
    client.poll(0, clock.mono_ms())
    _, version, cid = sel.last_request()
    sel.then(sent=[0], received=[(0, encode_response(API_VERSIONS, version, api_versions_response(), cid))])
    client.poll(0, clock.mono_ms())
    assert client.state(0) == "READY" and client.last_connect_error is None
    sel.then(disconnected=[Disconnect(0, K.IO_ERROR, "Connection reset by peer (ECONNRESET)")])
    client.poll(0, clock.mono_ms())
    assert 40 <= client.connection_delay(0, clock.mono_ms()) <= 60


def test_correlation_id_mismatch_disconnects(clock, sel):
    client = new_client(clock, sel)
    slot = make_ready(client, sel, clock)
    got = metadata_request(client, clock)
    _, version, cid = sel.last_request()
    resp = MetadataResponse(brokers=[], cluster_id="c", controller_id=0, topics=[])
    sel.then(sent=[slot], received=[(slot, encode_response(METADATA, version, resp, cid + 7))])
    client.poll(0, clock.mono_ms())
    [(r, err)] = got
    assert r is None and isinstance(err, ProtocolError)
    assert str(err) == f"node 0 answered correlation id {cid + 7}, expected {cid}"
    assert client.state(0) == "DISCONNECTED" and slot in sel.closed


@pytest.fixture
def two_addresses(monkeypatch):
    """kafka.test resolves to two addresses (and a repeat of the first, dropped)."""
    def getaddrinfo(host, port, *args, **kw):
        assert host == "kafka.test"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in ("10.0.0.1", "10.0.0.2", "10.0.0.1")]
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def wait_for_lookup(client, clock, node=0):
    deadline = real_time.monotonic() + 5
    ns = client.nodes[node]
    while ns.lookup is not None and not ns.lookup.done:
        assert real_time.monotonic() < deadline, "the lookup thread did not finish"
        real_time.sleep(0.001)
    client.poll(0, clock.mono_ms())


def test_the_next_resolved_address_is_tried_after_a_refused_connect(clock, sel, two_addresses):
    client = new_client(clock, sel)
    client.set_node(0, "kafka.test", 9092)
    assert not client.ready(0, clock.mono_ms())
    assert sel.connects == [] and client.state(0) == "CONNECTING"   # resolving
    wait_for_lookup(client, clock)
    assert [c[1] for c in sel.connects] == ["10.0.0.1"]
    sel.then(disconnected=[Disconnect(0, K.CONNECT_FAILED, REFUSED)])
    client.poll(0, clock.mono_ms())
    # At once, without a backoff, the same node's next address.
    assert [c[1] for c in sel.connects] == ["10.0.0.1", "10.0.0.2"]
    assert client.state(0) == "CONNECTING" and client.nodes[0].attempts == 0
    # All tried: the attempt fails and backs off.
    sel.then(disconnected=[Disconnect(0, K.CONNECT_FAILED, REFUSED)])
    client.poll(0, clock.mono_ms())
    assert client.state(0) == "DISCONNECTED" and client.nodes[0].attempts == 1
    assert client.connection_delay(0, clock.mono_ms()) > 0
    assert len(sel.connects) == 2


def test_the_next_resolved_address_is_tried_after_a_setup_timeout(clock, sel, two_addresses):
    client = new_client(clock, sel, connection_setup_timeout_ms=10_000)
    client.set_node(0, "kafka.test", 9092)
    client.ready(0, clock.mono_ms())
    wait_for_lookup(client, clock)
    clock.sleep(10_000)
    client.poll(0, clock.mono_ms())
    assert [c[1] for c in sel.connects] == ["10.0.0.1", "10.0.0.2"]
    assert 0 in sel.closed and client.state(0) == "CONNECTING"
    clock.sleep(10_000)
    client.poll(0, clock.mono_ms())
    assert client.state(0) == "DISCONNECTED"
    assert isinstance(client.last_connect_error, KafkaTimeoutError)
    assert "not established within socket.connection.setup.timeout.ms=10000" in str(client.last_connect_error)


def test_a_failed_tls_handshake_is_an_authentication_error_not_retried_elsewhere(clock, sel, two_addresses):
    client = new_client(clock, sel)
    client.set_node(0, "kafka.test", 9092)
    client.ready(0, clock.mono_ms())
    wait_for_lookup(client, clock)
    why = "TLS handshake failed: certificate verify failed: hostname mismatch"
    sel.then(disconnected=[Disconnect(0, K.TLS_HANDSHAKE, why)])
    client.poll(0, clock.mono_ms())
    assert len(sel.connects) == 1            # the other address has the same certificate
    [(node, exc)] = client.take_auth_failures()
    assert node == 0 and isinstance(exc, SslAuthenticationError)
    assert str(exc) == f"TLS connection to node 0 (kafka.test:9092) failed: {why}"
    assert client.authentication_error(0) is exc and client.state(0) == "DISCONNECTED"


@pytest.mark.parametrize("kind, detail", [
    (K.IO_ERROR, "Connection reset by peer (ECONNRESET)"),
    (K.PEER_CLOSED, "connection closed by peer"),
    (K.PEER_CLOSED_MID_FRAME, "connection closed by peer mid-frame (9 bytes of an incomplete frame received)"),
    (K.FRAME_SIZE, "invalid frame size -1 (must be 0..104857600); the stream is lost"),
    (K.TLS, "TLS error: decryption failed or bad record mac"),   # READY: a lost connection, retried
])
def test_a_lost_connection_fails_its_requests_with_the_reason(clock, sel, kind, detail):
    client = new_client(clock, sel)
    slot = make_ready(client, sel, clock)
    got = metadata_request(client, clock)
    sel.then(sent=[slot], disconnected=[Disconnect(slot, kind, detail)])
    client.poll(0, clock.mono_ms())
    [(resp, err)] = got
    assert type(err) is NetworkError
    assert str(err) == f"connection to node 0 (10.0.0.1:9092) lost: {detail}"
    assert client.take_auth_failures() == [] and client.state(0) == "DISCONNECTED"


def test_windows_full_when_every_ready_node_has_max_in_flight_out(clock, sel):
    client = new_client(clock, sel, max_in_flight=2)
    assert not client.windows_full()                     # no node at all
    a = make_ready(client, sel, clock, node=0)
    make_ready(client, sel, clock, node=1, host="10.0.0.2")
    metadata_request(client, clock, node=0)
    sel.then(sent=[a])
    client.poll(0, clock.mono_ms())
    metadata_request(client, clock, node=0)
    assert client.in_flight_count(0) == 2 and not client.windows_full()   # node 1 has room
    # ... but leads no partition (as the bootstrap connection): it takes no batch.
    assert client.windows_full(leaders={0}) and not client.windows_full(leaders={0, 1})
    assert not client.windows_full(leaders=set())        # no leader at all
    client.set_node(2, "10.0.0.3", 9092)
    client.ready(2, clock.mono_ms())                     # connecting: it takes nothing yet
    metadata_request(client, clock, node=1)
    metadata_request(client, clock, node=1)
    assert client.in_flight_count(1) == 2 and client.state(2) == "CONNECTING"
    assert client.windows_full()


def test_pacing_follows_the_smoothed_round_trip_and_waits_only_with_produce_in_flight(clock, sel):
    """The pace of a node's Produce requests (issue 39): its smoothed round trip (RFC 6298's
    SRTT, gain 1/8) over max.in.flight; a request that is not full waits that long after the
    last Produce request in flight, never when none is in flight; and while it waits the
    node counts as full for windows_full(paced_at_us=...), so batches keep growing."""
    from kproducer.protocol import PRODUCE
    client = new_client(clock, sel, max_in_flight=5)
    make_ready(client, sel, clock)
    assert client.pace_us(0) == 0 and client.paced_until_us(0, clock.mono_us()) == 0
    _, version, cid, _, _, _ = client.reserve_requests(0, PRODUCE)
    t = clock.mono_us()
    for k, rtt_us in enumerate((100_000, 180_000)):       # read by the courier, answered
        client.adopt(0, PRODUCE, version, cid + k, "req", lambda r, e: None, clock.mono_ms(),
                     sent=True, answer="acked", send_us=t, answer_us=t + rtt_us)
    client.settle_answered()
    assert client.in_flight_count(0) == 0
    srtt = 100_000 + (180_000 - 100_000) / 8
    assert client.pace_us(0) == int(srtt / 5) == 22_000
    assert client.paced_until_us(0, t) == 0               # nothing in flight: at once
    assert not client.windows_full({0}, paced_at_us=t)
    # One Produce request out, written at t: the next waits until t + pace, unless full.
    client.adopt(0, PRODUCE, version, cid + 2, "req", lambda r, e: None, clock.mono_ms(),
                 decoder=lambda ver, payload: payload, sent=True, send_us=t)
    assert client.paced_until_us(0, t + 5_000) == t + 22_000
    assert client.windows_full({0}, paced_at_us=t + 5_000)    # 1 of 5 out, but paced
    assert not client.windows_full({0})                        # without pacing: room
    assert client.paced_until_us(0, t + 22_000) == 0
    assert not client.windows_full({0}, paced_at_us=t + 22_000)
