"""Statistics in librdkafka's layout (``statistics.interval.ms``, ``stats_cb``).

Every ``statistics.interval.ms`` the producer builds one JSON document in the layout of
librdkafka's statistics (its STATISTICS.md), for the fields that apply to kproducer's
producer, and calls ``stats_cb(json_str)`` with it, as confluent-kafka does: the dashboards
and exporters that read librdkafka's statistics read these. docs/observability.md lists
every field kproducer fills; the others are left out rather than filled with made-up values.

Who calls ``stats_cb``: the Sender's step that finds the document due (kproducer.sender:
``Sender.run_once``), on whichever thread runs that step: the I/O thread, or an application
thread inside ``send()``, ``flush()`` or ``poll()``, as for delivery callbacks (confluent-kafka
calls it from ``poll()``; kproducer needs no ``poll()``). The step's deadline includes the
document's, so an idle producer still reports on time. Built in the step, the document's
counts agree: the courier's work has been taken and the answers read. An exception from
``stats_cb`` is logged (with its traceback) and swallowed.

Cost: nothing per record. The counts are kept per request, per batch or per connection
event (kproducer.counters), the bytes by the C selector, the queued records read from the
accumulator's queues under its lock as the document is built; the windows (``rtt``,
``int_latency``, ``throttle``, ``batchsize``, ``batchcnt``) are recorded only while
statistics are on, and each document takes them and starts new ones, as librdkafka's
rolling windows do.
"""

from __future__ import annotations

import itertools
import json
import time

from kproducer.histogram import exact_window
from kproducer.network import (AUTHENTICATING, CHECKING_API_VERSIONS, CONNECTING, DISCONNECTED,
                               READY, REAUTHENTICATING)
from kproducer.protocol import versions as v

__all__ = ["StatisticsReporter"]


_instances = itertools.count(1)

# NetworkClient's connection states under librdkafka's broker state names.
_STATES = {DISCONNECTED: "DOWN", CONNECTING: "CONNECT", CHECKING_API_VERSIONS: "APIVERSION_QUERY",
           AUTHENTICATING: "AUTH_HANDSHAKE", READY: "UP", REAUTHENTICATING: "REAUTH"}

# librdkafka's names of the requests in a broker's ``req`` object.
_REQUEST_NAMES = {v.PRODUCE: "Produce", v.METADATA: "Metadata", v.API_VERSIONS: "ApiVersion"}


def _request_name(api_key: int) -> str:
    name = _REQUEST_NAMES.get(api_key)
    return name if name is not None else v.api_name(api_key)


