"""Partition choice, on the code that runs: the compiled accumulator's placement (key hash,
sticky partition), its per-topic BuiltInPartitioner and the load stats and node latency
figures its ready() pass installs, and kproducer.partitioner.custom_partition.

Keyed placement is checked against kafka-python's independent murmur2; the sticky and
adaptive choices against Java's BuiltInPartitioner rules, with seeded (or scripted) random
numbers so no test depends on luck. The Sender's node latency figures on a stalled link:
tests/broker/test_node_latency_on_a_stalled_link.py."""

from __future__ import annotations

import random
import threading
import warnings
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kproducer._core import NEED_METADATA, RecordAccumulator, wall_clock_ms
from kproducer.codec import murmur2
from kproducer.partitioner import BuiltInPartitioner, custom_partition

with warnings.catch_warnings():   # kafka-python's own DeprecationWarnings on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kp_murmur2


class ScriptedRandom:
    """``getrandbits`` answering from a list, to pin exact choices."""

    def __init__(self, values):
        self.values = list(values)

    def getrandbits(self, k):
        return self.values.pop(0)


def accumulator(n=4, topic="t", available=None, **kw):
    acc = RecordAccumulator(**{"batch_size": 1000, "linger_ms": 10_000, "buffer_memory": 1 << 26, **kw})
    acc.set_partition_count(topic, n, available)
    return acc


def unkeyed(acc, count, size=92, topic="t"):
    """Partitions of ``count`` unkeyed records of ``size`` value bytes (``size`` + 8 counted)."""
    return [acc.append(topic, None, None, b"v" * size, None, None, None).partition for _ in range(count)]


def runs(partitions):
    """[(partition, length)] of consecutive equal partitions."""
    out = []
    for p in partitions:
        if out and out[-1][0] == p:
            out[-1][1] += 1
        else:
            out.append([p, 1])
    return [tuple(r) for r in out]


def chi_square(counts, n):
    total = sum(counts.get(i, 0) for i in range(n))
    expected = total / n
    return sum((counts.get(i, 0) - expected) ** 2 / expected for i in range(n))


def leaders(mapping):
    return lambda topic, partition: mapping[partition]


# ===========================================================================
# Keyed records
# ===========================================================================

def kafka_python_partition(key, n):
    return (kp_murmur2(key) & 0x7FFFFFFF) % n


def test_keyed_records_land_where_kafka_python_puts_them():
    rng = random.Random(1234)
    keys = [b"", b"a", b"key", "ünïcödé".encode(), bytes(range(256))]
    keys += [rng.randbytes(rng.randrange(0, 64)) for _ in range(2000)]
    keys += [str(i).encode() for i in range(2000)]
    for n in (1, 2, 3, 7, 12, 100, 1024):
        acc = accumulator(n, batch_size=16384)
        for k in keys:
            assert acc.append("t", None, k, b"v", None, None, None).partition == kafka_python_partition(k, n), (k, n)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 300))
def test_keyed_placement_property(key, n):
    acc = accumulator(n)
    assert acc.append("t", None, key, None, None, None, None).partition == kafka_python_partition(key, n)


def test_ignore_keys_sends_keyed_records_to_the_sticky_partition():
    acc = accumulator(8, ignore_keys=True, rng=ScriptedRandom([5]))
    assert {acc.append("t", None, bytes([i]), b"v", None, None, None).partition for i in range(50)} == {5}


def test_explicit_partition_wins_and_is_range_checked():
    acc = accumulator(4, rng=ScriptedRandom([]))      # no draw may happen
    assert acc.append("t", 3, b"key", b"v", None, None, None).partition == 3
    # Beyond the known count: Java waits for metadata that has the partition (the topic may
    # be growing), so the accumulator asks for it; the producer's wait then fails the future.
    assert acc.append("t", 4, None, b"v", None, None, None) is NEED_METADATA
    assert acc.queued_batches() == 1
    with pytest.raises(ValueError, match=r"partition -1"):
        acc.append("t", -1, None, b"v", None, None, None)


