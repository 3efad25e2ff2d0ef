"""Java's producer metrics in Producer.metrics() (kproducer.java_metrics): the names, groups
and values of Java's KafkaProducer.metrics(), checked against real sends read back, and the
sampled statistics (kproducer.sampled) against Java's Rate/Avg/Max rules."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from kproducer import Producer
from kproducer.java_metrics import NODE_GROUP, TOPIC_GROUP
from kproducer.sampled import Sampler
from kproducer.testing.readback import read_back

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"

OLD_KEYS = {"records_acked", "records_failed", "requests", "batches", "batch_bytes", "retries",
            "buffer_total_bytes", "buffer_available_bytes", "request_latency_avg_ms"}


def _documented_groups() -> dict:
    """{group: {names}} of the nested groups' table in docs/observability.md."""
    text = DOCS.read_text()
    out = {}
    for group in (TOPIC_GROUP, NODE_GROUP):
        row = re.search(rf"^\| {group} \| (.+) \|$", text, re.M).group(1)
        out[group] = {re.sub(r" \(.*", "", name.strip()) for name in row.split(", ")}
    return out


def test_java_metrics_count_what_was_sent_and_read_back(any_broker):
    broker = any_broker
    broker.create_topic("jm-a", 3)
    broker.create_topic("jm-b", 2)
    n_a, n_b = 2000, 500
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
        for i in range(n_a):
            p.send("jm-a", b"a%d" % i, key=b"%d" % i)
        for i in range(n_b):
            p.send("jm-b", b"b%d" % i, key=b"%d" % i)
        p.flush(30)
        m = p.metrics()
    back_a = read_back(broker.bootstrap, "jm-a", consumer_config=broker.consumer_config())
    back_b = read_back(broker.bootstrap, "jm-b", consumer_config=broker.consumer_config())
    assert sum(map(len, back_a.values())) == n_a and sum(map(len, back_b.values())) == n_b

    assert OLD_KEYS <= set(m)                       # kproducer's own counters stay
    assert m["records_acked"] == n_a + n_b
    assert m["record-send-total"] == n_a + n_b and m["record-error-total"] == 0
    assert m["record-retry-total"] == m["retries"] == 0
    assert m["record-send-rate"] > 0
    topics = m[TOPIC_GROUP]
    assert topics["jm-a"]["record-send-total"] == n_a and topics["jm-b"]["record-send-total"] == n_b
    assert topics["jm-a"]["byte-total"] + topics["jm-b"]["byte-total"] == m["batch_bytes"]
    assert topics["jm-a"]["record-send-rate"] > 0 and topics["jm-a"]["record-error-total"] == 0
    assert m["records-per-request-avg"] == pytest.approx((n_a + n_b) / m["requests"])
    assert m["batch-size-avg"] == pytest.approx(m["batch_bytes"] / m["batches"])
    assert m["batch-size-max"] == m["max_batch_bytes"]
    assert 0 <= m["record-queue-time-avg"] <= m["record-queue-time-max"]
    assert 0 < m["request-latency-avg"] <= m["request-latency-max"]
    assert m["produce-throttle-time-avg"] == 0 == m["produce-throttle-time-max"]
    assert m["buffer-available-bytes"] == m["buffer-total-bytes"] == 33554432
    assert m["bufferpool-wait-time-total"] == 0 and m["buffer-exhausted-total"] == 0
    assert m["requests-in-flight"] == 0
    assert m["metadata-age"] >= 0
    assert m["request-total"] >= m["requests"] and m["response-total"] >= m["requests"]
    assert m["outgoing-byte-total"] > m["batch_bytes"] and m["incoming-byte-total"] > 0
    assert m["connection-creation-total"] >= m["connection-count"] >= 1
    assert m["successful-authentication-total"] == 0 == m["successful-reauthentication-total"]

    nodes = m[NODE_GROUP]
    learned = {k: v for k, v in nodes.items() if not k.startswith("node--")}
    assert len(learned) == (3 if broker.kind == "mock-3" else 1), sorted(nodes)
    # The nodes' own (the bootstrap addresses removed since count in the total only).
    assert sum(v["request-total"] for v in nodes.values()) <= m["request-total"]
    produce_nodes = [v for v in learned.values() if not math.isnan(v["request-latency-avg"])]
    assert produce_nodes
    for v in produce_nodes:
        assert 0 < v["request-latency-avg"] <= v["request-latency-max"] <= m["request-latency-max"]
        assert v["outgoing-byte-total"] > 0 and v["response-total"] >= 1

    documented = _documented_groups()
    assert set(topics["jm-a"]) == documented[TOPIC_GROUP]
    assert all(set(v) == documented[NODE_GROUP] for v in nodes.values())


