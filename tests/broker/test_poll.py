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


def test_flush_and_commit_run_the_steps_they_wait_for_on_their_own_thread(broker):
    """flush() (and a transaction's commit, which flushes and then waits for EndTxn) holds
    the GIL and has nothing else to do: it runs the wanted steps itself, as poll() does. It
    used to wait without the GIL, and the watcher kept each step for it for a grace (it had
    just sent), then woke the I/O thread: a millisecond or more per response, and every
    callback on the I/O thread. A step the I/O thread runs when this thread is descheduled
    past that grace is allowed: most rounds, not all, are asserted."""
    broker.create_topic("flushing", 2)
    me = threading.get_ident()
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=60_000) as p:
        p.partitions_for("flushing")
        own, rounds = 0, 20
        for i in range(rounds):
            ran_on = []
            futs = [p.send("flushing", b"%d" % i, partition=part,
                           on_delivery=lambda err, md: ran_on.append((err, threading.get_ident())))
                    for part in (0, 1)]
            p.flush(30)                        # linger.ms is a minute: sent by the flush
            assert all(f.done() and f.exception() is None for f in futs)
            assert len(ran_on) == 2 and all(err is None for err, _ in ran_on)
            own += all(ident == me for _, ident in ran_on)
        assert own >= rounds // 2, f"callbacks ran on the flushing thread in {own} of {rounds} flushes"
    with Producer(bootstrap_servers=broker.bootstrap, transactional_id="flushing-1") as p:
        p.init_transactions(30)
        own = 0
        for i in range(rounds):
            ran_on = []
            p.begin_transaction()
            p.send("flushing", b"t%d" % i, partition=0,
                   on_delivery=lambda err, md: ran_on.append(threading.get_ident()))
            p.commit_transaction(30)
            own += ran_on == [me]
        assert own >= rounds // 2, f"callbacks ran on the committing thread in {own} of {rounds} commits"
    got = read_back(broker.bootstrap, "flushing", timeout=30)
    assert sorted(m.value for ms in got.values() for m in ms) == sorted(
        [b"%d" % i for i in range(rounds)] * 2 + [b"t%d" % i for i in range(rounds)])


def test_a_send_waiting_for_memory_runs_the_steps_that_free_it(broker):
    """64 KiB of buffer.memory: most sends wait for acknowledgements to free memory. The
    waiting thread runs those steps itself (BufferPool.wait_available through
    Sender.run_steps_until), so the callbacks of what they settle run on it; waiting without
    the GIL, it left them to the I/O thread (measured: 3-5 % of the callbacks on the sending
    thread before, 85-89 % after). Every record is acknowledged and read back."""
    broker.create_topic("memory", 2)
    me = threading.get_ident()
    on = {"sender": 0, "other": 0}

    def delivered(err, md):
        assert err is None
        on["sender" if threading.get_ident() == me else "other"] += 1
    n = 5000
    with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=64 * 1024,
                  batch_size=16 * 1024, linger_ms=0) as p:
        p.partitions_for("memory")
        for i in range(n):
            p.send("memory", b"%06d" % i + b"x" * 994, on_delivery=delivered)
        p.flush(60)
        assert p.metrics()["records_acked"] == n
    assert on["sender"] + on["other"] == n
    assert on["sender"] >= n * 0.4, f"{on['sender']} of {n} callbacks ran on the sending thread"
    got = read_back(broker.bootstrap, "memory", timeout=60)
    assert sorted(m.value[:6] for ms in got.values() for m in ms) == [b"%06d" % i for i in range(n)]


def test_a_send_from_a_callback_that_waits_for_memory_waits_without_spinning(broker):
    """A delivery callback runs inside a step; a send there that finds buffer.memory full
    can only wait (the steps that would free it wait for this one) and time out after
    max.block.ms. It waits without the GIL, as it always did: stepping from there (the wait
    of a send outside a callback) would find the step raised and its own, again and again."""
    broker.create_topic("full", 1)
    seen = {}

    def fill_then_wait(err, md):
        if seen:
            return
        seen["err"] = err
        t0, c0 = time.monotonic(), time.thread_time()     # this thread's, whichever steps
        for _ in range(100):                 # 100 KB into 32 KiB: the pool fills on the way
            fut = p.send("full", b"y" * 1000)
            if fut.done() and fut.exception() is not None:   # Java's send: a failed future
                seen["timeout"] = fut.exception()
                break
        seen["wall"] = time.monotonic() - t0
        seen["cpu"] = time.thread_time() - c0
    with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=32 * 1024,
                  batch_size=16 * 1024, linger_ms=0, max_block_ms=500) as p:
        p.partitions_for("full")
        p.send("full", b"first", on_delivery=fill_then_wait)
        deadline = time.monotonic() + 30
        while "wall" not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen.get("err") is None and "timeout" in seen, seen
        assert "buffer.memory" in str(seen["timeout"])
        # Spinning, the callback's thread would have run for about the whole wait.
        assert seen["wall"] >= 0.4 and seen["cpu"] < seen["wall"] / 2, seen


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
