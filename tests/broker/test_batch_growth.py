"""Batches that grow past batch.max.size while every leader's window is full, end
to end: librdkafka's mock cluster (three brokers) with a long round trip, kproducer at its
defaults, the courier included. The accumulator's rules alone are in test_accumulator.py.

What is produced is read back with confluent-kafka's consumer. The mock keeps at most 5 MiB
of each partition, so these runs stay below that.
"""

from __future__ import annotations

import pytest

from kproducer import Producer
from kproducer.testing.mock_cluster import MockCluster
from kproducer.testing.readback import read_back

RESERVE = 1024      # _core.pyx's REQUEST_RESERVE


@pytest.fixture
def cluster():
    with MockCluster(3) as mc:
        mc.create_topic("t", partitions=6, replication_factor=3)
        yield mc


def _run(cluster, n, **settings):
    """n keyed 100 B records in a send() loop, then flush(); returns the metrics of those
    records and what was read back, {partition: [values]}. A record to each partition first
    connects every broker (a connection takes round trips of its own, and while a leader
    connects the batches have nowhere to go but are not held by a full window)."""
    with Producer(bootstrap_servers=cluster.bootstrap, **settings) as p:
        for part in range(6):
            p.send("t", b"warm", partition=part)
        p.flush(timeout=60)
        before = p.metrics()
        for i in range(n):
            p.send("t", b"%08d" % i + b"v" * 92, key=b"key-%d" % (i % 1000))
        p.flush(timeout=120)
        stats = p.metrics()
        for counter in ("records_acked", "batches", "batch_bytes"):
            stats[counter] -= before[counter]
        max_request_size = p.config.max_request_size
        batch_max_size = p.config.batch_max_size
    got = read_back(cluster.bootstrap, "t", timeout=120)
    return stats, {part: [int(m.value[:8]) for m in msgs if m.value != b"warm"]
                   for part, msgs in got.items()}, max_request_size, batch_max_size


def _check_all_once_in_order(got, n):
    values = [v for vs in got.values() for v in vs]
    assert len(values) == n and len(set(values)) == n
    for vs in got.values():
        assert vs == sorted(vs)


@pytest.mark.timeout(300)
def test_over_a_long_round_trip_batches_grow_towards_max_request_size(cluster):
    cluster.set_rtt_all(300)
    n = 100_000
    stats, got, max_request_size, batch_max_size = _run(cluster, n)
    assert stats["records_acked"] == n and stats.get("records_failed", 0) == 0
    # Every window was full for a round trip at a time: the batches grew past batch.max.size
    # (each to its share of a request to its leader), and none past max.request.size less
    # the request's own fields.
    assert batch_max_size < stats["max_batch_bytes"] <= max_request_size - RESERVE, stats
    assert stats["batch_bytes"] / stats["batches"] > batch_max_size / 2, stats
    _check_all_once_in_order(got, n)


@pytest.mark.timeout(300)
def test_javas_batches_never_grow_whatever_the_round_trip(cluster):
    cluster.set_rtt_all(300)
    n = 20_000
    stats, got, _, _ = _run(cluster, n, batch_max_size=16384)
    assert stats["records_acked"] == n
    assert stats["max_batch_bytes"] <= 16384, stats
    _check_all_once_in_order(got, n)
