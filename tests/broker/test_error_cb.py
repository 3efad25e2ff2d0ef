"""``error_cb`` (confluent-kafka's setting, librdkafka's semantics): errors that belong to
no one record, each state reported once until it changes; the callback's exceptions are
logged and swallowed."""

from __future__ import annotations

import logging
import threading

import pytest

from _wait import wait_until

from kproducer import Producer
from kproducer.config import ProducerConfig
from kproducer.errors import AllBrokersDownError, ConfigError, KafkaError
from kproducer.testing import TansuBroker
from kproducer.testing.broker import free_port
from kproducer.testing.mock_cluster import MockCluster
from kproducer.testing.readback import read_back

FAST_RECONNECT = {"reconnect_backoff_ms": 10, "reconnect_backoff_max_ms": 40}
CLUSTER_AUTHORIZATION_FAILED = 31
INIT_PRODUCER_ID = 22


class Calls:
    """error_cb's calls, with the thread each ran on."""

    def __init__(self):
        self.errors: list = []
        self.threads: list = []
        self._lock = threading.Lock()

    def __call__(self, err):
        with self._lock:
            self.errors.append(err)
            self.threads.append(threading.current_thread().name)

    def of(self, kind) -> list:
        with self._lock:
            return [e for e in self.errors if isinstance(e, kind)]


class Attempts(logging.Handler):
    """Counts the failed connection attempts kproducer.network logs."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record):
        if "lost: connect failed" in record.getMessage():
            self.count += 1


@pytest.fixture
def attempts():
    handler = Attempts()
    network = logging.getLogger("kproducer.network")
    level = network.level
    network.setLevel(logging.DEBUG)
    network.addHandler(handler)
    try:
        yield handler
    finally:
        network.removeHandler(handler)
        network.setLevel(level)




def _all_records(bootstrap: str, topic: str) -> list:
    return [m.value for msgs in read_back(bootstrap, topic).values() for m in msgs]


@pytest.mark.timeout(180)
def test_all_brokers_down_is_reported_once_per_outage(attempts):
    """Nobody listens on the port: one AllBrokersDownError naming the broker, however many
    attempts fail; the broker comes up (the record is delivered), goes down again: a second
    one."""
    port = free_port()
    tansu = TansuBroker(port=port)
    calls = Calls()
    futures = []
    try:
        with Producer(bootstrap_servers=f"127.0.0.1:{port}", error_cb=calls, max_block_ms=120_000,
                      **FAST_RECONNECT) as p:
            sender = threading.Thread(target=lambda: futures.append(p.send("down", b"first")))
            sender.start()      # waits for metadata
            wait_until(lambda: calls.of(AllBrokersDownError), 30, "error_cb called")
            first = calls.of(AllBrokersDownError)[0]
            assert str(first).startswith("1/1 brokers are down: ")
            assert f"127.0.0.1:{port}" in str(first) and "Connection refused" in str(first)
            seen = attempts.count
            wait_until(lambda: attempts.count >= seen + 20, 60, "20 more failed attempts")
            assert len(calls.errors) == 1, calls.errors

            tansu.start()
            sender.join(60)
            assert futures[0].result(60).offset == 0
            assert len(calls.errors) == 1

            tansu.stop()
            second = p.send("down", b"second")
            wait_until(lambda: len(calls.of(AllBrokersDownError)) == 2, 30, "a second outage reported")
            seen = attempts.count
            wait_until(lambda: attempts.count >= seen + 20, 60, "20 more failed attempts")
            assert len(calls.of(AllBrokersDownError)) == 2
            assert "127.0.0.1:%d" % port in str(calls.of(AllBrokersDownError)[1])
            tansu.restart()
            assert second.result(60).offset == 0
        # Called from the producer's steps: the I/O thread or the application's thread.
        assert set(calls.threads) <= {"kproducer-network-thread", threading.main_thread().name,
                                      sender.name}
        assert _all_records(tansu.bootstrap, "down") == [b"second"]     # memory storage restarted
    finally:
        tansu.stop()
        tansu.check_log()
        tansu.cleanup()


@pytest.mark.timeout(120)
def test_an_exception_of_error_cb_is_logged_and_swallowed(caplog):
    port = free_port()
    tansu = TansuBroker(port=port)
    calls = []

    def error_cb(err):
        calls.append(err)
        raise RuntimeError("bug in error_cb")

    caplog.set_level(logging.ERROR, logger="kproducer")
    futures = []
    try:
        with Producer({"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "cb-raises",
                       "error_cb": error_cb, "max.block.ms": 120_000, **FAST_RECONNECT}) as p:
            sender = threading.Thread(target=lambda: futures.append(p.send("swallowed", b"v")))
            sender.start()
            wait_until(lambda: calls, 30, "error_cb called")
            wait_until(lambda: any("error_cb" in r.getMessage() for r in caplog.records), 30,
                       "the exception logged")
            tansu.start()
            sender.join(60)
            assert futures[0].result(60).offset == 0     # the producer carried on
        logged = [r for r in caplog.records if "error_cb" in r.getMessage()]
        assert len(logged) == 1 and logged[0].levelno == logging.ERROR
        assert logged[0].name == "kproducer.producer"
        assert logged[0].getMessage().startswith("[Producer clientId=cb-raises] error_cb ")
        assert "carries on" in logged[0].getMessage()
        assert logged[0].exc_info[0] is RuntimeError
        assert len(calls) == 1 and isinstance(calls[0], AllBrokersDownError)
        assert _all_records(tansu.bootstrap, "swallowed") == [b"v"]
    finally:
        tansu.stop()
        tansu.check_log()
        tansu.cleanup()


@pytest.mark.timeout(120)
def test_a_fatal_producer_error_is_reported_once():
    """InitProducerId refused with a non-retriable error (the idempotent producer cannot
    go on): error_cb gets it once, though the Sender keeps asking."""
    cluster = MockCluster(1)
    calls = Calls()
    try:
        cluster.create_topic("fatal", 1, replication_factor=1)
        cluster.push_request_errors(INIT_PRODUCER_ID, [CLUSTER_AUTHORIZATION_FAILED] * 5)
        with Producer(bootstrap_servers=cluster.bootstrap, error_cb=calls, max_block_ms=5000,
                      retry_backoff_ms=10, retry_backoff_max_ms=20) as p:
            fut = p.send("fatal", b"v")
            wait_until(lambda: calls.errors, 30, "error_cb called")
            # The Sender asks again after each refusal: once the five pushed refusals are
            # used up, the record goes (or fails); error_cb was called once all the same.
            wait_until(lambda: fut.done(), 60, "the record settled")
        fatal = [e for e in calls.errors if "CLUSTER_AUTHORIZATION_FAILED" in str(e)]
        assert len(fatal) == 1 and isinstance(fatal[0], KafkaError), calls.errors
        assert "InitProducerId" in str(fatal[0])
    finally:
        cluster.close()


def test_error_cb_is_confluent_kafkas_setting():
    def on_error(err):
        pass

    assert ProducerConfig({"bootstrap.servers": "h:1", "error_cb": on_error}).error_cb is on_error
    assert ProducerConfig(bootstrap_servers="h:1", error_cb=on_error)["error.cb"] is on_error
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(bootstrap_servers="h:1", error_cb="print")
    assert exc.value.key == "error.cb" and "expected a Python callable" in str(exc.value)
