"""The records every client of a scenario sends: generated the same way in every process.

A value is ``value_size - 8`` bytes of lowercase hex text (random, so about 2:1 compressible,
like typical text payloads: an all-random value would make lz4/zstd pointless, a constant one
would flatter them) followed by the record's index as 8 big-endian bytes. The read-back side
takes the index from those last 8 bytes, so a lost or duplicated record is found by index, not
only by a count that a loss plus a duplicate would balance. Keys (keyed scenarios) are
``b"key-%08d" % index``.
"""

from __future__ import annotations

import random

INDEX_BYTES = 8
MIN_VALUE_SIZE = INDEX_BYTES + 2


# Random bytes drawn per call: random.randbytes takes at most 2**31 bits (256 MiB), and
# 750,000 values of 1 KiB need 381 MB of them.
RANDOM_CHUNK = 1 << 24


def make_values(n: int, value_size: int, seed: int = 1) -> list[bytes]:
    if value_size < MIN_VALUE_SIZE:
        raise ValueError(f"value_size {value_size} is below {MIN_VALUE_SIZE} bytes "
                         f"(the last {INDEX_BYTES} hold the record index)")
    text = value_size - INDEX_BYTES
    # One text blob for all values: generation stays well under a second per million records.
    rng = random.Random(seed)
    left = (n * text + 1) // 2
    parts = []
    while left > 0:
        take = min(left, RANDOM_CHUNK)
        parts.append(rng.randbytes(take).hex().encode())
        left -= take
    blob = b"".join(parts)
    return [blob[i * text:(i + 1) * text] + i.to_bytes(INDEX_BYTES, "big") for i in range(n)]


def make_keys(n: int) -> list[bytes]:
    return [b"key-%08d" % i for i in range(n)]


def index_of(value: bytes) -> int:
    return int.from_bytes(value[-INDEX_BYTES:], "big")


def payload_bytes(n: int, value_size: int, keyed: bool) -> int:
    """Key + value bytes of the first ``n`` records (what MB/s counts)."""
    if keyed and n > 10 ** 8:
        raise ValueError("keys are 12 bytes only below 10**8 records")
    return n * (value_size + (12 if keyed else 0))
