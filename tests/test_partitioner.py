"""Tests of kproducer.partitioner.

Keyed placement is checked against kafka-python's independent murmur2; the
sticky and adaptive choices against Java's BuiltInPartitioner rules, with
seeded (or scripted) random numbers so no test depends on luck.
"""

from __future__ import annotations

import random
import threading
import warnings
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kproducer.codec import murmur2
from kproducer.metadata import Cluster, Node, PartitionInfo, TopicInfo
from kproducer.partitioner import (UNKNOWN_PARTITION, BuiltInPartitioner, StickyPartitionInfo,
                                   collect_load_stats, default_partition_for_key,
                                   resolve_partition)

with warnings.catch_warnings():   # kafka-python's own DeprecationWarnings on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kp_murmur2


def cluster(n=4, leaders=None, topic="t", brokers=(1, 2, 3)):
    """A snapshot with ``n`` partitions of ``topic``; ``leaders[i]`` is partition i's leader."""
    leaders = [brokers[i % len(brokers)] for i in range(n)] if leaders is None else leaders
    parts = {i: PartitionInfo(i, leaders[i], 0, (leaders[i],), (leaders[i],)) for i in range(n)}
    return Cluster([Node(b, f"h{b}", 9092) for b in brokers], [TopicInfo(topic, 0, parts)],
                   controller_id=brokers[0])


class ScriptedRandom:
    """``getrandbits`` answering from a list, to pin exact choices."""

    def __init__(self, values):
        self.values = list(values)

    def getrandbits(self, k):
        return self.values.pop(0)


def chi_square(counts, n):
    total = sum(counts.get(i, 0) for i in range(n))
    expected = total / n
    return sum((counts.get(i, 0) - expected) ** 2 / expected for i in range(n))


# ===========================================================================
# Keyed records
# ===========================================================================

def kafka_python_partition(key, n):
    return (kp_murmur2(key) & 0x7FFFFFFF) % n


def test_keyed_matches_kafka_python_on_many_keys():
    rng = random.Random(1234)
    keys = [b"", b"a", b"key", "ünïcödé".encode(), bytes(range(256))]
    keys += [rng.randbytes(rng.randrange(0, 64)) for _ in range(5000)]
    keys += [str(i).encode() for i in range(5000)]
    for n in (1, 2, 3, 7, 12, 100, 1024, 2 ** 31 - 1):
        for k in keys:
            assert default_partition_for_key(k, n) == kafka_python_partition(k, n), (k, n)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 10000))
def test_keyed_matches_kafka_python_property(key, n):
    assert default_partition_for_key(key, n) == kafka_python_partition(key, n)


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
        assert default_partition_for_key(key, n) == (h & 0x7FFFFFFF) % n


# ===========================================================================
# Sticky partitioning
# ===========================================================================

def test_sticky_switches_after_batch_size_bytes():
    c = cluster(8)
    bp = BuiltInPartitioner(1000, rng=random.Random(5))
    first = bp.partition("t", c)
    assert 0 <= first < 8
    for i in range(9):                       # 900 bytes: stay
        assert bp.partition("t", c) == first
        bp.update_partition_info("t", 100, c)
    assert bp.peek_partition_info("t", c).produced_bytes == 900
    info = bp.peek_partition_info("t", c)
    bp.update_partition_info("t", 100, c)    # reaches 1000 = batch.size: switch
    assert bp.is_partition_changed("t", info)
    new = bp.peek_partition_info("t", c)
    assert new.produced_bytes == 0 and new is not info


def test_switch_disabled_until_twice_batch_size():
    c = cluster(8)
    bp = BuiltInPartitioner(1000, rng=random.Random(5))
    info = bp.peek_partition_info("t", c)
    bp.update_partition_info("t", 1500, c, False)
    assert not bp.is_partition_changed("t", info)   # batch not full: keep filling
    bp.update_partition_info("t", 499, c, False)
    assert not bp.is_partition_changed("t", info)
    bp.update_partition_info("t", 1, c, False)      # 2 x batch.size: switch anyway
    assert bp.is_partition_changed("t", info)


def test_stale_info_is_not_credited():
    c = cluster(8)
    bp = BuiltInPartitioner(1000, rng=random.Random(5))
    old = bp.peek_partition_info("t", c)
    bp.update_partition_info("t", 1000, c, info=old)
    cur = bp.peek_partition_info("t", c)
    bp.update_partition_info("t", 999, c, info=old)   # raced a switch: ignored
    assert cur.produced_bytes == 0 and not bp.is_partition_changed("t", cur)
    bp.update_partition_info("t", 10, c, info=cur)
    assert cur.produced_bytes == 10
    assert not bp.is_partition_changed("t", None)
    bp.update_partition_info("unknown-topic", 10, c)  # nothing to do


