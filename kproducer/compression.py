"""Compression of a record batch's Records section (the header stays plain).

One place decides how each codec is produced and read, shared by the compiled
codec and its pure-Python reference twin, so both emit identical bytes.
The codecs here come from cramjam (one well-kept wheel carrying gzip, snappy, lz4
and zstd without system libraries). The producer's own batches are compressed
in C without the GIL (csrc/kp_compress.c: the same formats and levels, with zlib
and the codecs every build compiles from csrc/vendor).

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
_RECORDS_AT = 61    # where the Records section starts in a batch, for error offsets


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


# A raw snappy block starts with its uncompressed length (an unsigned varint). No element
# expands more than 64/3 times (a 3-byte copy of 64 bytes), so a longer claim is corrupt, and
# it must be refused before cramjam allocates it: a failed allocation aborts the process
# (a 15-byte block claiming 4 GiB did, on a machine with a memory limit).
_SNAPPY_MAX_EXPANSION = 22


def _snappy_raw(block: bytes, at: int) -> bytes:
    n = shift = 0
    for i in range(min(len(block), 5)):
        n |= (block[i] & 0x7F) << shift
        shift += 7
        if not block[i] & 0x80:
            break
    else:
        # cramjam reads a 5th byte's continuation bit as the end, and 4 GiB from ff ff ff ff 8f.
        raise CorruptRecordError(
            f"the snappy block at byte {at} of the batch does not start with a valid length "
            f"(an unsigned varint of at most 5 bytes)", field="Records", offset=at)
    if n > _SNAPPY_MAX_EXPANSION * (len(block) - i - 1):
        raise CorruptRecordError(
            f"the snappy block at byte {at} of the batch claims {n} uncompressed bytes, more "
            f"than its {len(block)} bytes can hold", field="Records", offset=at)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes) -> bytes:
    if data[:8] != _XERIAL_MAGIC:
        return _snappy_raw(data, _RECORDS_AT)
    # xerial framing (snappy-java's SnappyOutputStream, what Java Kafka writes): a 16-byte
    # header, then [int32 BE chunk length][raw snappy block] repeated. Version and
    # compatible-version are not checked: some writers get their byte order wrong
    # (kafka-python issue #2414).
    if len(data) < _XERIAL_HEADER:
        raise CorruptRecordError(
            f"truncated xerial snappy header ({len(data)} of 16 bytes) at byte 61 of the batch",
            field="Records", offset=_RECORDS_AT)
    out = []
    pos = _XERIAL_HEADER
    while pos < len(data):
        at = _RECORDS_AT + pos
        if len(data) - pos < 4:
            raise CorruptRecordError(
                f"truncated xerial snappy chunk length at byte {at} of the batch",
                field="Records", offset=at)
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or size > len(data) - pos - 4:
            raise CorruptRecordError(
                f"xerial snappy chunk length {size} at byte {at} of the batch exceeds the "
                f"{len(data) - pos - 4} bytes left", field="Records", offset=at)
        try:
            out.append(_snappy_raw(data[pos + 4:pos + 4 + size], at + 4))
        except CorruptRecordError:
            raise
        except Exception as exc:
            raise CorruptRecordError(
                f"cannot decompress the xerial snappy chunk at byte {at} of the batch: {exc}",
                field="Records", offset=at) from None
        pos += 4 + size
    return b"".join(out)


_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _check_lz4_frame(data: bytes) -> None:
    """Refuses LZ4 frame descriptors that Java Kafka's reader refuses.

    KafkaLZ4BlockInputStream validates FLG and BD: version 01, reserved bits 0,
    independent blocks (KIP-57), block size id 4..7. librdkafka and cramjam read linked
    blocks fine, so only this check catches a writer that links them.
    """
    at = _RECORDS_AT
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        raise CorruptRecordError(
            f"the lz4 Records section at byte {at} of the batch is not an LZ4 frame "
            f"(magic {data[:4].hex() or 'missing'})", field="Records", offset=at)
    flg, bd = data[4], data[5]
    problem = None
    if flg >> 6 != 1:
        problem = f"frame version {flg >> 6} (must be 1)"
    elif not flg & 0x20:
        problem = "linked blocks (FLG B.Indep = 0), which Kafka's Java reader refuses (KIP-57)"
    elif flg & 0x03:
        problem = f"reserved FLG bits set (FLG 0x{flg:02x})"
    elif bd & 0x8F or not 4 <= (bd >> 4) & 7 <= 7:
        problem = f"invalid block descriptor BD 0x{bd:02x}"
    if problem:
        raise CorruptRecordError(
            f"the LZ4 frame at byte {at} of the batch has {problem}", field="Records", offset=at + 4)


def decompress(codec: int, data) -> bytes:
    """Decompresses a Records section; any codec failure is a CorruptRecordError."""
    data = bytes(data)
    name = CODEC_NAMES.get(codec)
    if name is None or codec == 0:
        raise CorruptRecordError(f"unknown compression codec id {codec} in Attributes at byte 21",
                                 field="Attributes", offset=21)
    if codec == 3:
        _check_lz4_frame(data)
    try:
        if codec == 1:
            return bytes(cramjam.gzip.decompress(data))
        if codec == 2:
            return _snappy_decompress(data)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except BaseException as exc:
        # cramjam raises its own DecompressionError; a Rust panic surfaces as pyo3's
        # PanicException, which derives from BaseException.
        if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        raise CorruptRecordError(
            f"cannot decompress {name} records at byte 61 of the batch: {exc}",
            field="Records", offset=_RECORDS_AT) from None
