"""Read a topic back with a real consumer (confluent-kafka / librdkafka) to verify what a
producer stored.

The test broker (Tansu) accepts batches with a wrong CRC, wrong magic, wrong record count or
garbage compressed payloads and stores them as sent, so a produce "succeeding" proves little:
verification happens on the read side (shared/TANSU.md, "What it does not check"). librdkafka
checks CRCs (``check.crcs=true``), decompresses every codec and parses every record, so
:func:`read_back` returning cleanly means an independent implementation accepted the bytes.

    msgs = read_back(broker.bootstrap, "topic")        # {partition: [Msg, ...]}
    expect_records(broker.bootstrap, "topic", {0: [(b"k", b"v", 1000, [("h", b"x")])]})

Settings and their reasons: ``enable.partition.eof`` gives an explicit end per partition
(ListOffsets "latest" is wrong on Tansu for multi-record batches); ``fetch.wait.max.ms=500``
(0 makes the broker spin on empty fetches); ``queued.min.messages=2000000`` (librdkafka's range
is 1..10000000) keeps fetching ahead; ``isolation.level=read_uncommitted`` so records are
returned exactly as stored, transactional or not; a unique ``group.id`` with manual
assignment and no commits leaves no group state behind.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Sequence

from ._optional import require

if TYPE_CHECKING:  # pragma: no cover
    from confluent_kafka import Consumer, KafkaError


def _ck():
    """confluent-kafka, imported on first use (kproducer.testing imports without it)."""
    return require("confluent_kafka", "confluent-kafka", "test", "kproducer.testing.readback")

__all__ = ["Msg", "ReadBackError", "expect_records", "read_back"]


@dataclass(frozen=True)
class Msg:
    """One record as the consumer returned it; ``timestamp`` in ms, ``headers`` [] if none."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0
    offset: int = 0
    partition: int = 0


class ReadBackError(RuntimeError):
    """The consumer reported an error (bad CRC, corrupt batch, unknown topic, broker down...).

    ``error`` is confluent-kafka's ``KafkaError``; ``partition`` and ``offset`` are set when
    the error concerns one message position.
    """

    def __init__(self, message: str, error: KafkaError | None = None,
                 partition: int | None = None, offset: int | None = None):
        super().__init__(message)
        self.error = error
        self.partition = partition
        self.offset = offset


def verifying_consumer(bootstrap: str, group_prefix: str,
                       consumer_config: Mapping | None = None) -> Consumer:
    """A confluent-kafka Consumer for checking what was produced: CRC checks on, a fresh
    group (nothing committed), partition ends reported, large prefetch queues; where an
    assigned offset is gone (a real cluster's retention) it starts at the earliest.
    ``consumer_config`` adds librdkafka settings (e.g. security)."""
    return _ck().Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{group_prefix}-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "check.crcs": True,
        "fetch.wait.max.ms": 500,
        "queued.min.messages": 2000000,
        "isolation.level": "read_uncommitted",
        "socket.timeout.ms": 10000,
        **(consumer_config or {}),
    })


def messages_to_end(consumer: Consumer, topic: str, parts: Sequence[int], deadline: float,
                    what: str) -> Iterator:
    """Assigns ``parts`` of ``topic`` from offset 0 and yields every record (a
    confluent-kafka Message) until each partition reported its end. Raises
    :class:`ReadBackError` on any other consumer error and ``TimeoutError`` at ``deadline``
    (``time.monotonic()``), both starting with ``what`` and saying how far it got."""
    ck = _ck()
    # Offset 0, not OFFSET_BEGINNING: Tansu answers ListOffsets "earliest" with the batch
    # written first, not the lowest offset, so after producers wrote one partition at once
    # (transactional ones most) "earliest" can be a later batch, and the read-back would
    # silently start past the records before it.
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in parts])
    pending = set(parts)
    count = 0
    started = time.monotonic()
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"{what}: timed out after {time.monotonic() - started:.0f}s with {count} records "
                f"received; {len(parts) - len(pending)} of {len(parts)} partitions reached their "
                f"end, still waiting for {sorted(pending)}")
        for m in consumer.consume(num_messages=10000, timeout=min(remaining, 0.5)):
            err = m.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                    continue
                raise ReadBackError(
                    f"{what}: consumer error on partition {m.partition()} at offset {m.offset()}: "
                    f"{err.name()}: {err.str()}", err, m.partition(), m.offset())
            count += 1
            yield m


