"""RecordAccumulator rules without a broker: linger, fullness, drain rotation, pool bound."""

from __future__ import annotations

import pytest

from kproducer._core import (NEED_MEMORY, NEED_METADATA, BufferPool, RecordAccumulator,
                                    SenderTurn, wall_clock_ms)
from kproducer.errors import KafkaTimeoutError


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
    acc.append("t", 0, None, b"v", None, None, None)
    # Read after the append: the batch's creation time is the append's millisecond, so a clock
    # read before it could be a millisecond earlier (linger 51 ms away under the sanitizers).
    now = wall_clock_ms()
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


def test_each_partition_lingers_on_its_own_clock():
    # A node that is ready for one partition's full batch does not take the others' batches
    # along before their own linger.ms (librdkafka's rule, not Java's riders); ready() still
    # names the soonest of their waits, so the step that leaves them wakes for them.
    acc = _acc()
    acc.append("t", 0, None, b"v", None, None, None)             # lingering
    now = wall_clock_ms()                  # after the append: its batch's creation millisecond
    for _ in range(20):                                          # partition 1 past batch.size
        acc.append("t", 1, None, b"x" * 100, None, None, None)
    nodes, delay, _ = acc.ready(leader, now)
    assert nodes == {7} and 0 < delay <= 50
    taken = []
    while drained := acc.drain(leader, {7}, 1 << 20, now):       # partition 1's batches, one
        taken += [b.partition for b in drained[7]]               # per request
    assert set(taken) == {1} and len(taken) >= 2                 # partition 0 still lingers
    nodes, delay, _ = acc.ready(leader, now)
    assert nodes == set() and 0 < delay <= 50
    later = acc.drain(leader, {7}, 1 << 20, now + 60)[7]              # both lingered: both go,
    assert sorted(b.partition for b in later) == [0, 1]                # partition 1's last too


def test_drain_lingering_takes_every_partition():
    acc = _acc()
    now = wall_clock_ms()
    for p in range(4):
        acc.append("t", p, None, b"v", None, None, None)
    assert acc.drain(leader, {7}, 1 << 20, now) == {}
    taken = acc.drain(leader, {7}, 1 << 20, now, lingering=True)[7]
    assert sorted(b.partition for b in taken) == [0, 1, 2, 3]


def test_pool_is_a_hard_bound():
    acc = _acc(buffer_memory=3000)
    results = [acc.append("t", 0, None, b"x" * 900, None, None, None) for _ in range(10)]
    assert NEED_MEMORY in results
    assert acc.pool.used <= acc.pool.total == 3000


def test_the_turn_and_its_steps_are_given_to_the_constructors(pipe):
    """The accumulator takes the turn's watcher and its two ways of running steps when it is
    built, and hands run_steps_until to its pool: nothing is assigned from outside later."""
    calls = []

    def run_steps_until(done, deadline, step_first=False):
        calls.append(deadline)
        return done()

    turn = SenderTurn(pipe[0])
    try:
        acc = _acc(buffer_memory=3000, turn=turn, step=calls.clear, run_steps_until=run_steps_until)
        assert (acc.turn, acc.step, acc.pool.run_steps_until) == (turn, calls.clear, run_steps_until)
        for name, value in (("turn", None), ("step", None)):
            with pytest.raises(AttributeError):
                setattr(acc, name, value)
        with pytest.raises(AttributeError):
            acc.pool.run_steps_until = None
        while acc.append("t", 0, None, b"x" * 900, None, None, None) is not NEED_MEMORY:
            pass
        # A thread short of memory runs the steps that free it (here: none) before it waits.
        with pytest.raises(KafkaTimeoutError):
            acc.pool.wait_available(acc.last_need, 0.01)
        assert len(calls) == 1
    finally:
        turn.close()
    assert _acc().turn is None and _acc().pool.run_steps_until is None
    assert BufferPool(10).run_steps_until is None


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


# -- KIP-782: batches that grow while their leader is busy ----------------------------------

def _drain_all(acc, now):
    out = []
    while acc.queued_batches():
        out += _batches(acc, now)
    return out


def _fill(acc, partition, n, size=100):
    for i in range(n):
        assert acc.append("t", partition, None, b"%06d" % i + b"x" * (size - 6), None, None,
                          None) not in (NEED_MEMORY, NEED_METADATA)


def test_batch_max_size_equal_to_batch_size_gives_javas_batches():
    """Java's rule: a batch closes when the next record would take it past batch.size; the
    default growth bound never applies when batch.max.size == batch.size."""
    java = _acc(batch_size=1000, batch_max_size=1000)
    _fill(java, 0, 200)
    batches = _drain_all(java, wall_clock_ms() + 1000)
    sizes = [b.size_in_bytes for b in batches]
    counts = [b.record_count for b in batches]
    assert all(s <= 1000 for s in sizes) and sum(counts) == 200
    # Each full batch had no room for one more record (records here add 100 + 8 bytes).
    assert all(s + 108 > 1000 for s in sizes[:-1])
    assert len(set(counts[:-1])) == 1     # the same number of records in every full batch
    # A batch that never grows is never marked as grown past batch.size.
    assert java.batch_max_size == java.batch_size == 1000


