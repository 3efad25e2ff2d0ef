"""OpenTelemetry tracing of kproducer's sends (``pip install kproducer[otel]``).

::

    from kproducer.otel import KProducerInstrumentor
    KProducerInstrumentor().instrument()          # or: opentelemetry-instrument python app.py

Switched on as the instrumentations of confluent-kafka, kafka-python and aiokafka are (a
``BaseInstrumentor``, registered under the ``opentelemetry_instrumentor`` entry point, so
``opentelemetry-instrument`` finds it), every producer created from then on makes:

- one ``PRODUCER`` span per ``send()``, named ``send <topic>``, started when ``send()`` is
  called (as a child of the caller's current span) and ended when the record is
  acknowledged or fails; attributes after the messaging semantic conventions:
  ``messaging.system=kafka``, ``messaging.destination.name``, ``messaging.operation.type=send``,
  ``messaging.operation.name=send``, ``messaging.client.id``, ``messaging.kafka.message.key``
  (a str key), ``messaging.kafka.message.tombstone`` (a None value), and on acknowledgement
  ``messaging.destination.partition.id`` with ``messaging.kafka.destination.partition``, and
  ``messaging.kafka.offset`` with ``messaging.kafka.message.offset`` (older name). A failed
  record sets the span's status to ERROR, ``error.type`` and records the exception, whether
  it failed in ``send()`` or later;
- one span per ``send_many()`` call (not per record), with ``messaging.batch.message_count``;
- the span's context injected into the record's headers with the global propagator (W3C
  ``traceparent``, and ``tracestate``/``baggage`` as the propagator has them) unless the
  application's headers have a ``traceparent`` already. The application's header list is
  never modified: the record is sent with a new one.

It is built on interceptors (kproducer.interceptors): the instrumentation adds one to every
producer created while it is on and a tracer provider is set. With no tracer provider set
(``opentelemetry-api`` alone, nothing configured) a producer gets none, and its ``send()``
keeps its compiled path: instrumented but not configured costs nothing. Set the tracer
provider before creating producers (``opentelemetry-instrument`` does), or pass
``tracer_provider=`` to ``instrument()``. ``uninstrument()`` stops the spans of every
producer; producers created while instrumented keep their Python send path until closed.
"""

from __future__ import annotations

import logging
import weakref
from typing import Collection, Optional

from opentelemetry import propagate, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.trace import SpanKind, Status, StatusCode

from kproducer import __version__
from kproducer import interceptors as _interceptors

__all__ = ["KProducerInstrumentor"]

log = logging.getLogger("kproducer.otel")

# What instrument() checks is installed before it instruments: nothing, as the instrumented
# library is the package this module is part of (a dependency check of "kproducer" would
# fail where kproducer runs from a zip without its distribution metadata: Spark's --py-files).
_instruments: tuple = ()
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
_TRACEPARENT = "traceparent"


def _tracing_on(provider) -> bool:
    """Whether ``provider`` makes spans: not the API's proxy before a provider is set, nor
    the no-op provider."""
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _has_traceparent(headers) -> bool:
    for pair in headers:
        if pair[0] == _TRACEPARENT:
            return True
    return False


def _injected(span) -> list:
    """The propagator's headers for ``span``'s context, as (str, bytes) pairs."""
    carrier: dict = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return [(k, v.encode()) for k, v in carrier.items()]


def _with_context(headers, span):
    """``headers`` (one record's) plus the span's context; None when nothing is to add (the
    application set a traceparent, or the span has no valid context)."""
    try:
        if headers and _has_traceparent(headers):
            return None
    except Exception:       # malformed headers: the send fails on them, not here
        return None
    extra = _injected(span)
    if not extra:
        return None
    return list(headers) + extra if headers else extra


def _error(span, err: BaseException) -> None:
    span.set_attribute("error.type", type(err).__qualname__)
    span.record_exception(err)
    span.set_status(Status(StatusCode.ERROR, f"{type(err).__name__}: {err}"))


def _partition(span, partition) -> None:
    if isinstance(partition, int) and partition >= 0:
        span.set_attribute("messaging.destination.partition.id", str(partition))
        span.set_attribute("messaging.kafka.destination.partition", partition)