def _partitions_of(consumer: Consumer, topic: str, deadline: float) -> list[int]:
    """The topic's partitions from Metadata, retrying until the deadline while the broker
    has not settled (leader not available, topic still being created)."""
    KafkaError = _ck().KafkaError
    last = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"read_back: no metadata for topic {topic!r} "
                               f"before the deadline (last: {last})")
        try:
            md = consumer.list_topics(topic, timeout=min(remaining, 5.0))
        except Exception as exc:  # KafkaException on timeout or transport failure
            last = exc
            time.sleep(0.05)
            continue
        t = md.topics.get(topic)
        if t is None:
            last = "topic missing from Metadata"
        elif t.error is not None and t.error.code() != KafkaError.NO_ERROR:
            last = t.error
            if not t.error.retriable() and t.error.code() != KafkaError.LEADER_NOT_AVAILABLE:
                raise ReadBackError(f"read_back: Metadata for {topic!r} failed: {t.error}", t.error)
        elif not t.partitions:
            last = "topic has no partitions"
        else:
            return sorted(t.partitions)
        time.sleep(0.05)


def read_back(bootstrap: str, topic: str, *, partitions: Iterable[int] | None = None,
              timeout: float = 60.0,
              consumer_config: Mapping[str, object] | None = None) -> dict[int, list[Msg]]:
    """Every record of ``topic`` (or of the given ``partitions``), from offset 0 to the end.

    Returns ``{partition: [Msg, ...]}`` in offset order, with an entry (maybe empty) for every
    partition read. Raises :class:`ReadBackError` on any consumer error other than reaching
    a partition's end, and ``TimeoutError`` if not every partition reached its end within
    ``timeout`` seconds (the message says how far it got). ``consumer_config`` adds
    librdkafka settings (e.g. ``security.protocol`` and SASL credentials).
    """
    deadline = time.monotonic() + timeout
    consumer = verifying_consumer(bootstrap, "kproducer-readback", consumer_config)
    try:
        known = _partitions_of(consumer, topic, deadline)
        if partitions is None:
            parts = known
        else:
            parts = sorted(set(partitions))
            unknown = [p for p in parts if p not in known]
            if unknown:
                raise ReadBackError(
                    f"read_back({topic!r}): partitions {unknown} do not exist (topic has {known})")
        result: dict[int, list[Msg]] = {p: [] for p in parts}
        if not parts:
            return result
        for m in messages_to_end(consumer, topic, parts, deadline, f"read_back({topic!r})"):
            p = m.partition()
            if p not in result:  # not assigned: cannot happen, but never drop silently
                raise ReadBackError(f"read_back({topic!r}): message for unassigned partition {p}")
            if result[p] and m.offset() <= result[p][-1].offset:
                # A batch whose RecordsCount/LastOffsetDelta understates its records makes
                # the broker's log end lag behind; librdkafka then re-fetches the same batch
                # forever, delivering the same offsets again instead of failing.
                raise ReadBackError(
                    f"read_back({topic!r}): partition {p} delivered offset {m.offset()} after "
                    f"{result[p][-1].offset} (a batch's RecordsCount or LastOffsetDelta is "
                    f"probably wrong)", None, p, m.offset())
            try:
                headers = list(m.headers() or [])
            except Exception as exc:  # e.g. a header key that is not UTF-8
                raise ReadBackError(
                    f"read_back({topic!r}): partition {p} offset {m.offset()}: unreadable "
                    f"headers: {exc!r}", None, p, m.offset()) from exc
            result[p].append(Msg(key=m.key(), value=m.value(), headers=headers,
                                 timestamp=m.timestamp()[1], offset=m.offset(), partition=p))
        return result
    finally:
        consumer.close()


def expect_records(bootstrap: str, topic: str,
                   expected: Mapping[int, Sequence[tuple]], *, timeout: float = 60.0,
                   exact_partitions: bool = True,
                   consumer_config: Mapping[str, object] | None = None) -> dict[int, list[Msg]]:
    """Reads ``topic`` back and asserts its contents, partition by partition, in order.

    ``expected`` maps partition -> list of ``(key, value)`` or ``(key, value, timestamp_ms,
    headers)`` (a None timestamp is not checked; None headers mean none). With
    ``exact_partitions`` every other partition must be empty. Returns what was read.
    """
    got = read_back(bootstrap, topic, timeout=timeout, consumer_config=consumer_config)
    for p, recs in got.items():
        if p not in expected and exact_partitions and recs:
            raise AssertionError(f"{topic}[{p}]: expected no records, got {len(recs)}")
    for p, want in expected.items():
        have = got.get(p)
        if have is None:
            raise AssertionError(f"{topic}[{p}]: partition does not exist (have {sorted(got)})")
        if len(have) != len(want):
            raise AssertionError(f"{topic}[{p}]: expected {len(want)} records, got {len(have)}")
        for i, (w, h) in enumerate(zip(want, have)):
            key, value = w[0], w[1]
            ts = w[2] if len(w) > 2 else None
            headers = list(w[3] or []) if len(w) > 3 else []
            actual = (h.key, h.value, h.timestamp if ts is not None else None, h.headers)
            wanted = (None if key is None else bytes(key), None if value is None else bytes(value),
                      ts, [(k, None if v is None else bytes(v)) for k, v in headers])
            if actual != wanted:
                raise AssertionError(
                    f"{topic}[{p}] record {i} (offset {h.offset}): expected {wanted!r}, got {actual!r}")
    return got
