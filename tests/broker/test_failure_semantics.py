"""Java's send() failure contract: once send() has a valid record, every failure settles its
future and calls its on_delivery once, with a RecordMetadata carrying the record's topic and
partition (offset and timestamp -1), for every failure kind; nothing hangs and the other
records still arrive (read back with confluent-kafka's Consumer)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kproducer import Producer, RecordMetadata
from kproducer.aio import AIOProducer
from kproducer.errors import (BufferExhaustedError, DeliveryTimeoutError, InvalidRecordError,
                              KafkaTimeoutError, MetadataTimeoutError, RecordTooLargeError,
                              TopicAuthorizationFailedError)
from kproducer.protocol import versions as v
from kproducer.protocol.errors_table import ErrorCode
from kproducer.testing.mock_cluster import MockCluster
from kproducer.testing.readback import read_back

LIMIT = 4096


class Deliveries:
    """on_delivery callbacks that record every call, thread safe."""

    def __init__(self):
        self.calls: list = []
        self._lock = threading.Lock()

    def cb(self, err, md):
        with self._lock:
            self.calls.append((err, md))

    def wait(self, n: int, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.calls) >= n:
                    return list(self.calls)
            time.sleep(0.01)
        raise AssertionError(f"{len(self.calls)} of {n} callbacks within {timeout} s")


def _assert_failed(fut, calls, cls, topic, partition):
    assert fut.done()
    exc = fut.exception(0)
    assert isinstance(exc, cls), exc
    assert len(calls) == 1, calls
    err, md = calls[0]
    assert err is exc
    assert md == RecordMetadata(topic, partition, -1, -1)
    with pytest.raises(cls):
        fut.result(0)
    return exc


def test_record_too_large_fails_its_future(broker):
    broker.create_topic("big", 2)
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=LIMIT, linger_ms=5) as p:
        # Metadata unknown (the Python path checks the size before waiting), then known
        # (the compiled path: the accumulator refuses it).
        for partition in (None, 1, None):
            d = Deliveries()
            fut = p.send("big", b"x" * LIMIT, partition=partition, on_delivery=d.cb)
            exc = _assert_failed(fut, d.calls, RecordTooLargeError, "big",
                                 -1 if partition is None else partition)
            assert f"max.request.size={LIMIT}" in str(exc) and exc.code == 10
            assert p.send("big", b"fits", partition=0).result(10).offset >= 0
        assert p.metrics()["queued_batches"] == 0
    got = read_back(broker.bootstrap, "big", partitions=[0])
    assert [m.value for m in got[0]] == [b"fits"] * 3


def test_partition_beyond_the_count_waits_then_fails(broker):
    broker.create_topic("two", 2)
    with Producer(bootstrap_servers=broker.bootstrap, max_block_ms=600) as p:
        p.send("two", b"warm", partition=0).result(10)
        d = Deliveries()
        t0 = time.monotonic()
        fut = p.send("two", b"v", partition=5, on_delivery=d.cb)
        assert time.monotonic() - t0 >= 0.5      # Java waits max.block.ms for the partition
        exc = _assert_failed(fut, d.calls, MetadataTimeoutError, "two", 5)
        assert "partition 5 of topic 'two' with partition count 2" in str(exc)
        res = p.send_many("two", [b"a", b"b"], partition=2, on_delivery=d.cb, futures=True)
        assert res.wait(5) and res.failed == 2 and isinstance(res.first_error, MetadataTimeoutError)
        assert [md for _, md in d.calls[1:]] == [RecordMetadata("two", 2, -1, -1)] * 2
        assert all(isinstance(f.exception(0), MetadataTimeoutError) for f in res.futures)
        with pytest.raises(ValueError, match="partition -1 is not in the range"):
            p.send("two", b"v", partition=-1)       # a negative partition is a programming error


def test_metadata_timeout_fails_the_future(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("later", 1)
    proxy.stall(True)           # no broker answers: no metadata
    with Producer(bootstrap_servers=proxy.bootstrap, max_block_ms=500) as p:
        d = Deliveries()
        fut = p.send("later", b"lost", key=b"k", on_delivery=d.cb)
        _assert_failed(fut, d.calls, MetadataTimeoutError, "later", -1)
        assert isinstance(fut.exception(), KafkaTimeoutError) and isinstance(fut.exception(), TimeoutError)
        res = p.send_many("later", [b"a", b"b", b"c"], on_delivery=d.cb)
        assert res.done() and res.failed == 3 and isinstance(res.first_error, MetadataTimeoutError)
        assert [md for _, md in d.calls[1:]] == [RecordMetadata("later", -1, -1, -1)] * 3
        proxy.stall(False)
        assert p.send("later", b"kept").result(20).topic == "later"
    got = read_back(broker.bootstrap, "later")
    assert [m.value for m in got[0]] == [b"kept"]


def test_buffer_exhausted_fails_the_future(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("full", 1)
    with Producer(bootstrap_servers=proxy.bootstrap, buffer_memory=64 * 1024, batch_size=16 * 1024,
                  max_block_ms=300, linger_ms=0, request_timeout_ms=20_000,
                  delivery_timeout_ms=60_000) as p:
        p.send("full", b"warm").result(10)
        proxy.stall(True)          # what is sent is never answered: memory is never freed
        d = Deliveries()
        futs = [p.send("full", b"x" * 4000, on_delivery=d.cb) for _ in range(40)]
        failed = [f for f in futs if f.done() and isinstance(f.exception(0), BufferExhaustedError)]
        assert failed, "buffer.memory never ran out"
        first = futs.index(failed[0])
        assert all(f in failed for f in futs[first:])       # nothing queued once it is full
        calls = [c for c in d.calls if isinstance(c[0], BufferExhaustedError)]
        assert len(calls) == len(failed)
        assert all(md == RecordMetadata("full", -1, -1, -1) for _, md in calls)
        # send_many: the records without memory fail through the result and their callbacks.
        d2 = Deliveries()
        res = p.send_many("full", [b"y" * 4000] * 5, on_delivery=d2.cb, futures=True)
        assert res.failed == 5 and isinstance(res.first_error, BufferExhaustedError)
        assert all(isinstance(f.exception(0), BufferExhaustedError) for f in res.futures)
        assert len(d2.calls) == 5
        proxy.stall(False)
        p.flush(30)
        assert p.send("full", b"after").result(20).offset >= 0
    values = [m.value for m in read_back(broker.bootstrap, "full")[0]]
    assert values[0] == b"warm" and values[-1] == b"after"
    assert len(values) == 2 + first


def test_delivery_timeout_fails_with_topic_and_partition(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("slow", 2)
    with Producer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=500, delivery_timeout_ms=1500,
                  linger_ms=0, retry_backoff_ms=50) as p:
        p.send("slow", b"warm", partition=1).result(10)
        proxy.stall(True)
        d = Deliveries()
        fut = p.send("slow", b"late", partition=1, on_delivery=d.cb)
        err, md = d.wait(1, 30)[0]
        assert isinstance(err, KafkaTimeoutError), err
        assert isinstance(err, DeliveryTimeoutError) or "request" in str(err)
        assert md == RecordMetadata("slow", 1, -1, -1)
        assert fut.exception(0) is err and len(d.calls) == 1
        proxy.stall(False)
        assert p.send("slow", b"again", partition=1).result(20).partition == 1


@pytest.fixture
def mock():
    cluster = MockCluster(3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("code,cls", [
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, TopicAuthorizationFailedError),
    (ErrorCode.INVALID_RECORD, InvalidRecordError),
])
def test_broker_error_fails_the_batch_with_javas_class(mock, code, cls):
    mock.create_topic("refused", 1, replication_factor=3)
    with Producer(bootstrap_servers=mock.bootstrap, linger_ms=0) as p:
        p.send("refused", b"warm").result(10)
        mock.push_request_errors(v.PRODUCE, [int(code)])
        d = Deliveries()
        fut = p.send("refused", b"bad", on_delivery=d.cb)
        err, md = d.wait(1)[0]
        assert type(err) is cls and err.code == int(code) and not err.retriable
        assert md == RecordMetadata("refused", 0, -1, -1)
        assert fut.exception(10) is err and len(d.calls) == 1
        assert p.send("refused", b"next").result(10).offset >= 0
    got = read_back(mock.bootstrap, "refused")
    assert [m.value for m in got[0]] == [b"warm", b"next"]


def test_interceptor_sees_the_failed_records_metadata(broker):
    broker.create_topic("seen", 1)
    acks = []

    class Recorder:
        def on_send(self, record):
            return record

        def on_acknowledgement(self, metadata, error):
            acks.append((metadata, error))

    d = Deliveries()
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=LIMIT,
                  interceptor_classes=[Recorder()]) as p:
        fut = p.send("seen", b"x" * LIMIT, partition=0, on_delivery=d.cb)
        assert isinstance(fut.exception(0), RecordTooLargeError)
    assert acks == [(RecordMetadata("seen", 0, -1, -1), fut.exception(0))]
    assert d.calls == [(fut.exception(0), RecordMetadata("seen", 0, -1, -1))]


def test_aio_send_fails_the_future(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("aio", 1)

    async def main():
        async with AIOProducer(bootstrap_servers=proxy.bootstrap, max_request_size=LIMIT,
                               max_block_ms=500) as p:
            await p.send_and_wait("aio", b"warm")
            d = Deliveries()
            fut = await p.send("aio", b"x" * LIMIT, on_delivery=d.cb)        # compiled path
            _assert_failed(fut, d.calls, RecordTooLargeError, "aio", -1)
            proxy.stall(True)
            d = Deliveries()
            fut = await p.send("never", b"v", on_delivery=d.cb)               # waits on the loop
            _assert_failed(fut, d.calls, MetadataTimeoutError, "never", -1)
            with pytest.raises(MetadataTimeoutError):
                await fut
            proxy.stall(False)
            md = await p.send_and_wait("aio", b"kept")
            assert md.offset >= 0

    asyncio.run(main())
    assert [m.value for m in read_back(broker.bootstrap, "aio")[0]] == [b"warm", b"kept"]
