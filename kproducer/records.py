"""Plain data types returned by :func:`kproducer.codec.decode_batch`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One record of a decoded batch; ``timestamp`` is absolute (ms)."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class DecodedBatch:
    """Header fields of a record batch v2 (Kafka's names in snake_case) and its records."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: str
    timestamp_type: str          # "create" or "log_append"
    is_transactional: bool
    is_control: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    records: list[Record]
