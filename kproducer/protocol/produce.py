"""Fast, specialised codec for the producer's hot requests: Produce v3-v11.

The generic codec (:mod:`.schema` / :mod:`.messages`) interprets a schema for
every field of every struct; that is correct but costs ~140 us to encode a
4-partition Produce request and ~170 us to decode its response. This module
hard-codes the two layouts instead (straight-line ``struct`` calls, cached
constant pieces) and is byte-for-byte / value-for-value equivalent to the
generic codec (``tests/test_produce_fast.py`` checks it for every version).

Wire layout (Apache Kafka ``ProduceRequest.json`` / ``ProduceResponse.json``;
v9+ are flexible, KIP-482)::

    Request frame:  Size int32 | RequestHeader | Body
      RequestHeader v1 (v3-8) / v2 (v9+):
        ApiKey int16 = 0 | ApiVersion int16 | CorrelationId int32
        | ClientId nullable string (int16 length, also in v2) | [v2: tagged fields]
      Body:
        TransactionalId nullable string | Acks int16 | TimeoutMs int32
        | TopicData[] { Name string
                        | PartitionData[] { Index int32 | Records nullable bytes | [tags] }
                        | [tags] }
        | [tags]

    Response payload (no size prefix):
      ResponseHeader v0 (v3-8): CorrelationId int32
                     v1 (v9+):  CorrelationId int32 | tagged fields
      Body:
        Responses[] { Name string
                      | PartitionResponses[] {
                          Index int32 | ErrorCode int16 | BaseOffset int64
                          | LogAppendTimeMs int64 (v2+) | LogStartOffset int64 (v5+)
                          | RecordErrors[] (v8+) { BatchIndex int32
                                                   | BatchIndexErrorMessage nullable string
                                                   | [tags] }
                          | ErrorMessage nullable string (v8+)
                          | [tags: v10+ CurrentLeader (tag 0), skipped] }
                      | [tags] }
        | ThrottleTimeMs int32 (v1+)
        | [tags: v10+ NodeEndpoints (tag 0), skipped]

In flexible versions strings, bytes and arrays are "compact" (unsigned varint
length + 1, 0 = null) and ``[tags]`` is a tagged-field section (uvarint count,
then per field uvarint tag, uvarint size, ``size`` bytes).

API::

    frame = encode_produce_request(version, correlation_id, client_id, acks, timeout_ms,
                                   [(topic, [(partition, records_buffer), ...]), ...],
                                   transactional_id=None)
    correlation_id, results = decode_produce_response(version, payload)
    # results: [(topic, partition, error_code, base_offset, log_append_time_ms,
    #            error_message), ...] in wire order

``encode_produce_request`` returns the complete frame (4-byte size prefix
included) and copies each records buffer exactly once (one ``b"".join``).
Records may be ``bytes``, ``bytearray``, ``memoryview``, any object exporting
the buffer protocol (kproducer's ``ProducerBatch``), or ``None`` (null).

``decode_produce_response`` validates everything it reads: a truncated,
inconsistent or over-long payload raises
:class:`~kproducer.errors.ProtocolDecodeError` with the Kafka field name and
the byte offset (into ``payload``) where the failing read started. Fields
outside the 6-tuple (LogStartOffset, RecordErrors, ThrottleTimeMs, tagged
fields) are checked and skipped.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any, List, Optional, Sequence, Tuple

from ..errors import ProtocolDecodeError, ProtocolError, UnsupportedVersionError

__all__ = ["encode_produce_request", "decode_produce_response", "MIN_VERSION", "MAX_VERSION",
           "FIRST_FLEXIBLE_VERSION"]

MIN_VERSION = 3
MAX_VERSION = 11
FIRST_FLEXIBLE_VERSION = 9
_API_KEY = 0
_INT16_MAX = 0x7FFF
_INT32_MAX = 0x7FFFFFFF

ProduceResult = Tuple[str, int, int, int, int, Optional[str]]

# --------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------

_pack_head = struct.Struct(">ihhi").pack        # Size, ApiKey, ApiVersion, CorrelationId
_pack_i16 = struct.Struct(">h").pack
_pack_i32 = struct.Struct(">i").pack
_pack_acks_timeout = struct.Struct(">hi").pack
_pack_acks_timeout_count = struct.Struct(">hii").pack
_pack_ii = struct.Struct(">ii").pack            # Index, Records length (non-flexible)

# Unsigned varints below 128 are a single byte; precomputed.
_UV1 = [bytes((i,)) for i in range(128)]


def _uvarint(n: int) -> bytes:
    """Unsigned LEB128 of ``0 <= n < 2**32`` (Kafka's unsigned varint)."""
    if n < 0x80:
        return _UV1[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, (n >> 7) & 0x7F | 0x80, n >> 14))
    if n > 0xFFFFFFFF:
        raise ProtocolError(f"unsigned varint value {n} out of range 0..2**32-1")
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _utf8(value: str, what: str) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError(f"cannot encode {what}={value!r}: expected a str")
    data = value.encode("utf-8")
    if len(data) > _INT16_MAX:
        raise ProtocolError(f"cannot encode {what}: {len(data)} bytes is longer than {_INT16_MAX}")
    return data


