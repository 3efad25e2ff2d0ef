"""Producer.send_many: whole columns (lists, NumPy, Arrow) partitioned, batched and encoded
in C, read back with confluent-kafka."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kproducer import KafkaError, Producer
from kproducer.testing.readback import read_back


def _java_partition(key: bytes, n: int) -> int:
    from kafka.partitioner.default import murmur2
    return (murmur2(key) & 0x7FFFFFFF) % n


def _all(got):
    return [m for msgs in got.values() for m in msgs]


@pytest.mark.timeout(300)
def test_lists_keys_land_on_java_partitions_and_result_counts(broker):
    broker.create_topic("many", 4)
    n = 200_000
    values = [b"v%d" % i for i in range(n)]
    keys = [b"k%d" % (i % 1000) for i in range(n)]
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        res = p.send_many("many", values, keys)
        assert res.wait(120)
        assert (res.records, res.acked, res.failed, res.first_error) == (n, n, 0, None)
        res.raise_for_errors()
    got = read_back(broker.bootstrap, "many", timeout=120)
    msgs = _all(got)
    assert sorted(m.value for m in msgs) == sorted(values)
    for part, ms in got.items():
        last = -1
        for m in ms:
            assert part == _java_partition(m.key, 4)
            i = int(m.value[1:])
            assert i > last                                      # call order kept per partition
            last = i


@pytest.mark.timeout(120)
def test_numpy_and_arrow_inputs_with_nulls_and_slices(broker):
    broker.create_topic("cols", 1)
    obj = np.array([b"a", None, b"ccc"], dtype=object)
    fixed = np.array([b"x", b"yy", b"zzz\x00"], dtype="S4")      # NumPy strips trailing NULs
    arrow_bin = pa.array([b"p", None, b"", b"qq"], type=pa.binary())
    arrow_str = pa.array(["s0", "s1", None, "s3", "s4"]).slice(1, 3)
    arrow_large = pa.array([b"L1", b"L2"], type=pa.large_binary())
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=20) as p:
        results = [p.send_many("cols", obj, partition=0),
                   p.send_many("cols", fixed, keys=np.array([b"k1", b"k2", b"k3"], dtype="S2"), partition=0),
                   p.send_many("cols", arrow_bin, keys=pa.array(["a", "b", None, "d"]), partition=0),
                   p.send_many("cols", arrow_str, partition=0),
                   p.send_many("cols", arrow_large, partition=0)]
        p.flush(30)
        assert [r.acked for r in results] == [3, 3, 4, 3, 2]
    got = read_back(broker.bootstrap, "cols", timeout=30)[0]
    assert [(m.key, m.value) for m in got] == [
        (None, b"a"), (None, None), (None, b"ccc"),
        (b"k1", b"x"), (b"k2", b"yy"), (b"k3", b"zzz"),
        (b"a", b"p"), (b"b", None), (None, b""), (b"d", b"qq"),
        (None, b"s1"), (None, None), (None, b"s3"),
        (None, b"L1"), (None, b"L2")]


@pytest.mark.timeout(120)
def test_headers_timestamps_callbacks_and_futures(broker):
    broker.create_topic("hdr", 1)
    seen = []
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        r1 = p.send_many("hdr", [b"a", b"b"], headers=[("same", b"1"), ("null", None)], timestamps=1_000)
        r2 = p.send_many("hdr", [b"c", b"d"], headers=[[("own", b"c")], None],
                         timestamps=np.array([2_000, 3_000], dtype=np.int64))
        r3 = p.send_many("hdr", [b"e", b"f"], timestamps=[4_000, None],
                         on_delivery=lambda err, md: seen.append((err, md.offset)), futures=True)
        p.flush(30)
        assert all(r.acked == 2 for r in (r1, r2, r3))
        assert [f.result(0).offset for f in r3.futures] == [4, 5]
        assert sorted(seen) == [(None, 4), (None, 5)]
    got = read_back(broker.bootstrap, "hdr", timeout=30)[0]
    assert [(m.value, m.headers) for m in got[:4]] == [
        (b"a", [("same", b"1"), ("null", None)]), (b"b", [("same", b"1"), ("null", None)]),
        (b"c", [("own", b"c")]), (b"d", [])]
    assert [m.timestamp for m in got[:5]] == [1_000, 1_000, 2_000, 3_000, 4_000]


def test_bad_input_fails_before_anything_is_queued(broker):
    broker.create_topic("bad", 1)
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        with pytest.raises(TypeError, match=r"values\[1\] is a str"):
            p.send_many("bad", [b"ok", "text"])
        with pytest.raises(TypeError, match=r"keys\[0\] must be bytes or None, not int"):
            p.send_many("bad", [b"ok"], keys=[5])
        with pytest.raises(ValueError, match="2 keys for 1 values"):
            p.send_many("bad", [b"ok"], keys=[b"a", b"b"])
        with pytest.raises(ValueError, match="3 timestamps for 2 values"):
            p.send_many("bad", [b"a", b"b"], timestamps=[1, 2, 3])
        with pytest.raises(TypeError, match=r"timestamps\[0\] must be an int"):
            p.send_many("bad", [b"a"], timestamps=["now"])
        with pytest.raises(TypeError, match="NumPy unicode arrays need encoding"):
            p.send_many("bad", np.array(["x"]))
        with pytest.raises(TypeError, match="not a single bytes"):
            p.send_many("bad", b"one value")
        with pytest.raises(ValueError, match=r"partition -3 is not in the range"):
            p.send_many("bad", [b"a"], partition=-3)
        assert p.send_many("bad", [b"after"]).wait(10)
    got = read_back(broker.bootstrap, "bad", timeout=30)[0]
    assert [m.value for m in got] == [b"after"]                  # nothing of the bad calls was sent


@pytest.mark.timeout(120)
def test_failing_broker_fails_every_record_through_the_result(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("down", 2)
    p = Producer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=500, delivery_timeout_ms=1500,
                 linger_ms=0)
    p.send("down", b"warm").result(10)
    proxy.stall(True)
    res = p.send_many("down", [b"x%d" % i for i in range(5000)])
    assert res.wait(60)
    assert res.failed == 5000 and res.acked == 0
    with pytest.raises(KafkaError):
        res.raise_for_errors()
    p.close(timeout=5)


@pytest.mark.timeout(180)
def test_batch_size_above_what_the_pool_holds_for_every_partition(broker):
    # 8 partitions x batch.size 1 MB is four times buffer.memory (2 MiB): batches grow in the
    # pool instead of each taking 1 MB at once, so they stay large and few. With batch.size
    # taken up front only two batches fitted at a time and each round trip carried a handful
    # of records (8k records/s); with batch.size above buffer.memory nothing could be sent.
    broker.create_topic("tight", 8)
    n = 100_000
    values = [b"%09d" % i + b"v" * 91 for i in range(n)]
    keys = [b"k%d" % i for i in range(n)]
    for config in ({"batch_size": 1_000_000, "buffer_memory": 2 << 20},
                   {"batch_size": 4 << 20, "buffer_memory": 1 << 20}):
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, max_block_ms=30_000,
                      **config) as p:
            res = p.send_many("tight", values, keys)
            assert res.wait(120)
            assert (res.acked, res.failed) == (n, 0)
            stats = p.metrics()
            assert stats["buffer_available_bytes"] == config["buffer_memory"]   # all returned
            assert stats["records_acked"] / stats["batches"] >= 200, stats
    msgs = _all(read_back(broker.bootstrap, "tight", timeout=120))
    assert sorted(m.value for m in msgs) == sorted(values * 2)


@pytest.mark.timeout(300)
def test_a_long_column_runs_the_wanted_steps_while_it_is_queued(broker):
    """send_many's loop holds the GIL without running bytecode, so the interpreter never
    hands it to the I/O thread: the call itself runs the steps the Sender's turn wants
    (responses, the next requests, delivery callbacks) between chunks, as send() does.
    Acknowledgements therefore arrive while the column is still being queued. (The pool
    holds the whole column: no wait for memory lets the GIL go meanwhile.)"""
    import threading

    broker.create_topic("many-steps", 4)
    n = 400_000
    main = threading.get_ident()
    acked_during = [0, 0]       # callbacks before send_many returned: [other thread, this one]

    with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=256 << 20) as p:
        p.send("many-steps", b"w").result(30)
        queued = [False]

        def cb(err, meta):
            assert err is None
            if not queued[0]:
                acked_during[threading.get_ident() == main] += 1

        res = p.send_many("many-steps", [b"v" * 100] * n, [b"%d" % (i % 1000) for i in range(n)],
                          on_delivery=cb)
        queued[0] = True
        assert res.wait(120) and (res.acked, res.failed) == (n, 0)
        steps = p.metrics().get("steps_by_application", 0)
    print("acknowledged while queued (I/O thread, this thread):", acked_during, "steps", steps)
    assert sum(acked_during) > 0 and steps > 0, (acked_during, steps)
    got = read_back(broker.bootstrap, "many-steps", timeout=120)
    assert sum(len(ms) for ms in got.values()) == n + 1


@pytest.mark.timeout(120)
def test_send_many_from_a_delivery_callback_queues_its_column(broker):
    """A delivery callback runs inside a step (on whichever thread ran it) and may send a
    column itself: send_many then finds the step lock held by its own thread, neither
    waits for it nor steps again, and everything is delivered."""
    broker.create_topic("many-nested", 2)
    n = 20_000
    import threading

    results = []
    queued = threading.Event()
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        def cb(err, meta):
            assert err is None
            results.append(p.send_many("many-nested", [b"n%d" % i for i in range(n)],
                                       [b"%d" % i for i in range(n)]))
            queued.set()

        p.send("many-nested", b"first", key=b"first", on_delivery=cb)
        assert queued.wait(30)
        assert len(results) == 1 and results[0].wait(60)
        assert (results[0].acked, results[0].failed) == (n, 0)
    got = read_back(broker.bootstrap, "many-nested", timeout=60)
    assert sum(len(ms) for ms in got.values()) == n + 1