def test_sticky_spreads_uniformly_over_many_switches():
    n = 12
    c = cluster(n)
    bp = BuiltInPartitioner(100, rng=random.Random(42))
    counts = Counter()
    for _ in range(24000):
        counts[bp.partition("t", c)] += 1
        bp.update_partition_info("t", 100, c)        # one batch per pick
    assert set(counts) == set(range(n))
    # chi-square, 11 degrees of freedom: p = 0.001 at 31.26
    assert chi_square(counts, n) < 31.26, counts


def test_unavailable_partitions_are_avoided():
    c = cluster(6, leaders=[1, -1, 2, 9, -1, 3])     # 1, 4: no leader; 3: unknown broker
    bp = BuiltInPartitioner(1, rng=random.Random(3))
    seen = Counter()
    for _ in range(3000):
        seen[bp.partition("t", c)] += 1
        bp.update_partition_info("t", 1, c)
    assert set(seen) == {0, 2, 5}
    assert chi_square({i: seen[p] for i, p in enumerate((0, 2, 5))}, 3) < 13.8


def test_no_available_partition_falls_back_to_all():
    c = cluster(3, leaders=[-1, -1, -1])
    bp = BuiltInPartitioner(1, rng=random.Random(3))
    seen = set()
    for _ in range(200):
        seen.add(bp.partition("t", c))
        bp.update_partition_info("t", 1, c)
    assert seen == {0, 1, 2}


def test_unknown_topic_raises():
    bp = BuiltInPartitioner(1)
    with pytest.raises(ValueError, match="no partitions"):
        bp.partition("nope", cluster(3))


def test_sticky_partition_rechosen_when_topic_shrinks():
    bp = BuiltInPartitioner(10 ** 9, rng=ScriptedRandom([7, 1]))
    big = cluster(8)
    assert bp.partition("t", big) == 7
    assert bp.partition("t", cluster(8)) == 7        # another snapshot, still valid
    small = cluster(2)                               # re-created with 2 partitions
    assert bp.partition("t", small) == 1


def test_topics_are_independent():
    c = Cluster([Node(1, "h", 1)], [
        TopicInfo("a", 0, {i: PartitionInfo(i, 1) for i in range(4)}),
        TopicInfo("b", 0, {i: PartitionInfo(i, 1) for i in range(4)})])
    bp = BuiltInPartitioner(100, rng=ScriptedRandom([0, 3, 1]))
    assert bp.partition("a", c) == 0 and bp.partition("b", c) == 3
    bp.update_partition_info("a", 100, c)
    assert bp.partition("a", c) == 1 and bp.partition("b", c) == 3


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError):
        BuiltInPartitioner(0)


# ===========================================================================
# Adaptive partitioning
# ===========================================================================

def test_load_stats_cumulative_frequency_table():
    bp = BuiltInPartitioner(1)
    sizes, ids = [0, 3, 1], [0, 1, 2]
    bp.update_partition_load_stats("t", sizes, ids, 3)
    assert bp.load_stats("t") == ([4, 5, 8], [0, 1, 2], 3)     # Java's worked example
    assert sizes == [0, 3, 1]                                   # inputs untouched
    bp.update_partition_load_stats("t", [2, 2, 2], [0, 1, 2], 3)
    assert bp.load_stats("t") is None                           # all equal: uniform
    bp.update_partition_load_stats("t", [2, 2, 2], [0, 2, 1], 2)
    assert bp.load_stats("t") == ([1, 2], [0, 2], 2)            # one excluded: still adaptive
    bp.update_partition_load_stats("t", [5], [0], 1)
    assert bp.load_stats("t") is None                           # a single partition
    bp.update_partition_load_stats("t", [1, 2], [0, 1], 0)
    assert bp.load_stats("t") is None                           # nothing usable
    bp.update_partition_load_stats("t", None, None, 0)
    assert bp.load_stats("t") is None
    with pytest.raises(ValueError):
        bp.update_partition_load_stats("t", [1, 2], [0], 1)


def test_adaptive_choice_is_exact_with_scripted_random():
    c = cluster(3)
    # draws 0..7 (mod 8) against CFT 4 5 8 -> partitions 0 0 0 0 1 2 2 2
    draws = list(range(8)) + [8 + 4, 2 ** 31 - 1]
    bp = BuiltInPartitioner(1, rng=ScriptedRandom(draws + [0]))   # + the last switch
    bp.update_partition_load_stats("t", [0, 3, 1], [0, 1, 2], 3)
    got = []
    for _ in draws:
        got.append(bp.partition("t", c))
        bp.update_partition_info("t", 1, c)
    assert got[:8] == [0, 0, 0, 0, 1, 2, 2, 2]
    assert got[8] == 1 and got[9] == [0, 0, 0, 0, 1, 2, 2, 2][(2 ** 31 - 1) % 8]


