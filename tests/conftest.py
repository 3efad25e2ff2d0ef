"""Shared fixtures, and the test layers (markers registered in pyproject.toml), one folder
each; a test's marker is its folder's name:

- ``tests/unit`` (``unit``): no broker, no child process: pure logic, the codec, the
  accumulator, the partitioner, configuration. ``python -m pytest tests/unit`` (or
  ``-m unit``) runs this layer alone in seconds.
- ``tests/broker`` (``broker``): against a real Tansu broker (and Spark, TLS and SASL front
  ends) on loopback, or running a child process.
- ``tests/resilience`` (``resilience``): network faults through the proxy, hostile peers,
  leaks, soak, fuzzing.

A test in ``tests/unit`` that uses a broker fixture, or that starts a broker, proxy,
gateway, Spark or a child process (in its own source, a fixture's, or a function or class
of its module that either names) is a collection error that says to move it. Test files
outside the three folders are collection errors too. Helpers that several test modules
import live beside this file (``tests/_*.py``; pyproject's ``pythonpath`` puts tests/ on
``sys.path``).

``broker``: a fresh Tansu broker per test (it starts in milliseconds and
memory storage makes state leak between tests otherwise). After the test the
broker is stopped and its stderr checked: a CRC error or a panic logged by the
broker fails the test even if the client side looked fine.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import types
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


TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "broker", "resilience")
BROKER_FIXTURES = {"broker", "any_broker", "proxied_broker", "spark"}
# A unit test (or a fixture of it, or a function or class of its module that either names)
# that does one of these belongs in tests/broker.
_OUTSIDE_PARTS = ("TansuBroker(", "FaultProxy(", "SaslGateway(", "MockCluster(", "subprocess.", "os.fork(",
                  "SparkSession", "local_session(", "multiprocessing")
_source_cache: dict = {}


def _layer(path: Path) -> str | None:
    """The layer of a test file: the name of its folder under tests/, if it is one of them."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) == 2 and parts[0] in LAYERS else None


def _reached(fn) -> list:
    """``fn`` and, in a module of tests/, the functions and classes of that module that it
    names, transitively (a helper a test calls starts the process as surely as the test)."""
    fn = inspect.unwrap(fn)
    module = inspect.getmodule(fn)
    if module is None or TESTS not in Path(getattr(module, "__file__", "/")).resolve().parents:
        return [fn]
    seen, todo, found = set(), [fn], []
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        found.append(f)
        if inspect.isclass(f):
            todo += [getattr(v, "__func__", v) for v in vars(f).values()
                     if inspect.isfunction(getattr(v, "__func__", v))]
            continue
        code = getattr(f, "__code__", None)
        names, codes = set(), [code] if code is not None else []
        while codes:
            c = codes.pop()
            names.update(c.co_names)
            codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        for name in names:
            g = getattr(module, name, None)
            if (inspect.isfunction(g) or inspect.isclass(g)) and g.__module__ == getattr(module, "__name__", None):
                todo.append(g)
    return found


def _outside_parts(fn) -> str | None:
    """What of _OUTSIDE_PARTS ``fn`` (or what it reaches) uses, and where; else None."""
    if fn not in _source_cache:
        _source_cache[fn] = None
        for f in _reached(fn):
            try:
                src = inspect.getsource(f)
            except (OSError, TypeError):
                continue
            words = [w for w in _OUTSIDE_PARTS if w in src]
            if words:
                where = "" if f is inspect.unwrap(fn) else f", through {f.__qualname__}"
                _source_cache[fn] = f"{', '.join(map(repr, words))}{where}"
                break
    return _source_cache[fn]


def _not_a_unit_test(item) -> str | None:
    """Why ``item`` (a test in tests/unit) is not a unit test, or None."""
    fixtures = BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if fixtures:
        return f"it uses the {', '.join(sorted(fixtures))} fixture"
    why = getattr(item, "function", None) and _outside_parts(item.function)
    if why:
        return f"it uses {why}"
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info is not None else ()):
        for d in defs:
            why = _outside_parts(d.func)
            if why:
                return f"its fixture {name} uses {why}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A test file outside the layer folders, or a test in tests/unit that starts outside
    parts, fails its file's collection with what to do."""
    outcome = yield
    report = outcome.get_result()
    if not report.passed or not isinstance(collector, (pytest.Module, pytest.Class)):
        return
    layer = _layer(collector.path)
    problems = []
    if layer is None and isinstance(collector, pytest.Module):
        problems.append(f"{collector.path}: a test file belongs in tests/unit, tests/broker or "
                        "tests/resilience (its folder is its layer)")
    elif layer == "unit":
        seen = set()
        for item in report.result:
            test = item.nodeid.split("[")[0]              # once for all its parameters
            if test in seen or not isinstance(item, pytest.Function):
                continue
            seen.add(test)
            why = _not_a_unit_test(item)
            if why:
                problems.append(f"{test} is not a unit test ({why}): move it to tests/broker")
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(problems)


def pytest_collection_modifyitems(config, items):
    for item in items:
        layer = _layer(item.path)
        if layer is not None:
            item.add_marker(getattr(pytest.mark, layer))
