"""Pure-Python reference twin of kproducer's compiled codec: a test oracle, not used at run time.

Nothing in kproducer imports this module outside the tests. It re-implements, in plain
Python and independently of ``csrc/``, everything the compiled codec (``kproducer.codec``)
does with bytes, so the tests can hand both the same input and demand byte-identical
output (differential tests), and so golden vectors from Kafka, librdkafka, kafka-python
and aiokafka can be checked against something readable:

- :func:`crc32c` -- CRC-32C (Castagnoli), table driven, ``crc32c`` PyPI package convention.
- :func:`murmur2` -- Java Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``), signed 32-bit.
- :func:`encode_varint` / :func:`decode_varint` / :func:`size_of_varint` and the
  ``varlong`` equivalents -- zig-zag varints as in Kafka's ``ByteUtils``.
- :func:`encode_batch` -- a record batch v2 (magic 2) exactly as the C writer lays it out.
- :func:`decode_batch` -- a validating reader that raises only
  :class:`~kproducer.errors.CorruptRecordError` on bad input.
- :func:`frame` and :class:`FrameReceiver` -- the 4-byte size-prefixed framing.

Only the standard library and kproducer.compression (cramjam) are used; speed is not a goal (``crc32c`` runs at a
few MB/s), clarity is.

Wire layout written by :func:`encode_batch` (big-endian; offsets from the start)::

     0  BaseOffset            int64   0
     8  Length                int32   total length - 12
    12  PartitionLeaderEpoch  int32   -1
    16  Magic                 int8    2
    17  CRC                   uint32  CRC-32C of bytes 21..end
    21  Attributes            int16   codec id in bits 0-2; bit 3 (timestamp type) 0 = CreateTime
    23  LastOffsetDelta       int32   n - 1
    27  BaseTimestamp         int64   timestamp of the first record
    35  MaxTimestamp          int64   largest record timestamp
    43  ProducerId            int64
    51  ProducerEpoch         int16
    53  BaseSequence          int32
    57  RecordsCount          int32   n
    61  Records               (the only part that is compressed)

    Record: Length varint | Attributes int8 (0) | TimestampDelta varlong | OffsetDelta varint |
            KeyLength varint | Key | ValueLength varint | Value | HeadersCount varint |
            [HeaderKeyLength varint | HeaderKey (utf-8) | HeaderValueLength varint | HeaderValue]
            (-1 is the length of a null key, value or header value)

Compression (cramjam 2.x), applied to the Records section only:

- gzip: ``cramjam.gzip.compress(data, level=L)``, levels 1..9, default 6.
- snappy: ``cramjam.snappy.compress_raw(data)``: one raw snappy block (Java's and
  librdkafka's readers accept it; Java itself writes xerial framing, which
  :func:`decode_batch` also reads). Takes no level.
- lz4: an LZ4 frame with independent blocks and no content checksum
  (``cramjam.lz4.Compressor(level=L, content_checksum=False, block_linked=False)``);
  Kafka's Java reader rejects linked blocks (KIP-57). cramjam still sets the block-checksum
  flag (FLG byte 0x70), which Kafka's and librdkafka's readers accept. Levels 1..17 as in
  Kafka (KIP-390), default 9; cramjam treats 13..17 exactly as 12 (LZ4HC's maximum).
  cramjam's own default when no level is given is 4, *not* Kafka's 9, so the level is
  always passed explicitly.
- zstd: ``cramjam.zstd.compress(data, level=L)``, levels -131072..22 (negative levels are
  zstd's fast modes, 0 means zstd's default), default 3.

The defaults are Kafka's and match ``kproducer.compression`` (what the compiled writer
uses); for gzip and zstd passing the default explicitly gives the same bytes as omitting it.
"""

from __future__ import annotations

import struct
import time
from typing import Sequence


from kproducer import compression as _compression
from kproducer.errors import CorruptRecordError, FrameError
from kproducer.records import DecodedBatch, Record

__all__ = [
    "BATCH_HEADER_SIZE",
    "CODECS",
    "CODEC_NAMES",
    "LEVELS",
    "DecodedBatch",
    "FrameReceiver",
    "Record",
    "crc32c",
    "decode_batch",
    "decode_varint",
    "decode_varlong",
    "encode_batch",
    "encode_varint",
    "encode_varlong",
    "frame",
    "murmur2",
    "murmur2_partition",
    "size_of_varint",
    "size_of_varlong",
    "varint_size",
    "varlong_size",
]

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1