def test_adaptive_prefers_less_loaded_partitions():
    c = cluster(4)
    bp = BuiltInPartitioner(1, rng=random.Random(99))
    bp.update_partition_load_stats("t", [0, 9, 4, 9], [0, 1, 2, 3], 4)   # weights 10 1 6 1
    counts = Counter()
    for _ in range(18000):
        counts[bp.partition("t", c)] += 1
        bp.update_partition_info("t", 1, c)
    share = {p: counts[p] / 18000 for p in range(4)}
    assert share[0] > share[2] > share[1] and share[0] > share[2] > share[3]
    for p, w in {0: 10, 1: 1, 2: 6, 3: 1}.items():
        assert abs(share[p] - w / 18) < 0.015, share


def test_adaptive_off_ignores_load_stats():
    bp = BuiltInPartitioner(1, adaptive=False)
    bp.update_partition_load_stats("t", [0, 3, 1], [0, 1, 2], 3)
    assert bp.load_stats("t") is None


def test_adaptive_excluded_partitions_never_chosen():
    c = cluster(4)
    bp = BuiltInPartitioner(1, rng=random.Random(8))
    sizes, ids, n = collect_load_stats(c, "t", {0: 1, 1: 1, 2: 1, 3: 1},
                                       node_latency={2: (5000, 1000)}, availability_timeout_ms=1000)
    assert (ids[:n], n) == ([0, 2, 3], 3)            # partition 1's leader (node 2) is stuck
    bp.update_partition_load_stats("t", sizes, ids, n)
    seen = set()
    for _ in range(500):
        seen.add(bp.partition("t", c))
        bp.update_partition_info("t", 1, c)
    assert seen == {0, 2, 3}


def test_collect_load_stats():
    c = cluster(4, leaders=[1, -1, 2, 3])
    # not every partition has a queue yet: no adaptive choice
    assert collect_load_stats(c, "t", {0: 1, 2: 2}) == (None, None, 0)
    assert collect_load_stats(c, "unknown", {0: 1}) == (None, None, 0)
    sizes, ids, n = collect_load_stats(c, "t", {3: 4, 0: 1, 1: 7, 2: 2})
    assert (sizes[:n], ids[:n], n, len(sizes)) == ([1, 2, 4], [0, 2, 3], 3, 4)   # leaderless 1 left out
    # the availability timeout only counts when enabled, and only past the limit
    lat = {2: (3000, 1000), 3: (2500, 1000)}
    assert collect_load_stats(c, "t", {0: 1, 1: 1, 2: 1, 3: 1}, lat, 0)[2] == 3
    sizes, ids, n = collect_load_stats(c, "t", {0: 1, 1: 1, 2: 1, 3: 1}, lat, 1500)
    assert ids[:n] == [0, 3]


# ===========================================================================
# Precedence
# ===========================================================================

def test_resolve_partition_precedence():
    c = cluster(6)
    bp = BuiltInPartitioner(10 ** 9, rng=ScriptedRandom([4]))
    calls = []

    def custom(topic, key, key_bytes, value, value_bytes, cl):
        calls.append((topic, key, key_bytes, value, value_bytes, cl))
        return 2 if key == "to-two" else None

    args = ("t", "to-two", b"k", "v", b"vb", c)
    # explicit beats everything (and is not range-checked here)
    assert resolve_partition(*args, partition=5, partitioner=custom, builtin=bp) == 5
    assert resolve_partition(*args, partition=99) == 99
    assert calls == []
    # custom next
    assert resolve_partition(*args, partitioner=custom, builtin=bp) == 2
    assert calls == [args]
    # custom declines -> key hash
    keyed = ("t", "other", b"k", "v", b"vb", c)
    assert resolve_partition(*keyed, partitioner=custom, builtin=bp) == kafka_python_partition(b"k", 6)
    assert resolve_partition(*keyed) == kafka_python_partition(b"k", 6)
    # an empty key is still a key (Java: serializedKey != null)
    assert resolve_partition("t", "", b"", None, None, c) == kafka_python_partition(b"", 6)
    # ignore_keys -> sticky, as does a null key
    assert resolve_partition(*keyed, builtin=bp, ignore_keys=True) == 4
    assert resolve_partition("t", None, None, "v", b"vb", c, builtin=bp) == 4
    # without a BuiltInPartitioner the accumulator decides
    assert resolve_partition("t", None, None, "v", b"vb", c) == UNKNOWN_PARTITION
    assert resolve_partition(*keyed, ignore_keys=True) == UNKNOWN_PARTITION


@pytest.mark.parametrize("bad", [-1, 6, 1.0, "1", True])
def test_custom_partitioner_result_is_checked(bad):
    with pytest.raises(ValueError, match="custom partitioner"):
        resolve_partition("t", None, None, None, None, cluster(6), partitioner=lambda *a: bad)