def test_a_batch_at_batch_size_is_sendable_at_once_and_grows_while_undrained():
    acc = _acc(batch_size=1000, batch_max_size=4000, linger_ms=60_000)
    now = wall_clock_ms()
    _fill(acc, 0, 5)                                 # ~560 bytes: lingering
    assert acc.ready(leader, now)[0] == set()
    _fill(acc, 0, 5)                                 # past 1000 bytes: sendable at once
    assert acc.ready(leader, now)[0] == {7}
    assert acc.queued_batches() == 1                 # ... and still the one open batch
    _fill(acc, 0, 20)                                # the leader is busy: it keeps growing
    assert acc.queued_batches() == 1
    _fill(acc, 0, 30)                                # until batch.max.size, then a new one
    batches = _batches(acc, now)
    assert [b.partition for b in batches] == [0]     # one batch per partition per drain
    first = batches[0]
    assert 3000 < first.size_in_bytes <= 4000 and first.reached_size
    rest = _drain_all(acc, now)
    assert sum(b.record_count for b in (first, *rest)) == 60


def test_a_batch_drained_when_it_reaches_batch_size_stays_near_it():
    """The leader can take a request now: the Sender drains the batch as soon as ready()
    says it is full, so it does not grow."""
    acc = _acc(batch_size=1000, batch_max_size=100_000, linger_ms=60_000)
    now = wall_clock_ms()
    sizes = []
    for i in range(300):
        _fill(acc, 0, 1)
        if acc.ready(leader, now)[0]:
            sizes += [b.size_in_bytes for b in _batches(acc, now)]
    assert sizes and all(1000 <= s < 1000 + 108 for s in sizes)


def test_growth_past_batch_size_charges_the_pool_exactly():
    acc = _acc(batch_size=1000, batch_max_size=64_000, buffer_memory=8000, linger_ms=60_000)
    now = wall_clock_ms()
    for p in range(4):
        _fill(acc, p, 15)                            # each past batch.size, grown by doubling
    assert acc.pool.used <= acc.pool.total == 8000
    batches = _drain_all(acc, now)
    assert all(b.reached_size and b.size_in_bytes > 1000 for b in batches)
    assert sum(b.pool_bytes for b in batches) == acc.pool.used
    for b in batches:
        b.free_memory()
    assert acc.pool.used == 0
    # Past batch.size, a batch the pool cannot grow at once waits for the memory as a new
    # batch would (NEED_MEMORY), so records keep flowing as long as the Sender frees memory:
    # no record is refused.
    appended = 0
    for i in range(300):
        while acc.append("t", 0, None, b"%06d" % i + b"x" * 94, None, None, None) is NEED_MEMORY:
            assert acc.pool.used <= 8000
            for b in _drain_all(acc, now):
                appended += b.record_count
                b.free_memory()
        assert acc.pool.used <= 8000
    appended += sum(b.record_count for b in _drain_all(acc, now))
    assert appended == 300


# -- past batch.max.size while every window is full (issue 39) --------------------------------

RESERVE = 1024      # _core.pyx's REQUEST_RESERVE


def test_the_busy_bound_is_max_request_size_less_the_reserve_unless_javas_batches():
    assert _acc(batch_size=1000, batch_max_size=4000, max_request_size=21_024).batch_max_size_busy == 20_000
    # Never below batch.max.size; Java's batches (and batching off) never grow at all.
    assert _acc(batch_size=1000, batch_max_size=4000, max_request_size=4500).batch_max_size_busy == 4000
    assert _acc(batch_size=1000, batch_max_size=1000).batch_max_size_busy == 1000
    assert _acc(batch_size=1, batch_max_size=1).batch_max_size_busy == 1


def _grown(windows_full, n=300, **kw):
    acc = _acc(**{"batch_size": 1000, "batch_max_size": 4000, "max_request_size": 21_024,
                  "linger_ms": 60_000, **kw})
    acc.windows_full = windows_full
    _fill(acc, 0, 1)
    acc.ready(leader, wall_clock_ms())               # a step: partition 0 alone on its leader
    _fill(acc, 0, n - 1)                             # 300 x 108 bytes: more than 20,000
    return acc


