"""The courier (csrc/kp_courier.h): a C thread that writes a lingering batch's Produce request
when its linger.ms is over, between two Sender steps and without the GIL.

These tests drive it directly: a real Selector connected to a local socket that reads what
the courier wrote, byte by byte. A Producer using it against the broker while the
application holds the GIL: tests/broker/test_courier_in_a_producer.py."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from kproducer._core import CourierRequest, RecordAccumulator, SenderTurn, courier_codecs
from kproducer._reference import decode_batch

LINGER_MS = 30


def leader(topic, partition):
    return 7


LEADERS = {"t": [7, 7]}       # the accumulator's topic "t": both partitions led by node 7


from _courier_link import link, recv_frame as _recv_frame  # noqa: F401  (link: a fixture)


def _parse_produce_v3(body: bytes):
    """(correlation_id, client_id, acks, timeout_ms, {(topic, partition): records}) of a
    Produce v3 request (header v1, not flexible)."""
    api_key, version, cid, n = struct.unpack_from(">hhih", body, 0)
    assert (api_key, version) == (0, 3)
    pos = 10
    client_id = None if n < 0 else body[pos:pos + n].decode()
    pos += max(n, 0)
    (txn_len,) = struct.unpack_from(">h", body, pos)
    assert txn_len == -1
    pos += 2
    acks, timeout, n_topics = struct.unpack_from(">hii", body, pos)
    pos += 10
    out = {}
    for _ in range(n_topics):
        (n,) = struct.unpack_from(">h", body, pos)
        topic = body[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        (n_parts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(n_parts):
            partition, size = struct.unpack_from(">ii", body, pos)
            pos += 8
            out[(topic, partition)] = body[pos:pos + size]
            pos += size
    assert pos == len(body)
    return cid, client_id, acks, timeout, out


def node(cid, max_in_flight=1, prior=()):
    """A node entry of arm_courier's plan: connection 0, Produce v3, 4 correlation ids a
    request in flight from ``cid``, ``prior`` [(correlation id, api key, version)] the step's
    requests in flight."""
    return (0, 3, cid, max_in_flight * 4, max_in_flight, list(prior))


def _acc():
    acc = RecordAccumulator(batch_size=1000, linger_ms=LINGER_MS)
    acc.set_partition_count("t", 2)
    return acc


def test_a_courier_request_is_a_typed_read_only_record():
    """What take_courier_sends hands the Sender: named fields, set by the accumulator only."""
    req = CourierRequest()
    assert (req.node_id, req.correlation_id, req.batches, req.results, req.answer_us) == (0, 0, None, None, None)
    assert not req.acknowledged and "correlation id 0" in repr(req)
    for name in ("node_id", "correlation_id", "version", "send_us", "whole", "batches", "results",
                 "answer_us"):
        with pytest.raises(AttributeError):
            setattr(req, name, 1)
    with pytest.raises(TypeError):
        class Sub(CourierRequest):      # final: nothing else is handed over
            pass


def test_the_courier_writes_a_lingering_batch_at_its_deadline(link):
    sel, conn = link
    acc = _acc()
    acc.arm_courier(sel.courier_io(), {7: node(4242)}, LEADERS, None, {("t", 1): 5},
                    1000, 2, -1, 30000, b"app")
    t0 = time.monotonic()
    acc.append("t", 1, b"k", b"v1", 1_700_000_000_000, None, None)
    body = _recv_frame(conn)                    # written by the courier: nobody polls
    waited = time.monotonic() - t0
    assert waited >= LINGER_MS / 1000 - 0.002   # not before linger.ms (the clock is whole ms)
    assert acc.courier_sent == 1
    cid, client_id, acks, timeout, parts = _parse_produce_v3(body)
    assert (cid, client_id, acks, timeout) == (4242, "app", -1, 30000)
    assert list(parts) == [("t", 1)]
    batch = decode_batch(parts[("t", 1)])
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 2, 5)
    assert [(r.key, r.value, r.timestamp) for r in batch.records] == [(b"k", b"v1", 1_700_000_000_000)]

    # A record for the same partition after the send starts a new batch.
    acc.append("t", 1, b"k", b"v2", None, None, None)
    assert acc.queued_batches() == 2
    before_us = SenderTurn.now_us()
    [req] = acc.take_courier_sends(0)
    assert type(req) is CourierRequest and not req.acknowledged
    assert (req.node_id, req.correlation_id, req.version, req.results, req.answer_us) == (7, 4242, 3, None, None)
    assert 0 < req.send_us <= before_us         # written at a time.monotonic instant
    [b] = req.batches
    assert (b.record_count, b.base_sequence, b.producer_id, b.producer_epoch) == (1, 5, 1000, 2)
    assert bytes(b) == parts[("t", 1)]          # the batch as the courier finished it
    assert acc.queued_batches() == 1            # v2's batch, for the Sender
    assert acc.take_courier_sends(0) == []      # taken once; disarmed since
    # Written whole but not settled (it sent nothing after it): the selector reports it sent
    # at its next poll.
    assert not req.whole and sel.poll(0).sent == [0]


@pytest.mark.parametrize("codec", sorted(courier_codecs()))
def test_the_courier_compresses_a_batch_once_and_the_step_keeps_it(link, codec):
    """A compressing producer's batch: the courier compresses its Records section in C and
    sets the codec's bits (any reader decompresses it: here the Python codecs); the step that
    takes it over closes it without compressing it again. One record of random bytes makes
    the section incompressible, so it outgrows the bytes the batch was charged for."""
    sel, conn = link
    acc = RecordAccumulator(batch_size=4000, linger_ms=LINGER_MS, compression=codec)
    acc.set_partition_count("t", 2)
    acc.arm_courier(sel.courier_io(), {7: node(10)}, LEADERS, None, {("t", 0): 0},
                    1000, 2, -1, 30000, None)
    values = [b"x" * 200] * 5 + [os.urandom(1500)]
    for i, v in enumerate(values):
        acc.append("t", 0, b"%d" % i, v, 1_700_000_000_000 + i, None, None)
    _, _, _, _, parts = _parse_produce_v3(_recv_frame(conn))
    batch = decode_batch(parts[("t", 0)])
    assert batch.compression == codec
    assert [(r.key, r.value) for r in batch.records] == [(b"%d" % i, v) for i, v in enumerate(values)]
    [req] = acc.take_courier_sends(0)
    [b] = req.batches
    b.close()
    assert bytes(b) == parts[("t", 0)]          # compressed once, as sent


def test_one_request_per_node_with_every_due_partition(link):
    sel, conn = link
    acc = _acc()
    # Both due before the arming. Each batch lingers from its own created_ms, a whole wall
    # millisecond: two appends that straddle a millisecond (CI met it), or a thread descheduled
    # between them, would make the second due later than the first, which goes alone.
    acc.append("t", 0, None, b"a", None, None, None)
    time.sleep(0.003)               # a millisecond or more apart, on purpose: CI's case
    acc.append("t", 1, None, b"b", None, None, None)
    both_due_ms = time.time() * 1000 + LINGER_MS + 2
    while time.time() * 1000 < both_due_ms:
        time.sleep(0.005)
    acc.arm_courier(sel.courier_io(), {7: node(9)}, LEADERS, None, None, -1, -1, 1, 1000, None)
    cid, client_id, acks, timeout, parts = _parse_produce_v3(_recv_frame(conn))
    assert (cid, client_id, acks, timeout) == (9, None, 1, 1000)
    assert sorted(parts) == [("t", 0), ("t", 1)]
    for (_, p), value in zip(sorted(parts), (b"a", b"b")):
        batch = decode_batch(parts[("t", p)])
        assert batch.producer_id == -1 and batch.base_sequence == -1      # no idempotence
        assert [r.value for r in batch.records] == [value]
    [req] = acc.take_courier_sends(0)
    assert sorted(b.partition for b in req.batches) == [0, 1]
    assert acc.queued_batches() == 0


def test_the_queues_are_the_steps_again_only_after_the_take(link):
    sel, conn = link
    acc = _acc()
    acc.arm_courier(sel.courier_io(), {7: node(1)}, LEADERS, None, None, -1, -1, 1, 1000, None)
    with pytest.raises(RuntimeError, match="take_courier_sends"):
        acc.drain(leader, {7}, 1 << 20, 0)
    with pytest.raises(RuntimeError, match="take_courier_sends"):
        acc.abort_all()
    assert acc.take_courier_sends(0) == []
    assert acc.drain(leader, {7}, 1 << 20, 0) == {}


def test_a_connection_still_writing_gets_nothing(link):
    sel, conn = link
    acc = _acc()
    sel.send(0, struct.pack(">i", 4) + b"busy")     # staged, not yet written: no poll ran
    acc.arm_courier(sel.courier_io(), {7: node(1)}, LEADERS, None, None, -1, -1, 1, 1000, None)
    acc.append("t", 0, None, b"a", None, None, None)
    # The courier would have written it LINGER_MS after the append; wait well past that.
    time.sleep(5 * LINGER_MS / 1000)
    assert acc.courier_sent == 0 and acc.take_courier_sends(0) == []
    assert acc.queued_batches() == 1
    sel.poll(0)
    assert _recv_frame(conn) == b"busy"
    # Armed again with the connection free, the courier sends the batch at once (it lingered).
    acc.arm_courier(sel.courier_io(), {7: node(2)}, LEADERS, None, None, -1, -1, 1, 1000, None)
    assert _parse_produce_v3(_recv_frame(conn))[0] == 2


def test_a_queue_goes_in_order_one_batch_per_partition_per_request(link):
    """A partition's queued first attempts go in queue order with consecutive sequences, one
    batch a request (the full one at once, the lingering one at its linger.ms), as room in
    flight allows; a muted partition, and one whose queue holds a retry, stay the steps'."""
    sel, conn = link
    acc = _acc()
    acc.append("t", 0, None, b"x" * 600, None, None, None)
    acc.append("t", 0, None, b"y" * 600, None, None, None)     # a second batch: the first is full
    acc.append("t", 1, None, b"m", None, None, None)
    t0 = time.monotonic()
    acc.arm_courier(sel.courier_io(), {7: node(3, max_in_flight=2)}, LEADERS, {("t", 1)}, {("t", 0): 7},
                    1000, 0, 1, 1000, None)
    first = _parse_produce_v3(_recv_frame(conn))
    second = _parse_produce_v3(_recv_frame(conn))
    assert time.monotonic() - t0 >= LINGER_MS / 1000 - 0.002 - 0.001  # the second lingered
    assert (first[0], second[0]) == (3, 4) and list(first[4]) == list(second[4]) == [("t", 0)]
    b1, b2 = (decode_batch(f[4][("t", 0)]) for f in (first, second))
    assert (b1.base_sequence, b2.base_sequence) == (7, 8)
    assert [r.value for r in b1.records + b2.records] == [b"x" * 600, b"y" * 600]
    taken = acc.take_courier_sends(0)
    assert [(r.correlation_id, [b.base_sequence for b in r.batches]) for r in taken] \
        == [(3, [7]), (4, [8])]
    assert taken[0].whole is True       # settled to stage the second: no poll reports it
    assert acc.queued_batches() == 1    # the muted partition's



