"""The exactly-once stream sink's ledger: the micro-batches whose commit the driver decided.

Spark's commit log and the sink's commits cannot be one atomic step: a driver that dies
after the sink committed a micro-batch and before Spark recorded it replays that batch when
the query restarts. The driver therefore writes a decision record to a one-partition topic
(key: the batch id, value: the prepared transactions of its tasks) before it completes any
of them, and waits for the broker's acknowledgement. When the query (re)starts, the sink
reads the ledger: every decided batch's transactions are completed again (finishing twice
is harmless) and its tasks, if Spark replays it, write nothing.

The ledger is read with Fetch v4 through the producer's own I/O thread (TLS and SASL as
configured), from the partition's leader, and decoded with kproducer's codec.
"""

from __future__ import annotations

import json
import time

from kproducer.codec import decode_batch
from kproducer.coordinator import PRIORITY_ADD, Handler, TxnResult
from kproducer.errors import KafkaError
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.protocol.errors_table import ErrorCode, broker_error, is_retriable
from kproducer.transactions import PreparedTransaction

PARTITION = 0
_HEADER = 12            # BaseOffset int64 + Length int32: Length counts what follows


class _Fetch(Handler):
    api_key = v.FETCH
    priority = PRIORITY_ADD

    def __init__(self, topic: str, offset: int, node: int, result: TxnResult, deadline_ms: int):
        super().__init__(topic, result, deadline_ms=deadline_ms)
        self.topic, self.offset, self.node = topic, offset, node

    def build(self):
        # min_bytes 1 with a short wait, as consumers do: a broker may answer a zero wait
        # with no partition at all (Tansu does).
        return m.FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=8 << 20, topics=[m.FetchTopic(
            topic=self.topic, partitions=[m.FetchPartition(partition=PARTITION, fetch_offset=self.offset,
                                                            partition_max_bytes=4 << 20)])])

    def on_response(self, resp):
        parts = [p for t in resp.responses for p in t.partitions if p.partition_index == PARTITION]
        if not parts:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION          # asked again after a backoff
        pd = parts[0]
        if pd.error_code:
            if is_retriable(pd.error_code):
                return pd.error_code
            self.result.fail(broker_error(pd.error_code, f"Fetch {self.topic}-{PARTITION}"))
            return None
        self.result.succeed((pd.high_watermark, bytes(pd.records or b"")))
        return None


def _records(data: bytes):
    """(offset, key, value) of every data record in a Fetch's records bytes; a batch cut
    short at the end (a Fetch may end mid-batch) is left for the next Fetch."""
    pos = 0
    while len(data) - pos >= _HEADER:
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        end = pos + _HEADER + length
        if length <= 0 or end > len(data):
            break
        batch = decode_batch(data[pos:end])
        pos = end
        if batch.is_control:
            continue
        for r in batch.records:
            yield batch.base_offset + r.offset_delta, r.key, r.value


def read(producer, topic: str, timeout_s: float = 60.0) -> dict:
    """{batch id: [PreparedTransaction]} of every decision in the ledger."""
    deadline = time.monotonic() + timeout_s
    infos = [p for p in producer.partitions_for(topic) if p.partition == PARTITION]
    if not infos or infos[0].leader < 0:
        raise KafkaError(f"the ledger topic {topic!r} has no leader for partition {PARTITION}")
    node = infos[0].leader
    sender = producer._sender
    out, offset, high = {}, 0, None
    while high is None or offset < high:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaError(f"reading the ledger {topic!r} did not finish within {timeout_s} s")
        res = TxnResult("read the ledger")
        sender.coordinator.enqueue(_Fetch(topic, offset, node, res, int(time.monotonic() * 1000 + remaining * 1000)))
        sender.wakeup()
        high, data = res.wait(remaining + 1)
        before = offset
        for off, key, value in _records(data):
            if off >= offset:
                out[int(key)] = [PreparedTransaction(*t) for t in json.loads(value)]
                offset = off + 1
        if offset == before and offset < high:
            raise KafkaError(f"the ledger {topic!r}: no progress at offset {offset} of {high}")
    return out


def record(producer, topic: str, batch_id: int, prepared: list) -> None:
    """Writes the decision to commit micro-batch ``batch_id`` and waits until it is stored."""
    value = json.dumps([[p.transactional_id, p.producer_id, p.epoch] for p in prepared]).encode()
    producer.send(topic, value, key=str(batch_id).encode(), partition=PARTITION).result(60)
