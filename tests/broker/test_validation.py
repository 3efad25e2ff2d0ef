"""Argument validation of the public Producer API: every bad argument raises a clear,
specific exception naming the problem, and nothing of the failed call is queued.

Settings themselves are covered by tests/unit/test_config.py; this is the matrix of the calls:
``send()``, ``send_many()``, ``flush()``/``close()`` timeouts and every call after
``close()``. A record too large for ``max.request.size`` / ``buffer.memory`` is no
programming error: send() fails its future with RecordTooLargeError, as Java does (and a
partition beyond the topic's count fails it after max.block.ms: tests/broker/test_failure_semantics.py);
send_many() checks every record before queueing any and raises, naming the index. The
producer checks the limits itself because a broker may not (Tansu never does).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kproducer import Producer
from kproducer.errors import KafkaError, RecordTooLargeError
from kproducer.testing import TansuBroker
from kproducer.testing.readback import read_back

TOPIC = "valid"
LIMIT = 4096          # max.request.size of the shared producer


@pytest.fixture(scope="module")
def cluster():
    b = TansuBroker()
    b.start()
    try:
        b.create_topic(TOPIC, 2)
        yield b
    finally:
        b.stop()
    b.check_log()
    b.cleanup()


@pytest.fixture(scope="module")
def producer(cluster):
    # A long linger keeps anything a failed call might have queued in the accumulator,
    # where queued_batches sees it; flush() sends the good records at once.
    p = Producer(bootstrap_servers=cluster.bootstrap, max_request_size=LIMIT, linger_ms=60_000,
                 max_block_ms=10_000)
    p.send(TOPIC, b"warm-up").add_done_callback(lambda f: None)
    p.flush(10)               # metadata known: send() takes the compiled fast path
    yield p
    p.close(10)


def _assert_nothing_queued(p: Producer) -> None:
    assert p.metrics()["queued_batches"] == 0, "a failed call left records queued"


# (id, send() keyword arguments replacing the valid baseline, exception type, message regex)
SEND_CASES = [
    ("topic-int", {"topic": 5}, TypeError, r"topic must be a str, not int"),
    ("topic-none", {"topic": None}, TypeError, r"topic must be a str, not NoneType"),
    ("topic-bytes", {"topic": b"valid"}, TypeError, r"topic must be a str, not bytes"),
    ("topic-empty", {"topic": ""}, ValueError, r"invalid topic name ''"),
    ("topic-250-chars", {"topic": "t" * 250}, ValueError, r"invalid topic name 't{250}': 1..249 characters"),
    ("topic-space", {"topic": "a b"}, ValueError, r"invalid topic name 'a b'.*\[a-zA-Z0-9._-\]"),
    ("topic-slash", {"topic": "a/b"}, ValueError, r"invalid topic name 'a/b'"),
    ("topic-non-ascii", {"topic": "caf\u00e9"}, ValueError, "invalid topic name 'caf\u00e9'"),
    ("topic-dot", {"topic": "."}, ValueError, r"invalid topic name '\.'.*not '\.' or '\.\.'"),
    ("topic-dotdot", {"topic": ".."}, ValueError, r"invalid topic name '\.\.'"),
    ("value-str", {"value": "text"}, TypeError, r"value must be bytes-like or None, not str \(set value_serializer\)"),
    ("value-int", {"value": 5}, TypeError, r"value must be bytes-like or None, not int"),
    ("value-list", {"value": [1, 2]}, TypeError, r"value must be bytes-like or None, not list"),
    ("value-float", {"value": 1.5}, TypeError, r"value must be bytes-like or None, not float"),
    ("key-str", {"key": "k"}, TypeError, r"key must be bytes-like or None, not str \(set key_serializer\)"),
    ("key-int", {"key": 3}, TypeError, r"key must be bytes-like or None, not int"),
    ("key-dict", {"key": {}}, TypeError, r"key must be bytes-like or None, not dict"),
    ("partition-negative", {"partition": -1}, ValueError, r"partition -1 is not in the range \[0...1\] of topic 'valid'"),
    ("partition-str", {"partition": "1"}, TypeError, r"partition must be an int or None, not str"),
    ("partition-float", {"partition": 1.0}, TypeError, r"partition must be an int or None, not float"),
    ("partition-bool", {"partition": True}, TypeError, r"partition must be an int or None, not bool"),
    ("timestamp-str", {"timestamp_ms": "1700000000000"}, TypeError, r"timestamp_ms must be an int .*not str"),
    ("timestamp-float", {"timestamp_ms": 1.7e12}, TypeError, r"timestamp_ms must be an int .*not float"),
    ("timestamp-bool", {"timestamp_ms": True}, TypeError, r"timestamp_ms must be an int .*not bool"),
    ("timestamp-negative", {"timestamp_ms": -1}, ValueError, r"timestamp_ms must be >= 0, got -1"),
    ("timestamp-beyond-int64", {"timestamp_ms": 2**64}, ValueError, r"timestamp_ms 18446744073709551616 is out of range"),
    ("headers-not-sequence", {"headers": 5}, TypeError, r"headers must be a sequence of \(str, bytes \| None\) pairs"),
    ("headers-not-pairs", {"headers": [("k",)]}, TypeError, r"header 0 must be a \(str, bytes \| None\) tuple"),
    ("headers-triple", {"headers": [("k", b"v", b"x")]}, TypeError, r"header 0 must be a \(str, bytes \| None\) tuple"),
    ("header-key-bytes", {"headers": [(b"k", b"v")]}, TypeError, r"header 0 key must be str, not bytes"),
    ("header-key-none", {"headers": [("ok", b"1"), (None, b"v")]}, TypeError, r"header 1 key must be str, not NoneType"),
    ("header-value-str", {"headers": [("k", "v")]}, TypeError, r"header 0 \('k'\) value must be bytes-like or None, not str"),
    ("header-value-int", {"headers": [("k", 5)]}, TypeError, r"header 0 \('k'\) value must be bytes-like or None, not int"),
    ("on-delivery-not-callable", {"on_delivery": 5}, TypeError, r"on_delivery must be callable\(err, metadata\) or None, not int"),
]

# (id, send() keyword arguments, message regex): records send() takes and fails.
TOO_LARGE_CASES = [
    ("value-over-max-request-size", {"value": b"x" * LIMIT},
     rf"the record is {LIMIT + 82} bytes when serialized, larger than max.request.size={LIMIT}"),
    ("key-over-max-request-size", {"key": b"k" * LIMIT},
     rf"the record is \d+ bytes when serialized, larger than max.request.size={LIMIT}"),
    ("headers-over-max-request-size", {"headers": [("h", b"x" * LIMIT)]},
     rf"the record is \d+ bytes when serialized, larger than max.request.size={LIMIT}"),
]


@pytest.mark.parametrize("override,match", [c[1:] for c in TOO_LARGE_CASES], ids=[c[0] for c in TOO_LARGE_CASES])
def test_send_fails_a_record_too_large(producer, override, match):
    called = []
    fut = producer.send(TOPIC, **{"value": b"v", **override}, on_delivery=lambda err, md: called.append((err, md)))
    with pytest.raises(RecordTooLargeError, match=match):
        fut.result(0)
    _assert_nothing_queued(producer)
    assert called == [(fut.exception(0), (TOPIC, -1, -1, -1))]


@pytest.mark.parametrize("override,exc,match", [c[1:] for c in SEND_CASES], ids=[c[0] for c in SEND_CASES])
def test_send_rejects(producer, override, exc, match):
    kwargs = {"topic": TOPIC, "value": b"v", "key": None, "partition": None, "timestamp_ms": None, "headers": None,
                  "on_delivery": None}
    kwargs.update(override)
    called = []
    if kwargs["on_delivery"] is None:
        kwargs["on_delivery"] = lambda err, md: called.append(err)
    with pytest.raises(exc, match=match):
        producer.send(**kwargs)
    _assert_nothing_queued(producer)
    assert not called, "a rejected record must not reach its callback"


@pytest.mark.parametrize("override,exc,match", [
    ({"value": 5}, TypeError, r"value must be bytes-like or None, not int"),
    ({"partition": "0"}, TypeError, r"partition must be an int or None, not str"),
    ({"timestamp_ms": 1.5}, TypeError, r"timestamp_ms must be an int .*not float"),
    ({"on_delivery": "print"}, TypeError, r"on_delivery must be callable"),
    ({"headers": [(1, b"v")]}, TypeError, r"header 0 key must be str, not int"),
    ({"topic": "bad topic"}, ValueError, r"invalid topic name 'bad topic'"),
], ids=["value", "partition", "timestamp", "on_delivery", "header", "topic"])
def test_send_rejects_before_waiting_for_metadata(cluster, override, exc, match):
    """On a topic without metadata yet (the Python slow path), bad arguments raise at once
    rather than after a metadata round trip (or max.block.ms against a dead broker)."""
    with Producer(bootstrap_servers="127.0.0.1:1", max_block_ms=60_000) as p:
        kwargs = {"topic": "never-fetched", "value": b"v"}
        kwargs.update(override)
        with pytest.raises(exc, match=match):
            p.send(**kwargs)
        _assert_nothing_queued(p)
        p.close(0)


def test_serializer_output_is_checked(cluster):
    with Producer(bootstrap_servers=cluster.bootstrap, value_serializer=lambda v: v * 2) as p, \
            pytest.raises(TypeError, match=r"value must be bytes-like or None, not int"):
        p.send(TOPIC, 21)


# (id, send_many() arguments after the topic, exception type, message regex)
SEND_MANY_CASES = [
    ("values-none", {"values": None}, TypeError, r"values must be a sequence, not None"),
    ("values-int", {"values": 5}, TypeError, r"values and keys must be sequences"),
    ("values-single-bytes", {"values": b"one"}, TypeError, r"values must be a sequence of records.*not a single bytes"),
    ("values-element", {"values": [b"a", 5]}, TypeError, r"values\[1\] must be bytes or None, not int"),
    ("values-element-str", {"values": [b"a", b"b", "c"]}, TypeError, r"values\[2\] is a str"),
    ("values-numpy-float", {"values": np.zeros(2)}, TypeError, r"values: NumPy arrays of dtype float64 are not bytes"),
    ("values-arrow-int", {"values": pa.array([1, 2])}, TypeError, r"values: Arrow arrays of type int64 are not binary"),
    ("keys-length", {"values": [b"a", b"b"], "keys": [b"k"]}, ValueError, r"1 keys for 2 values"),
    ("keys-element", {"values": [b"a", b"b"], "keys": [b"k", 7]}, TypeError, r"keys\[1\] must be bytes or None, not int"),
    ("timestamps-length", {"values": [b"a", b"b"], "timestamps": [1, 2, 3]}, ValueError, r"3 timestamps for 2 values"),
    ("timestamps-element", {"values": [b"a", b"b"], "timestamps": [1, "x"]}, TypeError, r"timestamps\[1\] must be an int >= 0"),
    ("timestamps-element-negative", {"values": [b"a", b"b"], "timestamps": [1, -3]}, TypeError, r"timestamps\[1\] must be an int >= 0"),
    ("timestamps-negative", {"values": [b"a"], "timestamps": -5}, ValueError, r"timestamps must be >= 0 \(ms\), got -5"),
    ("timestamps-str", {"values": [b"a"], "timestamps": "5"}, TypeError, r"timestamps must be an int \(ms\) or a sequence of them, not str"),
    ("timestamps-float", {"values": [b"a"], "timestamps": 1.5}, TypeError, r"timestamps must be an int or a sequence"),
    ("timestamps-bool", {"values": [b"a"], "timestamps": True}, TypeError, r"timestamps must be .*not bool"),
    ("timestamps-array-float", {"values": [b"a"], "timestamps": np.array([1.5])}, TypeError,
     r"timestamps array must be 1-dimensional of integers"),
    ("timestamps-array-negative", {"values": [b"a", b"b"], "timestamps": np.array([5, -1])}, ValueError,
     r"timestamps\[1\] must be >= 0 \(ms\), got -1"),
    ("headers-length", {"values": [b"a", b"b"], "headers": [[("h", b"1")]]}, ValueError, r"1 header lists for 2 values"),
    ("headers-element", {"values": [b"a", b"b"], "headers": [[("h", b"1")], [(1, b"x")]]}, TypeError,
     r"record 1: header 0 key must be str, not int"),
    ("headers-shared-bad-value", {"values": [b"a", b"b"], "headers": [("h", "text")]}, TypeError,
     r"header 0 \('h'\) value must be bytes-like or None, not str"),
    ("partition-str", {"values": [b"a"], "partition": "0"}, TypeError, r"partition must be an int or None, not str"),
    ("partition-negative", {"values": [b"a"], "partition": -2}, ValueError, r"partition -2 is not in the range \[0...1\]"),
    ("on-delivery-not-callable", {"values": [b"a"], "on_delivery": 3}, TypeError, r"on_delivery must be callable"),
    ("oversized-value", {"values": [b"a", b"x" * LIMIT]}, RecordTooLargeError,
     rf"record 1: the record is {LIMIT + 82} bytes when serialized, larger than max.request.size={LIMIT}"),
    ("oversized-key", {"values": [b"a", b"b", None], "keys": [None, None, b"k" * LIMIT]}, RecordTooLargeError,
     rf"record 2: the record is \d+ bytes .*max.request.size={LIMIT}"),
    ("oversized-numpy", {"values": np.array([b"a", b"y" * LIMIT], dtype="S")}, RecordTooLargeError,
     rf"record 1: the record is {LIMIT + 82} bytes"),
    ("oversized-arrow", {"values": pa.array([b"a", b"b", b"z" * LIMIT])}, RecordTooLargeError,
     rf"record 2: the record is {LIMIT + 82} bytes"),
    ("oversized-arrow-slice", {"values": pa.array([b"z" * LIMIT, b"a", b"b" * LIMIT]).slice(1)}, RecordTooLargeError,
     rf"record 1: the record is {LIMIT + 82} bytes"),
    ("oversized-shared-headers", {"values": [b"a", b"b"], "headers": [("h", b"x" * LIMIT)]}, RecordTooLargeError,
     r"record 0: the record is \d+ bytes"),
    ("oversized-own-headers", {"values": [b"a", b"b"], "headers": [None, [("h", b"x" * LIMIT)]]}, RecordTooLargeError,
     r"record 1: the record is \d+ bytes"),
]


@pytest.mark.parametrize("kwargs,exc,match", [c[1:] for c in SEND_MANY_CASES], ids=[c[0] for c in SEND_MANY_CASES])
def test_send_many_rejects_before_queueing_anything(producer, kwargs, exc, match):
    kwargs = dict(kwargs)
    values = kwargs.pop("values")
    with pytest.raises(exc, match=match):
        producer.send_many(TOPIC, values, **kwargs)
    _assert_nothing_queued(producer)


def test_oversized_is_fine_below_the_limit(producer):
    """The check is exact enough not to refuse what fits: a record just under the limit."""
    fut = producer.send(TOPIC, b"x" * (LIMIT - 82), partition=0)
    res = producer.send_many(TOPIC, [b"y" * (LIMIT - 82)], partition=0)
    producer.flush(10)
    assert fut.exception() is None and res.acked == 1


def test_record_over_buffer_memory(cluster):
    with Producer(bootstrap_servers=cluster.bootstrap, buffer_memory=3000, batch_size=1000) as p:
        with pytest.raises(RecordTooLargeError, match=r"the record is \d+ bytes .*larger than buffer.memory=3000"):
            p.send(TOPIC, b"x" * 3000).result(0)
        with pytest.raises(RecordTooLargeError, match=r"record 0: .*larger than buffer.memory=3000"):
            p.send_many(TOPIC, [b"x" * 3000])
        assert p.send(TOPIC, b"fits").result(10).topic == TOPIC


@pytest.mark.parametrize("method", ["flush", "close"])
@pytest.mark.parametrize("timeout,exc,match", [
    ("5", TypeError, r"timeout must be a number of seconds or None, not str"),
    (True, TypeError, r"timeout must be a number of seconds or None, not bool"),
    (-1, ValueError, r"timeout must be >= 0 seconds, got -1"),
    (float("nan"), ValueError, r"timeout must be >= 0 seconds, got nan"),
], ids=["str", "bool", "negative", "nan"])
def test_bad_timeouts(producer, method, timeout, exc, match):
    with pytest.raises(exc, match=rf"{method}: {match}"):
        getattr(producer, method)(timeout)
    # A refused close() leaves the producer open and working.
    assert producer.send(TOPIC, b"after-bad-timeout", partition=1) is not None
    producer.flush(10)


@pytest.mark.parametrize("call", [
    lambda p: p.send(TOPIC, b"late"),
    lambda p: p.send(TOPIC, b"late", key=b"k", partition=0),
    lambda p: p.send_many(TOPIC, [b"late"]),
    lambda p: p.flush(),
    lambda p: p.partitions_for(TOPIC),
], ids=["send", "send-keyed", "send_many", "flush", "partitions_for"])
def test_calls_after_close_raise(cluster, call):
    p = Producer(bootstrap_servers=cluster.bootstrap)
    p.send(TOPIC, b"before-close").result(10)
    p.close(10)
    with pytest.raises(KafkaError, match=r"the producer is closed"):
        call(p)
    p.close()                                       # closing again is a no-op, as in Java
    assert p.metrics()["queued_batches"] == 0        # metrics stay readable, as in Java


def test_only_good_records_reached_the_broker(cluster, producer):
    """Last in this module: everything the matrix refused is absent from the topic."""
    producer.send(TOPIC, b"final", partition=0)
    producer.flush(10)
    got = read_back(cluster.bootstrap, TOPIC, timeout=60)
    values = sorted(m.value for msgs in got.values() for m in msgs)
    assert b"final" in values and b"warm-up" in values
    allowed = {b"final", b"warm-up", b"after-bad-timeout", b"before-close", b"fits",
               b"x" * (LIMIT - 82), b"y" * (LIMIT - 82)}
    assert set(values) <= allowed, set(values) - allowed
