"""The Producer with no broker to talk to: send() blocks then raises within max.block.ms when
the bootstrap servers do not answer, retries back off with jitter, and metrics() has every
counter from the start. Against the real broker: tests/broker/test_producer.py."""

from __future__ import annotations

import time

import pytest

from kproducer import KafkaTimeoutError, Producer
from kproducer.testing.broker import free_port


@pytest.mark.timeout(60)
def test_absent_broker_blocks_then_raises_within_max_block_ms():
    port = free_port()
    with Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=800) as p:
        t0 = time.monotonic()
        fut = p.send("nowhere", b"v")       # the wait, then a failed future (Java's send)
        assert time.monotonic() - t0 >= 0.75
        with pytest.raises(KafkaTimeoutError, match="max.block.ms=800"):
            fut.result(0)
        t0 = time.monotonic()
        p.close(timeout=10)
        assert time.monotonic() - t0 < 10, "close does not hang"


def test_retry_backoff_grows_with_jitter():
    from kproducer.network import ExponentialBackoff
    b = ExponentialBackoff(100, 1000)
    firsts = {b.backoff(0) for _ in range(200)}
    assert min(firsts) >= 80 and max(firsts) <= 120 and len(firsts) > 10     # +/-20 % jitter
    assert 160 <= b.backoff(1) <= 240 and 800 <= b.backoff(10) <= 1200        # doubling, capped


def test_metrics_has_every_counter_from_the_start():
    """Counters that nothing has counted yet are there as 0 (a step run only by the I/O thread
    left ``steps_by_application`` out, and reading it raised KeyError)."""
    from kproducer.sender import COUNTERS
    p = Producer(bootstrap_servers=f"127.0.0.1:{free_port()}")   # nobody listens
    try:
        m = p.metrics()
        assert all(type(m[k]) is int and m[k] >= 0 for k in COUNTERS), m
        assert m["records_acked"] == m["records_failed"] == m["requests"] == 0
        assert m["buffer_available_bytes"] == m["buffer_total_bytes"] > 0
    finally:
        p.close(timeout=0)
