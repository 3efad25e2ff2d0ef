"""The compiled codec: CRC-32C, murmur2, varints, record batch v2 and framing.

Everything here runs in C (``csrc/``, bound by ``kproducer/_codec.pyx``).
A pure-Python twin, :mod:`kproducer._reference`, produces byte-identical
output and serves as the test oracle; it is never used at run time.

Public functions:

- ``crc32c(data, crc=0) -> int``: CRC-32C (Castagnoli); SSE4.2 when available.
- ``murmur2(data) -> int`` and ``murmur2_partition(key, n) -> int``: Kafka's
  Java-compatible key hash and the partition it selects.
- ``encode_varint / decode_varint / varint_size`` (and ``varlong`` forms).
- ``encode_batch(records, *, compression="none", compression_level=None,
  producer_id=-1, producer_epoch=-1, base_sequence=-1) -> bytes``.
- ``decode_batch(data) -> DecodedBatch``: validates lengths, counts, magic
  and CRC; errors name the field and byte offset.
- ``frame(payload) -> bytes`` and ``FrameReceiver(max_size)``: 4-byte
  size-prefixed framing.
"""

from kproducer._codec import (  # noqa: F401  (re-exported API)
    DEFAULT_MAX_FRAME_SIZE,
    FrameReceiver,
    crc32c,
    crc32c_hw,
    crc32c_hw_available,
    crc32c_sw,
    decode_batch,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_varint,
    encode_varlong,
    frame,
    murmur2,
    murmur2_partition,
    varint_size,
    varlong_size,
)
from kproducer.records import DecodedBatch, Record  # noqa: F401

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE", "DecodedBatch", "FrameReceiver", "Record", "crc32c", "crc32c_hw",
    "crc32c_hw_available", "crc32c_sw", "decode_batch", "decode_varint", "decode_varlong",
    "encode_batch", "encode_varint", "encode_varlong", "frame", "murmur2", "murmur2_partition",
    "varint_size", "varlong_size",
]
