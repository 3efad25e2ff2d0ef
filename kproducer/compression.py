"""Compression of a record batch's Records section (the header stays plain).

One place decides how each codec is produced and read, shared by the compiled
codec and its pure-Python reference twin, so both emit identical bytes.
The codecs come from cramjam (one well-kept wheel carrying gzip, snappy, lz4
and zstd without system libraries).

- gzip: a gzip member (RFC 1952), as Java's GZIPOutputStream writes.
- snappy: written as one raw snappy block, which Java's and librdkafka's readers
  accept; read as a raw block or as xerial's framed stream (what Java writes).
- lz4: the LZ4 frame format with independent blocks; Kafka's Java reader
  refuses linked blocks, and cramjam's one-shot ``compress`` links them.
- zstd: a zstd frame.

Levels follow the Java producer's ``compression.<codec>.level`` ranges and
defaults (gzip 1..9, default 6; lz4 1..17, default 9; zstd -131072..22, default 3).
"""

from __future__ import annotations

import struct

import cramjam

from .errors import CorruptRecordError

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {v: k for k, v in CODEC_IDS.items()}

# (min, max, default) as in Kafka's GzipCompression / Lz4Compression / ZstdCompression.
LEVELS = {
    "gzip": (1, 9, 6),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic(8) + version int32 + compatible-version int32


def codec_id(name: str) -> int:
    """Maps a compression name to its Attributes id, rejecting unknown names."""
    try:
        return CODEC_IDS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"compression: unknown codec {name!r}; expected one of {', '.join(CODEC_IDS)}"
        ) from None


def resolve_level(name: str, level: int | None) -> int | None:
    """Validates ``level`` for codec ``name``; None selects Kafka's default."""
    if name not in LEVELS:
        if level is not None:
            raise ValueError(f"compression_level: codec {name!r} takes no level (got {level!r})")
        return None
    lo, hi, default = LEVELS[name]
    if level is None:
        return default
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"compression_level must be an int, not {type(level).__name__}")
    if not lo <= level <= hi:
        raise ValueError(f"compression_level {level} out of range for {name} ({lo}..{hi})")
    return level


def compress(codec: int, data, level: int | None) -> bytes:
    """Compresses a Records section. ``level`` must already be resolved."""
    if codec == 1:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        c = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        # Compressor.compress takes bytes only (cramjam 2.x), not a memoryview.
        c.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(c.finish())
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"compression: codec id {codec} has no compressor")


def _snappy_xerial(data: bytes) -> bytes:
    out = []
    pos = _XERIAL_HEADER
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordError(
                f"truncated xerial snappy chunk length at byte {pos} of the compressed records",
                field="Records", offset=pos)
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or n > len(data) - pos - 4:
            raise CorruptRecordError(
                f"invalid xerial snappy chunk length {n} at byte {pos} of the compressed records",
                field="Records", offset=pos)
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n])))
        pos += 4 + n
    return b"".join(out)


def decompress(codec: int, data) -> bytes:
    """Decompresses a Records section; any codec failure is a CorruptRecordError."""
    data = bytes(data)
    try:
        if codec == 1:
            return bytes(cramjam.gzip.decompress(data))
        if codec == 2:
            if data[:8] == _XERIAL_MAGIC:
                return _snappy_xerial(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueErrors
        raise CorruptRecordError(
            f"cannot decompress {CODEC_NAMES.get(codec, codec)} records: {exc}",
            field="Records", offset=61) from None
    raise CorruptRecordError(f"unknown compression codec id {codec} in Attributes",
                             field="Attributes", offset=21)
