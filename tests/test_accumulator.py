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
