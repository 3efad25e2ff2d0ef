"""Producer.poll(): an application thread that computes in Python without sending runs the
Sender's wanted steps itself, instead of leaving them to an I/O thread that must first get
the GIL from it (a switch interval per step). Against the real broker, read back with
confluent-kafka."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from kproducer import KafkaError, Producer
from kproducer.testing.readback import read_back


@pytest.fixture
def long_switch_interval():
    """The interpreter's switch interval at 30 s: while this thread runs Python, no other
    thread gets the GIL from it for 30 s, so only this thread can run a step meanwhile."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def test_a_thread_that_computes_without_sending_gets_its_callbacks_from_poll(broker, long_switch_interval):
    broker.create_topic("computing", 1)
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        # Metadata and a producer id first: their waits release the GIL.
        p.send("computing", b"warm", partition=0).result(timeout=30)
        steps_before = p.metrics().get("steps_by_application", 0)
        delivered = []
        fut = p.send("computing", b"computed", partition=0,
                     on_delivery=lambda err, md: delivered.append((err, threading.get_ident())))
        settled = 0
        deadline = time.monotonic() + 10       # a third of the switch interval
        while not delivered and time.monotonic() < deadline:
            settled += p.poll()                # the application's loop, computing
        assert delivered, "the callback did not run within 10 s of polling"
        (err, ident), = delivered
        assert err is None
        assert ident == threading.get_ident()  # run by poll(), on this thread
        assert settled == 1
        assert fut.result(timeout=0).offset == 1
        assert p.metrics()["steps_by_application"] > steps_before
    got = read_back(broker.bootstrap, "computing", timeout=30)[0]
    assert [m.value for m in got] == [b"warm", b"computed"]


def test_poll_waits_up_to_its_timeout_for_a_record_and_never_when_nothing_is_in_flight(broker):
    broker.create_topic("waiting", 2)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:
        p.send("waiting", b"warm", partition=0).result(timeout=30)
        assert p.poll() == 0                   # nothing in flight
        assert p.poll(None) == 0               # no limit, but nothing to wait for: at once
        futs = [p.send("waiting", b"%d" % i, partition=i % 2) for i in range(10)]
        settled = 0
        deadline = time.monotonic() + 30
        while settled < 10 and time.monotonic() < deadline:
            n = p.poll(5)
            assert n >= 1 or time.monotonic() >= deadline   # it waited for at least one
            settled += n
        assert settled == 10
        assert all(f.done() for f in futs)
    got = read_back(broker.bootstrap, "waiting", timeout=30)
    assert sorted(m.value for ms in got.values() for m in ms) == sorted(
        [b"warm"] + [b"%d" % i for i in range(10)])


def test_poll_from_a_callback_returns_0_and_bad_use_is_refused(broker):
    broker.create_topic("refused", 1)
    p = Producer(bootstrap_servers=broker.bootstrap)
    inner = []
    p.send("refused", b"a", on_delivery=lambda err, md: inner.append(p.poll())).result(timeout=30)
    assert inner == [0]                        # the callback's thread is stepping already
    with pytest.raises(ValueError, match="poll: timeout must be >= 0"):
        p.poll(-1)
    with pytest.raises(TypeError, match="poll: timeout must be a number"):
        p.poll("1")
    p.close()
    with pytest.raises(KafkaError, match="cannot poll: the producer is closed"):
        p.poll()