def test_a_batch_grows_past_batch_max_size_while_every_window_is_full():
    acc = _grown(windows_full=True)
    now = wall_clock_ms()
    batches = _drain_all(acc, now)
    sizes = [b.size_in_bytes for b in batches]
    assert sum(b.record_count for b in batches) == 300
    # Full at max.request.size less the reserve: no room for one more record, never past it.
    assert all(20_000 - 108 < s <= 20_000 == 21_024 - RESERVE for s in sizes[:-1]), sizes
    assert len(sizes) == 2
    # Its growth was charged to the pool, by doubling (1000 -> ... -> 4000 -> 8000 -> 16000
    # -> 20000), and every byte comes back.
    assert [b.pool_bytes for b in batches] == [20_000, 16_000]
    assert acc.pool.used == 36_000
    for b in batches:
        b.free_memory()
    assert acc.pool.used == 0


def test_with_a_window_free_a_batch_stops_at_batch_max_size_as_before():
    acc = _grown(windows_full=False)
    batches = _drain_all(acc, wall_clock_ms())
    sizes = [b.size_in_bytes for b in batches]
    assert sum(b.record_count for b in batches) == 300
    assert all(4000 - 108 < s <= 4000 for s in sizes[:-1]), sizes
    assert all(b.pool_bytes <= 4000 for b in batches)


def test_a_grown_batch_is_full_once_a_window_has_room():
    """The flag clears (a step found room): the next record finds the grown batch full at
    batch.max.size, and starts the next one; the grown batch is sendable at once."""
    acc = _grown(windows_full=True, n=100)           # about 10,800 bytes: grown past 4000
    assert acc.queued_batches() == 1
    acc.windows_full = False
    _fill(acc, 0, 1)
    assert acc.queued_batches() == 2
    now = wall_clock_ms()
    assert acc.ready(leader, now)[0] == {7}
    first = _batches(acc, now)[0]
    assert first.record_count == 100 and 4000 < first.size_in_bytes < 20_000


def test_partitions_that_share_a_leader_grow_to_their_share_of_a_request():
    """A request takes one batch of each partition: two on one leader grow to half of the
    bound each and go out together; on leaders of their own, to the whole of it. Before any
    step counted them, a batch stops at batch.max.size as before."""
    def grown(leader_of, ready=True):
        acc = _acc(batch_size=1000, batch_max_size=4000, max_request_size=21_024, linger_ms=60_000)
        acc.windows_full = True
        _fill(acc, 0, 1)
        _fill(acc, 1, 1)
        if ready:
            acc.ready(leader_of, wall_clock_ms())
        _fill(acc, 0, 299)
        _fill(acc, 1, 299)
        return acc

    acc = grown(leader)                              # both on node 7
    first = acc.drain(leader, {7}, acc.max_request_size, wall_clock_ms())[7]
    assert sorted(b.partition for b in first) == [0, 1]          # one request takes both
    assert all(10_000 - 108 < b.size_in_bytes <= 10_000 for b in first), first
    assert sum(b.size_in_bytes for b in first) <= acc.max_request_size - RESERVE

    def apart(topic, partition):
        return 7 + partition
    acc = grown(apart)
    first = acc.drain(apart, {7, 8}, acc.max_request_size, wall_clock_ms())
    assert all(20_000 - 108 < b.size_in_bytes <= 20_000 for bs in first.values() for b in bs)

    acc = grown(leader, ready=False)
    first = acc.drain(leader, {7}, acc.max_request_size, wall_clock_ms())[7]
    assert all(4000 - 108 < b.size_in_bytes <= 4000 for b in first), first


def test_a_batch_below_batch_size_does_not_grow_past_batch_max_size():
    """Only a batch that reached batch.size grows past batch.max.size: one still below it
    that has no room for a large record is full as before (it waits for no memory)."""
    acc = _acc(batch_size=3000, batch_max_size=4000, max_request_size=21_024, linger_ms=60_000)
    acc.windows_full = True
    _fill(acc, 0, 1)
    acc.ready(leader, wall_clock_ms())
    _fill(acc, 0, 19)                                # about 2,200 bytes: below batch.size
    assert acc.append("t", 0, None, b"z" * 2000, None, None, None) not in (NEED_MEMORY, NEED_METADATA)
    batches = _drain_all(acc, wall_clock_ms() + 100_000)     # (the second one lingers)
    assert [b.record_count for b in batches] == [20, 1]


