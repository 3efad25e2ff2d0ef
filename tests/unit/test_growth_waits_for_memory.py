"""A batch past batch.size that the pool cannot grow at once waits for the memory, as a new
batch would, instead of closing at whatever size the pool allowed (issue 39: under a long
round trip the pool is always short, and batches cut at powers of two left requests a
quarter empty). The accumulator alone, no broker; end to end: test_batch_growth.py."""

from __future__ import annotations

from kproducer._core import NEED_MEMORY, RecordAccumulator, wall_clock_ms


def _record(i: int) -> bytes:
    return b"%06d" % i + b"x" * 94


def test_growth_past_batch_size_waits_for_memory_then_the_same_batch_grows():
    acc = RecordAccumulator(batch_size=1000, batch_max_size=64_000, buffer_memory=20_000,
                            linger_ms=60_000)
    acc.set_partition_count("t", 2)
    # Partition 0's batch grows by doubling past batch.size while the pool has the bytes:
    # 1000, 2000, 4000, 8000 bytes of capacity.
    i = 0
    while acc.pool.used < 8000:
        assert acc.append("t", 0, None, _record(i), None, None, None) is not NEED_MEMORY
        i += 1
    # Partition 1's batch grows the same way until its next doubling does not fit.
    j = 0
    while acc.append("t", 1, None, _record(j), None, None, None) is not NEED_MEMORY:
        j += 1
    assert acc.pool.total - acc.pool.used < 8000
    # Partition 0's next doubling (8000 bytes more) does not fit now either.
    while True:
        got = acc.append("t", 0, None, _record(i), None, None, None)
        if got is NEED_MEMORY:
            break
        i += 1
    # It asked for memory rather than closing partition 0's batch: one batch there, still
    # growing (a closed one would have been followed by a second, smaller batch).
    now = wall_clock_ms()
    assert acc.last_need > 0
    assert acc.queued_batches() == 2
    # Partition 1's batch goes (the Sender frees its memory); the same append now fits, in
    # the same batch.
    drained = acc.drain(lambda t, p: 7 if p == 1 else 8, {7}, 1 << 30, now)[7]
    assert [b.partition for b in drained] == [1]
    for b in drained:
        b.free_memory()
    assert acc.append("t", 0, None, _record(i), None, None, None) is not NEED_MEMORY
    batches = acc.drain(lambda t, p: 8, {8}, 1 << 30, now)[8]
    assert len(batches) == 1 and batches[0].record_count == i + 1
    assert acc.queued_batches() == 0
    for b in batches:
        b.free_memory()
    assert acc.pool.used == 0


def test_a_batch_that_could_never_grow_is_full_as_it_is():
    # The pool could never hold the doubled batch: it closes, and the next record starts a
    # new batch (no wait that could never end).
    acc = RecordAccumulator(batch_size=1000, batch_max_size=64_000, buffer_memory=6000,
                            linger_ms=60_000)
    acc.set_partition_count("t", 1)
    for i in range(80):
        assert acc.append("t", 0, None, _record(i), None, None, None) is not NEED_MEMORY \
            or acc.pool.used <= acc.pool.total
        if acc.queued_batches() > 1:
            break
    assert acc.queued_batches() >= 2
