"""The Producer against the real broker, verified by reading back with confluent-kafka
(librdkafka, CRC checks on). Faults come from a real TCP proxy on loopback. The Producer
with no broker to talk to: tests/unit/test_producer_without_a_broker.py."""

from __future__ import annotations

import gc
import logging
import os
import random
import threading
import time
import weakref
from collections import defaultdict

import pytest

from kproducer import KafkaError, KafkaTimeoutError, Producer
from kproducer.errors import ConfigError, RecordTooLargeError
from kproducer.testing import TansuBroker
from kproducer.testing.readback import read_back

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _java_partition(key: bytes, n: int) -> int:
    from kafka.partitioner.default import murmur2
    return (murmur2(key) & 0x7FFFFFFF) % n


def _wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.mark.timeout(900)
def test_million_keyed_records_idempotent_exactly_once_in_order(any_broker):
    broker = any_broker
    # The mock cluster keeps 5 MiB of each partition: a third of the records there.
    topic, n, parts = "million", 1_000_000 if broker.kind == "tansu" else 300_000, 4
    broker.create_topic(topic, parts)
    with Producer(bootstrap_servers=broker.bootstrap, acks="all") as p:
        assert p.config.enable_idempotence
        keys = [b"key-%d" % (i % 5000) for i in range(n)]
        futures = [p.send(topic, b"%d" % i, key=keys[i]) for i in range(n)]
        p.flush(timeout=300)
        metas = [f.result(timeout=0) for f in futures]
        assert p.metrics()["records_acked"] == n
    got = read_back(broker.bootstrap, topic, timeout=300)
    by_offset = {(m.partition, m.offset): m for msgs in got.values() for m in msgs}
    assert len(by_offset) == n                                  # nothing lost, nothing twice
    seen_values = set()
    for p_id, msgs in got.items():
        last = -1
        for m in msgs:
            i = int(m.value)
            assert i not in seen_values
            seen_values.add(i)
            assert m.key == keys[i]
            assert p_id == _java_partition(m.key, parts)          # Java's partition for the key
            assert i > last, "send order kept within the partition"
            last = i
    for i, md in enumerate(metas[::997]):
        i *= 997
        m = by_offset[(md.partition, md.offset)]                 # the future's offset is real
        assert (m.key, int(m.value), md.topic) == (keys[i], i, topic)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("batch_max_size", [None, 16384])
def test_batches_grow_past_batch_size_while_the_leader_is_busy(broker, batch_max_size):
    """KIP-782: at the defaults a batch at batch.size (16384) goes out when its leader can take
    a request, and grows towards batch.max.size while it cannot (here: one request in flight),
    and past it towards max.request.size while every window is full (the one leader's, here);
    batch.max.size == batch.size gives Java's batches. Idempotence and order hold either way."""
    topic, n, parts = f"grow-{batch_max_size}", 200_000, 2
    broker.create_topic(topic, parts)
    settings = {"max_in_flight_requests_per_connection": 1}
    if batch_max_size is not None:
        settings["batch_max_size"] = batch_max_size
    with Producer(bootstrap_servers=broker.bootstrap, **settings) as p:
        assert p.config.batch_size == 16384
        for i in range(n):
            p.send(topic, b"%08d" % i + b"v" * 92, key=b"k%d" % (i % 100))
        p.flush(timeout=120)
        stats = p.metrics()
    assert stats["records_acked"] == n and stats.get("records_failed", 0) == 0
    if batch_max_size is None:
        assert stats["max_batch_bytes"] > 16384 * 2, stats     # grown while the leader was busy
        assert stats["max_batch_bytes"] <= 1048576 - 1024      # max.request.size less its reserve
    else:
        assert stats["max_batch_bytes"] <= 16384, stats
    got = read_back(broker.bootstrap, topic, timeout=120)
    assert sum(len(msgs) for msgs in got.values()) == n
    for msgs in got.values():
        values = [int(m.value[:8]) for m in msgs]
        assert values == sorted(values) and len(set(values)) == len(values)


