"""kproducer.otel's KProducerInstrumentor: the entry point opentelemetry-instrument finds,
and nothing at all added (the compiled send path kept) when no tracer provider is set or
nothing is instrumented. Spans against the broker: tests/broker/test_otel.py."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # noqa: E402

from kproducer import Producer  # noqa: E402
from kproducer import interceptors as kp_interceptors  # noqa: E402
from kproducer.otel import KProducerInstrumentor  # noqa: E402

BS = "127.0.0.1:1"
ROOT = Path(__file__).resolve().parents[2]


def test_an_instrumentor_opentelemetry_instrument_finds():
    assert issubclass(KProducerInstrumentor, BaseInstrumentor)
    assert KProducerInstrumentor().instrumentation_dependencies() == ()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]["opentelemetry_instrumentor"]
    assert declared == {"kproducer": "kproducer.otel:KProducerInstrumentor"}
    ep = metadata.EntryPoint("kproducer", declared["kproducer"], "opentelemetry_instrumentor")
    assert ep.load() is KProducerInstrumentor
    assert project["optional-dependencies"]["otel"][0].startswith("opentelemetry-api")
    # What opentelemetry-instrument reads: the installed distribution's entry points (an
    # install made before the entry point was declared has none at all).
    if metadata.distribution("kproducer").entry_points:
        eps = [e for e in metadata.entry_points(group="opentelemetry_instrumentor") if e.name == "kproducer"]
        assert len(eps) == 1 and eps[0].load() is KProducerInstrumentor


def test_instrumented_without_a_tracer_provider_keeps_the_compiled_path():
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)   # none set here
    inst = KProducerInstrumentor()
    inst.instrument()
    try:
        assert kp_interceptors._global_factories
        p = Producer(bootstrap_servers=BS)
        try:
            assert p._interceptors is None and p._send_path.needs_python is False
        finally:
            p.close(0)
    finally:
        inst.uninstrument()
    assert not kp_interceptors._global_factories


def test_not_instrumented_nothing_is_added():
    p = Producer(bootstrap_servers=BS)
    try:
        assert p._interceptors is None and p._send_path.needs_python is False
    finally:
        p.close(0)
