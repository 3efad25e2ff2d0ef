"""kproducer.backoff.ExponentialBackoff (Java's), the one retry wait: its schedule, its
jitter bounds, and that reconnects, metadata refreshes and produce retries all use it."""

from __future__ import annotations

import random

from kproducer.backoff import ExponentialBackoff


def test_doubles_up_to_the_cap_without_jitter():
    b = ExponentialBackoff(100, 1000, jitter=0)
    assert [b.backoff(a) for a in range(7)] == [100, 200, 400, 800, 1000, 1000, 1000]
    assert b.backoff(10_000) == 1000                      # no overflow for huge attempt counts


def test_jitter_stays_within_bounds_and_under_the_cap():
    b = ExponentialBackoff(100, 1000, rng=random.Random(7))
    firsts = {b.backoff(0) for _ in range(500)}
    assert min(firsts) >= 80 and max(firsts) <= 120 and len(firsts) > 10     # +/-20 %
    assert all(160 <= b.backoff(1) <= 240 for _ in range(200))
    capped = [b.backoff(10) for _ in range(500)]
    assert max(capped) == 1000 and min(capped) >= 800      # never above max (Java)


def test_degenerate_settings():
    assert ExponentialBackoff(0, 1000).backoff(3) == 0              # no backoff at all
    assert ExponentialBackoff(500, 100, jitter=0).backoff(4) == 500  # max below initial: flat
    assert ExponentialBackoff(50, 50).backoff(9) == 50                # no growth, no jitter


def test_every_retry_wait_uses_it():
    from kproducer import network, sender
    from kproducer._core import RecordAccumulator, wall_clock_ms
    from kproducer.metadata import Metadata
    from kproducer.network import NetworkClient

    assert network.ExponentialBackoff is ExponentialBackoff          # its old import path
    assert sender.ExponentialBackoff is ExponentialBackoff
    assert isinstance(Metadata()._backoff, ExponentialBackoff)
    client = NetworkClient(client_id="t", reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000)
    try:
        assert isinstance(client.reconnect, ExponentialBackoff) and client.reconnect.max == 1000
    finally:
        client.close()
    # The accumulator's default for a re-enqueued batch (split batches): the same schedule,
    # without jitter, read back through ready()'s wait.
    acc = RecordAccumulator(batch_size=1000, linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    acc.set_partition_count("t", 1)
    acc.append("t", 0, None, b"v", None, None, None)
    now = wall_clock_ms()
    (batch,) = acc.drain(lambda t, p: 1, {1}, 1 << 20, now)[1]
    waits = []
    for _ in range(5):
        acc.reenqueue(batch, now)
        waits.append(acc.ready(lambda t, p: 1, now)[1])
        (batch,) = acc.drain(lambda t, p: 1, {1}, 1 << 20, now + 10_000)[1]
    assert waits == [100, 200, 400, 800, 1000]
