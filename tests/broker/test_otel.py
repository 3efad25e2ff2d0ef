"""OpenTelemetry (kproducer.otel) against the broker: a PRODUCER span per send() and per
send_many() call after the messaging semantic conventions, W3C traceparent in the record's
headers (read back with confluent's Consumer from the test broker), error status on
failure, no spans once uninstrumented. The instrumentor itself:
tests/unit/test_otel_instrumentor.py."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402

from kproducer import KafkaError, Producer  # noqa: E402
from kproducer.otel import KProducerInstrumentor  # noqa: E402
from kproducer.testing.readback import read_back  # noqa: E402


@pytest.fixture
def exporter():
    """An SDK tracer provider with an in-memory exporter, given to instrument() (the global
    provider can be set only once per process)."""
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    inst = KProducerInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        yield exp, provider
    finally:
        inst.uninstrument()


def _spans(exp, n, timeout=10.0):
    """The finished spans once there are ``n`` (the I/O thread ends them as records settle)."""
    deadline = time.monotonic() + timeout
    while len(exp.get_finished_spans()) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return list(exp.get_finished_spans())


def _all(got):
    return [m for msgs in got.values() for m in sorted(msgs, key=lambda m: m.offset)]


def _traceparent(span) -> bytes:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}".encode()


def test_send_span_attributes_and_traceparent_read_back(broker, exporter):
    exp, provider = exporter
    broker.create_topic("traced", 2)
    tracer = provider.get_tracer("app")
    app_headers = [("app", b"1")]
    with tracer.start_as_current_span("handler") as parent:
        with Producer(bootstrap_servers=broker.bootstrap, client_id="otel-test", key_serializer=str.encode) as p:
            md = p.send("traced", b"v", key="user-1", partition=1, headers=app_headers).result(10)
            p.flush(10)
    assert app_headers == [("app", b"1")]                  # the application's list untouched
    spans = [s for s in _spans(exp, 2) if s.name == "send traced"]
    assert len(spans) == 1
    span = spans[0]
    assert span.kind is SpanKind.PRODUCER
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.status.status_code is StatusCode.UNSET
    a = dict(span.attributes)
    assert a["messaging.system"] == "kafka"
    assert a["messaging.destination.name"] == "traced"
    assert a["messaging.operation.type"] == "send" and a["messaging.operation.name"] == "send"
    assert a["messaging.client.id"] == "otel-test"
    assert a["messaging.kafka.message.key"] == "user-1"
    assert a["messaging.destination.partition.id"] == "1" and a["messaging.kafka.destination.partition"] == 1
    assert a["messaging.kafka.message.offset"] == md.offset == a["messaging.kafka.offset"]
    # Read back with confluent's Consumer: the span's context is in the record's headers.
    (m,) = _all(read_back(broker.bootstrap, "traced"))
    headers = dict(m.headers)
    assert [k for k, _ in m.headers][:1] == ["app"]
    assert headers["traceparent"] == _traceparent(span)
    extracted = TraceContextTextMapPropagator().extract({"traceparent": headers["traceparent"].decode()})
    assert trace.get_current_span(extracted).get_span_context().span_id == span.get_span_context().span_id


def test_an_application_traceparent_is_kept(broker, exporter):
    exp, _ = exporter
    broker.create_topic("own-tp", 1)
    own = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        p.send("own-tp", b"v", headers=[("traceparent", own)]).result(10)
    (m,) = _all(read_back(broker.bootstrap, "own-tp"))
    assert m.headers == [("traceparent", own)]
    assert len(_spans(exp, 1)) == 1


def test_failure_sets_error_status(broker, exporter):
    exp, _ = exporter
    broker.create_topic("tfail", 1)
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=60_000, max_request_size=2000)
    with pytest.raises(KafkaError, match="max.request.size"):
        p.send("tfail", b"x" * 10_000).result(0)       # fails in send(): a failed future
    fut = p.send("tfail", b"v")                        # fails later: closed before its linger
    p.close(timeout=0)
    assert isinstance(fut.exception(10), KafkaError)
    spans = _spans(exp, 2)
    assert len(spans) == 2
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"]
        assert [e.name for e in span.events] == ["exception"]
    assert spans[1].attributes["messaging.kafka.destination.partition"] == 0
    assert "messaging.kafka.offset" not in spans[1].attributes


def test_one_span_per_send_many_call(broker, exporter):
    exp, _ = exporter
    broker.create_topic("traced-many", 3)
    values = [b"v%d" % i for i in range(500)]
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        res = p.send_many("traced-many", values, headers=[("app", b"1")])
        assert res.wait(30) and res.acked == 500
        per = p.send_many("traced-many", [b"a", b"b"], headers=[[("x", b"1")], None])
        assert per.wait(30)
    spans = _spans(exp, 2)
    assert [s.name for s in spans] == ["send traced-many", "send traced-many"]
    assert spans[0].attributes["messaging.batch.message_count"] == 500
    assert spans[0].kind is SpanKind.PRODUCER and spans[0].status.status_code is StatusCode.UNSET
    got = _all(read_back(broker.bootstrap, "traced-many"))
    tps = {dict(m.headers)["traceparent"] for m in got}
    assert tps == {_traceparent(spans[0]), _traceparent(spans[1])}
    assert sum(1 for m in got if m.value in (b"a", b"b") and dict(m.headers).get("x")) == 1


def test_uninstrument_stops_the_spans(broker):
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    inst = KProducerInstrumentor()
    inst.instrument(tracer_provider=provider)
    broker.create_topic("off", 1)
    try:
        with Producer(bootstrap_servers=broker.bootstrap) as p:
            p.send("off", b"a").result(10)
            inst.uninstrument()
            p.send("off", b"b").result(10)
            with Producer(bootstrap_servers=broker.bootstrap) as q:
                assert q._interceptors is None
                q.send("off", b"c").result(10)
    finally:
        inst.uninstrument()
    assert len(_spans(exp, 1)) == 1
    got = _all(read_back(broker.bootstrap, "off"))
    assert ["traceparent" in dict(m.headers) for m in got] == [True, False, False]