@lru_cache(maxsize=256)
def _header_tail(flexible: bool, client_id: Optional[str], transactional_id: Optional[str]) -> bytes:
    """Everything between CorrelationId and Acks: ClientId, header tags, TransactionalId."""
    if client_id is None:
        out = b"\xff\xff"
    else:
        data = _utf8(client_id, "RequestHeader.ClientId")
        out = _pack_i16(len(data)) + data
    if flexible:
        out += b"\x00"                                      # header v2 tagged fields
        if transactional_id is None:
            out += b"\x00"
        else:
            data = _utf8(transactional_id, "ProduceRequest.TransactionalId")
            out += _uvarint(len(data) + 1) + data
    elif transactional_id is None:
        out += b"\xff\xff"
    else:
        data = _utf8(transactional_id, "ProduceRequest.TransactionalId")
        out += _pack_i16(len(data)) + data
    return out


# Encoded topic names keyed by (name, flexible); a producer writes to few topics.
_TOPIC_NAMES: dict = {}
_TOPIC_CACHE_MAX = 4096


def _topic_name(name: str, flexible: bool) -> bytes:
    data = _utf8(name, "TopicProduceData.Name")
    enc = (_uvarint(len(data) + 1) if flexible else _pack_i16(len(data))) + data
    if len(_TOPIC_NAMES) >= _TOPIC_CACHE_MAX:
        _TOPIC_NAMES.clear()
    _TOPIC_NAMES[(name, flexible)] = enc
    return enc


def _records_size(records: Any) -> int:
    """Byte length of a records buffer (bytes, bytearray, memoryview or any contiguous
    buffer-protocol object such as a ProducerBatch)."""
    t = type(records)
    if t is bytes or t is bytearray:
        return len(records)
    if t is memoryview:
        return records.nbytes
    try:
        with memoryview(records) as mv:
            if not mv.contiguous:
                raise ProtocolError("cannot encode PartitionProduceData.Records: buffer is not contiguous")
            return mv.nbytes
    except TypeError:
        raise ProtocolError(
            f"cannot encode PartitionProduceData.Records: {type(records).__name__} "
            f"does not support the buffer protocol") from None