BATCH_HEADER_SIZE = 61
_LOG_OVERHEAD = 12  # BaseOffset + Length: the bytes Length does not count
_MIN_LENGTH = BATCH_HEADER_SIZE - _LOG_OVERHEAD  # 49

# Compression itself (cramjam calls, levels, xerial/LZ4 framing checks) is shared with the
# compiled path in kproducer.compression: it is library glue, not codec logic, and sharing
# it keeps compressed output byte-identical. Record and batch layout stay independent here.
CODECS = _compression.CODEC_IDS
CODEC_NAMES = _compression.CODEC_NAMES
LEVELS = _compression.LEVELS

_ATTR_CODEC_MASK = 0x07
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version int32 + compatible-version int32


# --------------------------------------------------------------------------- CRC-32C

def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # reflected Castagnoli polynomial
        table.append(c)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from a previous result ``crc``.

    Same convention as the ``crc32c`` PyPI package: ``crc32c(b"123456789") == 0xE3069283``
    and ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    if isinstance(crc, bool) or not isinstance(crc, int):
        raise TypeError(f"crc must be an int, not {type(crc).__name__}")
    if not 0 <= crc <= UINT32_MAX:
        raise ValueError(f"crc {crc} out of uint32 range")
    buf = data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")
    table = _CRC32C_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in buf:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# --------------------------------------------------------------------------- murmur2

