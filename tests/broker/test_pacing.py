"""Pacing of Produce requests per connection (issue 39): while a connection has requests in
flight, its next request goes once its batches are full, or once the connection's smoothed
round trip over max.in.flight has passed since the one before; with nothing in flight, at
once. The rule is in both places that send Produce requests: the courier (csrc/kp_courier.h,
Pacing) and the Sender's step (NetworkClient.paced_until_us, RecordAccumulator.drain's
``paced``).

The first tests drive the courier and the accumulator directly (a local socket reads what the
courier writes); the last ones run a Producer against librdkafka's mock cluster with a round
trip set, and look at when the broker received each Produce request (its request tracking),
then read the records back.
"""

from __future__ import annotations

import struct
import time

import pytest

from kproducer import Producer
from kproducer._core import RecordAccumulator, SenderTurn
from kproducer._reference import decode_batch
from kproducer.testing.mock_cluster import MockCluster
from kproducer.testing.readback import read_back

LINGER_MS = 30
LEADERS = {"t": [7, 7]}       # the accumulator's topic "t": both partitions led by node 7
PRODUCE = 0


from _courier_link import link, recv_frame as _recv_frame  # noqa: F401  (link: a fixture)


def _produce_v3_batches(body: bytes) -> dict:
    """{partition: records} of a Produce v3 request of one topic."""
    api_key, version, cid, n = struct.unpack_from(">hhih", body, 0)
    assert (api_key, version) == (0, 3)
    pos = 10 + max(n, 0) + 2 + 10       # client id, transactional id, acks, timeout, topics
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n
    (n_parts,) = struct.unpack_from(">i", body, pos)
    pos += 4
    out = {}
    for _ in range(n_parts):
        partition, size = struct.unpack_from(">ii", body, pos)
        pos += 8
        out[partition] = body[pos:pos + size]
        pos += size
    return out


def _node(cid, *, prior=()):
    """A node entry of arm_courier's plan: connection 0, Produce v3, room for 5 requests,
    ``prior`` [(correlation id, api key, version)] the step's requests in flight."""
    return (0, 3, cid, 20, 5, list(prior))


def _acc(**kw):
    acc = RecordAccumulator(**{"batch_size": 1000, "linger_ms": LINGER_MS, **kw})
    acc.set_partition_count("t", 2)
    return acc


def _record(i: int) -> bytes:
    return b"%06d" % i + b"x" * 94


# -- the courier --------------------------------------------------------------------------------

def test_the_courier_holds_a_request_that_is_not_full_while_one_is_in_flight(link):
    sel, conn = link
    acc = _acc()
    # The step has a request in flight, written just now; the pace is far off.
    acc.arm_courier(sel.courier_io(), {7: _node(10, prior=[(9, PRODUCE, 3)])},
                    LEADERS, None, None, -1, -1, 1, 1000, None,
                    pacing={7: (60_000_000, SenderTurn.now_us())})
    acc.append("t", 0, None, _record(0), None, None, None)
    time.sleep(5 * LINGER_MS / 1000)        # its linger.ms is long over: due, but not full
    assert acc.courier_sent == 0
    # Filled: the record that does not fit starts a new batch, and the full one goes at once.
    i = 1
    while acc.queued_batches() < 2:
        acc.append("t", 0, None, _record(i), None, None, None)
        i += 1
    parts = _produce_v3_batches(_recv_frame(conn))
    assert list(parts) == [0]
    assert [r.value for r in decode_batch(parts[0]).records] == [_record(k) for k in range(i - 1)]
    [req] = acc.take_courier_sends(0)
    assert req.correlation_id == 10 and acc.queued_batches() == 1


def test_with_nothing_in_flight_the_courier_sends_at_linger_ms(link):
    sel, conn = link
    acc = _acc()
    acc.arm_courier(sel.courier_io(), {7: _node(20)}, LEADERS, None, None, -1, -1, 1, 1000,
                    None, pacing={7: (60_000_000, SenderTurn.now_us())})
    acc.append("t", 1, None, _record(0), None, None, None)
    parts = _produce_v3_batches(_recv_frame(conn))      # the pace does not apply: at once
    assert list(parts) == [1]
    assert acc.take_courier_sends(0)[0].correlation_id == 20


def test_the_courier_sends_a_request_that_is_not_full_once_the_pace_is_up(link):
    sel, conn = link
    acc = _acc()
    pace_us = 300_000
    last = SenderTurn.now_us()
    acc.arm_courier(sel.courier_io(), {7: _node(30, prior=[(29, PRODUCE, 3)])},
                    LEADERS, None, None, -1, -1, 1, 1000, None, pacing={7: (pace_us, last)})
    acc.append("t", 0, None, _record(0), None, None, None)
    parts = _produce_v3_batches(_recv_frame(conn))
    assert SenderTurn.now_us() >= last + pace_us and list(parts) == [0]
    acc.take_courier_sends(0)


# -- the step's drain ---------------------------------------------------------------------------