def test_with_acks0_a_request_is_done_once_written_and_nothing_is_read(link):
    """acks=0, room for one request in flight: each request is done once written, so a
    queue of three full batches goes in three requests at once, with acks 0 and no producer
    id; an answer on the connection (Tansu answers acks=0) is not read: the poll reads it."""
    sel, conn = link
    acc = _acc()
    for value in (b"x", b"y", b"z"):
        acc.append("t", 0, None, value * 600, None, None, None)     # a batch each
    conn.sendall(_produce_response_v3(2, "t", [(0, 0, 0)]))          # an earlier request's
    acc.arm_courier(sel.courier_io(), {7: node(3, max_in_flight=1)}, LEADERS, None, None,
                    -1, -1, 0, 1000, None)
    frames = [_parse_produce_v3(_recv_frame(conn)) for _ in range(3)]
    assert [(cid, acks) for cid, _, acks, _, _ in frames] == [(3, 0), (4, 0), (5, 0)]
    batches = [decode_batch(f[4][("t", 0)]) for f in frames]
    assert [(b.producer_id, b.base_sequence, b.records[0].value[:1]) for b in batches] \
        == [(-1, -1, b"x"), (-1, -1, b"y"), (-1, -1, b"z")]
    assert acc.courier_answered == 0
    taken = acc.take_courier_sends(0)
    assert [(r.correlation_id, r.whole, r.results) for r in taken] \
        == [(3, True, None), (4, True, None), (5, False, None)]
    deadline = time.monotonic() + 5
    received = []
    while not received and time.monotonic() < deadline:
        received = sel.poll(50).received
    assert [struct.unpack_from(">i", payload)[0] for _, payload in received] == [2]

