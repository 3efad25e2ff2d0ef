"""The counters behind the statistics document (kproducer.statistics) and the Java-named
metrics (kproducer.java_metrics): what a broker connection, a partition and the Sender
counted, each where the work is done once per request, per batch or per connection event,
never per record or byte (a batch adds its record count; the bytes are the selector's own
counters, csrc/kp_selector.c).

Counters only grow. *Windows* (kproducer.histogram.Window: librdkafka's rolling
``rtt``, ``int_latency``, ``throttle``, ``batchsize`` and ``batchcnt``) exist only while
``statistics.interval.ms`` is on, and each statistics document takes them and starts new
ones. *Peaks* (the largest value since the metrics' last sample, for Java's ``-max``
metrics) are taken by kproducer.sampled at each sample's end.
"""

from __future__ import annotations

from kproducer.histogram import Window

__all__ = ["NodeCounters", "PartitionCounters", "RemovedNodes", "SenderCounters"]

_PRODUCE = 0        # ApiKey of Produce: Java's request-latency metrics count its answers only


class NodeCounters:
    """One broker node's connections (NetworkClient.NodeState.counters): requests written
    (``tx``, by API key in ``by_api``) and answered (``rx``); requests failed by a lost
    connection (``txerrs``), responses that did not decode (``rxerrs``) or answered another
    correlation id (``rxcorriderrs``); request timeouts; connection attempts and
    disconnections; the round trips of Produce requests (Java's per-node request-latency,
    ms) and the throttle time of Produce answers (every answer, 0 included, as Java's
    produce-throttle-time); with windows on, librdkafka's ``rtt`` (every request, µs),
    ``throttle`` (ms) and ``int_latency`` (µs) windows."""

    __slots__ = ("tx", "rx", "by_api", "txerrs", "rxerrs", "rxcorriderrs", "req_timeouts",
                 "connects", "disconnects", "latency_total_us", "latency_count",
                 "latency_peak_us", "throttle_total_ms", "throttle_count", "throttle_peak_ms",
                 "rtt", "throttle", "int_latency", "_selector", "_slot", "_base")

    def __init__(self) -> None:
        self.tx = self.rx = 0
        self.by_api: dict = {}
        self.txerrs = self.rxerrs = self.rxcorriderrs = self.req_timeouts = 0
        self.connects = self.disconnects = 0
        self.latency_total_us = self.latency_count = self.latency_peak_us = 0
        self.throttle_total_ms = self.throttle_count = self.throttle_peak_ms = 0
        self.rtt = self.throttle = self.int_latency = None
        self._selector = None
        self._slot = -1
        self._base = (0, 0)

    def start(self, selector, slot: int, windows: bool) -> None:
        """The node's connections are ``slot`` of ``selector``: its byte counts start from
        what earlier nodes of that slot sent and read."""
        totals = getattr(selector, "totals", None)
        if totals is not None:
            self._selector, self._slot = selector, slot
            self._base = totals(slot)
        if windows:
            self.open_windows()

    def open_windows(self) -> None:
        self.rtt, self.throttle, self.int_latency = Window(), Window(), Window()

    def windows(self) -> tuple:
        """``(rtt, throttle, int_latency)``: Windows, or None while statistics are off."""
        return self.rtt, self.throttle, self.int_latency

    def bytes(self) -> tuple:
        """``(sent, received)``: bytes written to and read from this node's connections
        (TLS: plaintext bytes), from the selector's counters."""
        if self._selector is None:
            return 0, 0
        try:
            sent, received = self._selector.totals(self._slot)
        except Exception:       # the selector is closed
            return 0, 0
        return sent - self._base[0], received - self._base[1]

    def written(self, api_key: int) -> None:
        """A request was written whole."""
        self.tx += 1
        by_api = self.by_api
        by_api[api_key] = by_api.get(api_key, 0) + 1

    def answered(self, api_key: int, us) -> None:
        """A response was read, ``us`` µs after its request was written (None: unknown)."""
        self.rx += 1
        if us is None:
            return
        if us < 0:
            us = 0
        if api_key == _PRODUCE:
            self.latency_total_us += us
            self.latency_count += 1
            if us > self.latency_peak_us:
                self.latency_peak_us = us
        if self.rtt is not None:
            self.rtt.add(us)

    def throttled(self, ms: int) -> None:
        """A Produce answer's ThrottleTimeMs (0: none)."""
        if ms < 0:
            ms = 0
        self.throttle_total_ms += ms
        self.throttle_count += 1
        if ms > self.throttle_peak_ms:
            self.throttle_peak_ms = ms
        if self.throttle is not None:
            self.throttle.add(ms)


class RemovedNodes:
    """What the nodes a NetworkClient removed (a bootstrap address, once the metadata named
    the brokers; a broker that left the cluster) had counted, for the totals."""

    __slots__ = ("tx", "rx", "txbytes", "rxbytes", "txerrs", "connects", "disconnects")

    def __init__(self) -> None:
        self.tx = self.rx = self.txbytes = self.rxbytes = self.txerrs = 0
        self.connects = self.disconnects = 0

    def absorb(self, nc: NodeCounters) -> None:
        sent, received = nc.bytes()
        self.tx += nc.tx
        self.rx += nc.rx
        self.txbytes += sent
        self.rxbytes += received
        self.txerrs += nc.txerrs
        self.connects += nc.connects
        self.disconnects += nc.disconnects


class PartitionCounters:
    """One partition's records and bytes sent (a retried batch counts again, as librdkafka's
    ``txmsgs``/``txbytes`` and Java's record-send-total), acknowledged, retried and failed."""

    __slots__ = ("txmsgs", "txbytes", "acked", "retried", "failed")

    def __init__(self) -> None:
        self.txmsgs = self.txbytes = self.acked = self.retried = self.failed = 0


class SenderCounters:
    """The Sender's counts beyond ``Sender.stats``: per partition (``partitions``, by
    ``(topic, partition)``); the queue time of the batches sent (from the batch's creation
    to its request: Java's record-queue-time, ms); the largest batch since the last sample;
    batches split after MESSAGE_TOO_LARGE; producer ids obtained (librdkafka's
    ``epoch_cnt``); with windows on, each topic's ``batchsize`` and ``batchcnt`` windows."""

    __slots__ = ("partitions", "queue_time_total_ms", "queue_time_count", "queue_time_peak_ms",
                 "batch_size_peak", "splits", "producer_ids", "windows", "topic_windows")

    def __init__(self) -> None:
        self.partitions: dict = {}
        self.queue_time_total_ms = self.queue_time_count = self.queue_time_peak_ms = 0
        self.batch_size_peak = 0
        self.splits = 0
        self.producer_ids = 0
        self.windows = False
        self.topic_windows: dict = {}

    def partition(self, tp) -> PartitionCounters:
        pc = self.partitions.get(tp)
        if pc is None:
            pc = self.partitions[tp] = PartitionCounters()
        return pc

    def topic_window(self, topic: str) -> tuple:
        """``(batchsize, batchcnt)`` windows of ``topic`` (windows on)."""
        w = self.topic_windows.get(topic)
        if w is None:
            w = self.topic_windows[topic] = (Window(), Window())
        return w