@pytest.mark.timeout(120)
def test_each_partition_lingers_on_its_own_clock(broker):
    """Each partition's batch leaves when it has itself waited linger.ms (librdkafka's rule),
    not with another partition's batch that is ready first (Java's drain sends every batch
    for a broker together): a record sent half a linger after another partition's waits its
    own linger.ms and goes in a request of its own."""
    topic = "own-clock"
    broker.create_topic(topic, 2)
    linger_s = 2.0
    sent, acked = {}, {}

    def on_delivery(part):
        return lambda err, md: acked.setdefault(part, (err, time.monotonic()))

    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=int(linger_s * 1000)) as p:
        p.send(topic, b"warm-up", partition=0).result(30)      # metadata, producer id
        before = p.metrics()["requests"]
        sent[0] = time.monotonic()
        p.send(topic, b"a", partition=0, on_delivery=on_delivery(0))
        time.sleep(linger_s / 2)                                # the scenario, not a wait
        sent[1] = time.monotonic()
        p.send(topic, b"b", partition=1, on_delivery=on_delivery(1))
        _wait_until(lambda: len(acked) == 2, 30, "both records acknowledged")
        requests = p.metrics()["requests"] - before
    assert all(err is None for err, _ in acked.values()), acked
    for part in (0, 1):     # batch times are whole ms: a linger may end up to 1 ms early
        waited = acked[part][1] - sent[part]
        assert waited >= linger_s - 0.01, (part, waited)
    assert requests == 2


@pytest.mark.timeout(300)
@pytest.mark.parametrize("compression", CODECS)
def test_codecs_nulls_headers_timestamps_sizes(any_broker, compression):
    broker = any_broker
    topic = f"shapes-{compression}"
    broker.create_topic(topic, 3)
    rng = random.Random(compression)
    # The mock cluster keeps 5 MiB of each partition, and answers every Produce with a
    # LogAppendTime of 1234 (the record's own timestamp is what it stores).
    sizes = [0, 1, 100, 1000, 100_000, 1 << 20 if broker.kind == "tansu" else 200_000]
    sent = []
    with Producer(bootstrap_servers=broker.bootstrap, compression_type=compression,
                  max_request_size=4 << 20, linger_ms=20) as p:
        futures = []
        for i in range(60):
            key = None if i % 5 == 0 else b"k%d" % i
            value = None if i % 7 == 3 else rng.randbytes(sizes[i % len(sizes)])
            headers = [("i", b"%d" % i), ("null", None), ("empty", b"")] if i % 2 else None
            ts = 1_600_000_000_000 + i * 1000 if i % 3 else None
            part = i % 3
            futures.append(p.send(topic, value, key=key, partition=part, timestamp_ms=ts, headers=headers))
            sent.append((part, key, value, ts, headers or []))
        p.flush(60)
        metas = [f.result() for f in futures]
    got = read_back(broker.bootstrap, topic, timeout=120)
    per_part = defaultdict(list)
    for rec, md in zip(sent, metas):
        per_part[rec[0]].append((rec, md))
    for part, items in per_part.items():
        assert len(got[part]) == len(items)
        for m, ((_, key, value, ts, headers), md) in zip(got[part], items):
            assert (m.key, m.value, m.headers) == (key, value, headers)
            assert m.offset == md.offset and m.partition == md.partition
            if ts is not None:
                assert m.timestamp == ts
                assert md.timestamp == (ts if broker.kind == "tansu" else 1234)


@pytest.mark.timeout(300)
def test_many_topics_and_partitions_unkeyed_sticky(any_broker):
    broker = any_broker
    topics = [f"multi-{i}" for i in range(6)]
    for t in topics:
        broker.create_topic(t, 8)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
        for i in range(30_000):
            p.send(topics[i % len(topics)], b"v%d" % i)
        p.flush(120)
    total = 0
    for t in topics:
        got = read_back(broker.bootstrap, t, timeout=120)
        counts = [len(got.get(pp, [])) for pp in range(8)]
        total += sum(counts)
        assert sum(counts) == 5000
        assert sum(1 for c in counts if c) >= 2, "the sticky partitioner moves on as batches fill"
    assert total == 30_000