def test_a_paced_drain_takes_a_node_s_request_only_when_its_batches_are_full():
    acc = _acc(linger_ms=0)
    now = int(time.time() * 1000) + 1
    i = 0
    while acc.queued_batches() < 2:                 # partition 0: a full batch, and another
        acc.append("t", 0, None, _record(i), None, None, None)
        i += 1
    acc.append("t", 1, None, _record(0), None, None, None)       # partition 1: not full

    def leader(topic, partition):
        return 7

    # Paced: partition 1's batch would go not full, so the node's request waits.
    assert acc.drain(leader, {7}, 1 << 20, now, paced={7}) == {}
    # Partition 1's batch fills: the request is as full as it gets, and goes.
    j = 1
    while acc.queued_batches() < 4:
        acc.append("t", 1, None, _record(j), None, None, None)
        j += 1
    batches = acc.drain(leader, {7}, 1 << 20, now, paced={7})[7]
    assert sorted(b.partition for b in batches) == [0, 1]
    # Not paced (nothing in flight, or the pace is up): whatever is sendable goes.
    batches = acc.drain(leader, {7}, 1 << 20, now)[7]
    assert sorted(b.partition for b in batches) == [0, 1]
    assert acc.queued_batches() == 0


# -- end to end on the mock cluster ---------------------------------------------------------------

RTT_MS = 500
PACE_MS = RTT_MS / 5            # max.in.flight.requests.per.connection 5 (the default)


@pytest.fixture
def cluster():
    with MockCluster(1) as mc:
        mc.create_topic("t", partitions=1, replication_factor=1)
        mc.set_rtt_all(RTT_MS)
        yield mc


def _produce_times_ms(mc: MockCluster) -> list[float]:
    return [when / 1000 for _, api_key, when in mc.requests() if api_key == PRODUCE]


def _warm(p: Producer) -> None:
    # Connected, a producer id, and a few round trips measured (the smoothed round trip).
    p.send("t", b"warm")
    p.flush(timeout=30)


def _check_read_back(mc: MockCluster, sent: list[bytes]) -> None:
    mc.set_rtt_all(0)
    got = [m.value for m in read_back(mc.bootstrap, "t", timeout=60)[0] if m.value != b"warm"]
    assert got == sent


@pytest.mark.timeout(120)
def test_over_a_long_round_trip_requests_spread_over_it_instead_of_a_burst(cluster):
    """A trickle of records (no batch fills): each request waits for the pace after the one
    before, so the broker receives them a fifth of a round trip apart, not five within a few
    linger.ms as each window opens."""
    sent = []
    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=5) as p:
        _warm(p)
        cluster.start_request_tracking()
        end = time.monotonic() + 4 * RTT_MS / 1000
        i = 0
        while time.monotonic() < end:
            value = _record(i)
            p.send("t", value)
            sent.append(value)
            i += 1
            time.sleep(0.002)
        flush_ms = time.monotonic() * 1000
        p.flush(timeout=60)
        assert p.metrics()["records_failed"] == 0
    times = [t for t in _produce_times_ms(cluster) if t < flush_ms]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # Over four round trips: about a request per pace; without pacing, bursts of five a
    # linger.ms apart.
    assert len(gaps) >= 8, times
    assert min(gaps) >= 0.7 * PACE_MS, gaps
    _check_read_back(cluster, sent)


@pytest.mark.timeout(120)
def test_with_nothing_in_flight_a_request_goes_at_once_and_the_next_waits_for_the_pace(cluster):
    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=5) as p:
        _warm(p)
        cluster.start_request_tracking()
        first_ms = time.monotonic() * 1000
        p.send("t", b"first")
        deadline = time.monotonic() + 10
        while not _produce_times_ms(cluster):       # received: in flight now
            assert time.monotonic() < deadline, "the first request never arrived"
            time.sleep(0.001)
        p.send("t", b"second")
        while len(_produce_times_ms(cluster)) < 2:  # (a flush would send it at once)
            assert time.monotonic() < deadline, "the second request never arrived"
            time.sleep(0.001)
        p.flush(timeout=30)
    first, second = _produce_times_ms(cluster)
    # The first after its linger.ms, not a pace later; the second a pace after the first.
    assert first - first_ms < PACE_MS / 2
    assert second - first >= 0.7 * PACE_MS
    _check_read_back(cluster, [b"first", b"second"])


@pytest.mark.timeout(120)
def test_full_requests_go_without_waiting_for_the_pace(cluster):
    """A burst fills batches: each request is as full as it gets and goes as soon as the
    window has room, however recent the one before; and while the connection's next request
    waits for its pace (or its window is full) a batch keeps growing past batch.max.size,
    towards a full request, as for a full window."""
    sent = [_record(i) for i in range(40_000)]          # about 4.4 MB: four full requests
    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=5) as p:
        _warm(p)
        cluster.start_request_tracking()
        for value in sent:
            p.send("t", value)
        flush_ms = time.monotonic() * 1000
        p.flush(timeout=60)
        stats = p.metrics()
        batch_max_size = p.config.batch_max_size
    assert stats["records_failed"] == 0
    assert stats["max_batch_bytes"] > batch_max_size, stats
    before_flush = [t for t in _produce_times_ms(cluster) if t < flush_ms]
    gaps = [b - a for a, b in zip(before_flush, before_flush[1:])]
    # The first at once (nothing in flight), then full ones as fast as they fill.
    assert len(before_flush) >= 3, before_flush
    assert max(gaps) < PACE_MS, gaps
    _check_read_back(cluster, sent)
