"""The committed view of a topic, worked out from the log's own control batches.

Why this exists: Tansu's Fetch never carries the AbortedTransactions list
(shared/TANSU.md), so a ``read_committed`` consumer on it stops at the last stable
offset but still returns the records of aborted transactions. Tests of transactions
therefore cannot take a consumer's word for what was aborted. This reader fetches the
raw record batches (read_uncommitted, Fetch v4), decodes them with kafka-python's
record parser (an implementation independent of kproducer's codec, checking each
batch's CRC), and applies Kafka's read_committed rule itself: a transactional batch's
records count once the producer id's next control batch on that partition is a COMMIT
marker; those followed by an ABORT marker, or by no marker yet, are left out.

    view = committed_view(broker.bootstrap, "topic")
    view.records[0]          # [TxnRecord(offset, producer_id, key, value, headers), ...]
    view.markers             # [(partition, offset, producer_id, "commit" | "abort"), ...]
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

from kproducer.testing._optional import require
from kproducer.testing.client import BlockingClient

__all__ = ["TxnRecord", "CommittedView", "committed_view"]

_FETCH = 1
_FETCH_VERSION = 4            # IsolationLevel and AbortedTransactions, not yet flexible
_CONTROL_ABORT, _CONTROL_COMMIT = 0, 1


@dataclass(frozen=True)
class TxnRecord:
    offset: int
    producer_id: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


@dataclass
class CommittedView:
    records: dict = field(default_factory=dict)      # partition -> [TxnRecord] in offset order
    aborted: dict = field(default_factory=dict)      # partition -> [TxnRecord] of aborted txns
    open: dict = field(default_factory=dict)         # partition -> [TxnRecord] of unended txns
    markers: list = field(default_factory=list)      # (partition, offset, producer_id, kind)
    transactional_batches: int = 0

    def values(self, partition: int | None = None) -> list:
        parts = self.records if partition is None else {partition: self.records.get(partition, [])}
        return [r.value for p in sorted(parts) for r in parts[p]]


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _fetch_request(cid: int, client_id: str, topic: str, partition: int, offset: int) -> bytes:
    head = struct.pack(">hhi", _FETCH, _FETCH_VERSION, cid) + _string(client_id)
    body = struct.pack(">iiiib", -1, 100, 1, 8 << 20, 0)       # read_uncommitted
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, 4 << 20)
    return head + body


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string(self) -> str:
        n = self.take(">h")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def raw(self, n: int) -> bytes:
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


def _fetch(client: BlockingClient, cid: int, topic: str, partition: int, offset: int):
    """(high_watermark, records bytes) of one Fetch v4 from ``offset``."""
    client.send_raw(_fetch_request(cid, client.client_id or "txnlog", topic, partition, offset))
    r = _Reader(client.recv_raw())
    got = r.take(">i")
    if got != cid:
        raise RuntimeError(f"Fetch answer for correlation id {got}, expected {cid}")
    r.take(">i")                                   # throttle_time_ms
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            _p, error, high, _lso = r.take(">ihqq")
            n_aborted = r.take(">i")
            for _ in range(max(n_aborted, 0)):
                r.take(">qq")
            size = r.take(">i")
            data = r.raw(size) if size > 0 else b""
            if error:
                raise RuntimeError(f"Fetch {topic}-{partition} at {offset}: error code {error}")
            return high, data
    raise RuntimeError(f"Fetch {topic}-{partition}: no partition in the answer")


def committed_view(bootstrap: str, topic: str, partitions=None, *, timeout: float = 60.0) -> CommittedView:
    """Reads every partition of ``topic`` (or ``partitions``) from offset 0 to its high
    watermark and splits its records into committed, aborted and still open."""
    MemoryRecords = require("kafka.record.memory_records", "kafka-python", "test",
                            "kproducer.testing.txnlog").MemoryRecords
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    view = CommittedView()
    with BlockingClient(host, int(port)) as client:
        if partitions is None:
            md = client.metadata([topic])
            partitions = sorted(p.partition_index for t in md.topics if t.name == topic for p in t.partitions)
        cid = 1 << 20
        for partition in partitions:
            offset, high = 0, None
            committed, aborted, pending = [], [], {}
            while high is None or offset < high:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"committed_view: {topic}-{partition} not read to its end "
                                       f"within {timeout} s (at {offset} of {high})")
                cid += 1
                high, data = _fetch(client, cid, topic, partition, offset)
                records = MemoryRecords(data)
                progressed = False
                while records.has_next():
                    batch = records.next_batch()
                    if batch is None:
                        break
                    if not batch.validate_crc():
                        raise RuntimeError(f"{topic}-{partition}: batch at {batch.base_offset} fails its CRC")
                    if batch.next_offset <= offset:
                        continue
                    progressed = True
                    offset = batch.next_offset
                    pid = batch.producer_id
                    if batch.is_control_batch:
                        for rec in batch:
                            _version, kind = struct.unpack(">hh", rec.key[:4])
                            ended = pending.pop(pid, [])
                            if kind == _CONTROL_COMMIT:
                                committed.extend(ended)
                                view.markers.append((partition, rec.offset, pid, "commit"))
                            elif kind == _CONTROL_ABORT:
                                aborted.extend(ended)
                                view.markers.append((partition, rec.offset, pid, "abort"))
                        continue
                    recs = [TxnRecord(rec.offset, pid, rec.key, rec.value, tuple(rec.headers)) for rec in batch]
                    if batch.is_transactional:
                        view.transactional_batches += 1
                        pending.setdefault(pid, []).extend(recs)
                    else:
                        committed.extend(recs)
                if not progressed and offset < high:
                    raise RuntimeError(f"{topic}-{partition}: no progress at offset {offset} (high {high})")
            view.records[partition] = sorted(committed, key=lambda r: r.offset)
            view.aborted[partition] = sorted(aborted, key=lambda r: r.offset)
            view.open[partition] = sorted((r for rs in pending.values() for r in rs), key=lambda r: r.offset)
    return view