def _produce_response_v3(cid: int, topic: str, entries, throttle_time_ms: int = 0,
                         extra: bytes = b"") -> bytes:
    """A framed Produce v3 response: ``entries`` [(partition, error_code, base_offset)], then
    ``extra`` bytes after its last field."""
    name = topic.encode()
    body = struct.pack(">ii", cid, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">i", len(entries))
    for partition, code, offset in entries:
        body += struct.pack(">ihqq", partition, code, offset, -1)
    body += struct.pack(">i", throttle_time_ms) + extra
    return struct.pack(">i", len(body)) + body


def test_the_courier_reads_and_settles_an_acknowledgement_then_leaves_an_error(link):
    """It reads the responses: an acknowledgement of every batch is settled (its room is
    free: the next request goes before any step); an error is left to the next poll, with
    the request adopted by the step as unanswered."""
    sel, conn = link
    acc = _acc()
    acc.arm_courier(sel.courier_io(), {7: node(50)}, LEADERS, None, None,
                    -1, -1, 1, 1000, None)
    acc.append("t", 0, None, b"a", None, None, None)
    assert _parse_produce_v3(_recv_frame(conn))[0] == 50
    acc.append("t", 0, None, b"b", None, None, None)            # a new batch: the first is sealed
    time.sleep(2 * LINGER_MS / 1000)
    assert acc.courier_sent == 1                                # room 1: it waits for the answer
    conn.sendall(_produce_response_v3(50, "t", [(0, 0, 42)]))
    assert _parse_produce_v3(_recv_frame(conn))[0] == 51        # answered: room for the next
    assert acc.courier_answered == 1
    conn.sendall(_produce_response_v3(51, "t", [(0, 6, -1)]))   # NOT_LEADER_OR_FOLLOWER
    deadline = time.monotonic() + 5
    while not sel.needs_poll():                                 # read and kept for the poll
        assert time.monotonic() < deadline, "the courier did not read the error"
        time.sleep(0.001)
    taken = acc.take_courier_sends(0)
    assert [(r.correlation_id, r.results, [b.record_count for b in r.batches])
            for r in taken] == [(50, [(42, -1)], [1]), (51, None, [1])]
    assert [r.acknowledged for r in taken] == [True, False]
    # The answered request's round trip: written, then its answer read (mono_us instants).
    assert [r.answer_us is None for r in taken] == [False, True]
    assert taken[0].send_us <= taken[0].answer_us <= SenderTurn.now_us()
    assert acc.courier_answered == 1
    received = sel.poll(0).received
    assert received == [(0, _produce_response_v3(51, "t", [(0, 6, -1)])[4:])]


