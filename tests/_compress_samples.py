"""The codecs and the sample data the C codec tests compress (tests/unit/test_c_compress.py,
tests/broker/test_c_compress_read_by_librdkafka.py)."""

from __future__ import annotations

import random

CODECS = ["gzip", "snappy", "lz4", "zstd"]


def _sample(size):
    """``size`` bytes mixing runs that compress (repeats, zeros) with random ones."""
    rng = random.Random(size)
    parts, n = [], 0
    while n < size:
        kind = rng.randrange(3)
        chunk = (rng.randbytes(rng.randrange(1, 3000)) if kind == 0
                 else b"\0" * rng.randrange(1, 5000) if kind == 1
                 else b"kproducer %d; " % n * rng.randrange(1, 400))
        parts.append(chunk)
        n += len(chunk)
    return b"".join(parts)[:size]