class StatisticsReporter:
    """One producer's statistics; the Sender's step calls :meth:`emit` when ``due_ms``
    (``Sender.time.mono_ms()``'s clock) has come. See the module docstring."""

    def __init__(self, producer, interval_ms: int, callback):
        self.interval_ms = int(interval_ms)
        self.callback = callback
        self.client_id = producer.client_id
        self.name = f"{producer.client_id}#producer-{next(_instances)}"
        self.sender = sender = producer._sender
        self.log = sender.log_context.logger(__name__)
        self.client = client = sender.client
        self.acc = producer._acc
        self.metadata = producer._metadata
        self._buffer_memory = producer._config.buffer_memory
        self._started_us = time.monotonic_ns() // 1000
        self.due_ms = sender.time.mono_ms() + self.interval_ms
        # Between documents, once a second: windows holding many values are folded into
        # histograms (kproducer.histogram.Window.compact), which bounds their memory.
        self.compact_ms = sender.time.mono_ms() + 1000
        self.emitted = 0
        # The windows exist from now on, and only while statistics are on.
        client.windows = True
        for ns in list(client.nodes.values()):
            ns.counters.open_windows()
        sender.counters.windows = True

    def compact(self, now_ms: int) -> None:
        self.compact_ms = now_ms + 1000
        for ns in list(self.client.nodes.values()):
            for w in ns.counters.windows():
                if w is not None:
                    w.compact()
        for ws in list(self.sender.counters.topic_windows.values()):
            for w in ws:
                w.compact()

    def emit(self, now_ms: int) -> None:
        """Builds the document and calls ``stats_cb`` with it (the step that found it due)."""
        self.due_ms += self.interval_ms
        if self.due_ms <= now_ms:       # a late step: the next one interval from now
            self.due_ms = now_ms + self.interval_ms
        try:
            text = json.dumps(self.document(), separators=(",", ":"))
        except Exception:
            self.log.exception("building the statistics document failed")
            return
        self.emitted += 1
        try:
            self.callback(text)
        except Exception:
            self.log.exception("stats_cb %r raised; statistics go on", self.callback)

    # -- the document ---------------------------------------------------------------------

    def document(self) -> dict:
        """The statistics now, as a dict in librdkafka's layout; takes the windows."""
        sender, client = self.sender, self.client
        now_us = time.monotonic_ns() // 1000
        in_flight = {}          # (topic, partition) -> (records, bytes) in flight
        for tp, batches in list(sender.in_flight.items()):
            if batches:
                in_flight[tp] = (sum(b.record_count for b in batches),
                                 sum(b.size_in_bytes for b in batches))
        queued = {(t, p): (records, size) for t, p, _, records, size in self.acc.queue_stats()}
        brokers = self._brokers()
        removed = client.removed
        topics = self._topics(queued, in_flight)
        doc = {
            "name": self.name,
            "client_id": self.client_id,
            "type": "producer",
            "ts": now_us,
            "time": int(time.time()),
            "age": now_us - self._started_us,
            "replyq": 0,
            "msg_cnt": sum(r for r, _ in queued.values()) + sum(r for r, _ in in_flight.values()),
            "msg_size": sum(b for _, b in queued.values()) + sum(b for _, b in in_flight.values()),
            "msg_size_max": self._buffer_memory,
            # The brokers' and those of the nodes removed since (the bootstrap addresses).
            "tx": sum(b["tx"] for b in brokers.values()) + removed.tx,
            "txbytes": sum(b["txbytes"] for b in brokers.values()) + removed.txbytes,
            "rx": sum(b["rx"] for b in brokers.values()) + removed.rx,
            "rxbytes": sum(b["rxbytes"] for b in brokers.values()) + removed.rxbytes,
            "txmsgs": sum(pc.txmsgs for pc in list(sender.counters.partitions.values())),
            "txmsg_bytes": sum(pc.txbytes for pc in list(sender.counters.partitions.values())),
            "metadata_cache_cnt": len(self.metadata.cluster.topics),
            "brokers": brokers,
            "topics": topics,
        }
        if sender.idempotent:
            doc["eos"] = {
                "idemp_state": "Assigned" if sender.producer_id >= 0 else "RequestPID",
                "producer_id": sender.producer_id,
                "producer_epoch": sender.producer_epoch,
                "epoch_cnt": sender.counters.producer_ids,
            }
        return doc

    def _brokers(self) -> dict:
        cluster = self.metadata.cluster
        leads: dict = {}        # node id -> {"topic-p": {...}}
        for topic in self.acc.topics():
            n = self.acc.partition_count(topic) or 0
            for p in range(n):
                leader = cluster.leader_for(topic, p)
                if leader is not None:
                    leads.setdefault(leader.node_id, {})[f"{topic}-{p}"] = {"topic": topic,
                                                                           "partition": p}
        out = {}
        for node_id, ns in list(self.client.nodes.items()):
            nc = ns.counters
            nodename = f"{ns.host}:{ns.port}"
            name = f"{nodename}/{node_id if node_id >= 0 else 'bootstrap'}"
            outbuf = outbuf_msgs = waitresp = waitresp_msgs = 0
            for entry in list(ns.in_flight):
                if entry.sent and entry.expect_response:
                    waitresp += 1
                    waitresp_msgs += _records(entry)
                elif not entry.sent:
                    outbuf += 1
                    outbuf_msgs += _records(entry)
            for entry, _ in list(ns.pending):
                outbuf += 1
                outbuf_msgs += _records(entry)
            sent, received = nc.bytes()
            rtt, throttle, int_latency = nc.windows()
            out[name] = {
                "name": name,
                "nodeid": node_id,
                "nodename": nodename,
                "source": "configured" if node_id < 0 else "learned",
                "state": _STATES.get(ns.state, "INIT"),
                "outbuf_cnt": outbuf,
                "outbuf_msg_cnt": outbuf_msgs,
                "waitresp_cnt": waitresp,
                "waitresp_msg_cnt": waitresp_msgs,
                "tx": nc.tx,
                "txbytes": sent,
                "txerrs": nc.txerrs,
                "req_timeouts": nc.req_timeouts,
                "rx": nc.rx,
                "rxbytes": received,
                "rxerrs": nc.rxerrs,
                "rxcorriderrs": nc.rxcorriderrs,
                "connects": nc.connects,
                "disconnects": nc.disconnects,
                "req": {_request_name(k): n for k, n in sorted(nc.by_api.items())},
                "int_latency": _window(int_latency),
                "rtt": _window(rtt),
                "throttle": _window(throttle),
                "toppars": leads.get(node_id, {}),
            }
        return out

    def _topics(self, queued: dict, in_flight: dict) -> dict:
        cluster = self.metadata.cluster
        counters = self.sender.counters
        windows = counters.topic_windows
        updated = self.metadata.last_update_ms
        age = max(0, int(time.time() * 1000) - updated) if updated is not None else 0
        out = {}
        parts = counters.partitions
        for topic in self.acc.topics():
            n = self.acc.partition_count(topic) or 0
            partitions = {}
            for p in range(n):
                tp = (topic, p)
                pc = parts.get(tp)
                q_records, q_bytes = queued.get(tp, (0, 0))
                f_records, _ = in_flight.get(tp, (0, 0))
                leader = cluster.leader_for(topic, p)
                acked = pc.acked if pc is not None else 0
                failed = pc.failed if pc is not None else 0
                partitions[str(p)] = {
                    "partition": p,
                    "broker": -1 if leader is None else leader.node_id,
                    "leader": -1 if leader is None else leader.node_id,
                    "unknown": leader is None,
                    "msgq_cnt": q_records,
                    "msgq_bytes": q_bytes,
                    "msgs_inflight": f_records,
                    "txmsgs": pc.txmsgs if pc is not None else 0,
                    "txbytes": pc.txbytes if pc is not None else 0,
                    "msgs": acked + failed + q_records + f_records,
                }
            sizes, counts = windows.get(topic, (None, None))
            out[topic] = {"topic": topic, "metadata_age": age,
                          "batchsize": _window(sizes), "batchcnt": _window(counts),
                          "partitions": partitions}
        return out


def _records(entry) -> int:
    """The records of a request in a broker's queues: a Produce request's batches."""
    if entry.api_key != v.PRODUCE:
        return 0
    try:
        return sum(b.record_count for _, parts in entry.request for _, b in parts)
    except (TypeError, ValueError, AttributeError):
        return 0


def _window(window) -> dict:
    """A Window's figures, and it starts again (empty ones while it did not exist)."""
    return window.take() if window is not None else exact_window([])