@pytest.mark.timeout(120)
def test_callbacks_run_without_polling_and_errors_in_them_are_contained(broker, caplog):
    broker.create_topic("cb", 2)
    done = threading.Event()
    results = []
    lock = threading.Lock()

    def on_delivery(err, md):
        with lock:
            results.append((err, md, threading.current_thread().name))
            if len(results) == 200:
                done.set()

    def bad_callback(err, md):
        raise RuntimeError("user bug")

    with caplog.at_level(logging.ERROR, logger="kproducer"):
        with Producer(bootstrap_servers=broker.bootstrap) as p:
            p.send("cb", b"x", on_delivery=bad_callback)
            futs = [p.send("cb", b"v%d" % i, key=b"k", on_delivery=on_delivery) for i in range(200)]
            assert done.wait(30), "on_delivery ran without any poll call"
            seen = []
            futs[0].add_done_callback(lambda f: seen.append(f.result().offset))
            assert futs[-1].result(10).offset == futs[0].result(10).offset + 199
            assert futs[-1].exception() is None and futs[-1].done() and not futs[-1].cancel()
            assert seen == [futs[0].result().offset]
            # The producer survived the raising callback.
            assert p.send("cb", b"after").result(10).offset >= 0
    assert all(err is None for err, _, _ in results)
    # No poll call: the I/O thread runs them, or a send() that found a step wanted (the
    # Sender's turn) ran it on the application's own thread.
    assert {name for _, _, name in results} <= {"kproducer-network-thread", "MainThread"}
    assert "user bug" in caplog.text


@pytest.mark.timeout(120)
def test_a_busy_application_thread_settles_its_own_acknowledgements(broker):
    """The Sender's turn: while the application thread keeps the GIL (a Python loop that spins
    between sends), acknowledgements do not wait for the I/O thread to get it: the watcher
    thread says a step is wanted, send() runs it, and the callbacks run on the application
    thread."""
    broker.create_topic("busy", 2)
    names: dict = defaultdict(int)
    acked = []

    def on_delivery(err, md):
        acked.append(err)
        names[threading.current_thread().name] += 1

    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=1) as p:
        p.send("busy", b"warm-up").result(10)
        deadline = time.monotonic() + 60
        i = 0
        while len(acked) < 2000:
            assert time.monotonic() < deadline, f"{len(acked)} of {i} acknowledged"
            spin = time.perf_counter() + 0.0002
            while time.perf_counter() < spin:
                pass                      # busy in Python: the GIL stays with this thread
            p.send("busy", b"v%d" % i, key=b"k%d" % (i % 10), on_delivery=on_delivery)
            i += 1
        stepped = p._turn.watcher.raised
    assert all(err is None for err in acked)
    assert stepped > 0
    assert names["MainThread"] > names["kproducer-network-thread"], dict(names)


@pytest.mark.timeout(120)
def test_flush_and_close_from_a_delivery_callback(broker):
    broker.create_topic("cbc", 1)
    p = Producer(bootstrap_servers=broker.bootstrap)
    outcome = []
    ran = threading.Event()

    def flushing(err, md):
        try:
            p.flush(5)
            outcome.append(None)
        except KafkaError as exc:
            outcome.append(exc)
        ran.set()

    p.send("cbc", b"a", on_delivery=flushing)
    assert ran.wait(30)
    assert isinstance(outcome[0], KafkaError) and "delivery callback" in str(outcome[0])
    # close() from a callback closes at once (Java's close from the I/O thread: timeout 0).
    closed = threading.Event()

    def closing(err, md):
        p.close()
        closed.set()

    p.send("cbc", b"b", on_delivery=closing)
    assert closed.wait(30)
    assert p._sender.join(10), "the I/O thread stopped after the step that closed it"
    with pytest.raises(KafkaError, match="closed"):
        p.send("cbc", b"c")
    p.close()                             # closing again does nothing


@pytest.mark.timeout(120)
def test_threads_send_concurrently(broker):
    broker.create_topic("threads", 4)
    n_threads, per = 8, 5000
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        def work(t):
            for i in range(per):
                p.send("threads", b"%d-%d" % (t, i), key=b"t%d" % t)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        p.flush(60)
    got = read_back(broker.bootstrap, "threads", timeout=60)
    values = [m.value for msgs in got.values() for m in msgs]
    assert len(values) == len(set(values)) == n_threads * per
    for msgs in got.values():                                  # per-thread order kept
        last = {}
        for m in msgs:
            t, i = map(int, m.value.split(b"-"))
            assert i > last.get(t, -1)
            last[t] = i


