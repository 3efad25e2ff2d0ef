"""Logging: one logger per module under ``kproducer.``, messages carrying the producer's
client id (Java's ``[Producer clientId=...] `` prefix), connection failures logged with
suppression (one WARNING, then DEBUG until the broker connects, then an INFO), and the
``logger`` setting (confluent-kafka's) that takes a producer's records instead."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import pytest

from _wait import wait_until

from kproducer import Producer
from kproducer.config import ProducerConfig
from kproducer.errors import ConfigError
from kproducer.log_context import LogContext
from kproducer.testing import TansuBroker
from kproducer.testing.broker import free_port
from kproducer.testing.readback import read_back

PACKAGE = Path(__file__).resolve().parent.parent / "kproducer"
FAST_RECONNECT = {"reconnect_backoff_ms": 10, "reconnect_backoff_max_ms": 40}


class Records(logging.Handler):
    """Every record that reaches the logger it is added to, kept in order."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock_ = threading.Lock()

    def emit(self, record):
        with self._lock_:
            self.records.append(record)

    def snapshot(self) -> list[logging.LogRecord]:
        with self._lock_:
            return list(self.records)


@pytest.fixture
def kproducer_records():
    """A handler on the ``kproducer`` logger at DEBUG (the module loggers propagate to it)."""
    handler = Records()
    root = logging.getLogger("kproducer")
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)




def _connect_failures(records, level=None):
    """The connection failures of kproducer.network among ``records`` (at ``level``)."""
    return [r for r in records if r.name == "kproducer.network" and "connect" in r.getMessage()
            and ("retrying with backoff" in r.getMessage() or "failed attempts in" in r.getMessage())
            and (level is None or r.levelno == level)]


def _node_of(record) -> str:
    return _node_of_text(record.getMessage())


def _node_of_text(message: str) -> str:
    return re.search(r"node (-?\d+)", message).group(1)


# -- logger names and the client id -----------------------------------------------------


def test_no_module_logs_on_the_package_logger():
    """Each module names its own logger (``__name__``, or kproducer.<module> in compiled code)."""
    offenders = [str(p.relative_to(PACKAGE)) for p in list(PACKAGE.rglob("*.py")) + list(PACKAGE.rglob("*.pyx"))
                 + list(PACKAGE.rglob("*.pxi")) if 'getLogger("kproducer")' in p.read_text()]
    assert offenders == []


@pytest.mark.timeout(120)
def test_each_module_logs_on_its_own_logger_with_the_client_id(broker, kproducer_records):
    broker.create_topic("named", 1)
    with Producer(bootstrap_servers=broker.bootstrap, client_id="orders-app") as a, \
            Producer(bootstrap_servers=broker.bootstrap, client_id="audit-app") as b:
        a.send("named", b"from a").result(30)
        b.send("named", b"from b").result(30)
    records = kproducer_records.snapshot()
    names = {r.name for r in records}
    assert {"kproducer.network", "kproducer.sender"} <= names, names
    assert "kproducer" not in names
    # Every record of a producer's parts names its producer, and each producer's own id.
    for r in records:
        assert r.getMessage().startswith(("[Producer clientId=orders-app] ",
                                          "[Producer clientId=audit-app] ")), r.getMessage()
    by_id = {cid: [r for r in records if r.getMessage().startswith(f"[Producer clientId={cid}] ")]
             for cid in ("orders-app", "audit-app")}
    assert all(any(r.name == "kproducer.network" for r in rs) for rs in by_id.values())
    # The record's caller is the code that logged, not the adapter.
    assert all(not r.pathname.endswith("log_context.py") for r in records)
    assert sorted(m.value for m in read_back(broker.bootstrap, "named")[0]) == [b"from a", b"from b"]


def test_the_prefix_survives_percent_signs_in_the_client_id():
    handler = Records()
    target = logging.getLogger("test.kproducer.percent")
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    target.propagate = False
    try:
        log = LogContext("100%s-sure", logger=target).logger("kproducer.network")
        log.info("no arguments: 50%")
        log.info("node %s ready", 7)
        txn = LogContext("c", "tx-1", logger=target).logger("kproducer.sender")
        txn.debug("state %s", "READY")
    finally:
        target.removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == [
        "[Producer clientId=100%s-sure] no arguments: 50%",
        "[Producer clientId=100%s-sure] node 7 ready",
        "[Producer clientId=c, transactionalId=tx-1] state READY"]


def test_a_disabled_level_formats_nothing():
    class Loud:
        def __str__(self):
            raise AssertionError("formatted although the level is off")

    target = logging.getLogger("test.kproducer.quiet")
    target.setLevel(logging.WARNING)
    LogContext("c", logger=target).logger("kproducer.network").debug("%s", Loud())


# -- connection failures: one WARNING, DEBUG until connected, then INFO ------------------


