# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled codec core: bindings over csrc/ (varint, CRC-32C, murmur2, record batch v2,
framing, the Produce request and response). The public face is :mod:`kproducer.codec`
(:mod:`kproducer.protocol.produce` for the Produce pair).

Status codes from C become exceptions in exactly one place, ``kp_exception`` (raised by
``raise_kp_error``), for the codec, the accumulator and the network selector alike; the
selector's disconnect reasons become a kind and a text in ``disconnect_info`` beside it.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_Check
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.ref cimport PyObject
from cpython.long cimport PyLong_CheckExact
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, INT16_MIN, INT16_MAX, INT32_MIN, INT32_MAX
from libc.stdint cimport INT64_MIN as INT64_MIN_, INT64_MAX as INT64_MAX_
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy

from kproducer._cdefs.common cimport *
from kproducer._cdefs.varint cimport *
from kproducer._cdefs.crc32c cimport *
from kproducer._cdefs.murmur2 cimport *
from kproducer._cdefs.buf cimport *
from kproducer._cdefs.batch cimport *
from kproducer._cdefs.frame cimport *
from kproducer._cdefs.produce cimport *


import errno as _errno
import os as _os

from kproducer._disconnect import DisconnectKind as _Kind
from kproducer.errors import CodecError, CorruptRecordError, FrameError, NetworkError
from kproducer.records import DecodedBatch, Record
from kproducer import compression as _compression

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    # Borrowed-pointer forms of the macros, for the per-record loop of encode_batch.
    bint _tuple_check "PyTuple_Check"(PyObject *o)
    Py_ssize_t _tuple_size "PyTuple_GET_SIZE"(PyObject *o)
    PyObject *_tuple_item "PyTuple_GET_ITEM"(PyObject *o, Py_ssize_t i)
    bint _list_check_exact "PyList_CheckExact"(PyObject *o)
    Py_ssize_t _list_size "PyList_GET_SIZE"(PyObject *o)
    bint _long_check_exact "PyLong_CheckExact"(PyObject *o)
    # The output bytes object of an uncompressed batch, built in place (no final copy).
    PyObject *_bytes_new "PyBytes_FromStringAndSize"(const char *s, Py_ssize_t n)
    int _bytes_resize "_PyBytes_Resize"(PyObject **b, Py_ssize_t n) except -1
    void _xdecref "Py_XDECREF"(PyObject *o)

include "_record_common.pxi"

# Largest frame the receiver accepts by default (Kafka's socket.request.max.bytes).
DEFAULT_MAX_FRAME_SIZE = KP_FRAME_DEFAULT_MAX_SIZE
# The record batch v2 header, before the Records section (csrc/kp_batch.h).
BATCH_HEADER_SIZE = KP_BATCH_HEADER_SIZE


# ---- the one place where C status codes become Python exceptions ---------
# kproducer._net and kproducer._core cimport these (kproducer/_codec.pxd).

cdef str errno_text(int e):
    """``"Connection refused (ECONNREFUSED)"``."""
    name = _errno.errorcode.get(e)
    text = _os.strerror(e)
    return f"{text} ({name})" if name else f"{text} (errno {e})"


