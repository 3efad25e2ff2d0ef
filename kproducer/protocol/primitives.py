"""Kafka wire primitives: a bounds-checked reader and an appending writer.

Everything is big-endian, as in Kafka's ``ByteBuffer`` code. The types are the
ones named in Kafka's message JSON specs:

=====================  ======================================================
int8/16/32/64, uint16  fixed width, two's complement (uint16 unsigned)
uint32                 fixed width unsigned (the record batch CRC)
bool                   int8, 0 = false, anything else = true on read
unsigned varint        LEB128, at most 5 bytes, value < 2**32
varint / varlong       zig-zag then LEB128, at most 5 / 10 bytes
string                 int16 length + UTF-8, -1 = null (nullable only)
bytes                  int32 length + data, -1 = null (nullable only)
compact string/bytes   unsigned varint (length + 1) + data, 0 = null
array                  int32 count (-1 = null) / compact: uvarint count + 1
tagged fields          uvarint count, then per field uvarint tag, uvarint
                       size, ``size`` bytes
uuid                   16 raw bytes
=====================  ======================================================

:class:`Reader` never raises ``IndexError`` or ``struct.error``: every read is
checked against the end of the buffer first and a short or malformed input
raises :class:`~kproducer.errors.ProtocolDecodeError` naming the field and the
byte offset where the read started. Offsets are absolute in the buffer handed
to the reader, so an error can be matched with a hex dump of the frame.

The standalone varint functions (``encode_varint`` ...) are the pure-Python
reference for the record codec, which uses zig-zag varints for record fields.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from typing import Optional, Union

from ..errors import ProtocolDecodeError, ProtocolError

Buffer = Union[bytes, bytearray, memoryview]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

INT8_MIN, INT8_MAX = -(1 << 7), (1 << 7) - 1
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1

# Kafka's ByteUtils caps varints at 5 bytes (int) and 10 bytes (long); an
# endless run of continuation bytes must not make the reader loop or allocate.
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

NULL_UUID = _uuid.UUID(int=0)


# --------------------------------------------------------------------------
# zig-zag and varint helpers (pure functions)
# --------------------------------------------------------------------------

def zigzag_encode32(n: int) -> int:
    """Map a signed int32 onto an unsigned int so small magnitudes stay short."""
    if not INT32_MIN <= n <= INT32_MAX:
        raise ProtocolError(f"varint value {n} out of int32 range")
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def zigzag_encode64(n: int) -> int:
    if not INT64_MIN <= n <= INT64_MAX:
        raise ProtocolError(f"varlong value {n} out of int64 range")
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def zigzag_decode(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def encode_uvarint(n: int) -> bytes:
    """Unsigned LEB128 of a value in ``0 .. 2**32-1`` (Kafka's unsigned varint)."""
    if not 0 <= n <= UINT32_MAX:
        raise ProtocolError(f"unsigned varint value {n} out of range 0..2**32-1")
    return _leb128(n)


def encode_uvarlong(n: int) -> bytes:
    """Unsigned LEB128 of a value in ``0 .. 2**64-1``."""
    if not 0 <= n < (1 << 64):
        raise ProtocolError(f"unsigned varlong value {n} out of range 0..2**64-1")
    return _leb128(n)


def encode_varint(n: int) -> bytes:
    """Zig-zag varint of an int32 (record lengths, deltas, key/value lengths)."""
    return _leb128(zigzag_encode32(n))


def encode_varlong(n: int) -> bytes:
    """Zig-zag varlong of an int64 (record TimestampDelta)."""
    return _leb128(zigzag_encode64(n))


def _leb128(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_uvarint(buf: Buffer, offset: int = 0, field: str = "uvarint") -> tuple[int, int]:
    """Decode an unsigned varint at ``offset``; return ``(value, next_offset)``."""
    mv = _byte_view(buf)
    return _read_leb128(mv, offset, len(mv), MAX_VARINT_BYTES, 32, field)


def decode_varint(buf: Buffer, offset: int = 0, field: str = "varint") -> tuple[int, int]:
    """Decode a zig-zag varint (int32) at ``offset``; return ``(value, next_offset)``."""
    raw, end = decode_uvarint(buf, offset, field)
    return zigzag_decode(raw), end


def decode_varlong(buf: Buffer, offset: int = 0, field: str = "varlong") -> tuple[int, int]:
    """Decode a zig-zag varlong (int64) at ``offset``; return ``(value, next_offset)``."""
    mv = _byte_view(buf)
    raw, end = _read_leb128(mv, offset, len(mv), MAX_VARLONG_BYTES, 64, field)
    return zigzag_decode(raw), end


def _byte_view(buf: Buffer) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return mv if (mv.format == "B" and mv.ndim == 1) else mv.cast("B")


def _read_leb128(buf, start: int, end: int, max_bytes: int, bits: int, field: str) -> tuple[int, int]:
    if start < 0:
        raise ProtocolError(f"negative offset {start} for {field}")
    value = 0
    shift = 0
    pos = start
    for _ in range(max_bytes):
        if pos >= end:
            raise ProtocolDecodeError(
                f"truncated varint {field} at byte {start}: input ends at byte {end}",
                field=field, offset=start)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            # Strict: the last byte may only carry bits that fit the width, so
            # 5-byte int varints above 2**32-1 are rejected rather than
            # silently truncated as Java does.
            if value >> bits:
                raise ProtocolDecodeError(
                    f"varint {field} at byte {start} overflows {bits} bits",
                    field=field, offset=start)
            return value, pos
        shift += 7
    raise ProtocolDecodeError(
        f"varint {field} at byte {start} is longer than {max_bytes} bytes",
        field=field, offset=start)


# --------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------

class Reader:
    """Sequential, bounds-checked reader over a byte buffer.

    ``pos`` is the absolute offset of the next byte; ``end`` bounds the reader
    (a sub-reader for a tagged field shares the buffer and only narrows ``end``).
    Every method takes the Kafka field name used in error messages.
    """

    __slots__ = ("buf", "pos", "end")

    def __init__(self, data: Buffer, pos: int = 0, end: Optional[int] = None):
        mv = _byte_view(data)
        self.buf = mv
        self.pos = pos
        self.end = len(mv) if end is None else end
        if not 0 <= self.pos <= self.end <= len(mv):
            raise ProtocolError(f"reader bounds {pos}..{end} outside buffer of {len(mv)} bytes")

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, field: str, what: str) -> int:
        pos = self.pos
        if n > self.end - pos:
            raise ProtocolDecodeError(
                f"truncated {what} {field} at byte {pos}: need {n} bytes, "
                f"{self.end - pos} left",
                field=field, offset=pos)
        self.pos = pos + n
        return pos

    def sub(self, size: int, field: str) -> "Reader":
        """A reader over the next ``size`` bytes; this reader skips past them."""
        start = self._need(size, field, "field of")
        return Reader(self.buf, start, start + size)

    def skip(self, n: int, field: str) -> None:
        self._need(n, field, "skip of")

    # fixed width -----------------------------------------------------------
    def int8(self, field: str) -> int:
        return _I8.unpack_from(self.buf, self._need(1, field, "int8"))[0]

    def int16(self, field: str) -> int:
        return _I16.unpack_from(self.buf, self._need(2, field, "int16"))[0]

    def uint16(self, field: str) -> int:
        return _U16.unpack_from(self.buf, self._need(2, field, "uint16"))[0]

    def int32(self, field: str) -> int:
        return _I32.unpack_from(self.buf, self._need(4, field, "int32"))[0]

    def uint32(self, field: str) -> int:
        return _U32.unpack_from(self.buf, self._need(4, field, "uint32"))[0]

    def int64(self, field: str) -> int:
        return _I64.unpack_from(self.buf, self._need(8, field, "int64"))[0]

    def float64(self, field: str) -> float:
        return _F64.unpack_from(self.buf, self._need(8, field, "float64"))[0]

    def bool(self, field: str) -> bool:
        return self.buf[self._need(1, field, "bool")] != 0

    def uuid(self, field: str) -> _uuid.UUID:
        start = self._need(16, field, "uuid")
        return _uuid.UUID(bytes=bytes(self.buf[start:start + 16]))

    def raw(self, n: int, field: str) -> bytes:
        start = self._need(n, field, "bytes")
        return bytes(self.buf[start:start + n])

    # varints ---------------------------------------------------------------
    def uvarint(self, field: str) -> int:
        value, self.pos = _read_leb128(self.buf, self.pos, self.end, MAX_VARINT_BYTES, 32, field)
        return value

    def varint(self, field: str) -> int:
        return zigzag_decode(self.uvarint(field))

    def varlong(self, field: str) -> int:
        value, self.pos = _read_leb128(self.buf, self.pos, self.end, MAX_VARLONG_BYTES, 64, field)
        return zigzag_decode(value)

    # lengths ---------------------------------------------------------------
    def _length(self, field: str, compact: bool, wide: bool, nullable: bool) -> int:
        """Read a length prefix; return -1 for null, raise if null not allowed."""
        start = self.pos
        if compact:
            n = self.uvarint(field) - 1
        elif wide:
            n = self.int32(field)
        else:
            n = self.int16(field)
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise ProtocolDecodeError(
                f"{'null' if n == -1 else 'negative'} length {n} for {field} at byte {start}",
                field=field, offset=start)
        if n > self.end - self.pos:
            raise ProtocolDecodeError(
                f"truncated {field} at byte {start}: length {n}, {self.end - self.pos} bytes left",
                field=field, offset=start)
        return n

    def _text(self, n: int, field: str) -> str:
        start = self.pos
        self.pos += n
        try:
            return str(self.buf[start:start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolDecodeError(
                f"invalid UTF-8 in {field} at byte {start}: {exc.reason}",
                field=field, offset=start) from None

    def string(self, field: str) -> str:
        return self._text(self._length(field, False, False, False), field)

    def nullable_string(self, field: str) -> Optional[str]:
        n = self._length(field, False, False, True)
        return None if n < 0 else self._text(n, field)

    def compact_string(self, field: str) -> str:
        return self._text(self._length(field, True, False, False), field)

    def compact_nullable_string(self, field: str) -> Optional[str]:
        n = self._length(field, True, False, True)
        return None if n < 0 else self._text(n, field)

    def _blob(self, n: int) -> bytes:
        start = self.pos
        self.pos += n
        return bytes(self.buf[start:start + n])

    def bytes(self, field: str) -> bytes:
        return self._blob(self._length(field, False, True, False))

    def nullable_bytes(self, field: str) -> Optional[bytes]:
        n = self._length(field, False, True, True)
        return None if n < 0 else self._blob(n)

    def compact_bytes(self, field: str) -> bytes:
        return self._blob(self._length(field, True, False, False))

    def compact_nullable_bytes(self, field: str) -> Optional[bytes]:
        n = self._length(field, True, False, True)
        return None if n < 0 else self._blob(n)

    def array_length(self, field: str, compact: bool, nullable: bool, min_item_size: int = 1) -> int:
        """Read an array count; -1 means null.

        The count is checked against the bytes left (each item needs at least
        ``min_item_size`` bytes) so a hostile count cannot make the decoder
        allocate or loop far beyond the input.
        """
        start = self.pos
        n = (self.uvarint(field) - 1) if compact else self.int32(field)
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise ProtocolDecodeError(
                f"{'null' if n == -1 else 'negative'} array count {n} for {field} at byte {start}",
                field=field, offset=start)
        if n * max(1, min_item_size) > self.end - self.pos:
            raise ProtocolDecodeError(
                f"truncated array {field} at byte {start}: {n} items cannot fit in "
                f"{self.end - self.pos} bytes",
                field=field, offset=start)
        return n

    def skip_tagged_fields(self, field: str) -> None:
        """Skip a whole tagged-field section (for structs that define no tags)."""
        for _ in range(self.uvarint(field)):
            self.uvarint(field)                    # tag
            self.skip(self.uvarint(field), field)  # size, then the value

    def expect_end(self, what: str) -> None:
        if self.pos != self.end:
            raise ProtocolDecodeError(
                f"{self.end - self.pos} unexpected trailing bytes after {what} at byte {self.pos}",
                field=what, offset=self.pos)


# --------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------

class Writer:
    """Appends encoded values to a ``bytearray``.

    Out-of-range integers and wrong types raise ``ProtocolError`` (the schema
    layer adds the field name); strings are UTF-8 encoded.
    """

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def __len__(self) -> int:
        return len(self.buf)

    def _pack(self, st: struct.Struct, value, what: str) -> None:
        try:
            self.buf += st.pack(value)
        except struct.error as exc:
            raise ProtocolError(f"cannot encode {value!r} as {what}: {exc}") from None

    def int8(self, v: int) -> None:
        self._pack(_I8, v, "int8")

    def int16(self, v: int) -> None:
        self._pack(_I16, v, "int16")

    def uint16(self, v: int) -> None:
        self._pack(_U16, v, "uint16")

    def int32(self, v: int) -> None:
        self._pack(_I32, v, "int32")

    def uint32(self, v: int) -> None:
        self._pack(_U32, v, "uint32")

    def int64(self, v: int) -> None:
        self._pack(_I64, v, "int64")

    def float64(self, v: float) -> None:
        self._pack(_F64, v, "float64")

    def bool(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v) -> None:
        if isinstance(v, _uuid.UUID):
            self.buf += v.bytes
        elif isinstance(v, (bytes, bytearray, memoryview)) and len(v) == 16:
            self.buf += v
        else:
            raise ProtocolError(f"cannot encode {v!r} as uuid (need uuid.UUID or 16 bytes)")

    def raw(self, data: Buffer) -> None:
        self.buf += data

    def uvarint(self, v: int) -> None:
        if 0 <= v < 0x80:
            self.buf.append(v)
        else:
            self.buf += encode_uvarint(v)

    def varint(self, v: int) -> None:
        self.buf += encode_varint(v)

    def varlong(self, v: int) -> None:
        self.buf += encode_varlong(v)

    @staticmethod
    def _utf8(v) -> bytes:
        if not isinstance(v, str):
            raise ProtocolError(f"cannot encode {v!r} as a string")
        return v.encode("utf-8")

    def string(self, v: str) -> None:
        data = self._utf8(v)
        if len(data) > INT16_MAX:
            raise ProtocolError(f"string of {len(data)} bytes is longer than {INT16_MAX}")
        self.int16(len(data))
        self.buf += data

    def nullable_string(self, v: Optional[str]) -> None:
        if v is None:
            self.int16(-1)
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        data = self._utf8(v)
        if len(data) > INT16_MAX:
            # Kafka keeps the same 32767-byte limit for compact strings.
            raise ProtocolError(f"string of {len(data)} bytes is longer than {INT16_MAX}")
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, v: Optional[str]) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_string(v)

    @staticmethod
    def _blob(v) -> Buffer:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            raise ProtocolError(f"cannot encode {type(v).__name__} as bytes")
        if isinstance(v, memoryview) and (v.format != "B" or v.ndim != 1):
            v = v.cast("B")
        return v

    def bytes(self, v: Buffer) -> None:
        data = self._blob(v)
        if len(data) > INT32_MAX:
            raise ProtocolError(f"bytes of {len(data)} bytes is longer than {INT32_MAX}")
        self.int32(len(data))
        self.buf += data

    def nullable_bytes(self, v: Optional[Buffer]) -> None:
        if v is None:
            self.int32(-1)
        else:
            self.bytes(v)

    def compact_bytes(self, v: Buffer) -> None:
        data = self._blob(v)
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_bytes(self, v: Optional[Buffer]) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_bytes(v)

    def array_length(self, n: Optional[int], compact: bool) -> None:
        """Write an array count; ``None`` writes the null marker."""
        if compact:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int32(-1 if n is None else n)

    def empty_tagged_fields(self) -> None:
        self.buf.append(0)


def frame(payload: Buffer) -> bytes:
    """Prefix ``payload`` with its 4-byte big-endian size (Kafka framing)."""
    n = len(payload)
    if n > INT32_MAX:
        raise ProtocolError(f"frame of {n} bytes exceeds the int32 size field")
    return _I32.pack(n) + bytes(payload)
