"""A Prometheus collector for a producer's metrics (the ``prometheus`` extra:
``pip install 'kproducer[prometheus]'``, which brings ``prometheus_client``)::

    from prometheus_client import REGISTRY, start_http_server
    from kproducer.prometheus import KProducerCollector

    REGISTRY.register(KProducerCollector(producer))
    start_http_server(8000)

Each scrape reads ``producer.metrics()`` once. The names follow Prometheus' conventions from
Java's metric names (the JMX exporter's usual rules): ``kafka_producer_`` plus the name with
``-`` turned into ``_`` (``record-send-rate`` -> ``kafka_producer_record_send_rate``), the
topic group's as ``kafka_producer_topic_*`` with a ``topic`` label, the node group's as
``kafka_producer_node_*`` with a ``node_id`` label, every one with a ``client_id`` label.
Java's cumulative ``-total`` metrics are counters (the exposition adds ``_total`` once);
rates, averages, maxima and current values are gauges. kproducer's own counters
(``records_acked``, ``requests``, ...) follow as ``kproducer_<name>``.

The exposition is built by :func:`families` without prometheus_client (tested alone);
:class:`KProducerCollector` only wraps it in prometheus_client's metric families.
"""

from __future__ import annotations

import math
from typing import Iterator, NamedTuple

from kproducer.java_metrics import NODE_GROUP, TOPIC_GROUP

__all__ = ["Family", "KProducerCollector", "families"]

# kproducer's own counters that only grow (the rest of its flat metrics are gauges).
_OWN_COUNTERS = frozenset({
    "records_acked", "records_failed", "requests", "batches", "batch_bytes", "retries",
    "producer_id_resets", "duplicates_on_first_send", "steps_by_application",
    "steps_by_io_thread", "step_wait_us_total", "requests_by_courier", "responses_by_courier",
    "rebootstraps", "sequence_violations", "steps_for_a_sleeping_sender",
    "produce_throttled_responses", "produce_throttle_time_ms_total", "request_latency_count",
    "metadata_version",
})


class Family(NamedTuple):
    """One metric family: ``name`` (without ``_total`` for a counter), ``kind`` ("counter"
    or "gauge"), ``documentation``, the ``labels`` names and ``samples`` [(label values,
    value)]."""

    name: str
    kind: str
    documentation: str
    labels: tuple
    samples: list


def _prom_name(java_name: str) -> str:
    return java_name.replace("-", "_")


def families(producer) -> list[Family]:
    """The producer's metrics as Prometheus families (see the module docstring)."""
    m = producer.metrics()
    client_id = producer.client_id
    out: dict[str, Family] = {}

    def add(name, kind, doc, labels, label_values, value):
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        fam = out.get(name)
        if fam is None:
            fam = out[name] = Family(name, kind, doc, labels, [])
        fam.samples.append((label_values, float(value)))

    def java(prefix, name, labels, label_values, value, group):
        if name.endswith("-total"):
            add(f"{prefix}{_prom_name(name[:-len('-total')])}", "counter",
                f"Java's {group} {name}", labels, label_values, value)
        else:
            add(f"{prefix}{_prom_name(name)}", "gauge", f"Java's {group} {name}",
                labels, label_values, value)

    for key, value in m.items():
        if key == TOPIC_GROUP:
            for topic, metrics in value.items():
                for name, v in metrics.items():
                    java("kafka_producer_topic_", name, ("client_id", "topic"),
                         (client_id, topic), v, TOPIC_GROUP)
        elif key == NODE_GROUP:
            for node, metrics in value.items():
                node_id = node[len("node-"):] if node.startswith("node-") else node
                for name, v in metrics.items():
                    java("kafka_producer_node_", name, ("client_id", "node_id"),
                         (client_id, node_id), v, NODE_GROUP)
        elif "-" in key:
            java("kafka_producer_", key, ("client_id",), (client_id,), value, "producer-metrics")
        elif key in _OWN_COUNTERS:
            name = key[:-len("_total")] if key.endswith("_total") else key
            add(f"kproducer_{name}", "counter", f"kproducer's {key}", ("client_id",),
                (client_id,), value)
        else:
            add(f"kproducer_{key}", "gauge", f"kproducer's {key}", ("client_id",),
                (client_id,), value)
    return list(out.values())


class KProducerCollector:
    """A prometheus_client collector of one producer's metrics: register it with
    ``REGISTRY.register(KProducerCollector(producer))``. NaN values (an average with no
    event in its window, as Java reports it) are exported as NaN."""

    def __init__(self, producer):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        self._producer = producer
        self._kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}

    def collect(self) -> Iterator:
        for fam in families(self._producer):
            metric = self._kinds[fam.kind](fam.name, fam.documentation, labels=list(fam.labels))
            for label_values, value in fam.samples:
                metric.add_metric(list(label_values), value if not math.isinf(value) else float("nan"))
            yield metric

    def describe(self) -> list:
        # No describe at registration (the names depend on the topics and brokers seen):
        # prometheus_client then calls collect() only when scraped.
        return []
