"""Read a benchmark topic back and check that every record arrived exactly once.

The consumer is confluent-kafka with CRC checks on and the settings of
:func:`kproducer.testing.readback.read_back` (whose reasons are given there). Unlike
``read_back`` it keeps no message objects: it marks each record's index (the last 8 bytes
of its value, :mod:`bench.data`) in a bitmap, so millions of records cost a few MB. A
missing index, an index seen twice, an index out of range or an unexpected number of
warm-up records makes the run FAILED.
"""

from __future__ import annotations

import time

from bench.data import INDEX_BYTES
from kproducer.testing.readback import ReadBackError, messages_to_end, verifying_consumer

MAX_REPORTED = 5


def check_topic(bootstrap: str, topic: str, expected: int, *, warmups: int = 1,
                warmup_value: bytes = b"warm-up", timeout: float | None = None,
                consumer_config: dict | None = None) -> dict:
    """Returns ``{"ok", "read", "error", "seconds"}``; ``error`` says what is wrong."""
    started = time.monotonic()
    timeout = timeout if timeout is not None else 60.0 + expected / 20_000
    deadline = started + timeout
    consumer = verifying_consumer(bootstrap, "kproducer-bench-verify", consumer_config)
    seen = bytearray(expected)
    duplicates: list[int] = []
    out_of_range: list[int] = []
    warm = read = 0

    def result(error):
        return {"ok": error is None, "read": read, "error": error,
                "seconds": time.monotonic() - started}

    try:
        parts = None
        while parts is None:
            if time.monotonic() > deadline:
                return result(f"no metadata for topic {topic!r} within {timeout:.0f} s")
            try:
                md = consumer.list_topics(topic, timeout=5)
                t = md.topics.get(topic)
                if t is not None and t.error is None and t.partitions:
                    parts = sorted(t.partitions)
            except Exception:  # KafkaException on timeout: retry until the deadline
                pass
            if parts is None:
                time.sleep(0.05)
        try:
            for m in messages_to_end(consumer, topic, parts, deadline, f"topic {topic!r}"):
                read += 1
                value = m.value()
                if value == warmup_value:
                    warm += 1
                    continue
                i = int.from_bytes(value[-INDEX_BYTES:], "big") if value else -1
                if not 0 <= i < expected:
                    if len(out_of_range) < MAX_REPORTED:
                        out_of_range.append(i)
                    continue
                if seen[i]:
                    if len(duplicates) < MAX_REPORTED:
                        duplicates.append(i)
                    continue
                seen[i] = 1
        except (TimeoutError, ReadBackError) as exc:
            return result(f"{exc} ({read} of {expected + warmups} records read)")
    finally:
        consumer.close()
    problems = []
    missing = expected - sum(seen)
    if missing:
        first = [i for i, s in enumerate(seen) if not s][:MAX_REPORTED]
        problems.append(f"{missing} records missing (first indices {first})")
    if duplicates:
        problems.append(f"duplicated records (indices {duplicates}...)")
    if out_of_range:
        problems.append(f"records with unexpected values (indices {out_of_range}...)")
    if warm != warmups:
        problems.append(f"{warm} warm-up records, expected {warmups}")
    return result("; ".join(problems) or None)
