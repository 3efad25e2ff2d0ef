"""Shared fixtures, and the test layers (markers registered in pyproject.toml):

- ``unit``: no broker, no child process: pure logic, the codec, the accumulator, the
  partitioner, configuration. ``python -m pytest -m unit`` runs this layer alone in seconds.
- ``broker``: against a real Tansu broker (and Spark, TLS and SASL front ends) on loopback.
- ``resilience``: network faults through the proxy, hostile peers, leaks, soak, fuzzing.

A test is ``resilience`` by its file, else ``broker`` when its file is a broker file, it
uses a broker fixture, or it (or a fixture of it) starts a broker, proxy, gateway, Spark or
a child process itself, else ``unit``.

``broker``: a fresh Tansu broker per test (it starts in milliseconds and
memory storage makes state leak between tests otherwise). After the test the
broker is stopped and its stderr checked: a CRC error or a panic logged by the
broker fails the test even if the client side looked fine.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from pathlib import Path

import pytest

from kproducer.testing import FaultProxy, TansuBroker
from kproducer.testing.broker import free_port


@pytest.fixture
def pipe():
    """``(read end, write end)`` of an os.pipe, closed after the test: a descriptor for a
    SenderTurn to watch."""
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


@contextlib.contextmanager
def _tansu():
    """A fresh Tansu broker; after it stops, its log is checked (a CRC error or a panic
    fails the test) and its files removed."""
    b = TansuBroker()
    b.start()
    try:
        yield b
    finally:
        b.stop()
    b.check_log()
    b.cleanup()


@pytest.fixture
def broker():
    with _tansu() as b:
        yield b


class _MockClusterBroker:
    """librdkafka's mock cluster of three brokers behind the face of a TansuBroker that the
    suites use (``bootstrap``, ``create_topic``), for the suites that run on both."""

    kind = "mock-3"

    def __init__(self):
        from kproducer.testing.mock_cluster import MockCluster
        self.cluster = MockCluster(3)
        self.bootstrap = self.cluster.bootstrap

    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = False) -> None:
        try:
            self.cluster.create_topic(name, partitions, replication_factor=3)
        except Exception:
            if not exist_ok:
                raise

    def consumer_config(self, *, read_committed: bool = False) -> dict:
        return self.cluster.consumer_config(read_committed=read_committed)

    def close(self) -> None:
        self.cluster.close()


@pytest.fixture(params=["tansu", "mock-3"])
def any_broker(request):
    """The suites that run on both broker implementations: a fresh Tansu broker (one node),
    then librdkafka's mock cluster (three brokers; kproducer.testing.mock_cluster: at most
    5 MiB and 100,000 batches kept per partition, so these suites stay below that)."""
    if request.param == "tansu":
        with _tansu() as b:
            b.kind = "tansu"
            b.consumer_config = lambda *, read_committed=False: (
                {"isolation.level": "read_committed"} if read_committed else {})
            yield b
    else:
        b = _MockClusterBroker()
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def proxied_broker(tmp_path):
    """``(broker, proxy)``: a broker behind a FaultProxy. The broker advertises the proxy's
    port, so clients bootstrapped at ``proxy.bootstrap`` reach it only through the proxy."""
    port = free_port()
    proxy = FaultProxy("127.0.0.1", port).start()
    broker = TansuBroker(port=port, advertised_port=proxy.port, log_dir=tmp_path).start()
    try:
        yield broker, proxy
    finally:
        proxy.stop()
        broker.stop()
    broker.check_log()


RESILIENCE_FILES = {"test_faults.py", "test_soak.py", "test_hostile.py", "test_leaks.py",
                    "test_lifecycle.py", "test_fuzz.py", "test_failover.py"}
# Files whose tests all start brokers, proxies, gateways, Spark or other processes.
BROKER_FILES = {"test_aio.py", "test_bench.py", "test_build.py", "test_end_to_end.py", "test_proxy.py",
                "test_readback.py", "test_mock_cluster.py", "test_sasl.py", "test_selector.py", "test_selector_tls.py",
                "test_spark.py", "test_spark_sink.py", "test_tls.py", "test_transactions.py",
                "test_wheel.py"}
BROKER_FIXTURES = {"broker", "any_broker", "proxied_broker", "spark"}
# In the other files, a test (or one of its fixtures) that does one of these is a broker test.
_OUTSIDE_PARTS = ("TansuBroker(", "FaultProxy(", "SaslGateway(", "MockCluster(", "subprocess.", "os.fork(",
                  "SparkSession", "local_session(", "multiprocessing")
_source_cache: dict = {}


def _starts_outside_parts(item) -> bool:
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        funcs += [d.func for defs in info.name2fixturedefs.values() for d in defs]
    for fn in funcs:
        if fn is None:
            continue
        if fn not in _source_cache:
            try:
                src = inspect.getsource(fn)
            except (OSError, TypeError):
                src = ""
            _source_cache[fn] = any(word in src for word in _OUTSIDE_PARTS)
        if _source_cache[fn]:
            return True
    return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = Path(str(item.fspath)).name
        if name in RESILIENCE_FILES:
            item.add_marker(pytest.mark.resilience)
        elif (name in BROKER_FILES or BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
              or _starts_outside_parts(item)):
            item.add_marker(pytest.mark.broker)
        else:
            item.add_marker(pytest.mark.unit)