def test_serializers_custom_partitioner_and_partitions_for(broker):
    broker.create_topic("ser", 3)
    calls = []

    def partitioner(topic, key, key_bytes, value, value_bytes, cluster):
        calls.append(topic)
        return 2

    with Producer(bootstrap_servers=broker.bootstrap, key_serializer=str.encode,
                  value_serializer=lambda v: v.encode("utf-8"), partitioner=partitioner) as p:
        md = p.send("ser", "héllo", key="k").result(10)
        assert md.partition == 2 and calls == ["ser"]
        assert [pi.partition for pi in p.partitions_for("ser")] == [0, 1, 2]
    got = read_back(broker.bootstrap, "ser", timeout=30)
    assert got[2][0].value == "héllo".encode() and got[2][0].key == b"k"


def test_bad_configs_and_arguments(broker):
    with pytest.raises(ConfigError, match="linger.ms"):
        Producer(bootstrap_servers=broker.bootstrap, linger_msec=5)
    with pytest.raises(ConfigError, match="acks"):
        Producer({"bootstrap.servers": broker.bootstrap, "acks": "some"})
    with pytest.raises(ConfigError, match="enable.idempotence"):
        Producer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks=1)
    broker.create_topic("args", 2)
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=10_000) as p:
        p.send("args", b"warm").result(10)
        with pytest.raises(TypeError, match="value must be bytes-like or None, not str"):
            p.send("args", "text")
        with pytest.raises(TypeError, match="key must be bytes-like"):
            p.send("args", b"v", key="text")
        with pytest.raises(ValueError, match="invalid topic name"):
            p.send("bad topic!", b"v")
        with pytest.raises(ValueError, match=r"partition -1 is not in the range \[0...1\]"):
            p.send("args", b"v", partition=-1)
        # Java's contract: a record send() took fails its future (tests/broker/test_failure_semantics.py).
        with pytest.raises(RecordTooLargeError, match="max.request.size=10000"):
            p.send("args", b"x" * 20_000).result(0)
        with pytest.raises(TypeError, match="header 0 key must be str"):
            p.send("args", b"v", headers=[(b"k", b"v")])
    with pytest.raises(KafkaError, match="closed"):
        p.send("args", b"v")