cdef object kp_exception(kp_status st, const kp_error *err, str what, type exc=None,
                         int sys_errno=0, object conn_id=None, str detail=None):
    """The exception for status ``st`` (returned, not raised). ``what`` names the structure
    being read ("record batch", "varint", "frame") or the call that failed ("connect to
    h:p"); with ``conn_id`` the message starts with the selector's connection id.
    ``err``: where a reader stopped (or NULL). ``exc``: the class for a bad input (the
    codec's statuses, default CodecError; a TLS failure, default NetworkError).
    ``sys_errno``: the errno of KP_ERR_SYS. ``detail``: the C layer's text (KP_ERR_TLS,
    KP_ERR_OVERFLOW)."""
    prefix = what if conn_id is None else f"connection {conn_id}: {what}"
    if st == KP_ERR_NOMEM:
        return MemoryError(f"{prefix}: out of memory")
    if st == KP_ERR_OVERFLOW:
        # A caller that names its class (a ProtocolError for a request too large to frame)
        # gets it; else the builtin, as for any arithmetic that does not fit.
        return (exc or OverflowError)(
            f"{prefix}: {detail or 'a length, count or timestamp delta does not fit its wire field'}")
    if st == KP_ERR_CODEC:
        # The C codecs (csrc/kp_compress.h): err.value is the library's own code.
        code = err.value if err != NULL else 0
        return (exc or CodecError)(f"{prefix}: {detail or 'the codec failed'}"
                                   + (f" (library code {code})" if code else ""))
    if st == KP_ERR_ADDRESS:
        return ValueError(f"{prefix}: not a numeric IPv4/IPv6 address "
                          f"(resolve host names with socket.getaddrinfo first)")
    # -- the selector's statuses: NetworkError with the connection id and the errno ----
    if st == KP_ERR_SYS:
        return NetworkError(f"{prefix} failed: {errno_text(sys_errno)}", conn_id=conn_id,
                            errno=sys_errno)
    if st == KP_ERR_BUSY:
        return NetworkError(f"{prefix}: a send is already in flight on this connection; "
                            f"wait until poll() reports it in .sent", conn_id=conn_id)
    if st == KP_ERR_NOT_FOUND:
        return NetworkError(f"{prefix}: no such connection (never connected, closed, "
                            f"or reported disconnected)", conn_id=conn_id)
    if st == KP_ERR_IN_USE:
        return NetworkError(f"{prefix}: the id already has a connection; close it first",
                            conn_id=conn_id)
    if st == KP_ERR_EOF:
        return NetworkError(f"{prefix}: connection closed by peer", conn_id=conn_id)
    if st == KP_ERR_TLS:
        text = f"TLS: {detail or 'error'}"
        if exc is not None and exc is not NetworkError:
            return exc(f"{prefix}: {text}" if prefix else text)
        return NetworkError(f"{prefix}: {text}" if prefix else text, conn_id=conn_id)
    if st == KP_ERR_INVALID and err == NULL:
        # A bad argument, not bad data.
        if conn_id is not None:
            return ValueError(f"{prefix}: invalid argument")
        return (exc or CodecError)(f"{prefix}: invalid argument")
    # -- the codec's statuses: where decoding stopped ------------------------------------
    field = err.field.decode("ascii") if err != NULL and err.field != NULL else None
    offset = err.offset if err != NULL else None
    value = err.value if err != NULL else 0
    if st == KP_ERR_TRUNCATED:
        msg = f"truncated {field} at byte {offset}"
        if field in ("Length", "KeyLength", "ValueLength", "HeaderKeyLength", "HeaderValueLength"):
            msg += f" (length {value} runs past the end)"
    elif st == KP_ERR_VARINT:
        msg = f"over-long varint in {field} at byte {offset}"
    elif st == KP_ERR_INVALID:
        msg = f"invalid {field} {value} at byte {offset}"
    elif st == KP_ERR_MAGIC:
        msg = f"unsupported Magic {value} at byte {offset} (expected 2)"
    elif st == KP_ERR_CRC:
        msg = f"CRC mismatch at byte {offset}: computed 0x{value & 0xFFFFFFFF:08x} differs from the stored CRC"
    elif st == KP_ERR_FRAME_SIZE:
        msg = f"invalid frame Size {value} at byte {offset}"
    elif st == KP_ERR_TRAILING:
        msg = f"unexpected trailing bytes after {field} at byte {offset}"
    elif st == KP_ERR_NULL:
        msg = f"null {field} at byte {offset} (the field is not nullable)"
    elif st == KP_ERR_UTF8:
        msg = f"invalid UTF-8 in {field} at byte {offset}"
    else:
        msg = f"error code {<int>st}"
        if conn_id is not None:
            return NetworkError(f"{prefix}: {msg}", conn_id=conn_id)
    return (exc or CodecError)(f"{what}: {msg}", field=field, offset=offset)


cdef int raise_kp_error(kp_status st, const kp_error *err, str what, type exc=None,
                        int sys_errno=0, object conn_id=None, str detail=None) except -1:
    """Raises :func:`kp_exception`'s exception for status ``st``."""
    raise kp_exception(st, err, what, exc, sys_errno, conn_id, detail)


cdef tuple disconnect_info(kp_status st, bint was_connected, int sys_errno, int64_t value,
                           const char *detail, int32_t max_frame):
    """``(DisconnectKind, reason text)`` of a connection the selector dropped
    (csrc/kp_selector.h, "Disconnect reasons")."""
    text = detail.decode("utf-8", "replace") if detail != NULL else None
    if st == KP_ERR_TLS:
        if was_connected:
            return _Kind.TLS, "TLS error: " + (text or "out of memory for the error text")
        return _Kind.TLS_HANDSHAKE, "TLS handshake failed: " + (text or "out of memory for the error text")
    if st == KP_ERR_SYS:
        if was_connected:
            return _Kind.IO_ERROR, errno_text(sys_errno)
        return _Kind.CONNECT_FAILED, "connect failed: " + errno_text(sys_errno)
    if st == KP_ERR_EOF:
        if value:
            return _Kind.PEER_CLOSED_MID_FRAME, (f"connection closed by peer mid-frame ({value} bytes "
                                                 f"of an incomplete frame received)")
        return _Kind.PEER_CLOSED, f"connection closed by peer {text}" if text else "connection closed by peer"
    if st == KP_ERR_FRAME_SIZE:
        return _Kind.FRAME_SIZE, f"invalid frame size {value} (must be 0..{max_frame}); the stream is lost"
    if st == KP_ERR_NOMEM:
        return _Kind.NOMEM, f"out of memory for a received frame of {value} bytes"
    return _Kind.OTHER, f"error code {<int>st}"