def test_keyed_unknown_topic_raises():
    with pytest.raises(ValueError, match="no partitions"):
        resolve_partition("nope", "k", b"k", None, None, cluster(2))


# ===========================================================================
# Threads
# ===========================================================================

def test_thread_safety_smoke():
    n = 7
    c = cluster(n, leaders=[1, 2, 3, -1, 1, 2, 3])
    bp = BuiltInPartitioner(50, rng=random.Random(11))
    bp.update_partition_load_stats("t", [3, 0, 1, 0, 5, 2, 2], [0, 1, 2, 3, 4, 5, 6], 7)
    bad, chosen = [], Counter()
    barrier = threading.Barrier(8)

    def work(tid):
        local = Counter()
        barrier.wait()
        for i in range(20000):
            if i % 2:
                info = bp.peek_partition_info("t", c)
                p = info.partition
                bp.update_partition_info("t", 7, c, i % 3 != 0, info=info)
            else:
                p = bp.partition("t", c)
                bp.update_partition_info("t", 5, c)
            if not (isinstance(p, int) and 0 <= p < n):
                bad.append(p)
            local[p] += 1
            if i % 1000 == 0:   # the accumulator refreshing stats concurrently
                sizes = [random.Random(tid * i).randrange(5) for _ in range(n)]
                bp.update_partition_load_stats("t", sizes, list(range(n)), n)
        chosen.update(local)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad
    assert sum(chosen.values()) == 160000 and len(chosen) > 1
    assert isinstance(bp.peek_partition_info("t", c), StickyPartitionInfo)


# -- the producer's sticky choice: partitioner.availability.timeout.ms ---------------------------

@pytest.mark.parametrize("timeout_ms", [0, 1000])
def test_availability_timeout_keeps_unkeyed_records_off_a_stalled_leader(broker, timeout_ms, monkeypatch):
    """Java's partitionReady: with partitioner.availability.timeout.ms, a partition whose
    leader has had batches ready but could not take them for longer than the timeout gets
    no new unkeyed records; 0 disables the check. (Tansu is one broker, so the test gives
    the partitions two pretend leaders and sets the Sender's latency figures directly.)"""
    from kproducer import Producer

    broker.create_topic("avail", 4)
    with Producer(bootstrap_servers=broker.bootstrap, partitioner_availability_timeout_ms=timeout_ms) as p:
        assert len(p.partitions_for("avail")) == 4
        leaders = {0: Node(101, "a", 1), 1: Node(101, "a", 1), 2: Node(102, "b", 1), 3: Node(102, "b", 1)}
        monkeypatch.setattr(Cluster, "leader_for", lambda self, topic, partition: leaders[partition])
        # node 101: batches ready at 5,000 ms, last drained at 0 (stalled 5 s); 102 drains.
        p._sender.node_latency.update({101: (5000, 0), 102: (5000, 5000)})
        chosen = Counter(p._choose_sticky("avail", 4) for _ in range(400))
        if timeout_ms:
            assert set(chosen) == {2, 3}, chosen
            p._sender.node_latency[102] = (9000, 0)        # both stalled: no preference left
            assert set(p._choose_sticky("avail", 4) for _ in range(400)) == {0, 1, 2, 3}
        else:
            assert set(chosen) == {0, 1, 2, 3}, chosen


def test_sender_tracks_how_long_a_leader_leaves_ready_batches_waiting(proxied_broker):
    """The Sender's NodeLatencyStats: while the leader cannot take more (its five in-flight
    requests are stuck behind a stalled link), ready_ms moves on and drain_ms stays put;
    once the link moves again a drain resets the gap."""
    import time

    from kproducer import Producer

    broker, proxy = proxied_broker
    broker.create_topic("stall-lat", 1)
    with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, acks=1, enable_idempotence=False,
                  request_timeout_ms=30_000) as p:
        p.send("stall-lat", b"warm").result(timeout=30)
        proxy.stall(True)
        try:
            futures = []
            for i in range(200):
                # Each record larger than batch.size is a batch of its own, and a new batch
                # wakes the Sender (as in Java, whose ready pass runs only when woken).
                futures.append(p.send("stall-lat", b"v" * 20_000))
                time.sleep(0.005)
            deadline = time.monotonic() + 20
            waited = 0
            while time.monotonic() < deadline:
                waited = max((r - d for r, d in p._sender.node_latency.values()), default=0)
                if waited >= 500:
                    break
                time.sleep(0.05)
            assert waited >= 500, p._sender.node_latency
        finally:
            proxy.stall(False)
        assert all(f.result(timeout=30).partition == 0 for f in futures)
    assert max(r - d for r, d in p._sender.node_latency.values()) < waited