@pytest.mark.timeout(120)
def test_full_buffer_blocks_then_raises_and_delivery_timeout_fails_records(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("bp", 1)
    p = Producer(bootstrap_servers=proxy.bootstrap, buffer_memory=200_000, batch_size=16384,
                 max_block_ms=500, linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=3000,
                 enable_idempotence=False, acks=1)
    p.send("bp", b"warm").result(10)
    proxy.stall(True)                                    # broker stops answering
    futures = []
    for i in range(10_000):
        fut = p.send("bp", os.urandom(1000))
        if fut.done() and isinstance(fut.exception(0), KafkaTimeoutError):
            assert "buffer.memory" in str(fut.exception(0))   # a failed future, as Java's send()
            break
        futures.append(fut)
    else:
        raise AssertionError("buffer.memory never ran out")
    assert p.metrics()["buffer_available_bytes"] >= 0
    assert len(futures) * 1000 <= 200_000 + 16384, "memory stays bounded"
    # Every queued record fails with a clear timeout, none vanishes.
    for f in futures:
        exc = f.exception(timeout=30)
        assert isinstance(exc, (KafkaTimeoutError, KafkaError)), exc
    assert any("delivery.timeout.ms" in str(f.exception()) or "timed out" in str(f.exception())
               for f in futures)
    p.close(timeout=5)


@pytest.mark.timeout(60)
def test_close_with_zero_timeout_fails_pending_records(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("cz", 1)
    p = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0)
    p.send("cz", b"warm").result(10)
    proxy.stall(True)
    futures = [p.send("cz", b"v%d" % i) for i in range(100)]
    p.close(timeout=0)
    for f in futures:
        assert isinstance(f.exception(timeout=10), KafkaError)


@pytest.mark.timeout(60)
def test_a_raised_record_error_does_not_keep_the_raising_frame_alive(proxied_broker):
    """The error of a failed batch is one object, kept by its result. Raised by result() (or by
    a delivery callback), it takes a traceback through the frames it passes, and a frame that
    holds the future closes a cycle: future -> result -> error -> traceback -> frame -> future.
    The collector frees it once the frame is gone (with an untracked future it leaked every
    such frame and all its locals)."""
    broker, proxy = proxied_broker
    broker.create_topic("tb", 1)
    p = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, request_timeout_ms=300,
                 delivery_timeout_ms=600)
    p.send("tb", b"warm").result(10)
    proxy.stall(True)

    class Local:
        pass

    alive = []

    def application():                       # the future's error raised by result()
        local = Local()
        alive.append(weakref.ref(local))
        fut = p.send("tb", b"lost")
        fut.add_done_callback(lambda f: None)
        with pytest.raises(KafkaTimeoutError):
            fut.result(10)

    def callback_application():              # the error raised by a delivery callback
        local = Local()
        alive.append(weakref.ref(local))
        fut = None

        def on_delivery(err, meta):
            assert fut is not None and local is not None and meta is None
            raise err                        # contained (logged) by the producer

        fut = p.send("tb", b"lost too", on_delivery=on_delivery)
        p.flush(10)
        assert fut.done()

    # The producer logs the callback's error with its traceback (on kproducer.sender, the
    # logger of the step that settles it), and a captured log record would keep the frames
    # alive by itself.
    log = logging.getLogger("kproducer.sender")
    log.disabled = True
    try:
        application()
        callback_application()
    finally:
        log.disabled = False
    p.close(timeout=0)
    gc.collect()
    assert alive[0]() is None, "the frame that raised the record's error is still alive"
    assert alive[1]() is None, "the frame of the callback that raised it is still alive"


def test_metrics_request_latency_is_the_round_trip_to_the_broker(proxied_broker):
    """request_latency_*: each request's write to the read of its response. A proxy that
    holds every response 50 ms puts every round trip at 50 ms or more (ApiVersions and
    Metadata too); without it, loopback round trips are well under that."""
    broker, proxy = proxied_broker
    broker.create_topic("rtt", 4)

    def run():
        with Producer(bootstrap_servers=proxy.bootstrap) as p:
            futures = [p.send("rtt", b"v%d" % i, key=b"k%d" % i) for i in range(2_000)]
            p.flush(60)
            assert all(f.exception() is None for f in futures)
            return p.metrics()

    direct = run()
    assert direct["request_latency_count"] >= direct["requests"] + 2   # ApiVersions, Metadata
    assert 0 <= direct["request_latency_p50_ms"] < 50
    assert direct["request_latency_avg_ms"] <= direct["request_latency_max_ms"]
    proxy.delay(0.05)
    held = run()
    assert held["request_latency_count"] >= held["requests"] + 2
    # Each the proxy's 50 ms or more (a 1/16 bucket under it at most: the histogram's).
    assert held["request_latency_p50_ms"] >= 50 * 15 / 16
    assert held["request_latency_avg_ms"] >= 50 and held["request_latency_max_ms"] >= 50
    assert held["request_latency_p99_ms"] <= held["request_latency_max_ms"]


def _run_through_proxy(proxied_broker, configure, n=20_000, **producer_cfg):
    broker, proxy = proxied_broker
    broker.create_topic("faults", 4)
    configure(proxy)
    with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=2, request_timeout_ms=2000,
                  retry_backoff_ms=20, **producer_cfg) as p:
        futures = [p.send("faults", b"%d" % i, key=b"k%d" % (i % 50)) for i in range(n)]
        p.flush(180)
        errors = [f.exception() for f in futures]
        assert errors.count(None) == n, [e for e in errors if e][:3]
        stats = proxy.stats()
    proxy.reset_faults()
    got = read_back(broker.bootstrap, "faults", timeout=120)
    values = [int(m.value) for msgs in got.values() for m in msgs]
    assert sorted(values) == list(range(n)), "nothing lost, nothing duplicated"
    for msgs in got.values():
        per_key = {}
        for m in msgs:
            i = int(m.value)
            assert i > per_key.get(m.key, -1), "per-key order kept"
            per_key[m.key] = i
    return stats