def encode_produce_request(version: int, correlation_id: int, client_id: Optional[str], acks: int,
                           timeout_ms: int, topics: Sequence[Tuple[str, Sequence[Tuple[int, Any]]]],
                           transactional_id: Optional[str] = None) -> bytes:
    """The complete Produce request frame (size prefix + header + body) at ``version``.

    ``topics`` is ``[(topic, [(partition, records), ...]), ...]``; records are
    written in the given order, each copied once. Raises
    :class:`~kproducer.errors.UnsupportedVersionError` outside v3-v11 and
    :class:`~kproducer.errors.ProtocolError` for a value that cannot be encoded.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnsupportedVersionError(
            f"ProduceRequest version {version} is not implemented "
            f"(kproducer implements {MIN_VERSION}-{MAX_VERSION})")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    names = _TOPIC_NAMES
    # parts[0] is the size/ApiKey/ApiVersion/CorrelationId head, filled in last.
    try:
        tail = _header_tail(flexible, client_id, transactional_id)
        if flexible:
            mid = _pack_acks_timeout(acks, timeout_ms) + _uvarint(len(topics) + 1)
            parts = [b"", tail, mid]
            size = 8 + len(tail) + len(mid)
            append = parts.append
            uv1 = _UV1
            for name, partitions in topics:
                tn = names.get((name, True)) or _topic_name(name, True)
                np1 = len(partitions) + 1
                head = tn + (uv1[np1] if np1 < 0x80 else _uvarint(np1))
                append(head)
                size += len(head) + 1                      # + topic tagged fields
                for index, records in partitions:
                    if records is None:
                        ph = _pack_i32(index) + b"\x00\x00"   # null records, tagged fields
                        append(ph)
                        size += 6
                        continue
                    n = _records_size(records)
                    ph = _pack_i32(index) + (uv1[n + 1] if n < 0x7F else _uvarint(n + 1))
                    append(ph)
                    append(records)
                    append(b"\x00")                       # partition tagged fields
                    size += len(ph) + n + 1
                append(b"\x00")
            append(b"\x00")                               # body tagged fields
            size += 1
        else:
            mid = _pack_acks_timeout_count(acks, timeout_ms, len(topics))
            parts = [b"", tail, mid]
            size = 8 + len(tail) + 10
            append = parts.append
            for name, partitions in topics:
                tn = names.get((name, False)) or _topic_name(name, False)
                head = tn + _pack_i32(len(partitions))
                append(head)
                size += len(head)
                for index, records in partitions:
                    if records is None:
                        append(_pack_ii(index, -1))
                        size += 8
                        continue
                    n = _records_size(records)
                    append(_pack_ii(index, n))
                    append(records)
                    size += 8 + n
        if size > _INT32_MAX:
            raise ProtocolError(f"Produce request of {size} bytes exceeds the int32 size field")
        parts[0] = _pack_head(size, _API_KEY, version, correlation_id)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode ProduceRequest v{version}: {exc}") from None
    except (TypeError, ValueError) as exc:      # a malformed topics/partitions shape
        raise ProtocolError(f"cannot encode ProduceRequest v{version}: {exc}") from None
    try:
        return b"".join(parts)
    except (TypeError, BufferError) as exc:
        raise ProtocolError(f"cannot encode PartitionProduceData.Records: {exc}") from None


# --------------------------------------------------------------------------
# Decoder
# --------------------------------------------------------------------------

_unpack_i32 = struct.Struct(">i").unpack_from
_unpack_i16 = struct.Struct(">h").unpack_from

# Fixed-width run at the start of a PartitionProduceResponse, per version
# group: (struct, size, [(field, width), ...]) - the layout names the field
# a truncation hits.
_P_FIELDS = [("Index", 4), ("ErrorCode", 2), ("BaseOffset", 8), ("LogAppendTimeMs", 8),
             ("LogStartOffset", 8), ("RecordErrors", 4)]
_P_V3 = struct.Struct(">ihqq")           # v3-4
_P_V5 = struct.Struct(">ihqqq")          # v5-7, and v9+ (then a compact array follows)
_P_V8 = struct.Struct(">ihqqqi")         # v8: RecordErrors int32 count included

_PART = "PartitionProduceResponse"
_TOPIC = "TopicProduceResponse"
_BODY = "ProduceResponse"
_RERR = "BatchIndexAndErrorMessage"
_F_RESPONSES = f"{_BODY}.Responses"
_F_TOPIC_NAME = f"{_TOPIC}.Name"
_F_PARTITIONS = f"{_TOPIC}.PartitionResponses"
_F_RECORD_ERRORS = f"{_PART}.RecordErrors"
_F_ERROR_MESSAGE = f"{_PART}.ErrorMessage"
_F_PART_TAGS = f"{_PART}._tagged_fields"
_F_TOPIC_TAGS = f"{_TOPIC}._tagged_fields"
_F_BODY_TAGS = f"{_BODY}._tagged_fields"
_F_BATCH_MSG = f"{_RERR}.BatchIndexErrorMessage"
_F_RERR_TAGS = f"{_RERR}._tagged_fields"


def _err(msg: str, field: str, offset: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"{msg} ({field} at byte {offset})", field=field, offset=offset)


def _truncated_run(struct_name: str, fields, pos: int, end: int) -> ProtocolDecodeError:
    """Error for a fixed-width run starting at ``pos`` that does not fit before ``end``."""
    p = pos
    for name, width in fields:
        if p + width > end:
            return _err(f"truncated {struct_name}.{name}: need {width} bytes, {end - p} left",
                        f"{struct_name}.{name}", p)
        p += width
    return _err(f"truncated {struct_name}", struct_name, pos)   # pragma: no cover


def _uvarint_slow(buf, pos: int, end: int, field: str) -> Tuple[int, int]:
    start = pos
    value = 0
    shift = 0
    for _ in range(5):
        if pos >= end:
            raise _err(f"truncated varint {field}: input ends at byte {end}", field, start)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value >> 32:
                raise _err(f"varint {field} overflows 32 bits", field, start)
            return value, pos
        shift += 7
    raise _err(f"varint {field} is longer than 5 bytes", field, start)


def _skip_tags(buf, pos: int, end: int, field: str) -> int:
    """Skip a tagged-field section starting at ``pos``; return the position after it."""
    if pos < end and buf[pos] == 0:                 # the common case: no tags
        return pos + 1
    count, pos = _uvarint_slow(buf, pos, end, field)
    for _ in range(count):
        _tag, pos = _uvarint_slow(buf, pos, end, field)
        start = pos
        size, pos = _uvarint_slow(buf, pos, end, field)
        if size > end - pos:
            raise _err(f"truncated tagged field {field}: size {size}, {end - pos} bytes left",
                       field, start)
        pos += size
    return pos


def _text(buf, pos: int, n: int, field: str) -> str:
    try:
        return str(buf[pos:pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise _err(f"invalid UTF-8 in {field}: {exc.reason}", field, pos) from None


def _length(buf, pos: int, end: int, flexible: bool, width: int, field: str):
    """Read a length or count prefix: unsigned varint N+1 when flexible (compact), else a
    big-endian int16 (``width`` 2) or int32 (4). Returns ``(n, next_pos)``; -1 means null."""
    if flexible:
        if pos < end and buf[pos] < 0x80:
            return buf[pos] - 1, pos + 1
        n, pos = _uvarint_slow(buf, pos, end, field)
        return n - 1, pos
    if pos + width > end:
        kind = "length" if width == 2 else "count"
        raise _err(f"truncated int{width * 8} {kind} of {field}: {end - pos} bytes left", field, pos)
    return (_unpack_i16 if width == 2 else _unpack_i32)(buf, pos)[0], pos + width


def _string(buf, pos: int, end: int, flexible: bool, nullable: bool, field: str):
    """Read a (compact) (nullable) string at ``pos``; return ``(value, next_pos)``."""
    start = pos
    n, pos = _length(buf, pos, end, flexible, 2, field)
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise _err(f"{'null' if n == -1 else 'negative'} length {n} for {field}", field, start)
    if n > end - pos:
        raise _err(f"truncated {field}: length {n}, {end - pos} bytes left", field, start)
    return _text(buf, pos, n, field), pos + n


def _array_count(buf, pos: int, end: int, flexible: bool, min_item: int, field: str):
    """Read a non-nullable (compact) array count; return ``(count, next_pos)``."""
    start = pos
    n, pos = _length(buf, pos, end, flexible, 4, field)
    if n < 0:
        raise _err(f"{'null' if n == -1 else 'negative'} array count {n} for {field}", field, start)
    if n * min_item > end - pos:
        raise _err(f"truncated array {field}: {n} items cannot fit in {end - pos} bytes", field, start)
    return n, pos


def _check_count(n: int, min_item: int, pos: int, end: int, field: str, start: int) -> None:
    if n < 0:
        raise _err(f"{'null' if n == -1 else 'negative'} array count {n} for {field}", field, start)
    if n * min_item > end - pos:
        raise _err(f"truncated array {field}: {n} items cannot fit in {end - pos} bytes", field, start)


def _skip_record_errors(buf, pos: int, end: int, count: int, flexible: bool) -> int:
    """Validate and skip ``count`` BatchIndexAndErrorMessage entries."""
    for _ in range(count):
        if pos + 4 > end:
            raise _err(f"truncated int32 {_RERR}.BatchIndex: {end - pos} bytes left",
                       f"{_RERR}.BatchIndex", pos)
        _msg, pos = _string(buf, pos + 4, end, flexible, True, _F_BATCH_MSG)
        if flexible:
            pos = _skip_tags(buf, pos, end, _F_RERR_TAGS)
    return pos


def decode_produce_response(version: int, payload) -> Tuple[int, List[ProduceResult]]:
    """Decode a Produce response payload (header + body, no size prefix).

    Returns ``(correlation_id, [(topic, partition, error_code, base_offset,
    log_append_time_ms, error_message), ...])`` in wire order;
    ``error_message`` is ``None`` before v8. Trailing bytes are an error.
    Raises :class:`~kproducer.errors.ProtocolDecodeError` (with ``field`` and
    ``offset``) for malformed input, never ``IndexError`` / ``struct.error``.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnsupportedVersionError(
            f"ProduceResponse version {version} is not implemented "
            f"(kproducer implements {MIN_VERSION}-{MAX_VERSION})")
    if type(payload) is bytes:
        buf = payload
    else:
        buf = memoryview(payload)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE_VERSION

    # -- header ----------------------------------------------------------------
    if end < 4:
        raise _err(f"truncated int32 ResponseHeader.CorrelationId: {end} bytes left",
                   "ResponseHeader.CorrelationId", 0)
    correlation_id = _unpack_i32(buf, 0)[0]
    pos = 4
    if flexible:
        pos = _skip_tags(buf, pos, end, "ResponseHeader._tagged_fields")

    # -- per-version partition layout -------------------------------------------
    if version >= 9:
        pst, fields = _P_V5, _P_FIELDS[:5]
        # fixed run + RecordErrors count + ErrorMessage + tagged fields
        p_min = 33
    elif version == 8:
        pst, fields = _P_V8, _P_FIELDS
        p_min = 36                       # fixed run (incl. count) + ErrorMessage int16
    elif version >= 5:
        pst, fields = _P_V5, _P_FIELDS[:5]
        p_min = 30
    else:
        pst, fields = _P_V3, _P_FIELDS[:4]
        p_min = 22
    unpack_p = pst.unpack_from
    p_size = pst.size
    v5 = version >= 5
    t_min = 3 if flexible else 6          # topic: Name + PartitionResponses count (+ tags)
    out: List[ProduceResult] = []
    append = out.append
    string = _string

    # -- body ----------------------------------------------------------------------
    ntopics, pos = _array_count(buf, pos, end, flexible, t_min, _F_RESPONSES)
    for _ in range(ntopics):
        topic, pos = string(buf, pos, end, flexible, False, _F_TOPIC_NAME)
        nparts, pos = _array_count(buf, pos, end, flexible, p_min, _F_PARTITIONS)
        for _ in range(nparts):
            if pos + p_size > end:
                raise _truncated_run(_PART, fields, pos, end)
            if v5:
                if version == 8:
                    index, error_code, base_offset, append_time, _lso, nerr = unpack_p(buf, pos)
                    pos += 34
                    if nerr:
                        _check_count(nerr, 6, pos, end, _F_RECORD_ERRORS, pos - 4)
                        pos = _skip_record_errors(buf, pos, end, nerr, False)
                    message, pos = string(buf, pos, end, False, True, _F_ERROR_MESSAGE)
                elif flexible:
                    index, error_code, base_offset, append_time, _lso = unpack_p(buf, pos)
                    pos += 30
                    # RecordErrors (compact array): usually empty, i.e. the single byte 0x01.
                    if pos < end and buf[pos] == 1:
                        pos += 1
                    else:
                        nerr, pos = _array_count(buf, pos, end, True, 6, _F_RECORD_ERRORS)
                        pos = _skip_record_errors(buf, pos, end, nerr, True)
                    # ErrorMessage (compact nullable string): usually null, the byte 0x00.
                    if pos < end and buf[pos] == 0:
                        message = None
                        pos += 1
                    else:
                        message, pos = string(buf, pos, end, True, True, _F_ERROR_MESSAGE)
                    if pos < end and buf[pos] == 0:
                        pos += 1
                    else:
                        pos = _skip_tags(buf, pos, end, _F_PART_TAGS)
                else:
                    index, error_code, base_offset, append_time, _lso = unpack_p(buf, pos)
                    pos += 30
                    message = None
            else:
                index, error_code, base_offset, append_time = unpack_p(buf, pos)
                pos += 22
                message = None
            append((topic, index, error_code, base_offset, append_time, message))
        if flexible:
            if pos < end and buf[pos] == 0:
                pos += 1
            else:
                pos = _skip_tags(buf, pos, end, _F_TOPIC_TAGS)

    # ThrottleTimeMs (v1+, so always here)
    if pos + 4 > end:
        raise _err(f"truncated int32 {_BODY}.ThrottleTimeMs: {end - pos} bytes left",
                   f"{_BODY}.ThrottleTimeMs", pos)
    pos += 4
    if flexible:
        pos = _skip_tags(buf, pos, end, _F_BODY_TAGS)
    if pos != end:
        raise _err(f"{end - pos} unexpected trailing bytes after {_BODY} v{version}",
                   f"{_BODY} v{version}", pos)
    return correlation_id, out