# Java's UtilsTest.testMurmur2 vectors (signed 32-bit results).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,h", sorted(JAVA_MURMUR2.items()))
def test_java_murmur2_vectors(key, h):
    assert murmur2(key) == h
    for n in (1, 3, 16, 1000):
        assert accumulator(n).append("t", None, key, None, None, None, None).partition == (h & 0x7FFFFFFF) % n


# ===========================================================================
# Sticky partitioning (the per-record half runs in RecordAccumulator._place)
# ===========================================================================

def test_sticky_partition_changes_after_batch_size_bytes():
    # 100 bytes counted per record (92 + 8), batch.size 1000: ten records, then a new draw.
    acc = accumulator(8, batch_size=1000, adaptive=False, rng=ScriptedRandom([3, 5, 1, 6]))
    got = runs(unkeyed(acc, 35, 92))
    assert [p for p, _ in got] == [3, 5, 1, 6]
    assert all(length <= 10 for _, length in got), got       # a full batch switches early
    assert sum(length for _, length in got) == 35
    sp = acc.partitioner("t")
    assert sp.partition == 6 and 0 < sp.produced_bytes < 1000 and sp.used


def test_sticky_spreads_uniformly_over_many_switches():
    n = 12
    acc = accumulator(n, batch_size=100, rng=random.Random(42))
    counts = Counter(unkeyed(acc, 12000, 92))                # one record per choice
    assert set(counts) == set(range(n))
    # chi-square, 11 degrees of freedom: p = 0.001 at 31.26
    assert chi_square(counts, n) < 31.26, counts


def test_partitions_without_a_leader_are_avoided():
    acc = accumulator(6, available=[0, 2, 5], batch_size=100, rng=random.Random(3))
    seen = Counter(unkeyed(acc, 3000))
    assert set(seen) == {0, 2, 5}
    assert chi_square({i: seen[p] for i, p in enumerate((0, 2, 5))}, 3) < 13.8


def test_no_partition_with_a_leader_falls_back_to_all():
    acc = accumulator(3, available=[], batch_size=100, rng=random.Random(3))
    assert set(unkeyed(acc, 200)) == {0, 1, 2}


def test_metadata_updates_availability():
    acc = accumulator(4, available=[1], batch_size=100, rng=random.Random(3))
    assert set(unkeyed(acc, 50)) == {1}
    acc.set_partition_count("t", 4, [2, 3])
    assert set(unkeyed(acc, 200)) == {2, 3}
    acc.set_partition_count("t", 6, None)                  # grown, all with a leader
    assert set(unkeyed(acc, 600)) == set(range(6))


def test_topics_are_independent():
    acc = accumulator(4, batch_size=1000, adaptive=False, rng=ScriptedRandom([0, 3, 1]))
    acc.set_partition_count("u", 4)
    assert unkeyed(acc, 1, topic="t") == [0] and unkeyed(acc, 1, topic="u") == [3]
    unkeyed(acc, 9, topic="t")                               # t's batch's worth: t draws again
    assert unkeyed(acc, 1, topic="t") == [1] and unkeyed(acc, 1, topic="u") == [3]


def test_a_draw_needs_partitions():
    with pytest.raises(ValueError, match="no partitions known for topic 'x'"):
        BuiltInPartitioner("x", [], random.Random()).next_partition()


# ===========================================================================
# Adaptive partitioning (queue lengths weigh each switch)
# ===========================================================================

def queue(acc, partition, batches, topic="t"):
    """``batches`` queued batches on ``partition`` (each record fills one at batch.size 1000)."""
    for _ in range(batches):
        acc.append(topic, partition, None, b"q" * 2000, None, None, None)


def table(acc, topic="t"):
    ids, cft = acc.partitioner(topic).choice_table()
    return list(ids), cft