def test_a_throttled_acknowledgement_is_left_to_the_poll_and_the_node_gets_nothing_more(link):
    """Room for two requests: 50 and 51 go. Their answers come together: 50's acknowledges
    its batch with bytes after ThrottleTimeMs (ignored: settled); 51's acknowledges its batch
    but asks for a throttle (ThrottleTimeMs > 0): the step must mute the connection that long
    (KIP-219), so the courier leaves it to the next poll, adopted as unanswered, and writes
    nothing more to the node, though a third batch is due and there is room for it."""
    sel, conn = link
    acc = _acc()
    acc.arm_courier(sel.courier_io(), {7: node(50, max_in_flight=2)}, LEADERS, None, None,
                    -1, -1, 1, 1000, None)
    acc.append("t", 0, None, b"a", None, None, None)
    assert _parse_produce_v3(_recv_frame(conn))[0] == 50
    acc.append("t", 0, None, b"b", None, None, None)            # a new batch: the first is sealed
    assert _parse_produce_v3(_recv_frame(conn))[0] == 51
    acc.append("t", 0, None, b"c", None, None, None)            # due in LINGER_MS, room for one then
    throttled = _produce_response_v3(51, "t", [(0, 0, 43)], throttle_time_ms=250)
    conn.sendall(_produce_response_v3(50, "t", [(0, 0, 42)], extra=b"\x00\x01\x02") + throttled)
    deadline = time.monotonic() + 5
    while not sel.needs_poll():                                 # read and kept for the poll
        assert time.monotonic() < deadline, "the courier did not read the throttled answer"
        time.sleep(0.001)
    conn.settimeout(5 * LINGER_MS / 1000)
    with pytest.raises(socket.timeout):                         # the third batch is not written
        conn.recv(1)
    assert acc.courier_sent == 2 and acc.courier_answered == 1
    taken = acc.take_courier_sends(0)
    assert [(r.correlation_id, r.results, [b.record_count for b in r.batches])
            for r in taken] == [(50, [(42, -1)], [1]), (51, None, [1])]
    assert sel.poll(0).received == [(0, throttled[4:])]


