"""The Java producer's metrics, under Java's names, for ``Producer.metrics()``.

Java's ``KafkaProducer.metrics()`` is a map of MetricName (name, group, tags) to value. Here
the three groups become parts of the dict ``metrics()`` returns, beside kproducer's own
counters (whose names use underscores, so the two never clash):

- ``producer-metrics`` (tag ``client-id``): its metrics at the top level of the dict,
  ``record-send-rate``, ``request-latency-avg``, ...;
- ``producer-topic-metrics`` (tags ``client-id``, ``topic``): ``metrics()["producer-topic-
  metrics"][topic]``, a dict of ``record-send-rate``, ``byte-total``, ...;
- ``producer-node-metrics`` (tags ``client-id``, ``node-id``): ``metrics()["producer-node-
  metrics"]["node-<id>"]``, Java's ``node-id`` tag value (bootstrap nodes, before metadata
  names the brokers, have negative ids: ``node--1``).

Rates, averages and maxima are Java's sampled statistics over ``metrics.num.samples``
samples of ``metrics.sample.window.ms`` (kproducer.sampled), computed from counters the
producer keeps per request and per batch (kproducer.counters); an average or maximum with
no event in the window is NaN, as in Java. Times are in ms (``bufferpool-wait-time-total``
and ``bufferpool-wait-time-ns-total`` in ns, ``metadata-age`` in s), sizes in bytes.
"""

from __future__ import annotations

from kproducer.network import READY
from kproducer.sampled import Sampler

__all__ = ["JavaMetrics", "PRODUCER_GROUP", "TOPIC_GROUP", "NODE_GROUP"]

PRODUCER_GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics"
NODE_GROUP = "producer-node-metrics"

# What each Java metric of the producer group is: (name, kind, counter[, count counter]);
# kind: "rate", "total", "avg", "max" (over the samples), "ratio" (a rate of ns per s).
_PRODUCER = (
    ("record-send-rate", "rate", "record-send"),
    ("record-send-total", "total", "record-send"),
    ("record-retry-rate", "rate", "record-retry"),
    ("record-retry-total", "total", "record-retry"),
    ("record-error-rate", "rate", "record-error"),
    ("record-error-total", "total", "record-error"),
    ("records-per-request-avg", "avg", "record-send", "requests"),
    ("batch-size-avg", "avg", "batch-bytes", "batches"),
    ("batch-size-max", "max", "batch-size", "batches"),
    ("record-queue-time-avg", "avg", "queue-time", "queue-count"),
    ("record-queue-time-max", "max", "queue-time", "queue-count"),
    ("request-latency-avg", "avg", "latency-ms", "latency-count"),
    ("request-latency-max", "max", "latency-ms", "latency-count"),
    ("produce-throttle-time-avg", "avg", "throttle-ms", "throttle-count"),
    ("produce-throttle-time-max", "max", "throttle-ms", "throttle-count"),
    ("batch-split-rate", "rate", "splits"),
    ("batch-split-total", "total", "splits"),
    ("request-rate", "rate", "tx"),
    ("request-total", "total", "tx"),
    ("response-rate", "rate", "rx"),
    ("response-total", "total", "rx"),
    ("outgoing-byte-rate", "rate", "bytes-out"),
    ("outgoing-byte-total", "total", "bytes-out"),
    ("incoming-byte-rate", "rate", "bytes-in"),
    ("incoming-byte-total", "total", "bytes-in"),
    ("connection-creation-rate", "rate", "connects"),
    ("connection-creation-total", "total", "connects"),
    ("connection-close-rate", "rate", "disconnects"),
    ("connection-close-total", "total", "disconnects"),
    ("bufferpool-wait-ratio", "ratio", "wait-ns"),
    ("buffer-exhausted-rate", "rate", "exhausted"),
    ("buffer-exhausted-total", "total", "exhausted"),
    ("successful-authentication-rate", "rate", "auth-ok"),
    ("successful-authentication-total", "total", "auth-ok"),
    ("failed-authentication-rate", "rate", "auth-failed"),
    ("failed-authentication-total", "total", "auth-failed"),
    ("successful-reauthentication-rate", "rate", "reauth-ok"),
    ("successful-reauthentication-total", "total", "reauth-ok"),
    ("failed-reauthentication-rate", "rate", "reauth-failed"),
    ("failed-reauthentication-total", "total", "reauth-failed"),
)
# Gauges and lifetime totals, read as they are: buffer-total-bytes, buffer-available-bytes,
# bufferpool-wait-time-total, bufferpool-wait-time-ns-total, requests-in-flight,
# connection-count, metadata-age.

