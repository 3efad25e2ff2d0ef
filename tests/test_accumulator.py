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


def test_batch_size_above_buffer_memory_still_makes_large_batches():
    # batch.size (1 MB) above buffer.memory (200 kB), records spread over 4 partitions.
    # Java's rule (every new batch takes batch.size from the pool) could not start a single
    # batch; here a batch takes at most half of what is free and grows in the pool. When the
    # pool is short, what is queued is sent (drained and completed here) and appends resume.
    acc = _acc(batch_size=1_000_000, buffer_memory=200_000)
    sent = []
    for i in range(2000):
        while (r := acc.append("t", i % 4, None, b"x" * 100, None, None, None)) is NEED_MEMORY:
            batches = _batches(acc, wall_clock_ms() + 1000)
            assert batches, "the pool is short but nothing is sendable"
            for b in batches:
                sent.append((b.record_count, b.pool_bytes))
                b.free_memory()
        assert r is not NEED_METADATA
        assert acc.pool.used <= acc.pool.total
    for b in _batches(acc, wall_clock_ms() + 1000):
        sent.append((b.record_count, b.pool_bytes))
    assert sum(n for n, _ in sent) == 2000
    assert all(charge < 200_000 for _, charge in sent)
    assert sum(n for n, _ in sent) / len(sent) >= 100              # large batches, not a few records


def test_a_batch_the_pool_cannot_grow_is_full_and_sendable_at_once():
    acc = _acc(batch_size=1_000_000, buffer_memory=100_000, linger_ms=60_000)
    results = [acc.append("t", 0, None, b"y" * 1000, None, None, None) for _ in range(150)]
    assert NEED_MEMORY in results                                # the pool, not batch.size, ends it
    assert acc.pool.used <= acc.pool.total
    now = wall_clock_ms()
    assert acc.ready(leader, now)[0] == {7}                      # full: no waiting for linger
    first = _batches(acc, now)
    assert len(first) == 1 and first[0].record_count >= 60
    used, charged = acc.pool.used, first[0].pool_bytes
    assert charged > 50_000                                      # grew past its first half of the pool
    first[0].free_memory()                                       # completed: its memory returns
    assert acc.pool.used == used - charged