@pytest.mark.timeout(300)
def test_connections_cut_every_n_responses(proxied_broker):
    stats = _run_through_proxy(proxied_broker, lambda px: px.cut_every_n_responses(5), batch_size=2000,
                               batch_max_size=2000)   # many requests: Java's batches
    assert stats["cuts"] >= 10


@pytest.mark.timeout(300)
def test_responses_byte_by_byte_and_delayed(proxied_broker):
    def configure(px):
        px.byte_by_byte(True)
        px.delay(0.01)
    _run_through_proxy(proxied_broker, configure, n=5000)


@pytest.mark.timeout(300)
def test_dropped_responses_are_retried_without_duplicates(proxied_broker):
    stats = _run_through_proxy(proxied_broker, lambda px: px.drop_response_every(9), n=5000,
                               batch_size=2000, batch_max_size=2000)
    assert stats["responses_dropped"] >= 1


@pytest.mark.timeout(300)
def test_broker_restart_mid_stream(tmp_path):
    broker = TansuBroker(log_dir=tmp_path).start()
    try:
        broker.create_topic("restart", 2)
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2, request_timeout_ms=2000,
                      retry_backoff_ms=20, delivery_timeout_ms=60000) as p:
            first = [p.send("restart", b"a%d" % i, key=b"k%d" % (i % 10)) for i in range(5000)]
            p.flush(60)
            pid_before = p.metrics()["producer_id"]
            broker.restart()                                   # memory storage: all state lost
            broker.create_topic("restart", 2, exist_ok=True)
            second = [p.send("restart", b"b%d" % i, key=b"k%d" % (i % 10)) for i in range(5000)]
            p.flush(120)
            for f in first + second:                            # each acked or failed, none vanishes
                assert f.done()
            ok_second = [f for f in second if f.exception() is None]
            assert len(ok_second) == len(second)
            assert p.metrics()["producer_id"] != pid_before or p.metrics()["producer_id_resets"] >= 1
        got = read_back(broker.bootstrap, "restart", timeout=60)
        values = sorted(m.value for msgs in got.values() for m in msgs)
        assert values == sorted(b"b%d" % i for i in range(5000))
    finally:
        broker.stop()


@pytest.mark.timeout(120)
def test_fork_child_starts_afresh(broker):
    broker.create_topic("fork", 1)
    p = Producer(bootstrap_servers=broker.bootstrap)
    p.send("fork", b"parent-1").result(10)
    pid = os.fork()
    if pid == 0:  # child: must not touch the parent's thread or sockets
        code = 1
        try:
            p.send("fork", b"child").result(20)
            p.close(10)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    p.send("fork", b"parent-2").result(10)                   # the parent's producer still works
    p.close()
    got = read_back(broker.bootstrap, "fork", timeout=30)
    assert sorted(m.value for m in got[0]) == [b"child", b"parent-1", b"parent-2"]


@pytest.mark.timeout(60)
def test_adaptive_sticky_partitioner_avoids_long_queues(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("adaptive", 4)
    p = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=1000, batch_max_size=1000)
    p.send("adaptive", b"warm", partition=0).result(10)
    proxy.stall(True)                                   # nothing completes from here on
    for _ in range(300):                                # a long queue on partition 0
        p.send("adaptive", b"x" * 900, partition=0)
    unkeyed = [p.send("adaptive", b"y" * 400) for _ in range(400)]
    counts = [sum(1 for f in unkeyed if f.partition == i) for i in range(4)]
    assert sum(counts) == 400
    assert counts[0] < 40 and min(counts[1:]) > 40, counts
    p.close(timeout=0)


