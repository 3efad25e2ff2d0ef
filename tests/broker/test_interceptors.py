"""Interceptors (kproducer.interceptors) in a producer against the broker: Java's
ProducerInterceptor contract on send() (on_send before serialization and partitioning,
on_acknowledgement before the record's callback on the completing thread, send() failures
routed to it, exceptions logged and swallowed), once per call on send_many(), and in the
task's context on kproducer.aio. The setting: tests/unit/test_interceptor_setting.py."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading

import pytest

from kproducer import KafkaError, Producer, RecordMetadata
from kproducer.interceptors import ProducerRecord, SendManyColumns
from kproducer.testing.readback import read_back

from _interceptor_recorder import Recorder


def _all(got):
    return [m for msgs in got.values() for m in sorted(msgs, key=lambda m: m.offset)]


# -- send() ----------------------------------------------------------------------------------


def test_on_send_runs_first_in_order_before_serialization(broker):
    broker.create_topic("ic", 2)
    calls = []

    class Upper:
        def on_send(self, record):
            calls.append(("upper", record))
            return record._replace(value=record.value.upper(), partition=1)

    class Tag:
        def on_send(self, record):
            calls.append(("tag", record))
            return record._replace(headers=list(record.headers or []) + [("tag", b"t")])

    serialized = []

    def value_ser(v):
        serialized.append(v)
        return v.encode()
    hdrs = [("app", b"a")]
    with Producer(bootstrap_servers=broker.bootstrap, value_serializer=value_ser,
                  interceptor_classes=[Upper(), Tag()]) as p:
        md = p.send("ic", "hello", headers=hdrs).result(10)
        assert md.partition == 1
    assert calls[0] == ("upper", ProducerRecord("ic", "hello", None, None, None, hdrs))
    assert calls[1][1].value == "HELLO" and calls[1][1].partition == 1   # the previous one's record
    assert serialized == ["HELLO"]                                       # serialized after on_send
    assert hdrs == [("app", b"a")]
    (m,) = _all(read_back(broker.bootstrap, "ic"))
    assert (m.partition, m.value, m.headers) == (1, b"HELLO", [("app", b"a"), ("tag", b"t")])


def test_on_acknowledgement_before_the_callback_on_the_completing_thread(broker):
    broker.create_topic("ack", 1)
    log: list = []
    user = []
    a, b = Recorder("a", log), Recorder("b", log)
    with Producer(bootstrap_servers=broker.bootstrap, interceptor_classes=[a, b]) as p:
        fut = p.send("ack", b"v", key=b"k",
                     on_delivery=lambda err, md: user.append((err, md, threading.get_ident())))
        p.flush(10)
        md = fut.result(0)
        deadline = threading.Event()
        for _ in range(100):
            if user:
                break
            deadline.wait(0.05)
    sends = [e for e in log if e[1] == "send"]
    acks = [e for e in log if e[1] == "ack"]
    assert [e[0] for e in sends] == ["a", "b"] and all(e[3] == threading.get_ident() for e in sends)
    assert [e[0] for e in acks] == ["a", "b"]
    assert all(e[2] == (md, None) for e in acks)
    assert user == [(None, md, acks[0][3])]          # the callback after, on the same thread
    assert log.index(acks[1]) > log.index(acks[0])


def test_interceptor_exceptions_are_logged_and_swallowed(broker, caplog):
    broker.create_topic("boom", 1)

    class Raises:
        def on_send(self, record):
            raise RuntimeError("on_send boom")

        def on_acknowledgement(self, md, err):
            raise RuntimeError("ack boom")

    class ReturnsNone:
        def on_send(self, record):
            return None

    after = Recorder("after")
    caplog.set_level(logging.WARNING, logger="kproducer.interceptors")
    acked = []
    with Producer(bootstrap_servers=broker.bootstrap,
                  interceptor_classes=[Raises(), ReturnsNone(), after]) as p:
        md = p.send("boom", b"v", on_delivery=lambda e, m: acked.append((e, m))).result(10)
        p.flush(10)
    assert md.offset == 0
    # The next interceptor got the record as it was: neither the raise nor the None changed it.
    assert after.log[0][2] == ProducerRecord("boom", b"v", None, None, None, None)
    assert after.log[1][2] == (md, None)
    text = caplog.text
    assert "on_send boom" in text and "ack boom" in text and "not a ProducerRecord" in text
    assert acked == [(None, md)]


def test_send_failure_goes_to_on_acknowledgement(broker):
    broker.create_topic("fail", 2)
    rec = Recorder()
    called = []
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=1000,
                  interceptor_classes=[rec]) as p:
        # Taken and failed (Java's send()): on_acknowledgement, then the application's callback.
        fut = p.send("fail", b"x" * 5000, partition=1, on_delivery=lambda e, m: called.append(e))
        with pytest.raises(KafkaError, match="larger than max.request.size"):
            fut.result(0)
        # Programming errors raise: on_acknowledgement only (Java's onSendError).
        with pytest.raises(ValueError):
            p.send("fail", b"x", partition=-7)              # no such partition
        with pytest.raises(TypeError):
            p.send("fail", 12345)                            # not bytes, no serializer
    acks = [e[2] for e in rec.log if e[1] == "ack"]
    assert len(acks) == 3
    (md0, err0), (md1, err1), (md2, err2) = acks
    assert md0 == RecordMetadata("fail", 1, -1, -1) and "max.request.size" in str(err0)
    assert md1 == RecordMetadata("fail", -7, -1, -1) and isinstance(err1, ValueError)
    assert md2 == RecordMetadata("fail", -1, -1, -1) and isinstance(err2, TypeError)
    assert called == [err0]          # only the record send() took reaches its callback


def test_failed_delivery_reaches_on_acknowledgement_with_topic_and_partition(broker):
    broker.create_topic("late", 3)
    rec = Recorder()
    user = []
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=60_000, interceptor_classes=[rec])
    p.send("late", b"warm", partition=2)      # waits for its linger: still pending at close
    p.send("late", b"v", partition=2, on_delivery=lambda e, m: user.append((e, m)))
    p.close(timeout=0)
    acks = [e[2] for e in rec.log if e[1] == "ack"]
    assert len(acks) == 2
    for md, err in acks:
        assert isinstance(err, KafkaError) and md == RecordMetadata("late", 2, -1, -1)
    # The callback as without interceptors: Java's failed metadata.
    assert len(user) == 1 and user[0][1] == RecordMetadata("late", 2, -1, -1)


# -- send_many() -----------------------------------------------------------------------------


class ManyRecorder:
    def __init__(self):
        self.log = []

    def on_send_many(self, columns):
        self.log.append(("send_many", columns, threading.get_ident()))
        return columns._replace(headers=[("many", b"1")])

    def on_acknowledgement_many(self, columns, result, error):
        self.log.append(("ack_many", (columns, result, error), threading.get_ident()))


def test_send_many_calls_interceptors_once_per_call(broker):
    broker.create_topic("bulk", 2)
    many, per_record = ManyRecorder(), Recorder()
    values = [b"v%d" % i for i in range(1000)]
    with Producer(bootstrap_servers=broker.bootstrap, interceptor_classes=[many, per_record]) as p:
        res = p.send_many("bulk", values, timestamps=1_700_000_000_000)
        assert res.wait(30)
        p.flush(10)
        for _ in range(100):
            if len(many.log) == 2:
                break
            threading.Event().wait(0.05)
    assert [e[0] for e in many.log] == ["send_many", "ack_many"]
    cols = many.log[0][1]
    assert cols == SendManyColumns("bulk", values, None, None, 1_700_000_000_000, None)
    columns, result, error = many.log[1][1]
    assert result is res and error is None and res.acked == 1000
    assert columns.headers == [("many", b"1")]        # what on_send_many returned
    assert per_record.log == []                        # per-record hooks: send() only
    got = _all(read_back(broker.bootstrap, "bulk"))
    assert len(got) == 1000 and all(m.headers == [("many", b"1")] for m in got)


def test_send_many_failure_goes_to_on_acknowledgement_many(broker):
    broker.create_topic("bulkfail", 1)
    many = ManyRecorder()
    with Producer(bootstrap_servers=broker.bootstrap, interceptor_classes=[many]) as p:
        with pytest.raises(ValueError):
            p.send_many("bulkfail", [b"a", b"b"], partition=-5)
    (name, (columns, result, error), _) = many.log[1]
    assert name == "ack_many" and result is None and isinstance(error, ValueError)
    assert columns.topic == "bulkfail"


# -- asyncio ---------------------------------------------------------------------------------


def test_aio_send_runs_interceptors_in_the_tasks_context(broker):
    from kproducer.aio import AIOProducer
    broker.create_topic("aio-ic", 1)
    var = contextvars.ContextVar("var", default=None)
    seen = []

    class SeesContext:
        def on_send(self, record):
            seen.append(var.get())
            return record

    async def main():
        async with AIOProducer(bootstrap_servers=broker.bootstrap, interceptor_classes=[SeesContext()]) as p:
            var.set("task-value")
            fut = await p.send("aio-ic", b"v")
            md = await fut
            res = await p.send_many("aio-ic", [b"a", b"b"])
            await res
            return md
    md = asyncio.run(main())
    assert md.offset == 0 and seen == ["task-value"]