def test_queue_lengths_become_a_cumulative_frequency_table():
    acc = accumulator(3)
    assert table(acc) == ([0, 1, 2], [1, 2, 3])              # all equal: uniform
    queue(acc, 1, 3)
    queue(acc, 2, 1)
    assert table(acc) == ([0, 1, 2], [4, 5, 8])              # Java's worked example
    acc.set_partition_count("t", 3, [0, 2])
    assert table(acc) == ([0, 2], [2, 3])                    # 1 has no leader
    assert table(accumulator(1)) == ([0], None)              # a single partition
    off = accumulator(3, adaptive=False)
    queue(off, 1, 3)
    assert table(off) == ([0, 1, 2], None)                   # adaptive off: uniform


def test_adaptive_choice_is_exact_with_scripted_random():
    # draws 0..7 (mod 8) against the table 4 5 8 -> partitions 0 0 0 0 1 2 2 2
    draws = list(range(8)) + [8 + 4, 2 ** 31 - 1]
    acc = accumulator(3, rng=ScriptedRandom(draws))
    queue(acc, 1, 3)
    queue(acc, 2, 1)
    got = [acc.partitioner("t").next_partition() for _ in draws]
    assert got[:8] == [0, 0, 0, 0, 1, 2, 2, 2]
    assert got[8] == 1 and got[9] == [0, 0, 0, 0, 1, 2, 2, 2][(2 ** 31 - 1) % 8]


def test_unkeyed_records_prefer_short_queues():
    acc = accumulator(4, batch_size=1000, rng=random.Random(99))
    for p, n in enumerate([0, 9, 4, 9]):                     # weights 10 1 6 1
        queue(acc, p, n)
    counts = Counter(unkeyed(acc, 36000, 992))               # one record per choice
    share = [counts[p] / 36000 for p in range(4)]
    # the queues grow as records go in, so the shares move towards equal; the order stays
    assert share[0] > share[2] > share[1] and share[2] > share[3], share


def test_adaptive_off_ignores_queues():
    acc = accumulator(3, adaptive=False, batch_size=100, rng=random.Random(1))
    queue(acc, 1, 50)
    counts = Counter(unkeyed(acc, 3000))
    assert chi_square(counts, 3) < 13.8, counts


# ===========================================================================
# partitioner.availability.timeout.ms (Java's NodeLatencyStats)
# ===========================================================================

def test_node_latency_figures():
    acc = accumulator(2, availability_timeout_ms=1000)
    acc.update_node_latency(101, 100, False)                 # first seen: both times now
    assert acc.node_latency() == {101: (100, 100)}
    acc.update_node_latency(101, 700, False)                 # ready, could not drain
    acc.update_node_latency(102, 700, True)
    assert acc.node_latency() == {101: (700, 100), 102: (700, 700)}
    acc.update_node_latency(101, 900, True)                  # drained: the gap closes
    assert acc.node_latency()[101] == (900, 900)
    off = accumulator(2)                                     # timeout 0: nothing kept (Java)
    off.update_node_latency(101, 100, False)
    assert off.node_latency() == {}


@pytest.mark.parametrize("timeout_ms", [0, 1000])
def test_a_stalled_leader_gets_no_new_unkeyed_records(timeout_ms):
    """Partitions 0, 1 are led by node 101, which has left ready batches waiting 5 s;
    2, 3 by node 102, which drains. With the timeout only 2 and 3 are chosen; 0 disables
    the check; when every leader is stalled there is no preference left."""
    acc = accumulator(4, availability_timeout_ms=timeout_ms, batch_size=100, rng=random.Random(5))
    lead = leaders({0: 101, 1: 101, 2: 102, 3: 102})
    unkeyed(acc, 1)
    acc.update_node_latency(101, 0, True)
    acc.update_node_latency(101, 5000, False)
    acc.update_node_latency(102, 5000, True)
    acc.ready(lead, wall_clock_ms())
    assert acc.partitioner("t").stalled_partitions == ([0, 1] if timeout_ms else [])
    chosen = Counter(unkeyed(acc, 400))
    if timeout_ms:
        assert set(chosen) == {2, 3}, chosen
        acc.update_node_latency(102, 9000, False)
        acc.update_node_latency(102, 20000, False)
        acc.ready(lead, wall_clock_ms())
        assert set(unkeyed(acc, 400)) == {0, 1, 2, 3}
    else:
        assert set(chosen) == {0, 1, 2, 3}, chosen