def murmur2(data) -> int:
    """Java Kafka's ``Utils.murmur2`` (MurmurHash2, seed 0x9747b28c), as a signed 32-bit int.

    The default partitioner puts a keyed record on ``(murmur2(key) & 0x7fffffff) % n``.
    """
    buf = bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data
    m = 0x5BD1E995
    length = len(buf)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = buf[i] | (buf[i + 1] << 8) | (buf[i + 2] << 16) | (buf[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= buf[n4 + 2] << 16
    if rest >= 2:
        h ^= buf[n4 + 1] << 8
    if rest >= 1:
        h ^= buf[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for a non-null ``key``:
    ``toPositive(murmur2(key)) % num_partitions``."""
    _check_int(num_partitions, 1, INT32_MAX, "num_partitions")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# --------------------------------------------------------------------------- varints

def _check_int(value, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise OverflowError(f"{what} {value} out of range {lo}..{hi}")
    return value


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a 32-bit signed int (1..5 bytes), as Kafka's ``ByteUtils.writeVarint``."""
    _check_int(value, INT32_MIN, INT32_MAX, "varint value")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint of a 64-bit signed int (1..10 bytes), as ``ByteUtils.writeVarlong``."""
    _check_int(value, INT64_MIN, INT64_MAX, "varlong value")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _size_unsigned(u: int) -> int:
    n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`encode_varint` writes for ``value``."""
    _check_int(value, INT32_MIN, INT32_MAX, "varint value")
    return _size_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def size_of_varlong(value: int) -> int:
    """Number of bytes :func:`encode_varlong` writes for ``value``."""
    _check_int(value, INT64_MIN, INT64_MAX, "varlong value")
    return _size_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# The compiled module's names for the two size functions.
varint_size = size_of_varint
varlong_size = size_of_varlong


def _read_zigzag(buf, pos: int, end: int, max_bytes: int, field: str | None,
                 where: str, delta: int) -> tuple[int, int]:
    """Reads a zig-zag varint of at most ``max_bytes`` bytes from ``buf[pos:end]``.

    ``delta`` is added to positions in error offsets and ``where`` names what they count in.
    Redundant continuation bytes (non-canonical encodings) are accepted, as Java does; bits
    that do not fit 32 (or 64) bits, more than ``max_bytes`` bytes and truncation are errors.
    """
    bits = 7 * max_bytes - (3 if max_bytes == 5 else 6)  # 32 or 64
    kind = "varint" if max_bytes == 5 else "varlong"
    label = f"{field} {kind}" if field else kind
    start = pos
    u = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptRecordError(
                f"truncated {label} at byte {start + delta} {where}", field=field,
                offset=start + delta)
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptRecordError(
                f"{label} longer than {max_bytes} bytes at byte {start + delta} {where}",
                field=field, offset=start + delta)
    if u >> bits:
        raise CorruptRecordError(
            f"{label} at byte {start + delta} {where} overflows {bits} bits",
            field=field, offset=start + delta)
    return (u >> 1) ^ -(u & 1), pos


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Reads a zig-zag varint (at most 5 bytes, int32) at ``pos``; returns ``(value, new_pos)``.

    Truncation, more than 5 bytes, or a value over 32 bits raise CorruptRecordError with
    the byte offset in ``buf``.
    """
    mv = memoryview(buf).cast("B")
    return _read_zigzag(mv, pos, len(mv), 5, None, "of the buffer", 0)


def decode_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Reads a zig-zag varlong (at most 10 bytes, int64) at ``pos``; returns ``(value, new_pos)``."""
    mv = memoryview(buf).cast("B")
    return _read_zigzag(mv, pos, len(mv), 10, None, "of the buffer", 0)


# --------------------------------------------------------------------------- encoder

def _as_bytes(obj, what: str) -> bytes:
    """The raw bytes of a bytes-like object (buffer protocol, C-contiguous)."""
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, str):
        raise TypeError(f"{what} must be bytes-like or None, not str")
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like or None, not {type(obj).__name__}") from None
    if not mv.c_contiguous:
        raise TypeError(f"{what} must be a C-contiguous buffer")
    return mv.tobytes()


def _nullable(obj, what: str) -> bytes:
    """KeyLength/ValueLength + bytes, -1 for None."""
    if obj is None:
        return b"\x01"  # zig-zag -1
    data = _as_bytes(obj, what)
    if len(data) > INT32_MAX:
        raise OverflowError(f"{what} is {len(data)} bytes, more than int32 allows")
    return encode_varint(len(data)) + data


def _encode_record(index: int, offset_delta: int, ts_delta: int, key, value, headers) -> bytes:
    body = bytearray(b"\x00")  # Attributes int8: unused, 0
    body += encode_varlong(ts_delta)  # TimestampDelta
    body += encode_varint(offset_delta)  # OffsetDelta
    body += _nullable(key, f"record {index}: key")  # KeyLength | Key
    body += _nullable(value, f"record {index}: value")  # ValueLength | Value
    if headers is None:
        headers = ()
    elif not isinstance(headers, (list, tuple)):
        raise TypeError(
            f"record {index}: headers must be a list or tuple of (str, bytes | None), "
            f"not {type(headers).__name__}")
    body += encode_varint(len(headers))  # HeadersCount
    for j, header in enumerate(headers):
        if not isinstance(header, tuple) or len(header) != 2:
            raise TypeError(f"record {index}: header {j} must be a (str, bytes | None) tuple")
        h_key, h_value = header
        if not isinstance(h_key, str):
            raise TypeError(
                f"record {index}: header {j} key must be str, not {type(h_key).__name__}")
        try:
            raw_key = h_key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"record {index}: header {j} key is not encodable as UTF-8: {exc}") from None
        body += encode_varint(len(raw_key)) + raw_key  # HeaderKeyLength | HeaderKey
        body += _nullable(h_value, f"record {index}: header {j} value")  # HeaderValueLength | HeaderValue
    if len(body) > INT32_MAX:
        raise OverflowError(f"record {index} is {len(body)} bytes, more than int32 allows")
    return encode_varint(len(body)) + bytes(body)  # Length | body


def encode_batch(records: Sequence[tuple], *, compression: str = "none",
                 compression_level: int | None = None, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """Builds one record batch v2, byte for byte as the compiled writer does.

    ``records`` is a non-empty sequence of tuples ``(key, value)`` or
    ``(key, value, timestamp_ms, headers)``. Keys and values are bytes-like or None;
    ``headers`` is None or a list/tuple of ``(str, bytes-like | None)``. The two-element
    form, and a ``timestamp_ms`` of None, stand for the current time in ms
    (``int(time.time() * 1000)``, taken once per call) and no headers.

    Raises ValueError for an empty ``records``, an unknown ``compression`` or an invalid
    ``compression_level``, or a ProducerId/ProducerEpoch/BaseSequence outside int64/int16/
    int32; TypeError (naming the record index and field) for wrong types; OverflowError for
    a timestamp or TimestampDelta outside int64.
    """
    if not isinstance(compression, str) or compression not in CODECS:
        raise ValueError(
            f"compression: unknown codec {compression!r}; expected one of {', '.join(CODECS)}")
    level = _compression.resolve_level(compression, compression_level)
    # Out-of-range producer fields are ValueError (the compiled writer's choice); an
    # out-of-range timestamp or TimestampDelta is OverflowError in both.
    for name, wire, value, lo, hi in (
            ("producer_id", "ProducerId", producer_id, INT64_MIN, INT64_MAX),
            ("producer_epoch", "ProducerEpoch", producer_epoch, INT16_MIN, INT16_MAX),
            ("base_sequence", "BaseSequence", base_sequence, INT32_MIN, INT32_MAX)):
        try:
            _check_int(value, lo, hi, f"{name} ({wire})")
        except OverflowError as exc:
            raise ValueError(str(exc)) from None
    if isinstance(records, (str, bytes, bytearray, memoryview)):
        raise TypeError("records must be a sequence of tuples, not bytes or str")
    try:
        records = list(records)
    except TypeError:
        raise TypeError(f"records must be a sequence of tuples, not {type(records).__name__}") from None
    if not records:
        raise ValueError("records must not be empty")
    if len(records) > INT32_MAX:
        raise OverflowError("too many records for one batch (RecordsCount is an int32)")

    now = None
    parsed = []
    for i, rec in enumerate(records):
        if not isinstance(rec, tuple) or len(rec) not in (2, 4):
            raise TypeError(
                f"record {i}: expected a tuple (key, value) or (key, value, timestamp_ms, headers), "
                f"got {type(rec).__name__}" + (f" of length {len(rec)}" if isinstance(rec, tuple) else ""))
        if len(rec) == 2:
            key, value = rec
            ts, headers = None, None
        else:
            key, value, ts, headers = rec
        if ts is None:
            if now is None:
                now = int(time.time() * 1000)
            ts = now
        elif isinstance(ts, bool) or not isinstance(ts, int):
            raise TypeError(f"record {i}: timestamp_ms must be an int or None, not {type(ts).__name__}")
        elif not INT64_MIN <= ts <= INT64_MAX:
            raise OverflowError(f"record {i}: timestamp_ms {ts} out of int64 range")
        parsed.append((key, value, ts, headers))

    base_ts = parsed[0][2]
    max_ts = max(p[2] for p in parsed)
    out = bytearray()
    for i, (key, value, ts, headers) in enumerate(parsed):
        delta = ts - base_ts
        if not INT64_MIN <= delta <= INT64_MAX:
            raise OverflowError(
                f"record {i}: TimestampDelta {delta} (timestamp_ms - BaseTimestamp) out of int64 range")
        out += _encode_record(i, i, delta, key, value, headers)

    records_section = (bytes(out) if compression == "none" else
                       _compression.compress(CODECS[compression], bytes(out), level))
    total = BATCH_HEADER_SIZE + len(records_section)
    if total - _LOG_OVERHEAD > INT32_MAX:
        raise OverflowError(f"batch of {total} bytes is too large (Length is an int32)")
    n = len(parsed)
    header = bytearray(_HEADER.pack(
        0,                       # BaseOffset
        total - _LOG_OVERHEAD,   # Length
        -1,                      # PartitionLeaderEpoch
        2,                       # Magic
        0,                       # CRC, patched below
        CODECS[compression],     # Attributes: codec; CreateTime; not transactional/control
        n - 1,                   # LastOffsetDelta
        base_ts,                 # BaseTimestamp
        max_ts,                  # MaxTimestamp
        producer_id,             # ProducerId
        producer_epoch,          # ProducerEpoch
        base_sequence,           # BaseSequence
        n,                       # RecordsCount
    ))
    crc = crc32c(records_section, crc32c(header[21:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + records_section


# --------------------------------------------------------------------------- decoder

class _Cursor:
    """Reads the (decompressed) Records section, locating errors in the caller's terms."""

    __slots__ = ("buf", "pos", "where")

    def __init__(self, buf, pos: int, where: str):
        self.buf = buf
        self.pos = pos
        self.where = where  # "of the batch" or "of the decompressed records section"

    def error(self, message: str, field: str, at: int) -> CorruptRecordError:
        return CorruptRecordError(f"{message} at byte {at} {self.where}", field=field, offset=at)

    def varint(self, end: int, field: str) -> int:
        value, self.pos = _read_zigzag(self.buf, self.pos, end, 5, field, self.where, 0)
        return value

    def varlong(self, end: int, field: str) -> int:
        value, self.pos = _read_zigzag(self.buf, self.pos, end, 10, field, self.where, 0)
        return value

    def take(self, n: int, end: int, length_field: str, length_at: int) -> bytes:
        if n > end - self.pos:
            raise self.error(
                f"{length_field} {n} exceeds the {end - self.pos} bytes left in the record",
                length_field, length_at)
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data

    def nullable(self, end: int, length_field: str) -> bytes | None:
        at = self.pos
        n = self.varint(end, length_field)
        if n == -1:
            return None
        if n < -1:
            raise self.error(f"invalid {length_field} {n}", length_field, at)
        return self.take(n, end, length_field, at)


def _read_record(cur: _Cursor, index: int, end: int) -> tuple[int, int, int, Record]:
    """Reads record ``index``; returns (TimestampDelta, its position, OffsetDelta's position, Record)."""
    rec_at = cur.pos
    length = cur.varint(end, "Length")
    if length < 0:
        raise cur.error(f"record {index} has negative Length {length}", "Length", rec_at)
    body_at = cur.pos
    if length > end - body_at:
        raise cur.error(
            f"record {index} Length {length} exceeds the {end - body_at} bytes left",
            "Length", rec_at)
    rec_end = body_at + length
    if cur.pos >= rec_end:
        raise cur.error(f"record {index} too short for its Attributes", "Attributes", cur.pos)
    attributes = cur.buf[cur.pos]
    attributes = attributes - 256 if attributes > 127 else attributes
    cur.pos += 1
    ts_at = cur.pos
    ts_delta = cur.varlong(rec_end, "TimestampDelta")
    od_at = cur.pos
    offset_delta = cur.varint(rec_end, "OffsetDelta")
    key = cur.nullable(rec_end, "KeyLength")
    value = cur.nullable(rec_end, "ValueLength")
    hc_at = cur.pos
    count = cur.varint(rec_end, "HeadersCount")
    if count < 0:
        raise cur.error(f"record {index} has negative HeadersCount {count}", "HeadersCount", hc_at)
    headers = []
    for _ in range(count):
        hk_at = cur.pos
        hk_len = cur.varint(rec_end, "HeaderKeyLength")
        if hk_len < 0:
            raise cur.error(
                f"record {index} has a {'null' if hk_len == -1 else 'negative'} header key "
                f"(HeaderKeyLength {hk_len})", "HeaderKeyLength", hk_at)
        hk_data_at = cur.pos
        raw = cur.take(hk_len, rec_end, "HeaderKeyLength", hk_at)
        try:
            h_key = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise cur.error(f"record {index} header key is not valid UTF-8 ({exc.reason})",
                            "HeaderKey", hk_data_at) from None
        h_value = cur.nullable(rec_end, "HeaderValueLength")
        headers.append((h_key, h_value))
    if cur.pos != rec_end:
        raise cur.error(
            f"record {index} Length is {length} but its fields take {cur.pos - body_at} bytes",
            "Length", rec_at)
    return ts_delta, ts_at, od_at, Record(offset_delta=offset_delta, timestamp=0, key=key, value=value,
                                   headers=headers, attributes=attributes)


def decode_batch(data) -> DecodedBatch:
    """Parses and validates exactly one record batch v2; every failure is a CorruptRecordError.

    Checked: at least the 61-byte header; Length equal to the bytes that follow it (a short
    buffer or trailing bytes are errors); Magic 2; CRC-32C; a known codec; the Records
    section decompresses (snappy as a raw block or xerial framing; an lz4 frame whose
    descriptor Java's reader accepts, so no linked blocks; gzip; zstd);
    every varint at most 5 bytes (varlong 10) and not truncated; every length >= -1 and
    inside its record; header keys non-null UTF-8; each record's Length equal to what its
    fields use; OffsetDelta increasing within 0..LastOffsetDelta and the last one equal to
    LastOffsetDelta; RecordsCount equal to the records present; no bytes after the last
    record; for CreateTime batches MaxTimestamp equal to the largest record timestamp.

    The error's ``offset`` is a byte offset into ``data``, except inside a compressed
    Records section, where it counts from the start of the decompressed section (the
    message says which).
    """
    try:
        mv = memoryview(data).cast("B")
    except TypeError:
        raise TypeError(f"data must be bytes-like, not {type(data).__name__}") from None
    buf = mv.tobytes()
    n = len(buf)
    if n < _LOG_OVERHEAD:
        field, at = ("BaseOffset", 0) if n < 8 else ("Length", 8)
        raise CorruptRecordError(
            f"truncated batch header: {n} bytes end inside {field} (byte {at})",
            field=field, offset=at)
    if n > 16 and buf[16] != 2:
        raise CorruptRecordError(f"unsupported Magic {buf[16]} at byte 16 (expected 2)",
                                 field="Magic", offset=16)
    (length,) = struct.unpack_from(">i", buf, 8)
    if length < _MIN_LENGTH:
        raise CorruptRecordError(
            f"Length {length} at byte 8 is below the minimum {_MIN_LENGTH}",
            field="Length", offset=8)
    if length + _LOG_OVERHEAD > n:
        raise CorruptRecordError(
            f"truncated batch: Length at byte 8 says {length} bytes follow but only "
            f"{n - _LOG_OVERHEAD} do", field="Length", offset=8)
    if length + _LOG_OVERHEAD < n:
        raise CorruptRecordError(
            f"{n - length - _LOG_OVERHEAD} trailing bytes after the batch at byte "
            f"{length + _LOG_OVERHEAD} (Length at byte 8 is {length})", field="Length", offset=8)
    (base_offset, _, leader_epoch, magic, crc, attributes, last_offset_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, records_count) = _HEADER.unpack_from(buf, 0)
    actual_crc = crc32c(buf[21:])
    if crc != actual_crc:
        raise CorruptRecordError(
            f"CRC mismatch at byte 17: stored 0x{crc:08x}, computed 0x{actual_crc:08x}",
            field="CRC", offset=17)
    codec = attributes & _ATTR_CODEC_MASK
    if codec not in CODEC_NAMES:
        raise CorruptRecordError(
            f"unknown compression codec {codec} in Attributes 0x{attributes & 0xFFFF:04x} at byte 21",
            field="Attributes", offset=21)
    compression = CODEC_NAMES[codec]
    log_append = bool(attributes & _ATTR_TIMESTAMP_TYPE)
    if last_offset_delta < 0:
        raise CorruptRecordError(f"negative LastOffsetDelta {last_offset_delta} at byte 23",
                                 field="LastOffsetDelta", offset=23)
    if records_count < 0:
        raise CorruptRecordError(f"negative RecordsCount {records_count} at byte 57",
                                 field="RecordsCount", offset=57)

    if compression == "none":
        cur = _Cursor(buf, BATCH_HEADER_SIZE, "of the batch")
    else:
        section = _compression.decompress(codec, buf[BATCH_HEADER_SIZE:])
        cur = _Cursor(section, 0, "of the decompressed records section")
    end = len(cur.buf)

    records = []
    prev_delta = -1
    seen_max = None
    for i in range(records_count):
        if cur.pos >= end:
            raise CorruptRecordError(
                f"RecordsCount at byte 57 is {records_count} but the records section holds only {i}",
                field="RecordsCount", offset=57)
        ts_delta, ts_at, od_at, rec = _read_record(cur, i, end)
        if not prev_delta < rec.offset_delta <= last_offset_delta:
            raise cur.error(
                f"record {i} OffsetDelta {rec.offset_delta} is not in {prev_delta + 1}..{last_offset_delta}",
                "OffsetDelta", od_at)
        prev_delta = rec.offset_delta
        ts = base_ts + ts_delta
        if not INT64_MIN <= ts <= INT64_MAX:
            raise cur.error(
                f"record {i} timestamp BaseTimestamp + TimestampDelta = {ts} overflows int64",
                "TimestampDelta", ts_at)
        seen_max = ts if seen_max is None or ts > seen_max else seen_max
        rec.timestamp = max_ts if log_append else ts
        records.append(rec)
    if cur.pos != end:
        raise cur.error(f"{end - cur.pos} bytes left after the last record", "Records", cur.pos)
    if records and prev_delta != last_offset_delta:
        raise CorruptRecordError(
            f"LastOffsetDelta at byte 23 is {last_offset_delta} but the last record's "
            f"OffsetDelta is {prev_delta}", field="LastOffsetDelta", offset=23)
    if records and not log_append and seen_max != max_ts:
        raise CorruptRecordError(
            f"MaxTimestamp at byte 35 is {max_ts} but the largest record timestamp is {seen_max}",
            field="MaxTimestamp", offset=35)

    return DecodedBatch(
        base_offset=base_offset, length=length, partition_leader_epoch=leader_epoch,
        magic=magic, crc=crc, attributes=attributes, compression=compression,
        timestamp_type="log_append" if log_append else "create",
        is_transactional=bool(attributes & _ATTR_TRANSACTIONAL),
        is_control=bool(attributes & _ATTR_CONTROL),
        last_offset_delta=last_offset_delta, base_timestamp=base_ts, max_timestamp=max_ts,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        records_count=records_count, records=records)


# --------------------------------------------------------------------------- framing

def frame(payload) -> bytes:
    """``payload`` prefixed with its size as a 4-byte big-endian int32 (Kafka's request framing)."""
    data = _as_bytes(payload, "payload")
    if len(data) > INT32_MAX:
        raise OverflowError(f"payload of {len(data)} bytes does not fit an int32 size")
    return struct.pack(">i", len(data)) + data


class FrameReceiver:
    """Splits a byte stream into size-prefixed frames, however the stream is cut.

    ``feed(data)`` returns the frames completed by ``data`` (possibly none, possibly many).
    A negative size or one above ``max_size`` raises FrameError with the stream offset of
    the size field; the receiver is then unusable (every later ``feed`` raises), as a
    connection that sent it must be closed.
    """

    def __init__(self, max_size: int):
        _check_int(max_size, 0, INT32_MAX, "max_size")
        self.max_size = max_size
        self._buf = bytearray()
        self._base = 0  # stream offset of self._buf[0]
        self._failed: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buf)

    def feed(self, data) -> list[bytes]:
        if self._failed is not None:
            raise FrameError(f"receiver already failed: {self._failed}",
                             field=self._failed.field, offset=self._failed.offset)
        self._buf += _as_bytes(data, "data")
        frames = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= 4:
            (size,) = struct.unpack_from(">i", buf, pos)
            if size < 0 or size > self.max_size:
                at = self._base + pos
                what = "negative" if size < 0 else f"above the limit {self.max_size}"
                self._failed = FrameError(f"frame size {size} {what} at byte {at} of the stream",
                                          field="Size", offset=at)
                raise self._failed
            if len(buf) - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
            self._base += pos
        return frames


# -- the Produce response, read by the generic schema decoder --------------------------------

def produce_response(version: int, payload):
    """What ``kproducer.protocol.produce.decode_produce_response`` returns, by the generic
    schema decoder: ``(correlation_id, [(topic, partition, error_code, base_offset,
    log_append_time_ms, error_message)], throttle_time_ms, bytes left after the last field,
    leaders, endpoints)`` (the last two, from v10: KIP-951's hints, None when there are
    none). Raises ProtocolDecodeError as the generic decoder does."""
    from kproducer.protocol import PRODUCE
    from kproducer.protocol.messages import decode_response_lenient

    resp, trailing = decode_response_lenient(PRODUCE, version, payload)
    leaders = endpoints = None
    if version >= 10:
        leaders = {(t.name, p.index): (p.current_leader.leader_id, p.current_leader.leader_epoch)
                   for t in resp.responses for p in t.partition_responses
                   if p.current_leader is not None and p.current_leader.leader_id >= 0} or None
        endpoints = {e.node_id: (e.host, e.port) for e in resp.node_endpoints or ()} or None
    results = [(t.name, p.index, p.error_code, p.base_offset, p.log_append_time_ms,
                p.error_message if version >= 8 else None)
               for t in resp.responses for p in t.partition_responses]
    return resp.correlation_id, results, resp.throttle_time_ms, trailing, leaders, endpoints