def test_errors_and_retries_per_topic():
    """On the mock cluster: retriable errors count as retries and the records arrive; a
    non-retriable error counts the records as errors, per topic as in total."""
    from kproducer.testing.mock_cluster import MockCluster
    with MockCluster(3) as cluster:
        cluster.create_topic("jm-retry", 1, replication_factor=3)
        cluster.create_topic("jm-fail", 1, replication_factor=3)
        with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=0) as p:
            assert p.send("jm-retry", b"warm").result(30).offset == 0
            assert p.send("jm-fail", b"warm").result(30).offset == 0
            cluster.push_request_errors(0, [19, 19])          # NOT_ENOUGH_REPLICAS: retriable
            assert p.send("jm-retry", b"x").result(30).offset == 1
            cluster.push_request_errors(0, [87])              # INVALID_RECORD: not retriable
            fut = p.send("jm-fail", b"y")
            with pytest.raises(Exception):
                fut.result(30)
            m = p.metrics()
        assert m["record-retry-total"] == 2 == m[TOPIC_GROUP]["jm-retry"]["record-retry-total"]
        assert m["record-error-total"] == 1 == m[TOPIC_GROUP]["jm-fail"]["record-error-total"]
        assert m[TOPIC_GROUP]["jm-retry"]["record-error-total"] == 0
        assert m["record-send-total"] == 2 + 3 + 1        # the retried batch counts each time
        assert m["record-retry-rate"] > 0 and m["record-error-rate"] > 0


class _Clock:
    def __init__(self):
        self.ms = 0


def _sampler(window_ms=1000, samples=2):
    clock = _Clock()
    counters = {"events": 0, "sum": 0}
    peaks = {"v": 0}

    def take():
        out = dict(peaks)
        peaks["v"] = 0
        return out

    s = Sampler(window_ms, samples, lambda: dict(counters), take, clock.ms)

    def record(value):
        counters["events"] += 1
        counters["sum"] += value
        peaks["v"] = max(peaks["v"], value)

    def view():
        return s.view(clock.ms, dict(counters), dict(peaks))
    return clock, record, view


def test_rate_follows_javas_window_size():
    clock, record, view = _sampler(window_ms=1000, samples=2)
    for _ in range(10):
        record(5)
    clock.ms = 500
    # Elapsed 500 ms, and (samples - 1) = 1 whole window added as Java does: 10 / 1.5 s.
    assert view().rate("events") == pytest.approx(10 / 1.5)
    clock.ms = 1500      # a second sample begins at 1500 (the first read after the window)
    assert view().rate("events") == pytest.approx(10 / 1.5)
    clock.ms = 2100      # the first sample started 2.1 s ago (2 x 1 s): dropped, as Java's purge
    record(7)
    v = view()
    assert v.total("events") == 1 and v.max("v", "events") == 7.0 and v.avg("sum", "events") == 7.0
    assert v.rate("events") == pytest.approx(1 / 1.6)
    assert v.now("events") == 11                     # a -total counts since the start
    clock.ms = 3600      # and the second (from 1500) too
    v = view()
    assert v.total("events") == 0 and math.isnan(v.max("v", "events"))


def test_avg_and_max_are_nan_without_events():
    clock, record, view = _sampler()
    v = view()
    assert math.isnan(v.avg("sum", "events")) and math.isnan(v.max("v", "events"))
    assert v.rate("events") == 0.0
    record(3)
    record(9)
    v = view()
    assert v.avg("sum", "events") == 6.0 and v.max("v", "events") == 9.0


def test_sample_settings_are_used(broker):
    with Producer(bootstrap_servers=broker.bootstrap, metrics_sample_window_ms=500,
                  metrics_num_samples=3) as p:
        sampler = p._java_metrics.sampler
        assert (sampler.window_ms, sampler.samples) == (500, 3)
        p.send("jm-settings", b"x").result(30)
        assert p.metrics()["record-send-total"] == 1


def test_reauthentications_are_counted(tmp_path):
    """KIP-368: the SASL gateway ends sessions after 1 s; the connections re-authenticate
    and metrics() counts it under Java's names."""
    import time

    from kproducer.testing import TansuBroker
    from kproducer.testing.broker import free_port
    from kproducer.testing.sasl_gateway import SaslGateway

    port = free_port()
    gw = SaslGateway("127.0.0.1", port, users={"alice": "alice-secret"}, session_ms=1000).start()
    broker = TansuBroker(port=port, advertised_port=gw.port, log_dir=tmp_path).start()
    try:
        with Producer(bootstrap_servers=gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_username="alice",
                      sasl_password="alice-secret") as p:
            deadline = time.monotonic() + 20
            while p.metrics()["successful-reauthentication-total"] < 1:
                assert time.monotonic() < deadline, "no re-authentication within 20 s"
                p.send("jm-reauth", b"x").result(30)      # a request on the connection
            m = p.metrics()
        assert m["successful-reauthentication-total"] == p._client.reauthentications >= 1
        assert m["successful-authentication-total"] >= 1
        assert m["failed-authentication-total"] == 0 == m["failed-reauthentication-total"]
    finally:
        gw.stop()
        broker.stop()
    broker.check_log()