def test_keyed_only_topics_are_not_checked():
    acc = accumulator(4, availability_timeout_ms=1000)
    acc.append("t", None, b"key", b"v", None, None, None)
    acc.update_node_latency(101, 0, True)
    acc.update_node_latency(101, 5000, False)
    acc.ready(lambda t, p: 101, wall_clock_ms())
    assert not acc.partitioner("t").used and acc.partitioner("t").stalled_partitions == []


def test_producer_settings_reach_the_accumulator():
    from kproducer import Producer

    with Producer(bootstrap_servers="127.0.0.1:1", partitioner_adaptive_partitioning_enable=False,
                  partitioner_availability_timeout_ms=1500, partitioner_ignore_keys=True) as p:
        assert (p._acc.adaptive, p._acc.availability_timeout_ms, p._acc.ignore_keys) == (False, 1500, True)
        p.close(timeout=0)


# ===========================================================================
# Custom partitioner
# ===========================================================================

def test_custom_partition_passes_the_record_and_checks_the_answer():
    calls = []

    def custom(topic, key, key_bytes, value, value_bytes, cluster):
        calls.append((topic, key, key_bytes, value, value_bytes, cluster))
        return None if key == b"none" else 2

    assert custom_partition(custom, "t", b"k", b"v", "CLUSTER", 6) == 2
    assert custom_partition(custom, "t", b"none", b"v", "CLUSTER", 6) is None
    assert calls[0] == ("t", b"k", b"k", b"v", b"v", "CLUSTER")


@pytest.mark.parametrize("bad", [-1, 6, 1.0, "1"])
def test_custom_partitioner_result_is_checked(bad):
    with pytest.raises(ValueError, match=f"custom partitioner returned {bad!r} for topic 't' with 6 partitions"):
        custom_partition(lambda *a: bad, "t", None, None, None, 6)


# ===========================================================================
# Threads
# ===========================================================================

def test_appends_and_ready_passes_from_many_threads():
    n = 7
    acc = accumulator(n, available=[0, 1, 2, 4, 5, 6], batch_size=500, rng=random.Random(11),
                      availability_timeout_ms=50)
    lead = leaders({0: 1, 1: 2, 2: 3, 3: -1, 4: 1, 5: 2, 6: 3})
    bad, chosen = [], Counter()
    stop = threading.Event()
    barrier = threading.Barrier(5)

    def work(tid):
        local = Counter()
        barrier.wait()
        for i in range(5000):
            p = acc.append("t", None, None, b"x" * (10 + i % 50), None, None, None).partition
            if not (isinstance(p, int) and 0 <= p < n):
                bad.append(p)
            local[p] += 1
        chosen.update(local)

    def sender():
        barrier.wait()
        now = 0
        while not stop.is_set():
            now += 10
            acc.update_node_latency(1 + now % 3, now, now % 7 != 0)
            acc.ready(lead, wall_clock_ms())
            for batches in acc.drain(lead, {1, 2, 3}, 1 << 30, wall_clock_ms() + 20_000).values():
                for b in batches:
                    b.free_memory()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    io = threading.Thread(target=sender)
    io.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    io.join()
    assert not bad
    assert sum(chosen.values()) == 20000 and len(chosen) > 1
    assert 3 not in chosen                                   # never offered: no leader