@pytest.mark.timeout(180)
def test_a_refusing_broker_logs_one_warning_then_debug_until_it_is_back(kproducer_records):
    """At the start (nobody listens on the port yet) and again after the broker was up and
    stopped: one WARNING per broker, then DEBUG for every further attempt (many of them:
    reconnect.backoff.max.ms is 40 ms), and an INFO once it connects again."""
    port = free_port()
    tansu = TansuBroker(port=port)
    futures = []
    try:
        with Producer(bootstrap_servers=f"127.0.0.1:{port}", client_id="refused",
                      max_block_ms=120_000, **FAST_RECONNECT) as p:
            sender = threading.Thread(target=lambda: futures.append(p.send("back", b"first")))
            sender.start()     # waits for the topic's metadata, up to max.block.ms
            wait_until(lambda: len(_connect_failures(kproducer_records.snapshot())) >= 20, 60,
                       "20 failed connection attempts")
            records = kproducer_records.snapshot()
            failures = _connect_failures(records)
            warnings = [r for r in records if r.levelno >= logging.WARNING]
            assert len(warnings) == 1 and warnings[0] is failures[0], [r.getMessage() for r in warnings]
            assert "retrying with backoff" in warnings[0].getMessage()
            assert f"127.0.0.1:{port}" in warnings[0].getMessage()
            assert all(r.levelno == logging.DEBUG for r in failures[1:])
            assert not [r for r in records if r.levelno == logging.INFO and r.name == "kproducer.network"]

            tansu.start()
            sender.join(60)
            assert futures and futures[0].result(60).offset == 0
            back = [r for r in kproducer_records.snapshot()
                    if r.levelno == logging.INFO and "is connected again" in r.getMessage()]
            assert len(back) == 1 and "failed attempt(s)" in back[0].getMessage()

            # Up, then down: the broker's first failure warns again, once.
            mark = len(kproducer_records.snapshot())
            tansu.stop()
            second = p.send("back", b"second")
            wait_until(lambda: len(_connect_failures(kproducer_records.snapshot()[mark:])) >= 20, 60,
                       "20 failed attempts after the broker stopped")
            records = kproducer_records.snapshot()[mark:]
            warnings = [r for r in records if r.levelno >= logging.WARNING]
            # One per broker the client knows (the broker's id, and the bootstrap address
            # again when the producer rebootstraps), never one per attempt.
            nodes = [_node_of(r) for r in warnings]
            assert warnings and len(nodes) == len(set(nodes)), [r.getMessage() for r in warnings]
            assert all(r in _connect_failures(records) for r in warnings)
            # The rest at INFO: the lost connections (one per node) and a rebootstrap.
            infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
            lost = [m for m in infos if "disconnected from node" in m]
            assert len(lost) == len({_node_of_text(m) for m in lost})
            assert len(infos) - len(lost) <= 1 and all("starting again from bootstrap.servers" in m
                                                        for m in infos if m not in lost), infos

            tansu.restart()
            assert second.result(60).offset >= 0
            assert any("is connected again" in r.getMessage() for r in kproducer_records.snapshot()[mark:])
        stored = read_back(tansu.bootstrap, "back")     # memory storage: after the restart
        assert [m.value for msgs in stored.values() for m in msgs] == [b"second"]
    finally:
        tansu.stop()
        tansu.check_log()
        tansu.cleanup()


# -- the logger setting -------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_the_logger_setting_receives_the_producers_records_instead(broker, kproducer_records):
    broker.create_topic("own", 1)
    handler = Records()
    app = logging.getLogger("test.app.kafka")
    app.setLevel(logging.DEBUG)
    app.propagate = False
    app.addHandler(handler)
    try:
        with Producer({"bootstrap.servers": broker.bootstrap, "client.id": "with-logger",
                       "logger": app}) as p:
            p.send("own", b"v").result(30)
            p.send("own", b"w", on_delivery=lambda err, md: 1 / 0).result(30)
            p.flush(30)
    finally:
        app.removeHandler(handler)
    mine = handler.snapshot()
    assert mine and all(r.name == "test.app.kafka" for r in mine)
    assert all(r.getMessage().startswith("[Producer clientId=with-logger] ") for r in mine)
    assert any("sender thread started" in r.getMessage() for r in mine)
    # A delivery callback's exception goes there too, with its traceback.
    raised = [r for r in mine if "on_delivery callback" in r.getMessage()]
    assert len(raised) == 1 and raised[0].levelno == logging.ERROR and raised[0].exc_info[0] is ZeroDivisionError
    assert kproducer_records.snapshot() == []
    assert [m.value for m in read_back(broker.bootstrap, "own")[0]] == [b"v", b"w"]


def test_the_logger_setting_takes_loggers_and_adapters_only():
    adapter = logging.LoggerAdapter(logging.getLogger("test.app.adapter"), {"svc": "x"})
    assert ProducerConfig(bootstrap_servers="h:1", logger=adapter).logger is adapter
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(bootstrap_servers="h:1", logger="app.kafka")
    assert exc.value.key == "logger"
    assert str(exc.value) == ("logger: expected a logging.Logger, a logging.LoggerAdapter or None, "
                              "got str 'app.kafka'")


def test_configuration_warnings_go_to_the_logger_setting(kproducer_records):
    handler = Records()
    app = logging.getLogger("test.app.config")
    app.setLevel(logging.DEBUG)
    app.propagate = False
    app.addHandler(handler)
    try:
        ProducerConfig(bootstrap_servers="h:1", acks=0, logger=app)
    finally:
        app.removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == [
        "Idempotence will be disabled because acks is set to 0, not set to 'all'."]
    assert kproducer_records.snapshot() == []
    ProducerConfig(bootstrap_servers="h:1", acks=0)
    assert [(r.name, r.levelno) for r in kproducer_records.snapshot()] == [("kproducer.config", logging.INFO)]