def test_the_step_s_request_in_flight_is_read_and_kept_for_the_poll(link):
    """The step's own request fills the room in flight: the courier reads its response (an
    acknowledgement), keeps it for the next poll, and with the room it freed sends its own
    request, whose acknowledgement it settles."""
    sel, conn = link
    acc = _acc()
    acc.arm_courier(sel.courier_io(), {7: node(60, prior=[(59, 0, 3)])}, LEADERS, None, None,
                    -1, -1, 1, 1000, None)
    acc.append("t", 0, None, b"a", None, None, None)
    time.sleep(2 * LINGER_MS / 1000)
    assert acc.courier_sent == 0                                # the step's request fills it
    answered_after = SenderTurn.now_us()
    conn.sendall(_produce_response_v3(59, "t", [(1, 0, 7)]))
    assert _parse_produce_v3(_recv_frame(conn))[0] == 60
    conn.sendall(_produce_response_v3(60, "t", [(0, 0, 8)]))
    deadline = time.monotonic() + 5
    while acc.courier_answered < 2:
        assert time.monotonic() < deadline, "the courier did not read both answers"
        time.sleep(0.001)
    read_by = SenderTurn.now_us()
    [req] = acc.take_courier_sends(0)
    assert (req.correlation_id, req.results, len(req.batches)) == (60, [(8, -1)], 1)
    assert answered_after <= req.answer_us <= read_by
    time.sleep(0.02)
    polled = sel.poll(0)
    assert polled.received == [(0, _produce_response_v3(59, "t", [(1, 0, 7)])[4:])]
    # The kept frame carries the instant the courier read it, not the poll's (20 ms later).
    [kept_us] = polled.received_us
    assert answered_after <= kept_us <= read_by
