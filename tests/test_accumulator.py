"""RecordAccumulator rules without a broker: linger, fullness, drain rotation, pool bound."""

from __future__ import annotations

from kproducer._accumulator import NEED_MEMORY, NEED_METADATA, RecordAccumulator, wall_clock_ms


def _acc(**kw):
    acc = RecordAccumulator(**{"batch_size": 1000, "linger_ms": 50, **kw})
    acc.set_partition_count("t", 4)
    return acc


def leader(topic, partition):
    return 7


def test_unknown_topic_needs_metadata():
    assert RecordAccumulator().append("nope", None, b"k", b"v", None, None, None) is NEED_METADATA


def test_ready_waits_for_linger_unless_full():
    acc = _acc()
    now = wall_clock_ms()
    acc.append("t", 0, None, b"v", None, None, None)
    nodes, delay, unknown = acc.ready(leader, now)
    assert nodes == set() and 0 < delay <= 50 and unknown == set()
    assert acc.ready(leader, now + 60)[0] == {7}                 # lingered long enough
    for _ in range(20):                                          # fill partition 1 past batch.size
        acc.append("t", 1, None, b"x" * 100, None, None, None)
    assert acc.ready(leader, now)[0] == {7}                      # a full batch is sendable at once
    assert acc.ready(lambda t, p: -1, now)[2] == {"t"}           # leaderless: metadata needed


def test_drain_rotates_across_partitions_when_requests_fill():
    acc = _acc()
    for p in range(4):
        for _ in range(3):
            acc.append("t", p, None, b"x" * 400, None, None, None)
    now = wall_clock_ms() + 1000
    first = []
    for _ in range(4):                                           # room for one batch per request
        batches = acc.drain(leader, {7}, 500, now)[7]
        assert len(batches) == 1
        first.append(batches[0].partition)
    assert sorted(first) == [0, 1, 2, 3], first


def test_pool_is_a_hard_bound():
    acc = _acc(buffer_memory=3000)
    results = [acc.append("t", 0, None, b"x" * 900, None, None, None) for _ in range(10)]
    assert NEED_MEMORY in results
    assert acc.pool.used <= acc.pool.total == 3000


def _batches(acc, now):
    out = []
    for batches in acc.drain(leader, {7}, 1 << 30, now).values():
        out.extend(batches)
    return out


def test_batches_grow_in_the_pool_rather_than_taking_batch_size_up_front():
    # batch.size (1 MB) above buffer.memory (200 kB): every batch starts small and grows by
    # doubling, charged to the pool, so records spread over 4 partitions all fit. Taking
    # batch.size per batch up front (Java's rule) could never start even one batch here.
    acc = _acc(batch_size=1_000_000, buffer_memory=200_000)
    for i in range(1000):
        assert acc.append("t", i % 4, None, b"x" * 100, None, None, None) not in (NEED_MEMORY, NEED_METADATA)
        assert acc.pool.used <= acc.pool.total
    batches = _batches(acc, wall_clock_ms() + 1000)
    assert sorted(b.partition for b in batches) == [0, 1, 2, 3]
    assert sum(b.record_count for b in batches) == 1000
    assert acc.pool.used == sum(b.pool_bytes for b in batches)   # the charge is the batches' capacity
    assert all(16384 < b.pool_bytes < 100_000 for b in batches)     # grew from 16 KiB, far below 1 MB


def test_a_batch_the_pool_cannot_grow_is_full_and_sendable_at_once():
    acc = _acc(batch_size=1_000_000, buffer_memory=100_000, linger_ms=60_000)
    results = [acc.append("t", 0, None, b"y" * 1000, None, None, None) for _ in range(150)]
    assert NEED_MEMORY in results                                # the pool, not batch.size, ends it
    assert acc.pool.used <= acc.pool.total
    now = wall_clock_ms()
    assert acc.ready(leader, now)[0] == {7}                      # full: no waiting for linger
    first = _batches(acc, now)
    assert len(first) == 1 and 60 <= first[0].record_count < 100
    used, charged = acc.pool.used, first[0].pool_bytes
    first[0].free_memory()                                       # completed: its memory returns
    assert acc.pool.used == used - charged and charged > 60_000
