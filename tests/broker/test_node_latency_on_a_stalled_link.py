"""The accumulator's node latency figures (NodeLatencyStats), fed by the Sender on a real
link: a FaultProxy stalls it so the leader cannot take more. The partitioner's unit tests:
tests/unit/test_partitioner.py."""

from __future__ import annotations


# ===========================================================================
# The Sender's figures on a real link
# ===========================================================================

def test_sender_tracks_how_long_a_leader_leaves_ready_batches_waiting(proxied_broker):
    """The accumulator's NodeLatencyStats, fed by the Sender: while the leader cannot take
    more (its five in-flight requests are stuck behind a stalled link), ready_ms moves on
    and drain_ms stays put; once the link moves again a drain resets the gap."""
    import time

    from kproducer import Producer

    broker, proxy = proxied_broker
    broker.create_topic("stall-lat", 1)
    with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, acks=1, enable_idempotence=False,
                  request_timeout_ms=30_000, partitioner_availability_timeout_ms=100_000) as p:
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
                waited = max((r - d for r, d in p._acc.node_latency().values()), default=0)
                if waited >= 500:
                    break
                time.sleep(0.05)
            assert waited >= 500, p._acc.node_latency()
        finally:
            proxy.stall(False)
        assert all(f.result(timeout=30).partition == 0 for f in futures)
    assert max(r - d for r, d in p._acc.node_latency().values()) < waited