cdef inline int get_view(object obj, Py_buffer *view, const char *what, Py_ssize_t index) except -1:
    if PyUnicode_Check(obj):
        raise TypeError(f"record {index}: {what.decode()} must be bytes-like or None, not str "
                        f"(encode it, or give the producer a serializer)")
    try:
        PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"record {index}: {what.decode()} must be bytes-like or None, "
                        f"not {type(obj).__name__}") from None
    return 0


# ---- CRC-32C ------------------------------------------------------------

def crc32c(data, uint32_t crc=0):
    """CRC-32C (Castagnoli) of ``data``, continuing from ``crc``.

    ``crc32c(b"123456789") == 0xE3069283``; ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    Uses the SSE4.2 instruction when the CPU has it.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            crc = kp_crc32c_update(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc


def crc32c_sw(data, uint32_t crc=0):
    """CRC-32C by the table-driven path only (for tests and comparison)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            crc = kp_crc32c_update_sw(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc


def crc32c_hw(data, uint32_t crc=0):
    """CRC-32C by the SSE4.2 path only; RuntimeError when the CPU lacks it."""
    cdef Py_buffer view
    if not kp_crc32c_hw_available():
        raise RuntimeError("crc32c_hw: this CPU has no SSE4.2 crc32 instruction")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            crc = kp_crc32c_update_hw(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc


def crc32c_hw_available():
    """True when CRC-32C runs on the SSE4.2 instruction."""
    return bool(kp_crc32c_hw_available())


# ---- murmur2 --------------------------------------------------------------

def murmur2(data):
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (Java's Utils.murmur2)."""
    cdef Py_buffer view
    cdef int32_t h
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    h = kp_murmur2_hash(<const uint8_t *>view.buf, <size_t>view.len)
    PyBuffer_Release(&view)
    return h


def murmur2_partition(key, int32_t num_partitions):
    """The partition Java's default partitioner picks for ``key``."""
    cdef Py_buffer view
    cdef int32_t p
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    p = kp_murmur2_partition(<const uint8_t *>view.buf, <size_t>view.len, num_partitions)
    PyBuffer_Release(&view)
    return p


# ---- varints --------------------------------------------------------------

def encode_varint(int32_t value):
    """Zig-zag varint bytes of an int32."""
    cdef uint8_t out[5]
    cdef size_t n = kp_varint_put(out, value)
    return PyBytes_FromStringAndSize(<char *>out, n)


def encode_varlong(int64_t value):
    """Zig-zag varlong bytes of an int64."""
    cdef uint8_t out[10]
    cdef size_t n = kp_varlong_put(out, value)
    return PyBytes_FromStringAndSize(<char *>out, n)


def varint_size(int32_t value):
    return kp_varint_size(value)


def varlong_size(int64_t value):
    return kp_varlong_size(value)


def decode_varint(data, Py_ssize_t pos=0):
    """Reads a zig-zag varint at ``pos``; returns ``(value, next_pos)``."""
    cdef Py_buffer view
    cdef int32_t out = 0
    cdef size_t p
    cdef kp_status st
    cdef kp_error err
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if pos < 0 or pos > view.len:
            raise IndexError(f"decode_varint: pos {pos} outside 0..{view.len}")
        p = <size_t>pos
        st = kp_varint_read(<const uint8_t *>view.buf, <size_t>view.len, &p, &out)
        if st != KP_OK:
            err.field = "varint"; err.offset = <size_t>pos; err.value = 0
            raise_kp_error(st, &err, "varint")
    finally:
        PyBuffer_Release(&view)
    return out, p


def decode_varlong(data, Py_ssize_t pos=0):
    """Reads a zig-zag varlong at ``pos``; returns ``(value, next_pos)``."""
    cdef Py_buffer view
    cdef int64_t out = 0
    cdef size_t p
    cdef kp_status st
    cdef kp_error err
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if pos < 0 or pos > view.len:
            raise IndexError(f"decode_varlong: pos {pos} outside 0..{view.len}")
        p = <size_t>pos
        st = kp_varlong_read(<const uint8_t *>view.buf, <size_t>view.len, &p, &out)
        if st != KP_OK:
            err.field = "varlong"; err.offset = <size_t>pos; err.value = 0
            raise_kp_error(st, &err, "varlong")
    finally:
        PyBuffer_Release(&view)
    return out, p


# ---- record batch v2 --------------------------------------------------------

cdef int64_t as_int64(object v, str field, Py_ssize_t index) except? -1:
    cdef int64_t r
    if PyLong_CheckExact(v):
        if not _exact_int64(<PyObject *>v, &r):
            raise OverflowError(f"record {index}: {field} {v} does not fit int64")
        return r
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"record {index}: {field} must be an int, not {type(v).__name__}")
    try:
        return <int64_t>v
    except OverflowError:
        raise OverflowError(f"record {index}: {field} {v} does not fit int64") from None


cdef class _HeaderScratch:
    """Reusable array of kp_header plus the objects keeping their bytes alive
    (attributes declared in _codec.pxd)."""

    def __cinit__(self):
        self.items = NULL
        self.cap = 0
        self.keep = []

    def __dealloc__(self):
        free(self.items)

    cdef int fill(self, object headers, Py_ssize_t index) except -1:
        """Returns the header count after filling self.items from ``headers``."""
        cdef Py_ssize_t n, i
        cdef Py_ssize_t klen
        cdef const char *kp
        cdef object hk, hv, pair
        cdef kp_header *grown
        if headers is None:
            return 0
        headers = PySequence_Fast(headers, b"headers must be a sequence of (str, bytes | None) pairs")
        n = PySequence_Fast_GET_SIZE(headers)
        if n == 0:
            return 0
        if n > self.cap:
            grown = <kp_header *>malloc(n * sizeof(kp_header))
            if grown == NULL:
                raise MemoryError()
            free(self.items)
            self.items = grown
            self.cap = n
        if self.keep:
            self.keep.clear()
        for i in range(n):
            pair = <object>PySequence_Fast_ITEMS(headers)[i]
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError(f"record {index}: header {i} must be a (str, bytes | None) tuple")
            hk = pair[0]
            hv = pair[1]
            if not PyUnicode_Check(hk):
                raise TypeError(f"record {index}: header {i} key must be str, not {type(hk).__name__}")
            kp = PyUnicode_AsUTF8AndSize(hk, &klen)
            self.items[i].key = <const uint8_t *>kp
            self.items[i].key_len = <size_t>klen
            if hv is None:
                self.items[i].value = NULL
                self.items[i].value_len = -1
            else:
                if not PyBytes_CheckExact(hv):
                    if PyUnicode_Check(hv):
                        raise TypeError(f"record {index}: header {i} ({hk!r}) value must be bytes-like or None, not str")
                    try:
                        hv = bytes(memoryview(hv))
                    except TypeError:
                        raise TypeError(f"record {index}: header {i} ({hk!r}) value must be bytes-like or None, "
                                        f"not {type(hv).__name__}") from None
                    self.keep.append(hv)
                self.items[i].value = <const uint8_t *>PyBytes_AS_STRING(hv)
                self.items[i].value_len = PyBytes_GET_SIZE(hv)
        return <int>n


cdef kp_status append_buffers(kp_batch_writer *w, int64_t ts, object key, object value,
                              const kp_header *headers, Py_ssize_t nh, Py_ssize_t index) except *:
    """Slow path of encode_batch for keys/values that are buffers but not bytes."""
    cdef Py_buffer kview, vview
    cdef bint khave = False, vhave = False
    cdef const uint8_t *kptr = NULL
    cdef const uint8_t *vptr = NULL
    cdef int64_t klen = -1, vlen = -1
    try:
        if key is not None:
            get_view(key, &kview, b"key", index); khave = True
            kptr = <const uint8_t *>kview.buf; klen = kview.len
        if value is not None:
            get_view(value, &vview, b"value", index); vhave = True
            vptr = <const uint8_t *>vview.buf; vlen = vview.len
        return kp_batch_append(w, ts, kptr, klen, vptr, vlen, headers, <size_t>nh)
    finally:
        if khave:
            PyBuffer_Release(&kview)
        if vhave:
            PyBuffer_Release(&vview)


cdef enum:
    ESTIMATE_LIMIT = 16 << 20     # the most encode_batch reserves up front from a guess


cdef inline size_t _initial_capacity(PyObject **items, Py_ssize_t n) noexcept:
    """Output bytes for ``n`` records shaped like the first: its key and value bytes plus
    20 bytes of framing each (a header-less record takes 10-16), then one shrink at the end.
    A grow-by-realloc per batch costs more than copying a 16 KiB batch's records; records
    larger than the first still grow the buffer.
    Beyond 16 MiB the estimate is not trusted (a large first record among small ones would
    reserve gigabytes): the buffer starts there and doubles as needed."""
    cdef PyObject *rec = items[0]
    cdef size_t payload = 0
    cdef size_t estimate
    if _tuple_check(rec) and _tuple_size(rec) >= 2:
        if _bytes_check_exact(_tuple_item(rec, 0)):
            payload += <size_t>_bytes_size(_tuple_item(rec, 0))
        if _bytes_check_exact(_tuple_item(rec, 1)):
            payload += <size_t>_bytes_size(_tuple_item(rec, 1))
    estimate = KP_BATCH_HEADER_SIZE + <size_t>n * (payload + 20)
    if estimate > ESTIMATE_LIMIT:
        estimate = max(<size_t>ESTIMATE_LIMIT, KP_BATCH_HEADER_SIZE + payload + 20)
    return estimate


cdef int _grow_output(kp_batch_writer *w, PyObject **outp, size_t cap) except -1:
    """Grows the bytes object an uncompressed batch is written into to ``cap`` bytes."""
    if cap <= w.buf.cap:
        cap = w.buf.cap * 2
    _bytes_resize(outp, <Py_ssize_t>cap)
    kp_buf_rebase(&w.buf, <uint8_t *>_bytes_data(outp[0]), cap)
    return 0


cdef int64_t _int_field(object v, str name, int64_t lo, int64_t hi, str what) except? -1:
    """An exact int (not bool) within lo..hi, else ValueError naming the argument."""
    cdef long long r
    if type(v) is int:
        try:
            r = v
        except OverflowError:
            raise ValueError(f"{name} must be {what}, got {v!r}") from None
        if lo <= r <= hi:
            return r
    raise ValueError(f"{name} must be {what}, got {v!r}")


def encode_batch(records, *, compression="none", compression_level=None,
                 producer_id=-1, producer_epoch=-1, base_sequence=-1):
    """Encodes ``records`` as one Kafka record batch v2 and returns its bytes.

    Each record is ``(key, value)`` or ``(key, value, timestamp_ms, headers)``;
    key and value are bytes-like or None; headers a sequence of
    ``(str, bytes | None)`` or None. Records given as pairs are stamped with
    the current time. ``compression`` is one of none, gzip, snappy, lz4, zstd
    (``compression_level`` None picks Kafka's default for the codec).
    """
    cdef int codec = 0
    cdef int64_t pid
    cdef int16_t epoch
    cdef int32_t base_seq
    level = None
    # Per-call work matters for small batches: skip the Python lookups in the common case.
    if not (compression_level is None and compression == "none"):
        codec = _compression.codec_id(compression)
        level = _compression.resolve_level(compression, compression_level)
    pid = _int_field(producer_id, "producer_id", INT64_MIN_, INT64_MAX_, "an int64")
    epoch = <int16_t>_int_field(producer_epoch, "producer_epoch", INT16_MIN, INT16_MAX, "an int16")
    base_seq = <int32_t>_int_field(base_sequence, "base_sequence", INT32_MIN, INT32_MAX, "an int32")

    seq = PySequence_Fast(records, b"records must be a sequence of tuples")
    cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(seq)
    if n == 0:
        raise ValueError("encode_batch: records is empty (a batch holds at least one record)")

    cdef kp_batch_writer w
    cdef kp_status st
    cdef Py_ssize_t i, tlen
    # Borrowed references: the list `seq` keeps every record (and so its fields)
    # alive, so the fast path does no reference counting at all.
    cdef PyObject **items = PySequence_Fast_ITEMS(seq)
    cdef PyObject *rec
    cdef PyObject *pre
    cdef PyObject *key
    cdef PyObject *value
    cdef PyObject *ts_obj
    cdef PyObject *hdrs
    cdef PyObject *none = <PyObject *>None
    cdef int64_t now = -1, ts
    cdef const uint8_t *kptr
    cdef const uint8_t *vptr
    cdef int64_t klen, vlen
    cdef Py_ssize_t nh
    cdef int appended
    cdef _HeaderScratch scratch = None
    cdef const kp_header *hitems = NULL
    cdef bytes out
    cdef PyObject *outp = NULL
    cdef size_t cap = _initial_capacity(items, n)

    if codec == 0:
        outp = _bytes_new(NULL, <Py_ssize_t>cap)
        if outp == NULL:
            raise MemoryError()
        st = kp_batch_init_external(&w, <uint8_t *>_bytes_data(outp), cap)
    else:
        st = kp_batch_init(&w, cap)
    if st != KP_OK:
        _xdecref(outp)
        raise_kp_error(st, NULL, "encode_batch")
    try:
        for i in range(n):
            # Records are separate heap objects: fetch the tuple 8 ahead and its key and
            # value 4 ahead, so the loop does not stall on cache misses (large batches
            # of distinct values are memory-bound otherwise).
            if i + 8 < n:
                KP_PREFETCH(items[i + 8])
            if i + 4 < n:
                pre = items[i + 4]
                if _tuple_check(pre) and _tuple_size(pre) >= 2:
                    KP_PREFETCH(_tuple_item(pre, 0))
                    KP_PREFETCH(<char *>_tuple_item(pre, 0) + 48)
                    KP_PREFETCH(_tuple_item(pre, 1))
                    KP_PREFETCH(<char *>_tuple_item(pre, 1) + 64)
                    KP_PREFETCH(<char *>_tuple_item(pre, 1) + 128)
                    if _tuple_size(pre) >= 3:
                        KP_PREFETCH(_tuple_item(pre, 2))
            rec = items[i]
            if not _tuple_check(rec):
                raise TypeError(f"record {i}: expected a tuple (key, value) or (key, value, timestamp_ms, headers), "
                                f"not {type(<object>rec).__name__}")
            tlen = _tuple_size(rec)
            nh = 0
            if tlen == 4:
                ts_obj = _tuple_item(rec, 2)
                if _long_check_exact(ts_obj):
                    if not _exact_int64(ts_obj, &ts):
                        raise OverflowError(f"record {i}: timestamp_ms {<object>ts_obj} does not fit int64")
                elif ts_obj == none:
                    if now < 0:
                        now = now_ms()
                    ts = now
                else:
                    ts = as_int64(<object>ts_obj, "timestamp_ms", i)
                hdrs = _tuple_item(rec, 3)
                if hdrs != none and not (_list_check_exact(hdrs) and _list_size(hdrs) == 0):
                    if scratch is None:
                        scratch = _HeaderScratch()
                    nh = scratch.fill(<object>hdrs, i)
                    hitems = scratch.items
            elif tlen == 2:
                if now < 0:
                    now = now_ms()
                ts = now
            else:
                raise TypeError(f"record {i}: expected 2 or 4 fields (key, value[, timestamp_ms, headers]), got {tlen}")
            key = _tuple_item(rec, 0)
            value = _tuple_item(rec, 1)
            # Fast path: bytes or None; anything else goes through the buffer protocol.
            if _bytes_check_exact(key):
                kptr = <const uint8_t *>_bytes_data(key); klen = _bytes_size(key)
            elif key == none:
                kptr = NULL; klen = -1
            else:
                kptr = NULL; klen = -2
            if _bytes_check_exact(value):
                vptr = <const uint8_t *>_bytes_data(value); vlen = _bytes_size(value)
            elif value == none:
                vptr = NULL; vlen = -1
            else:
                vptr = NULL; vlen = -2
            while True:
                if klen != -2 and vlen != -2:
                    st = kp_batch_append_inline(&w, 0, ts, kptr, klen, vptr, vlen, hitems, <size_t>nh, &appended)
                else:
                    st = append_buffers(&w, ts, <object>key, <object>value, hitems, nh, i)
                if st != KP_ERR_FULL:
                    break
                _grow_output(&w, &outp, 0)
            if st != KP_OK:
                raise_kp_error(st, NULL, f"encode_batch: record {i}")

        if codec != 0:
            section = memoryview(<char[:w.buf.len - KP_BATCH_HEADER_SIZE]>(<char *>w.buf.data + KP_BATCH_HEADER_SIZE))
            compressed = _compression.compress(codec, section, level)
            del section
            st = kp_batch_replace_records(&w, <const uint8_t *>PyBytes_AS_STRING(compressed),
                                          <size_t>PyBytes_GET_SIZE(compressed))
            if st != KP_OK:
                raise_kp_error(st, NULL, "encode_batch")
        st = kp_batch_finish(&w, <int16_t>codec, pid, epoch, base_seq)
        if st != KP_OK:
            raise_kp_error(st, NULL, "encode_batch")
        if outp != NULL:
            _bytes_resize(&outp, <Py_ssize_t>w.buf.len)   # shrink in place to the batch
            out = <bytes>outp                              # takes a new reference
        else:
            out = PyBytes_FromStringAndSize(<char *>w.buf.data, <Py_ssize_t>w.buf.len)
    finally:
        kp_batch_free(&w)
        _xdecref(outp)
    return out


cdef size_t record_field_at(const uint8_t *buf, size_t len, size_t start, bint offset_delta) noexcept:
    """Where TimestampDelta (or OffsetDelta) starts in the record at ``start``, which
    kp_record_read already validated: for error offsets only, so the hot loop keeps none."""
    cdef size_t p = start
    cdef int32_t i32
    cdef int64_t i64
    kp_varint_read(buf, len, &p, &i32)      # Length
    p += 1                                  # Attributes
    if offset_delta:
        kp_varlong_read(buf, len, &p, &i64)
    return p


cdef inline object opt_bytes(const uint8_t *p, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char *>p, n)


def decode_batch(data):
    """Decodes one record batch v2, validating every length, count, the magic
    and the CRC. Raises :class:`~kproducer.errors.CorruptRecordError` naming
    the field and byte offset on bad input. Offsets inside a compressed
    batch's records refer to the decompressed Records section."""
    cdef Py_buffer view
    cdef kp_batch_info info
    cdef kp_error err
    cdef kp_status st
    cdef kp_record_view rv
    cdef kp_header hd
    cdef size_t pos, hpos, base, rlen, start
    cdef const uint8_t *rbuf
    cdef int32_t i, j
    cdef int codec
    cdef bytes plain
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        st = kp_batch_read_header(<const uint8_t *>view.buf, <size_t>view.len, &info, &err)
        if st != KP_OK:
            raise_kp_error(st, &err, "record batch", CorruptRecordError)
        codec = info.attributes & KP_ATTR_COMPRESSION_MASK
        where = "record batch"
        if codec == 0:
            rbuf = info.records
            rlen = info.records_len
            base = KP_BATCH_HEADER_SIZE
        else:
            section = memoryview(<char[:info.records_len]>(<char *>info.records)) if info.records_len else b""
            plain = _compression.decompress(codec, section)
            del section
            rbuf = <const uint8_t *>PyBytes_AS_STRING(plain)
            rlen = <size_t>PyBytes_GET_SIZE(plain)
            base = 0
            where = f"record batch ({_compression.CODEC_NAMES[codec]} records, offsets in the decompressed section)"
        log_append = bool(info.attributes & KP_ATTR_TIMESTAMP_TYPE)
        if info.last_offset_delta < 0:
            raise CorruptRecordError(f"{where}: negative LastOffsetDelta {info.last_offset_delta} at byte 23",
                                     field="LastOffsetDelta", offset=23)
        records = []
        pos = 0
        prev_delta = -1
        seen_max = None
        for i in range(info.records_count):
            if pos >= rlen:
                err.field = "RecordsCount"; err.offset = 57; err.value = info.records_count
                raise CorruptRecordError(
                    f"{where}: RecordsCount {info.records_count} at byte 57 but only {i} records present",
                    field="RecordsCount", offset=57)
            start = pos
            st = kp_record_read(rbuf, rlen, &pos, &rv, &err, base)
            if st != KP_OK:
                raise_kp_error(st, &err, f"{where}, record {i}", CorruptRecordError)
            headers = []
            hpos = 0
            for j in range(rv.headers_count):
                kp_record_read_header(&rv, &hpos, &hd, &err, 0)  # validated by kp_record_read
                try:
                    hkey = (<const char *>hd.key)[:hd.key_len].decode("utf-8")
                except UnicodeDecodeError:
                    at = base + <size_t>(hd.key - rbuf)
                    raise CorruptRecordError(f"{where}, record {i}: header {j} key at byte {at} is not valid UTF-8",
                                             field="HeaderKey", offset=at) from None
                headers.append((hkey, opt_bytes(hd.value, <int32_t>hd.value_len)))
            if not prev_delta < rv.offset_delta <= info.last_offset_delta:
                at = base + record_field_at(rbuf, rlen, start, True)
                raise CorruptRecordError(
                    f"{where}, record {i}: OffsetDelta {rv.offset_delta} at byte {at} is not in "
                    f"{prev_delta + 1}..{info.last_offset_delta}", field="OffsetDelta", offset=at)
            prev_delta = rv.offset_delta
            # Checked before adding: int64 overflow is undefined behaviour in C (and a
            # wrapped timestamp would pass for a LogAppendTime batch).
            if ((rv.timestamp_delta > 0 and info.base_timestamp > INT64_MAX_ - rv.timestamp_delta) or
                    (rv.timestamp_delta < 0 and info.base_timestamp < INT64_MIN_ - rv.timestamp_delta)):
                at = base + record_field_at(rbuf, rlen, start, False)
                raise CorruptRecordError(f"{where}, record {i}: BaseTimestamp + TimestampDelta at byte {at} "
                                         f"overflows int64", field="TimestampDelta", offset=at)
            ts = info.base_timestamp + rv.timestamp_delta
            if seen_max is None or ts > seen_max:
                seen_max = ts
            records.append(Record(rv.offset_delta, info.max_timestamp if log_append else ts,
                                  opt_bytes(rv.key, rv.key_len), opt_bytes(rv.value, rv.value_len),
                                  headers, rv.attributes))
        if pos != rlen:
            raise CorruptRecordError(
                f"{where}: {rlen - pos} bytes after the last of RecordsCount={info.records_count} records "
                f"at byte {base + pos}", field="RecordsCount", offset=base + pos)
        if records and prev_delta != info.last_offset_delta:
            raise CorruptRecordError(
                f"{where}: LastOffsetDelta at byte 23 is {info.last_offset_delta} but the last record's "
                f"OffsetDelta is {prev_delta}", field="LastOffsetDelta", offset=23)
        if records and not log_append and seen_max != info.max_timestamp:
            raise CorruptRecordError(
                f"{where}: MaxTimestamp at byte 35 is {info.max_timestamp} but the largest record "
                f"timestamp is {seen_max}", field="MaxTimestamp", offset=35)
        return DecodedBatch(
            base_offset=info.base_offset, length=info.length,
            partition_leader_epoch=info.partition_leader_epoch, magic=info.magic, crc=info.crc,
            attributes=info.attributes, compression=_compression.CODEC_NAMES[codec],
            timestamp_type="log_append" if info.attributes & KP_ATTR_TIMESTAMP_TYPE else "create",
            is_transactional=bool(info.attributes & KP_ATTR_TRANSACTIONAL),
            is_control=bool(info.attributes & KP_ATTR_CONTROL),
            last_offset_delta=info.last_offset_delta, base_timestamp=info.base_timestamp,
            max_timestamp=info.max_timestamp, producer_id=info.producer_id,
            producer_epoch=info.producer_epoch, base_sequence=info.base_sequence,
            records_count=info.records_count, records=records)
    finally:
        PyBuffer_Release(&view)


# ---- framing ----------------------------------------------------------------

def frame(payload):
    """Returns ``payload`` preceded by its 4-byte big-endian size."""
    cdef Py_buffer view
    cdef bytes out
    cdef char *p
    cdef kp_status st
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        if <size_t>view.len > <size_t>INT32_MAX:
            raise OverflowError(f"frame: payload of {view.len} bytes exceeds the int32 Size field")
        out = PyBytes_FromStringAndSize(NULL, view.len + 4)
        p = PyBytes_AS_STRING(out)
        st = kp_frame_put_size(<uint8_t *>p, <size_t>view.len)
        if st != KP_OK:
            raise_kp_error(st, NULL, "frame")
        memcpy(p + 4, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


cdef class FrameReceiver:
    """Incremental receiver of size-prefixed frames.

    ``feed(data)`` accepts bytes in any split and returns the list of frame
    bodies completed by them. A negative size or one above ``max_size`` raises
    :class:`~kproducer.errors.FrameError`; the stream is then unusable.
    """
    cdef kp_frame_rx rx
    cdef bint broken

    def __cinit__(self, int32_t max_size=DEFAULT_MAX_FRAME_SIZE):
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        kp_frame_rx_init(&self.rx, max_size)
        self.broken = False

    def __dealloc__(self):
        kp_frame_rx_free(&self.rx)

    @property
    def max_size(self):
        return self.rx.max_size

    @property
    def buffered(self):
        """Bytes of an incomplete frame held so far (size prefix included)."""
        if self.rx.body_size < 0:
            return self.rx.size_have
        return 4 + self.rx.body.len

    def feed(self, data):
        cdef Py_buffer view
        cdef size_t pos = 0, used = 0, blen = 0
        cdef int complete = 0
        cdef kp_status st
        cdef kp_error err
        cdef uint8_t *body = NULL
        cdef list frames = []
        if self.broken:
            raise FrameError("frame receiver: the stream already failed; open a new connection")
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            while True:
                st = kp_frame_rx_feed(&self.rx, <const uint8_t *>view.buf + pos, <size_t>view.len - pos,
                                      &used, &complete, &err)
                pos += used
                if st != KP_OK:
                    self.broken = True
                    if st == KP_ERR_FRAME_SIZE:
                        raise FrameError(
                            f"frame: invalid Size {err.value} at stream byte {err.offset} "
                            f"(must be 0..{self.rx.max_size})", field="Size", offset=err.offset)
                    raise_kp_error(st, &err, "frame", FrameError)
                if not complete:
                    break
                kp_frame_rx_take(&self.rx, &body, &blen)
                try:
                    frames.append(PyBytes_FromStringAndSize(<char *>body, <Py_ssize_t>blen))
                finally:
                    free(body)
                if pos >= <size_t>view.len:
                    break
        finally:
            PyBuffer_Release(&view)
        return frames


include "_codec_parts/produce.pxi"