_TOPIC = (
    ("record-send-rate", "rate", "record-send"),
    ("record-send-total", "total", "record-send"),
    ("byte-rate", "rate", "bytes"),
    ("byte-total", "total", "bytes"),
    ("record-retry-rate", "rate", "record-retry"),
    ("record-retry-total", "total", "record-retry"),
    ("record-error-rate", "rate", "record-error"),
    ("record-error-total", "total", "record-error"),
)

_NODE = (
    ("request-rate", "rate", "tx"),
    ("request-total", "total", "tx"),
    ("response-rate", "rate", "rx"),
    ("response-total", "total", "rx"),
    ("outgoing-byte-rate", "rate", "bytes-out"),
    ("outgoing-byte-total", "total", "bytes-out"),
    ("incoming-byte-rate", "rate", "bytes-in"),
    ("incoming-byte-total", "total", "bytes-in"),
    ("request-latency-avg", "avg", "latency-ms", "latency-count"),
    ("request-latency-max", "max", "latency-ms", "latency-count"),
)


class JavaMetrics:
    """The Java-named metrics of one producer (its Sender, NetworkClient, BufferPool and
    Metadata); see the module docstring. The Sender's steps end the samples as they come
    due (``Sender.sampler``)."""

    def __init__(self, sender, pool, metadata, window_ms: int, samples: int):
        self.sender = sender
        self.client = sender.client
        self.pool = pool
        self.metadata = metadata
        self._time = sender.time
        self.sampler = Sampler(window_ms, samples, self._counters, self._take_peaks,
                               self._time.mono_ms())

    # -- the counters and peaks the samples keep -------------------------------------------

    def _counters(self) -> dict:
        """Every counter the metrics are computed from, now: ``{key: number}`` with keys
        ``name`` (producer), ``(TOPIC_GROUP, topic, name)`` and ``(NODE_GROUP, id, name)``."""
        s = self.sender
        stats = s.stats
        sc = s.counters
        client = self.client
        out = {"requests": stats["requests"], "batches": stats["batches"],
               "batch-bytes": stats["batch_bytes"], "record-error": stats["records_failed"],
               "queue-time": sc.queue_time_total_ms, "queue-count": sc.queue_time_count,
               "splits": sc.splits, "wait-ns": self.pool.wait_time_ns_total,
               "exhausted": self.pool.exhausted, "auth-ok": client.authentications,
               "auth-failed": client.authentication_failures,
               "reauth-ok": client.reauthentications,
               "reauth-failed": client.reauthentication_failures}
        sent = retried = 0
        for (topic, _), pc in list(sc.partitions.items()):
            sent += pc.txmsgs
            retried += pc.retried
            for name, value in (("record-send", pc.txmsgs), ("bytes", pc.txbytes),
                                ("record-retry", pc.retried), ("record-error", pc.failed)):
                key = (TOPIC_GROUP, topic, name)
                out[key] = out.get(key, 0) + value
        out["record-send"] = sent
        out["record-retry"] = retried
        totals = dict.fromkeys(("tx", "rx", "bytes-out", "bytes-in", "latency-ms",
                                "latency-count", "throttle-ms", "throttle-count", "connects",
                                "disconnects"), 0)
        for node_id, ns in list(client.nodes.items()):
            nc = ns.counters
            sent_bytes, read_bytes = nc.bytes()
            for name, value in (("tx", nc.tx), ("rx", nc.rx), ("bytes-out", sent_bytes),
                                ("bytes-in", read_bytes), ("latency-ms", nc.latency_total_us / 1000),
                                ("latency-count", nc.latency_count)):
                out[(NODE_GROUP, node_id, name)] = value
                totals[name] += value
            totals["throttle-ms"] += nc.throttle_total_ms
            totals["throttle-count"] += nc.throttle_count
            totals["connects"] += nc.connects
            totals["disconnects"] += nc.disconnects
        removed = client.removed
        totals["tx"] += removed.tx
        totals["rx"] += removed.rx
        totals["bytes-out"] += removed.txbytes
        totals["bytes-in"] += removed.rxbytes
        totals["connects"] += removed.connects
        totals["disconnects"] += removed.disconnects
        out.update(totals)
        return out

    def _peaks(self, take: bool) -> dict:
        """The largest values since the last sample ended; ``take``: and start again."""
        sc = self.sender.counters
        out = {"batch-size": sc.batch_size_peak, "queue-time": sc.queue_time_peak_ms}
        latency = throttle = 0
        for node_id, ns in list(self.client.nodes.items()):
            nc = ns.counters
            out[(NODE_GROUP, node_id, "latency-ms")] = nc.latency_peak_us / 1000
            latency = max(latency, nc.latency_peak_us)
            throttle = max(throttle, nc.throttle_peak_ms)
            if take:
                nc.latency_peak_us = nc.throttle_peak_ms = 0
        out["latency-ms"] = latency / 1000
        out["throttle-ms"] = throttle
        if take:
            sc.batch_size_peak = sc.queue_time_peak_ms = 0
        return out

    def _take_peaks(self) -> dict:
        return self._peaks(True)

    # -- the metrics ------------------------------------------------------------------------

    def read(self) -> dict:
        """The producer group's metrics, with the topic and node groups under
        ``TOPIC_GROUP`` and ``NODE_GROUP`` (see the module docstring)."""
        now = self._time.mono_ms()
        view = self.sampler.view(now, self._counters(), self._peaks(False))
        out = {name: _value(view, kind, name, keys) for name, kind, *keys in _PRODUCER}
        pool = self.pool
        client = self.client
        wait_ns = pool.wait_time_ns_total
        updated = self.metadata.last_update_ms
        out.update({
            "buffer-total-bytes": pool.total,
            "buffer-available-bytes": pool.available,
            "bufferpool-wait-time-total": wait_ns,
            "bufferpool-wait-time-ns-total": wait_ns,
            "requests-in-flight": client.in_flight_count(),
            "connection-count": sum(1 for ns in list(client.nodes.values()) if ns.state == READY),
            "metadata-age": (self._time.wall_ms() - updated) / 1000 if updated is not None else 0.0,
        })
        topics = sorted(view.tagged(TOPIC_GROUP))
        out[TOPIC_GROUP] = {
            topic: {name: _value(view, kind, name, [(TOPIC_GROUP, topic, k) for k in keys])
                    for name, kind, *keys in _TOPIC}
            for topic in topics}
        nodes = sorted(view.tagged(NODE_GROUP))
        out[NODE_GROUP] = {
            f"node-{node}": {name: _value(view, kind, name, [(NODE_GROUP, node, k) for k in keys])
                             for name, kind, *keys in _NODE}
            for node in nodes}
        return out


def _value(view, kind: str, name: str, keys) -> float:
    if kind == "rate":
        return view.rate(keys[0])
    if kind == "total":
        return float(view.now(keys[0]))     # Java's CumulativeSum: since the start
    if kind == "avg":
        return view.avg(keys[0], keys[1])
    if kind == "max":
        return view.max(keys[0], keys[1])
    if kind == "ratio":
        return view.rate(keys[0]) / 1e9     # ns waited per s: the fraction of the time
    raise ValueError(f"{name}: unknown kind {kind!r}")