class _TracingInterceptor:
    """The interceptor ``instrument()`` adds to each new producer: a span from send to
    acknowledgement (kproducer.interceptors' private per-record hooks)."""

    def __init__(self, tracer, producer):
        self._tracer = tracer
        self._producer = weakref.ref(producer)
        self.enabled = True

    def _attributes(self, topic) -> dict:
        attrs = {"messaging.system": "kafka", "messaging.destination.name": topic,
                 "messaging.operation.type": "send", "messaging.operation.name": "send"}
        p = self._producer()
        client_id = getattr(p, "client_id", None)
        if client_id:
            attrs["messaging.client.id"] = client_id
        return attrs

    def _kp_on_send(self, record):
        if not self.enabled:
            return record, None
        attrs = self._attributes(record.topic)
        if isinstance(record.key, str):
            attrs["messaging.kafka.message.key"] = record.key
        if record.value is None:
            attrs["messaging.kafka.message.tombstone"] = True
        span = self._tracer.start_span(f"send {record.topic}", kind=SpanKind.PRODUCER, attributes=attrs)
        try:
            _partition(span, record.partition)
            headers = _with_context(record.headers, span)
            if headers is not None:
                record = record._replace(headers=headers)
        except BaseException as exc:        # never leave a span open
            _error(span, exc)
            span.end()
            raise

        def acknowledged(md, err):
            if md is not None:
                _partition(span, md.partition)
                if err is None and md.offset >= 0:
                    span.set_attribute("messaging.kafka.offset", md.offset)
                    span.set_attribute("messaging.kafka.message.offset", md.offset)
            if err is not None:
                _error(span, err)
            span.end()
        return record, acknowledged

    def _kp_on_send_many(self, columns):
        if not self.enabled:
            return columns, None
        attrs = self._attributes(columns.topic)
        try:
            attrs["messaging.batch.message_count"] = len(columns.values)
        except TypeError:
            pass
        span = self._tracer.start_span(f"send {columns.topic}", kind=SpanKind.PRODUCER, attributes=attrs)
        try:
            _partition(span, columns.partition)
            headers = columns.headers
            if headers is None or len(headers) == 0 or isinstance(headers[0], tuple):
                # One header list for every record (send_many's rule): one with the context.
                new = _with_context(headers, span)
                if new is not None:
                    columns = columns._replace(headers=new)
            else:
                extra = _injected(span)
                if extra:
                    columns = columns._replace(headers=[
                        h if h and _has_traceparent(h) else (list(h) + extra if h else extra)
                        for h in headers])
        except BaseException as exc:
            _error(span, exc)
            span.end()
            raise

        def acknowledged(columns, result, err):
            if result is not None and result.failed:
                span.set_attribute("kproducer.send_many.failed_count", result.failed)
            if err is not None:
                _error(span, err)
            span.end()
        return columns, acknowledged


class _Factory:
    """What ``instrument()`` registers with kproducer.interceptors: called for each new
    producer, a tracing interceptor when tracing is on, else None (no interceptor: the
    compiled send path)."""

    def __init__(self, tracer_provider=None):
        self._provider = tracer_provider
        self._made: "weakref.WeakSet[_TracingInterceptor]" = weakref.WeakSet()

    def __call__(self, producer) -> Optional[_TracingInterceptor]:
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        if not _tracing_on(provider):
            return None
        tracer = trace.get_tracer(__name__, __version__, provider, schema_url=_SCHEMA_URL)
        if isinstance(tracer, trace.NoOpTracer):       # e.g. the SDK with OTEL_SDK_DISABLED
            return None
        ic = _TracingInterceptor(tracer, producer)
        self._made.add(ic)
        return ic

    def disable(self) -> None:
        for ic in list(self._made):
            ic.enabled = False


class KProducerInstrumentor(BaseInstrumentor):
    """OpenTelemetry instrumentation of kproducer (see the module docstring).

    ``KProducerInstrumentor().instrument(tracer_provider=None)``: producers created from
    then on trace their sends (with the global tracer provider unless one is given);
    ``uninstrument()`` stops it."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs) -> None:
        factory = _Factory(kwargs.get("tracer_provider"))
        self._kp_factory: Optional[_Factory] = factory
        _interceptors.add_global_factory(factory)

    def _uninstrument(self, **kwargs) -> None:
        factory = getattr(self, "_kp_factory", None)
        if factory is not None:
            _interceptors.remove_global_factory(factory)
            factory.disable()
            self._kp_factory = None
