"""Producer.purge() as confluent-kafka's (librdkafka's rd_kafka_purge): records not yet
sent, and those whose request awaits an answer, fail with PurgedError through their future
and callback; with idempotence, records sent afterwards are accepted and read back in order."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kproducer import Producer, RecordMetadata
from kproducer.aio import AIOProducer
from kproducer.errors import KafkaError, PurgedError
from kproducer.testing.readback import read_back


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"not {what} within {timeout} s")


class Deliveries:
    def __init__(self):
        self.calls: list = []
        self._lock = threading.Lock()

    def cb(self, err, md):
        with self._lock:
            self.calls.append((err, md))


def _stalled_backlog(p: Producer, proxy, topic: str, d: Deliveries, n: int = 30):
    """Warm up, stall the proxy, then send ``n`` records: the first ones go in flight (never
    answered), the rest queue behind them (max.in.flight 1)."""
    assert p.send(topic, b"warm").result(20).offset == 0
    proxy.stall(True)
    futs = [p.send(topic, b"%d" % i, key=b"k", on_delivery=d.cb) for i in range(n)]
    _wait_for(lambda: p.metrics()["requests"] >= 2, 10, "a request in flight")
    return futs


def test_purge_queued_and_in_flight_then_send_in_order(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("purged", 1)
    d = Deliveries()
    with Producer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True, linger_ms=0,
                  batch_size=64, max_in_flight_requests_per_connection=1,
                  request_timeout_ms=30_000) as p:
        futs = _stalled_backlog(p, proxy, "purged", d)
        pid_before = p.metrics()["producer_id"]
        p.purge()
        assert all(f.done() for f in futs)
        errors = [f.exception(0) for f in futs]
        assert all(isinstance(e, PurgedError) and not e.retriable for e in errors)
        in_flight = [e.in_flight for e in errors]
        assert True in in_flight and False in in_flight, in_flight
        # In send order: what went out first was in flight, the rest queued.
        assert in_flight == sorted(in_flight, reverse=True)
        assert len(d.calls) == len(futs)
        assert all(md == RecordMetadata("purged", 0, -1, -1) for _, md in d.calls)
        assert p.metrics()["queued_batches"] == 0
        proxy.stall(False)
        after = [p.send("purged", b"after-%d" % i, key=b"k") for i in range(20)]
        p.flush(30)
        offsets = [f.result(0).offset for f in after]
        assert offsets == sorted(offsets)
        assert p.metrics()["producer_id"] != pid_before      # a new id after the in-flight purge
    values = [m.value for m in read_back(broker.bootstrap, "purged")[0]]
    assert values[0] == b"warm"
    later = [x for x in values if x.startswith(b"after-")]
    assert later == [b"after-%d" % i for i in range(20)]
    # The queued ones never reached the broker; those purged in flight may have (their
    # requests were written), each at most once, before the later records.
    queued = {b"%d" % i for i, e in enumerate(errors) if not e.in_flight}
    assert not queued & set(values)
    early = values[1:values.index(b"after-0")]
    assert len(early) == len(set(early))


def test_purge_in_queue_only_keeps_what_is_in_flight(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("queue-only", 1)
    d = Deliveries()
    with Producer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True, linger_ms=0,
                  batch_size=64, max_in_flight_requests_per_connection=1,
                  request_timeout_ms=30_000) as p:
        futs = _stalled_backlog(p, proxy, "queue-only", d)
        p.purge(in_queue=True, in_flight=False)
        purged = [f for f in futs if f.done()]
        kept = [f for f in futs if not f.done()]
        assert purged and kept
        assert all(isinstance(f.exception(0), PurgedError) and not f.exception(0).in_flight for f in purged)
        proxy.stall(False)
        p.flush(30)
        assert all(f.exception(0) is None for f in kept)
        kept_values = {f.result(0).offset for f in kept}
        assert len(kept_values) == len(kept)
    values = [m.value for m in read_back(broker.bootstrap, "queue-only")[0]]
    assert len(values) == 1 + len(kept)


def test_purge_not_blocking_and_closed(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("nb", 1)
    d = Deliveries()
    p = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=64,
                 max_in_flight_requests_per_connection=1, request_timeout_ms=30_000)
    futs = _stalled_backlog(p, proxy, "nb", d, 10)
    p.purge(blocking=False)
    _wait_for(lambda: all(f.done() for f in futs), 10, "purged")
    assert all(isinstance(f.exception(0), PurgedError) for f in futs)
    assert len(d.calls) == 10
    p.purge()        # nothing left: does nothing
    proxy.stall(False)
    assert p.send("nb", b"next").result(20).offset >= 1
    p.close(10)
    with pytest.raises(KafkaError, match="closed"):
        p.purge()


def test_aio_purge(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("aio-purge", 1)

    async def main():
        async with AIOProducer(bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=64,
                               max_in_flight_requests_per_connection=1) as p:
            await p.send_and_wait("aio-purge", b"warm")
            proxy.stall(True)
            futs = [await p.send("aio-purge", b"%d" % i) for i in range(10)]
            await p.purge()
            for f in futs:
                with pytest.raises(PurgedError):
                    await f
            proxy.stall(False)
            assert (await p.send_and_wait("aio-purge", b"after")).offset >= 1

    asyncio.run(main())