def test_growth_past_batch_max_size_waits_for_memory_unless_it_never_could():
    """A pool too small for a batch's next doubling ever: the batch is full as it is (a new
    one starts); one whose doubling would fit once memory is freed waits for it, as a new
    batch would (``last_need`` is that growth), rather than closing small."""
    acc = _acc(batch_size=1000, batch_max_size=4000, max_request_size=1 << 20,
               buffer_memory=12_000, linger_ms=60_000)
    acc.windows_full = True
    _fill(acc, 0, 1)
    acc.ready(leader, wall_clock_ms())
    results = [None] + [acc.append("t", 0, None, b"%06d" % i + b"x" * 94, None, None, None)
                        for i in range(1, 300)]
    assert NEED_MEMORY in results
    assert acc.last_need == 4000 and acc.pool.waiters == 0
    assert acc.pool.used <= acc.pool.total == 12_000
    batches = _drain_all(acc, wall_clock_ms())
    # The first grew from 4000 to 8000 (16000 could never fit the pool: full as it is); the
    # second waits to double past 4000 (8000 would fit once the first is freed).
    assert [b.pool_bytes for b in batches] == [8000, 4000]
    assert 4000 < batches[0].size_in_bytes <= 8000 and batches[1].size_in_bytes <= 4000
    assert sum(b.record_count for b in batches) == results.index(NEED_MEMORY)
    assert sum(b.pool_bytes for b in batches) == acc.pool.used


def test_record_metadata_is_a_namedtuple_built_in_c_without_leaks():
    # The futures' RecordMetadata is allocated and filled in C (RECORD_METADATA_IN_C): a
    # real RecordMetadata (fields, tuple equality, GC-tracked), for the future's result, an
    # on_delivery callback and the log-append time alike, and nothing it holds leaks.
    import gc
    import sys

    from kproducer import RecordMetadata
    from kproducer import _core

    assert _core.RECORD_METADATA_IN_C is True
    topic = "".join(["metadata-", "topic"])      # a string of its own: its count is ours
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    acc.set_partition_count(topic, 2)
    delivered = []
    futs = [acc.append(topic, 1, None, b"v", 1_700_000_000_000 + i, None,
                       lambda err, md: delivered.append(md)) for i in range(3)]
    other = acc.append(topic, 0, None, b"v", 5, None, None)
    now = wall_clock_ms() + 1000
    batches = {b.partition: b for b in acc.drain(leader, acc.ready(leader, now)[0], 1 << 20, now)[7]}
    batches[1].result.complete(40, -1, None)
    md = futs[2].result()
    assert type(md) is RecordMetadata and md == (topic, 1, 42, 1_700_000_000_002)
    assert (md.topic, md.partition, md.offset, md.timestamp) == md and md._asdict()["offset"] == 42
    assert delivered == [(topic, 1, 40 + i, 1_700_000_000_000 + i) for i in range(3)]
    assert gc.is_tracked(md) and hash(md) == hash(tuple(md))
    before = sys.getrefcount(topic)
    for _ in range(1000):
        futs[1].result()
    assert sys.getrefcount(topic) == before
    # LogAppendTime: the broker's time for every record of the batch, -1 offsets with acks=0.
    batches[0].result.complete(-1, 1_800_000_000_000, None)
    assert other.result() == (topic, 0, -1, 1_800_000_000_000)


# -- steps a full batch asks for -------------------------------------------------------------

def _steps_asked(windows_full, txn_generation=0, availability_timeout_ms=0):
    """How many times a record that fills the open batch asks for a step (``wakeup``)."""
    woken = []
    acc = _acc(batch_size=1000, batch_max_size=1000, linger_ms=60_000,
               wakeup=lambda: woken.append(1), availability_timeout_ms=availability_timeout_ms)
    acc.windows_full = windows_full
    acc.txn_generation = txn_generation
    _fill(acc, 0, 8)                                 # 61 + 8 x 108 bytes: lingering
    del woken[:]                                     # (the batch's start named its linger)
    _fill(acc, 0, 1)                                 # no room: it fills, the next one starts
    assert acc.queued_batches() == 2 and acc.ready(leader, wall_clock_ms())[0] == {7}
    return len(woken)


def test_a_batch_that_fills_while_every_window_is_full_asks_for_no_step():
    # The answer that makes room brings the step that sends it (Sender._step sets the flag).
    assert _steps_asked(windows_full=False) == 1
    assert _steps_asked(windows_full=True) == 0
    # A transaction's step adds the new batch's partition: it is asked for all the same.
    assert _steps_asked(windows_full=True, txn_generation=1) == 1
    # With partitioner.availability.timeout.ms the ready pass times the stalled leader
    # (test_partitioner: the Sender tracks how long a leader leaves ready batches waiting).
    assert _steps_asked(windows_full=True, availability_timeout_ms=100_000) == 1


def test_a_record_that_waits_for_memory_asks_for_a_step_whatever_the_windows():
    """The record fills its batch and finds no memory for the next: the steps free it."""
    woken = []
    acc = _acc(batch_size=1000, buffer_memory=3000, linger_ms=60_000,
               wakeup=lambda: woken.append(1))
    acc.windows_full = True
    for _ in range(10):
        before = len(woken)
        if acc.append("t", 0, None, b"x" * 900, None, None, None) is NEED_MEMORY:
            break
    else:
        raise AssertionError("the pool never ran short")
    assert len(woken) == before + 1