def _inject_produce_error(producer, code: int, times: int = 1):
    """Answers the next ``times`` Produce requests with ``code`` for every partition,
    without sending them (Tansu never returns these errors)."""
    from kproducer.protocol import PRODUCE

    client = producer._client
    real_send = client.send
    left = [times]
    # The answer replaces the request, so no request may leave without client.send: the
    # courier (which writes lingering batches itself) stays off from now on.
    sender = producer._sender
    sender.courier.io = None
    # The last step armed it: a step of this thread takes what it sent and does not arm it
    # again (a step already running elsewhere may have; then this one comes after it).
    deadline = time.monotonic() + 10
    while not producer._turn.step_from_app():
        assert time.monotonic() < deadline, "no step could run"
        time.sleep(0.001)

    def send(node_id, api_key, request, callback, now, **kw):
        if api_key == PRODUCE and left[0] > 0:
            left[0] -= 1
            # request is the Sender's [(topic, [(partition, batch)])]; answer in
            # decode_produce_response's shape (no throttle, no trailing bytes).
            callback((0, [(t, part, code, -1, -1, "injected") for t, parts in request for part, _ in parts], 0, 0),
                     None)
            return
        return real_send(node_id, api_key, request, callback, now, **kw)
    client.send = send


@pytest.mark.timeout(60)
def test_message_too_large_splits_the_batch_and_keeps_every_future(broker):
    broker.create_topic("split", 1)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:
        p.send("split", b"warm").result(10)
        _inject_produce_error(p, 10)                          # MESSAGE_TOO_LARGE
        cb = []
        futures = [p.send("split", b"r%d" % i, on_delivery=lambda e, md: cb.append(e)) for i in range(40)]
        p.flush(30)
        metas = [f.result(0) for f in futures]
        assert cb == [None] * 40
    got = read_back(broker.bootstrap, "split", timeout=30)
    by_offset = {m.offset: m.value for m in got[0]}
    assert [by_offset[md.offset] for md in metas] == [b"r%d" % i for i in range(40)]
    assert len(got[0]) == 41


@pytest.mark.timeout(60)
def test_non_retriable_error_fails_every_record_with_its_name(broker):
    from kproducer.errors import BrokerResponseError
    broker.create_topic("fatal", 1)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:
        p.send("fatal", b"warm").result(10)
        _inject_produce_error(p, 87)                          # INVALID_RECORD
        errs = []
        futures = [p.send("fatal", b"r%d" % i, on_delivery=lambda e, md: errs.append(e)) for i in range(10)]
        for f in futures:
            exc = f.exception(10)
            assert isinstance(exc, BrokerResponseError) and exc.code == 87 and "INVALID_RECORD" in str(exc)
        assert len(errs) == 10 and all(isinstance(e, BrokerResponseError) for e in errs)
        assert p.send("fatal", b"next").result(10).offset >= 1   # later records go through


@pytest.mark.timeout(120)
def test_acks_zero_keeps_reading_and_delivers(broker):
    """acks=0: no response is expected, but the broker answers anyway (TANSU.md); the
    connection keeps being read, so the stream does not stall after ~70 k requests."""
    broker.create_topic("acks0", 1)
    n = 100_000
    with Producer(bootstrap_servers=broker.bootstrap, acks=0, enable_idempotence=False,
                  linger_ms=0, batch_size=200, batch_max_size=200) as p:
        futures = [p.send("acks0", b"%d" % i) for i in range(n)]
        p.flush(90)
        assert all(f.result(0).offset == -1 for f in futures[::1000])
        assert p.metrics()["requests"] > 70_000 // 10
    got = read_back(broker.bootstrap, "acks0", timeout=60)
    assert [int(m.value) for m in got[0]] == list(range(n))


@pytest.mark.timeout(60)
def test_busy_topic_is_not_forgotten_after_metadata_max_idle_ms(broker):
    """Java touches a topic on every send; a topic in use must never expire from the
    metadata (records would wait for a leader until they time out)."""
    broker.create_topic("busy", 2)
    with Producer(bootstrap_servers=broker.bootstrap, metadata_max_idle_ms=5000, metadata_max_age_ms=300,
                  delivery_timeout_ms=3000, request_timeout_ms=1000) as p:
        futures = []
        deadline = time.monotonic() + 7.5                        # well past metadata.max.idle.ms
        while time.monotonic() < deadline:
            futures.append(p.send("busy", b"x"))
            time.sleep(0.002)
        p.flush(10)
        failed = [f.exception() for f in futures if f.exception() is not None]
        assert not failed, failed[:1]
        assert "busy" in p._metadata.topics()
