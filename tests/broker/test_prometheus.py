"""kproducer.prometheus: the families built from metrics() (without prometheus_client), and
the collector registered in a real prometheus_client registry, scraped in the text format."""

from __future__ import annotations

import math

import pytest

from kproducer import Producer
from kproducer.prometheus import KProducerCollector, families


def _by_name(fams) -> dict:
    return {f.name: f for f in fams}


def test_families_follow_prometheus_conventions(broker):
    broker.create_topic("prom", 2)
    with Producer(bootstrap_servers=broker.bootstrap, client_id="prom-client") as p:
        for i in range(300):
            p.send("prom", b"v%d" % i, key=b"%d" % i)
        p.flush(30)
        fams = _by_name(families(p))
        m = p.metrics()
    for fam in fams.values():
        assert fam.name == fam.name.lower() and "-" not in fam.name and "." not in fam.name
        assert fam.kind in ("counter", "gauge") and not fam.name.endswith("_total")
        assert fam.labels[0] == "client_id" and fam.samples
        for values, value in fam.samples:
            assert values[0] == "prom-client" and len(values) == len(fam.labels)
            assert isinstance(value, float)
    sent = fams["kafka_producer_record_send"]                    # Java's record-send-total
    assert sent.kind == "counter" and sent.samples == [(("prom-client",), 300.0)]
    assert fams["kafka_producer_record_send_rate"].kind == "gauge"
    assert fams["kafka_producer_request_latency_avg"].samples[0][1] == m["request-latency-avg"]
    topic = fams["kafka_producer_topic_record_send"]
    assert topic.labels == ("client_id", "topic") and topic.samples == [(("prom-client", "prom"), 300.0)]
    node = fams["kafka_producer_node_request"]
    assert node.labels == ("client_id", "node_id")
    assert {values[1] for values, _ in node.samples} == {k[len("node-"):] for k in m["producer-node-metrics"]}
    assert fams["kproducer_records_acked"].kind == "counter"
    assert fams["kproducer_records_acked"].samples[0][1] == 300.0
    assert fams["kproducer_buffer_available_bytes"].kind == "gauge"
    assert fams["kproducer_step_wait_us"].kind == "counter"      # step_wait_us_total
    # Every numeric metric is exported once: the producer group, the topic and node groups
    # (one sample per topic or node) and kproducer's own.
    java = [k for k, v in m.items() if "-" in k and isinstance(v, (int, float))]
    assert all(f"kafka_producer_{k.removesuffix('-total').replace('-', '_')}" in fams for k in java)


def test_collector_in_a_real_registry(broker):
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    with Producer(bootstrap_servers=broker.bootstrap, client_id="scraped") as p:
        registry.register(KProducerCollector(p))
        for i in range(50):
            p.send("prom-real", b"x%d" % i)
        p.flush(30)
        text = generate_latest(registry).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    sent = parsed["kafka_producer_record_send"]
    assert sent.type == "counter"
    (sample,) = [s for s in sent.samples if s.name == "kafka_producer_record_send_total"]
    assert sample.value == 50.0 and sample.labels == {"client_id": "scraped"}
    topic = parsed["kafka_producer_topic_record_send"]
    assert [s.value for s in topic.samples if s.name.endswith("_total")
            and s.labels["topic"] == "prom-real"] == [50.0]
    assert parsed["kafka_producer_buffer_available_bytes"].type == "gauge"
    assert parsed["kproducer_records_acked"].samples[0].value == 50.0
    queue_time = parsed["kafka_producer_record_queue_time_avg"].samples[0].value
    assert not math.isnan(queue_time) and queue_time >= 0
