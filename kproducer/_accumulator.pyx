# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""RecordAccumulator: per-partition queues of record batches being filled, over a
bounded memory pool (Java's RecordAccumulator, ProducerBatch, BufferPool,
ProduceRequestResult and FutureRecordMetadata).

``send()`` runs through :meth:`RecordAccumulator.append` once per record: choose
the partition (murmur2 in C, or the topic's sticky partition), append into the
partition's open batch with the C writer, hand back a :class:`RecordFuture`. No
Python function is called on that path unless a batch fills up or the partition
switches. The Sender thread calls ``ready``/``drain`` per poll, per batch.

Thread safety: one lock per accumulator guards every queue; the pool has its own
condition for the (rare) blocking path. The lock is never held while user code
(callbacks) runs.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_acquire_lock, PyThread_release_lock, WAIT_LOCK, NOWAIT_LOCK)
from cpython.unicode cimport PyUnicode_Check
from cpython.long cimport PyLong_CheckExact
from cpython.number cimport PyIndex_Check
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uintptr_t
from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME
from libc.stdlib cimport calloc, free

from cpython.ref cimport PyObject
from kproducer._cdefs.common cimport *
from kproducer._cdefs.batch cimport *
from kproducer._cdefs.buf cimport kp_buf_resize
from kproducer._cdefs.murmur2 cimport kp_murmur2_partition
from kproducer._codec cimport _HeaderScratch, raise_kp_error

cdef extern from "Python.h":
    object PySequence_Fast(object o, const char *m)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject **PySequence_Fast_ITEMS(object o)
    bint _bytes_check_exact "PyBytes_CheckExact"(PyObject *o)
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *o)
    Py_ssize_t _bytes_size "PyBytes_GET_SIZE"(PyObject *o)

import logging
import os
import threading
import time
from collections import deque, namedtuple

from kproducer import compression as _compression
from kproducer.errors import KafkaError, KafkaTimeoutError, RecordTooLargeError

log = logging.getLogger("kproducer")

RecordMetadata = namedtuple("RecordMetadata", "topic partition offset timestamp")
RecordMetadata.__doc__ = "Where an acknowledged record was written (offset -1 with acks=0)."

# Sentinels append() returns when the caller must take the slow path.
NEED_METADATA = object()
NEED_MEMORY = object()

cdef enum:
    # Outcomes of RecordAccumulator._append_open.
    NO_BATCH = 0
    APPENDED = 1
    FILLED = 2
    NEED_GROWTH = 3     # the open batch must grow and the pool has not the bytes yet
    # A record batch v2 header plus the worst-case record framing, for pool estimates.
    RECORD_OVERHEAD = 61 + 21
    # Rough per-header framing allowance for pool estimates.
    HEADER_OVERHEAD = 64
    # The smallest first capacity (and pool charge) of a new batch when batch.size is
    # larger and the pool is short: Java's default batch.size.
    BATCH_START_BYTES = 16384
    # How many new batches can start at batch.size before the pool counts as short.
    BATCH_START_SHARE = 16


cdef inline int64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


def wall_clock_ms():
    """The clock record timestamps use (ms since the epoch)."""
    return now_ms()


# ---- completion of a batch and of its records ---------------------------------

cdef class BatchResult:
    """The outcome of one batch (Java's ProduceRequestResult), shared by its
    records' futures. Completed once, by the Sender thread."""
    cdef readonly str topic
    cdef readonly int32_t partition
    cdef readonly int64_t base_offset
    cdef readonly int64_t log_append_time
    cdef readonly object error
    cdef bint _done
    cdef object _event
    # (index, callable) pairs: on_delivery(err, metadata) callbacks and future done-callbacks.
    cdef list _deliveries
    cdef list _done_callbacks
    # When a batch is split (MESSAGE_TOO_LARGE), record i continues as record
    # _redirect[i] = (BatchResult, index) of a smaller batch.
    cdef list _redirect
    # send_many contributions: [SendManyResult, first index in this batch, count], so
    # one completion settles a whole range of records without per-record objects.
    cdef list _bulk

    def __cinit__(self, str topic, int32_t partition):
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time = -1

    @property
    def done(self):
        return self._done

    cdef inline void add_delivery(self, int32_t index, int64_t timestamp, object callback):
        if self._deliveries is None:
            self._deliveries = []
        self._deliveries.append((index, timestamp, callback))

    cdef object metadata_for(self, int32_t index, int64_t timestamp):
        cdef int64_t offset = self.base_offset + index if self.base_offset >= 0 else -1
        cdef int64_t ts = self.log_append_time if self.log_append_time >= 0 else timestamp
        return RecordMetadata(self.topic, self.partition, offset, ts)

    def wait(self, timeout=None):
        """Blocks until done or ``timeout`` seconds pass; True when done. A split
        batch is done when every batch it was split into is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._done:
            if self._event is None:
                self._event = threading.Event()
            ev = self._event
            # Re-check: complete() sets _done before it reads _event (both under the GIL).
            if not self._done and not ev.wait(timeout):
                return False
        if self._redirect is not None:
            for target in {id(t): t for t, _ in self._redirect}.values():
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not (<BatchResult>target).wait(remaining):
                    return False
        return True

    def redirect(self, list targets):
        """Split: record i of this batch now lives at targets[i] = (BatchResult, index).
        Callbacks move with their records."""
        cdef BatchResult target
        cdef list entry
        self._redirect = targets
        if self._bulk:
            for entry in self._bulk:
                for i in range(<Py_ssize_t>entry[1], <Py_ssize_t>entry[1] + <Py_ssize_t>entry[2]):
                    target, new_index = targets[i]
                    target.add_bulk(entry[0], new_index, 1)
            self._bulk = None
        if self._deliveries:
            for index, ts, cb in self._deliveries:
                target, new_index = targets[index]
                target.add_delivery(new_index, ts, cb)
            self._deliveries = None
        if self._done_callbacks:
            for index, fut, fn in self._done_callbacks:
                target, new_index = targets[index]
                target.add_done_callback_for(new_index, fut, fn)
            self._done_callbacks = None
        self._done = True
        if self._event is not None:
            self._event.set()

    cdef void add_bulk(self, SendManyResult owner, Py_ssize_t first, Py_ssize_t count):
        """Counts records first..first+count-1 of this batch for ``owner`` (extending the
        last range when it is the owner's and contiguous)."""
        cdef list last
        if self._bulk is None:
            self._bulk = []
        elif self._bulk:
            last = self._bulk[len(self._bulk) - 1]
            if last[0] is owner and <Py_ssize_t>last[1] + <Py_ssize_t>last[2] == first:
                last[2] = <Py_ssize_t>last[2] + count
                return
        self._bulk.append([owner, first, count])

    cdef void add_done_callback_for(self, int32_t index, object fut, object fn):
        if self._done_callbacks is None:
            self._done_callbacks = []
        self._done_callbacks.append((index, fut, fn))

    def complete(self, int64_t base_offset, int64_t log_append_time, object error):
        """Records the outcome and runs every callback (errors in user callbacks are
        logged, never raised)."""
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self._done = True
        if self._event is not None:
            self._event.set()
        if self._bulk:
            for owner, first, count in self._bulk:
                (<SendManyResult>owner).settle(count, error)
            self._bulk = None
        if self._deliveries:
            for index, ts, cb in self._deliveries:
                md = None if error is not None else self.metadata_for(index, ts)
                try:
                    cb(error, md)
                except Exception:
                    log.exception("on_delivery callback %r raised; the producer carries on", cb)
            self._deliveries = None
        if self._done_callbacks:
            for index, fut, fn in self._done_callbacks:
                try:
                    fn(fut)
                except Exception:
                    log.exception("future done-callback %r raised; the producer carries on", fn)
            self._done_callbacks = None


cdef class RecordFuture:
    """The future ``send()`` returns: ``result(timeout)`` gives a RecordMetadata or
    raises the record's error. Compatible with concurrent.futures.Future's
    ``result``, ``exception``, ``done``, ``add_done_callback``, ``cancel``."""
    cdef BatchResult _result
    cdef int32_t _index
    cdef int64_t _timestamp

    def __repr__(self):
        state = "done" if self.done() else "pending"
        return f"<RecordFuture {self._result.topic}[{self._result.partition}] #{self._index} {state}>"

    @property
    def topic(self):
        return self._result.topic

    @property
    def partition(self):
        """The partition the record was appended to (known before it is sent)."""
        return self._result.partition

    cdef inline void _follow(self):
        # A split batch forwards its records to smaller batches.
        cdef BatchResult r = self._result
        while r._redirect is not None:
            r, self._index = r._redirect[self._index]
        self._result = r

    def done(self):
        self._follow()
        return self._result._done and self._result._redirect is None

    def cancelled(self):
        return False

    def running(self):
        return not self.done()

    def cancel(self):
        """Records already handed to the producer cannot be withdrawn."""
        return False

    def _wait(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._follow()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._result.wait(remaining):
                raise KafkaTimeoutError(
                    f"record for {self._result.topic}[{self._result.partition}] not acknowledged "
                    f"within {timeout} s (it is still pending; the producer keeps trying until "
                    f"delivery.timeout.ms)")
            if self._result._redirect is None:
                return

    def result(self, timeout=None):
        self._wait(timeout)
        if self._result.error is not None:
            raise self._result.error
        return self._result.metadata_for(self._index, self._timestamp)

    def exception(self, timeout=None):
        self._wait(timeout)
        return self._result.error

    def add_done_callback(self, fn):
        """Calls ``fn(future)`` when done (at once if already done). It runs on the
        producer's I/O thread: keep it short."""
        self._follow()
        if self._result._done and self._result._redirect is None:
            try:
                fn(self)
            except Exception:
                log.exception("future done-callback %r raised", fn)
        else:
            self._result.add_done_callback_for(self._index, self, fn)


cdef inline bint _field_bytes(object obj, Py_buffer *view, const uint8_t **ptr, int64_t *length,
                              str what) except -1:
    """A key or value of send(): its bytes (``length`` -1 for None). Returns True when a
    buffer ``view`` was taken (the caller releases it): bytes need none."""
    if obj is None:
        ptr[0] = NULL
        length[0] = -1
        return False
    if PyBytes_CheckExact(obj):
        ptr[0] = <uint8_t *>PyBytes_AS_STRING(obj)
        length[0] = PyBytes_GET_SIZE(obj)
        return False
    if PyUnicode_Check(obj):
        raise TypeError(f"{what} must be bytes-like or None, not str (set {what}_serializer)")
    try:
        PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like or None, not {type(obj).__name__} "
                        f"(set {what}_serializer)") from None
    ptr[0] = <const uint8_t *>view.buf
    length[0] = view.len
    return True


cdef Py_ssize_t _headers_size(_HeaderScratch scratch, Py_ssize_t nh):
    """Upper bound of the encoded size of the ``nh`` headers held in ``scratch``."""
    cdef Py_ssize_t i, size = 0
    for i in range(nh):
        size += <Py_ssize_t>scratch.items[i].key_len + 10
        if scratch.items[i].value_len > 0:
            size += <Py_ssize_t>scratch.items[i].value_len
    return size


cdef inline Py_ssize_t _record_need(int64_t klen, int64_t vlen, Py_ssize_t headers_size):
    """Upper bound of one record's size in a batch of its own (what max.request.size and
    buffer.memory are checked against)."""
    return (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) + RECORD_OVERHEAD + headers_size


cdef inline int64_t _index_arg(object v, str name, str what) except? -1:
    """An integer argument (an int or anything with __index__, such as a NumPy integer;
    never a bool or a float, which Python would silently truncate) as int64."""
    if not PyLong_CheckExact(v):
        if isinstance(v, bool) or not PyIndex_Check(v):
            raise TypeError(f"{name} must be {what}, not {type(v).__name__}")
        v = v.__index__()
    try:
        return v
    except OverflowError:
        raise ValueError(f"{name} {v} is out of range") from None


cdef inline int32_t _partition_in_range(int64_t partition, int32_t n, str topic) except -1:
    if partition < 0 or partition >= n:
        raise ValueError(f"partition {partition} is not in the range [0...{n - 1}] of topic {topic!r}")
    return <int32_t>partition


cdef inline RecordFuture make_future(BatchResult result, int32_t index, int64_t timestamp):
    cdef RecordFuture f = RecordFuture.__new__(RecordFuture)
    f._result = result
    f._index = index
    f._timestamp = timestamp
    return f


cdef class SendManyResult:
    """What ``send_many`` returns: how many of its records were acknowledged and how many
    failed (with the first error), settled batch by batch by the I/O thread.
    ``wait(timeout)`` blocks until every record is settled; ``raise_for_errors()`` raises
    the first error if any record failed."""
    cdef readonly Py_ssize_t records
    cdef readonly Py_ssize_t acked
    cdef readonly Py_ssize_t failed
    cdef readonly object first_error
    cdef readonly list futures
    cdef object _cond

    def __cinit__(self, Py_ssize_t records):
        self.records = records
        self._cond = threading.Condition(threading.Lock())

    cdef void settle(self, Py_ssize_t count, object error):
        if error is None:
            self.acked += count
        else:
            self.failed += count
            if self.first_error is None:
                self.first_error = error
        if self.acked + self.failed >= self.records:
            with self._cond:
                self._cond.notify_all()

    def done(self):
        return self.acked + self.failed >= self.records

    def wait(self, timeout=None):
        """Blocks until every record is acknowledged or failed; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.acked + self.failed < self.records:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def raise_for_errors(self):
        if self.first_error is not None:
            raise self.first_error

    def __repr__(self):
        return (f"<SendManyResult records={self.records} acked={self.acked} failed={self.failed}"
                f"{' first_error=' + repr(self.first_error) if self.first_error is not None else ''}>")


cdef enum ColumnKind:
    COL_NONE = 0       # every record null
    COL_OBJECTS = 1    # PyObject* per record: bytes or None
    COL_FIXED = 2      # NumPy "S" array: itemsize bytes each, trailing NULs stripped as NumPy does
    COL_ARROW32 = 3    # Arrow binary/string: int32 offsets, data, optional validity bitmap
    COL_ARROW64 = 4    # Arrow large_binary/large_string: int64 offsets


cdef struct Column:
    ColumnKind kind
    PyObject **items
    const uint8_t *data
    Py_ssize_t itemsize
    const int32_t *off32
    const int64_t *off64
    const uint8_t *validity
    Py_ssize_t start      # Arrow slice offset


cdef inline int column_get(const Column *c, Py_ssize_t i, const uint8_t **ptr, int64_t *length) except -1:
    """Record i of a column: its bytes and length (-1 for null)."""
    cdef PyObject *o
    cdef Py_ssize_t j, n
    if c.kind == COL_OBJECTS:
        o = c.items[i]
        if _bytes_check_exact(o):
            ptr[0] = <const uint8_t *>_bytes_data(o)
            length[0] = _bytes_size(o)
        elif o == <PyObject *>None:
            ptr[0] = NULL
            length[0] = -1
        else:
            raise TypeError(f"record {i}: expected bytes or None, not {type(<object>o).__name__}")
    elif c.kind == COL_FIXED:
        ptr[0] = c.data + i * c.itemsize
        n = c.itemsize
        while n > 0 and ptr[0][n - 1] == 0:
            n -= 1
        length[0] = n
    elif c.kind == COL_ARROW32 or c.kind == COL_ARROW64:
        j = c.start + i
        if c.validity != NULL and not (c.validity[j >> 3] >> (j & 7)) & 1:
            ptr[0] = NULL
            length[0] = -1
        elif c.kind == COL_ARROW32:
            ptr[0] = c.data + c.off32[j]
            length[0] = c.off32[j + 1] - c.off32[j]
        else:
            ptr[0] = c.data + c.off64[j]
            length[0] = c.off64[j + 1] - c.off64[j]
    else:
        ptr[0] = NULL
        length[0] = -1
    return 0


cdef class _ColumnSource:
    """Resolves one send_many column (values or keys) to a Column, keeping the Python
    objects and buffers it points into alive for the duration of the call."""
    cdef Column col
    cdef Py_ssize_t n
    cdef Py_ssize_t max_len   # longest record (0 when all null): sizes are checked before queueing
    cdef list keep
    cdef list views

    def __cinit__(self):
        self.keep = []
        self.views = []

    cdef int setup(self, object obj, str what) except -1:
        self.col.kind = COL_NONE
        self.max_len = 0
        if obj is None:
            self.n = -1
            return 0
        # Arrow arrays (pyarrow or anything shaped like it), read through their buffers.
        if hasattr(obj, "buffers") and hasattr(obj, "type") and hasattr(obj, "offset"):
            return self._arrow(obj, what)
        if hasattr(obj, "dtype") and hasattr(obj, "__array_interface__"):
            return self._numpy(obj, what)
        if isinstance(obj, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"{what} must be a sequence of records (a list of bytes, a NumPy or "
                            f"Arrow array), not a single {type(obj).__name__}")
        seq = PySequence_Fast(obj, b"send_many: values and keys must be sequences")
        self.keep.append(seq)
        self.n = PySequence_Fast_GET_SIZE(seq)
        self.col.kind = COL_OBJECTS
        self.col.items = PySequence_Fast_ITEMS(seq)
        # Check every element before anything is queued: a bad record must fail the
        # call, not leave part of it sent.
        cdef Py_ssize_t i
        cdef PyObject *o
        for i in range(self.n):
            o = self.col.items[i]
            if _bytes_check_exact(o):
                if _bytes_size(o) > self.max_len:
                    self.max_len = _bytes_size(o)
            elif o != <PyObject *>None:
                if isinstance(<object>o, str):
                    raise TypeError(f"{what}[{i}] is a str: send_many takes bytes (encode it first)")
                raise TypeError(f"{what}[{i}] must be bytes or None, not {type(<object>o).__name__}")
        return 0

    cdef int _numpy(self, object arr, str what) except -1:
        kind = arr.dtype.kind
        if arr.ndim != 1:
            raise ValueError(f"{what}: expected a 1-dimensional array, got {arr.ndim} dimensions")
        if kind == "O":
            lst = arr.tolist()      # one C-level call: a list of the same objects
            self.keep.append(lst)
            return self.setup(lst, what)
        if kind == "S":
            if not arr.flags["C_CONTIGUOUS"]:
                arr = arr.copy()
            self.keep.append(arr)
            self.n = arr.shape[0]
            self.col.kind = COL_FIXED
            self.col.itemsize = arr.dtype.itemsize
            self.max_len = self.col.itemsize
            self.col.data = <const uint8_t *><uintptr_t>arr.__array_interface__["data"][0]
            return 0
        if kind == "U":
            raise TypeError(f"{what}: NumPy unicode arrays need encoding: pass arr.astype('S') "
                            f"(or an object array of bytes)")
        raise TypeError(f"{what}: NumPy arrays of dtype {arr.dtype} are not bytes (use dtype 'S' or object)")

    cdef int _arrow(self, object arr, str what) except -1:
        tname = str(arr.type)
        if hasattr(arr, "chunks"):
            raise TypeError(f"{what}: a ChunkedArray is sent chunk by chunk; pass its chunks")
        if tname in ("binary", "string", "utf8"):
            self.col.kind = COL_ARROW32
        elif tname in ("large_binary", "large_string", "large_utf8"):
            self.col.kind = COL_ARROW64
        else:
            raise TypeError(f"{what}: Arrow arrays of type {tname} are not binary or string "
                            f"(cast to binary first)")
        bufs = arr.buffers()
        self.n = len(arr)
        self.col.start = arr.offset
        validity = self._pointer(bufs[0]) if bufs[0] is not None and arr.null_count else NULL
        self.col.validity = validity
        offsets = self._pointer(bufs[1])
        if self.col.kind == COL_ARROW32:
            self.col.off32 = <const int32_t *>offsets
        else:
            self.col.off64 = <const int64_t *>offsets
        self.col.data = self._pointer(bufs[2]) if bufs[2] is not None else <const uint8_t *>""
        self.keep.append(arr)
        cdef Py_ssize_t j, size
        for j in range(self.col.start, self.col.start + self.n):
            if self.col.kind == COL_ARROW32:
                size = self.col.off32[j + 1] - self.col.off32[j]
            else:
                size = self.col.off64[j + 1] - self.col.off64[j]
            if size > self.max_len:
                self.max_len = size
        return 0

    cdef const uint8_t *_pointer(self, object buf) except? NULL:
        view = memoryview(buf)
        self.views.append(view)
        cdef const unsigned char[::1] m = view.cast("B")
        if m.shape[0] == 0:
            return <const uint8_t *>""
        return &m[0]

    def release(self):
        for v in self.views:
            v.release()
        self.views.clear()
        self.keep.clear()


# ---- memory -----------------------------------------------------------------------

cdef class BufferPool:
    """``buffer.memory`` as a hard bound on the bytes of batches not yet completed.
    Java pools ByteBuffers; here the C writer mallocs and the pool keeps the count.
    A full pool blocks appenders up to ``max.block.ms`` in FIFO spirit: while anyone
    waits, the fast path does not barge in."""
    cdef readonly Py_ssize_t total
    cdef readonly Py_ssize_t used
    cdef readonly int waiters
    cdef object _cond

    def __cinit__(self, Py_ssize_t total):
        self.total = total
        self.used = 0
        self.waiters = 0
        self._cond = threading.Condition(threading.Lock())

    cdef inline bint try_reserve(self, Py_ssize_t n):
        if self.waiters == 0 and self.used + n <= self.total:
            self.used += n
            return True
        return False

    def wait_available(self, Py_ssize_t n, double timeout_s):
        """Blocks until ``n`` bytes are free (without taking them) or raises
        KafkaTimeoutError after ``timeout_s``; the caller then retries its append."""
        if n > self.total:
            raise KafkaError(f"a batch of {n} bytes can never fit buffer.memory={self.total}")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self.waiters += 1
            try:
                while self.used + n > self.total:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise KafkaTimeoutError(
                            f"failed to allocate {n} bytes of buffer.memory ({self.used} of "
                            f"{self.total} in use) within max.block.ms={int(timeout_s * 1000)}")
                    self._cond.wait(remaining)
            finally:
                self.waiters -= 1

    cpdef void release(self, Py_ssize_t n):
        self.used -= n
        if self.waiters:
            with self._cond:
                self._cond.notify_all()

    @property
    def available(self):
        return self.total - self.used


# ---- batches --------------------------------------------------------------------

cdef class ProducerBatch:
    """One record batch for one partition: filled by appends, then closed,
    finished with the producer id/epoch/sequence at drain time, sent (maybe
    several times) and completed. Exposes its wire bytes via the buffer protocol."""
    cdef kp_batch_writer w
    cdef readonly str topic
    cdef readonly int32_t partition
    cdef readonly BatchResult result
    cdef readonly int64_t created_ms
    cdef public int64_t last_attempt_ms
    cdef public int64_t drained_ms
    cdef public int attempts
    cdef public int64_t backoff_ms     # wait before the next attempt (set on retry, jittered)
    cdef public int32_t base_sequence
    cdef public int64_t producer_id
    cdef public int16_t producer_epoch
    cdef readonly bint closed
    cdef readonly bint finished
    cdef readonly Py_ssize_t pool_bytes
    cdef Py_ssize_t grow_need       # bytes _grow wanted and the pool did not have
    cdef Py_ssize_t limit
    cdef int codec
    cdef object level
    cdef BufferPool pool
    cdef int exports

    def __cinit__(self):
        kp_batch_init(&self.w, 0)  # header placeholder only; real capacity on first use

    def __dealloc__(self):
        kp_batch_free(&self.w)
        if self.pool is not None and self.pool_bytes:
            self.pool.release(self.pool_bytes)
            self.pool_bytes = 0

    @property
    def record_count(self):
        return self.w.count

    @property
    def size_in_bytes(self):
        return self.w.buf.len

    cdef kp_status append(self, int64_t ts, const uint8_t *k, int64_t klen, const uint8_t *v,
                          int64_t vlen, const kp_header *h, size_t nh, int *appended):
        cdef kp_status st = kp_batch_append_inline(&self.w, <size_t>self.limit, ts, k, klen, v, vlen,
                                                   h, nh, appended)
        if st == KP_ERR_FULL:
            # The buffer is at its capacity (and the batch below batch.size): grow it by
            # doubling, charging buffer.memory first. When the pool has not got the bytes
            # now, KP_ERR_FULL tells the caller to wait for them (grow_need); when it never
            # could, the batch is full as it is.
            st = self._grow(ts, klen, vlen, h, nh)
            if st == KP_OK:
                return kp_batch_append_inline(&self.w, <size_t>self.limit, ts, k, klen, v, vlen,
                                              h, nh, appended)
            if st == KP_ERR_FULL and self.w.count > 0 and self.pool_bytes + self.grow_need > self.pool.total:
                appended[0] = 0
                return KP_OK
        return st

    cdef kp_status _grow(self, int64_t ts, int64_t klen, int64_t vlen, const kp_header *h, size_t nh):
        """Doubles the capacity (at least to fit the record, at most to batch.size or the
        one record) after charging the pool for the extra bytes: KP_ERR_FULL when the pool
        has no room (or others wait for it)."""
        # kp_batch_append_inline checked ts - base for overflow before it ran out of room.
        cdef int64_t delta = ts - (self.w.base_timestamp if self.w.count else ts)
        cdef size_t record = kp_batch_record_size(delta, self.w.count, klen, vlen, h, nh)
        cdef size_t need = self.w.buf.len + record
        cdef size_t cap = self.w.buf.cap * 2
        cdef size_t most = <size_t>self.limit if <size_t>self.limit > need else need
        if cap < need:
            cap = need
        if self.limit > 0 and cap > most:
            cap = most
        cdef Py_ssize_t extra = <Py_ssize_t>(cap - self.w.buf.cap)
        if self.pool is not None:
            if not self.pool.try_reserve(extra):
                self.grow_need = extra
                return KP_ERR_FULL
            self.pool_bytes += extra
        cdef kp_status st = kp_buf_resize(&self.w.buf, cap)
        if st != KP_OK and self.pool is not None:
            self.pool.release(extra)
            self.pool_bytes -= extra
        return st

    def close(self):
        """No more appends: compress the Records section if a codec is set."""
        if self.closed:
            return
        self.closed = True
        # The compressed section may outgrow what the pool was charged for (incompressible
        # data gains the codec's framing): it is replaced in place, uncharged, as before.
        self.w.buf.fixed = 0
        if self.codec != 0 and self.w.count:
            section = memoryview(<char[:self.w.buf.len - KP_BATCH_HEADER_SIZE]>(
                <char *>self.w.buf.data + KP_BATCH_HEADER_SIZE))
            compressed = _compression.compress(self.codec, section, self.level)
            del section
            st = kp_batch_replace_records(&self.w, <const uint8_t *>PyBytes_AS_STRING(compressed),
                                          <size_t>PyBytes_GET_SIZE(compressed))
            if st != KP_OK:
                raise_kp_error(st, NULL, "batch close")

    def finish(self, int64_t producer_id, int producer_epoch, int32_t base_sequence):
        """Back-patches producer id, epoch and BaseSequence and the CRC; callable again
        when a retry needs new values (epoch bump, new producer id)."""
        if not self.closed:
            self.close()
        if self.exports:
            raise BufferError("batch bytes are still exported; cannot re-finish")
        self.producer_id = producer_id
        self.producer_epoch = <int16_t>producer_epoch
        self.base_sequence = base_sequence
        st = kp_batch_finish(&self.w, <int16_t>self.codec, producer_id, <int16_t>producer_epoch,
                             base_sequence)
        if st != KP_OK:
            raise_kp_error(st, NULL, "batch finish")
        self.finished = True

    def wire_bytes(self):
        """A copy of the finished batch."""
        if not self.finished:
            raise RuntimeError("batch not finished")
        return PyBytes_FromStringAndSize(<char *>self.w.buf.data, <Py_ssize_t>self.w.buf.len)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if not self.finished:
            raise BufferError("batch not finished")
        view.buf = self.w.buf.data
        view.obj = self
        view.len = <Py_ssize_t>self.w.buf.len
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def complete(self, int64_t base_offset, int64_t log_append_time, object error):
        """Completes every record of the batch and gives its memory back."""
        self.result.complete(base_offset, log_append_time, error)
        self.free_memory()

    def free_memory(self):
        if self.exports == 0:
            kp_batch_free(&self.w)
            kp_batch_init(&self.w, 0)
        if self.pool is not None and self.pool_bytes:
            self.pool.release(self.pool_bytes)
            self.pool_bytes = 0

    def __repr__(self):
        return (f"<ProducerBatch {self.topic}[{self.partition}] records={self.w.count} "
                f"bytes={self.w.buf.len} attempts={self.attempts} seq={self.base_sequence}>")


cdef ProducerBatch new_batch(str topic, int32_t partition, Py_ssize_t capacity, Py_ssize_t limit,
                             int codec, object level, int64_t now, BufferPool pool):
    cdef ProducerBatch b = ProducerBatch.__new__(ProducerBatch)
    cdef kp_status st
    kp_batch_free(&b.w)
    st = kp_batch_init(&b.w, <size_t>capacity)
    if st != KP_OK:
        raise_kp_error(st, NULL, "new batch")
    # Growth past `capacity` goes through ProducerBatch._grow, which charges the pool.
    b.w.buf.fixed = pool is not None
    b.topic = topic
    b.partition = partition
    b.result = BatchResult.__new__(BatchResult, topic, partition)
    b.created_ms = now
    b.last_attempt_ms = now
    b.base_sequence = -1
    b.backoff_ms = -1
    b.producer_id = -1
    b.producer_epoch = -1
    b.limit = limit
    b.codec = codec
    b.level = level
    b.pool = pool
    b.pool_bytes = capacity
    return b


def batch_from_records(str topic, int32_t partition, list records, int codec, object level,
                       BatchResult result_owner=None):
    """Builds a closed batch from (key, value, timestamp, headers) tuples: the split
    path after MESSAGE_TOO_LARGE. Memory is not charged to the pool."""
    cdef ProducerBatch b = new_batch(topic, partition, 256, 0, codec, level, now_ms(), None)
    cdef _HeaderScratch scratch = _HeaderScratch()
    cdef int appended
    cdef Py_ssize_t nh
    cdef int64_t klen, vlen
    cdef const uint8_t *kp
    cdef const uint8_t *vp
    for key, value, ts, headers in records:
        nh = scratch.fill(headers, 0)
        kp = NULL if key is None else <uint8_t *>PyBytes_AS_STRING(key)
        klen = -1 if key is None else PyBytes_GET_SIZE(key)
        vp = NULL if value is None else <uint8_t *>PyBytes_AS_STRING(value)
        vlen = -1 if value is None else PyBytes_GET_SIZE(value)
        st = b.append(ts, kp, klen, vp, vlen, scratch.items, <size_t>nh, &appended)
        if st != KP_OK:
            raise_kp_error(st, NULL, "split batch")
    b.pool_bytes = 0
    b.close()
    return b


# ---- the accumulator -----------------------------------------------------------------

cdef class _TopicState:
    cdef str topic
    cdef int32_t num_partitions
    cdef list queues          # partition -> deque of ProducerBatch
    cdef list open_batches    # partition -> the last batch if still appendable, else None
    cdef int32_t sticky       # current sticky partition for unkeyed records, -1 none
    cdef int64_t sticky_bytes
    cdef bint touched         # appended to since the Sender last asked (metadata idle expiry)

    def __cinit__(self, str topic):
        self.topic = topic
        self.num_partitions = -1
        self.queues = []
        self.open_batches = []
        self.sticky = -1
        self.sticky_bytes = 0


cdef class RecordAccumulator:
    """Per-partition deques of ProducerBatch; see the module docstring."""
    cdef readonly Py_ssize_t batch_size
    cdef readonly int64_t linger_ms
    cdef readonly int codec
    cdef readonly object level
    cdef readonly BufferPool pool
    cdef readonly bint ignore_keys
    cdef dict _topics
    cdef object _last_topic       # the str of the last append, with its state: most sends
    cdef _TopicState _last_state  # go to one topic, so this skips the dict lookup
    cdef PyThread_type_lock _lock
    cdef _HeaderScratch _scratch
    cdef object _wakeup
    cdef object _choose_sticky
    cdef public int flushes_in_progress
    cdef public bint closed
    cdef readonly Py_ssize_t last_need
    cdef readonly Py_ssize_t max_request_size
    cdef Py_ssize_t _drain_index
    # BatchResults of batches not yet completed: flush() waits for a snapshot of these.
    cdef readonly set incomplete
    cdef int64_t retry_backoff_ms
    cdef int64_t retry_backoff_max_ms

    def __cinit__(self, *, Py_ssize_t batch_size=16384, int64_t linger_ms=5, str compression="none",
                  compression_level=None, Py_ssize_t buffer_memory=33554432, bint ignore_keys=False,
                  int64_t retry_backoff_ms=100, int64_t retry_backoff_max_ms=1000,
                  Py_ssize_t max_request_size=1048576, wakeup=None, choose_sticky=None):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.codec = _compression.codec_id(compression)
        self.level = _compression.resolve_level(compression, compression_level)
        self.pool = BufferPool(buffer_memory)
        self.ignore_keys = ignore_keys
        self._topics = {}
        self.incomplete = set()
        self._scratch = _HeaderScratch()
        self._wakeup = wakeup
        self._choose_sticky = choose_sticky
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.max_request_size = max_request_size

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef inline void _acquire(self):
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self._lock, WAIT_LOCK)

    cdef inline void _release(self):
        PyThread_release_lock(self._lock)

    # -- metadata the hot path needs -------------------------------------------------

    def set_partition_count(self, str topic, int32_t n):
        """Called when metadata knows the topic; partitions never shrink in Kafka."""
        cdef _TopicState st
        self._acquire()
        try:
            st = self._topics.get(topic)
            if st is None:
                st = _TopicState(topic)
                self._topics[topic] = st
            if n > st.num_partitions:
                while len(st.queues) < n:
                    st.queues.append(deque())
                    st.open_batches.append(None)
                st.num_partitions = n
        finally:
            self._release()

    def partition_count(self, str topic):
        st = self._topics.get(topic)
        return None if st is None or (<_TopicState>st).num_partitions < 0 else (<_TopicState>st).num_partitions

    # -- append (per record) -------------------------------------------------------

    cpdef object append(self, str topic, object partition, object key, object value,
                        object timestamp, object headers, object on_delivery):
        """Appends one record; returns its RecordFuture, or NEED_METADATA (partition
        count unknown) / NEED_MEMORY (pool exhausted: reserve, then call again)."""
        cdef _TopicState st
        cdef int32_t p, n
        cdef int64_t ts, now
        cdef const uint8_t *kptr = NULL
        cdef const uint8_t *vptr = NULL
        cdef int64_t klen = -1, vlen = -1
        cdef Py_ssize_t nh = 0
        cdef ProducerBatch b
        cdef bint wake = False
        cdef int32_t fixed_p
        cdef int64_t want_p = -1
        cdef Py_buffer kview, vview
        cdef bint khave = False, vhave = False
        cdef RecordFuture fut

        if self.closed:
            raise KafkaError("cannot send: the producer is closed")
        now = now_ms()
        if timestamp is None:
            ts = now
        else:
            ts = _index_arg(timestamp, "timestamp_ms", "an int (ms since the epoch) or None")
            if ts < 0:
                raise ValueError(f"timestamp_ms must be >= 0, got {ts}")
        if partition is not None:
            want_p = _index_arg(partition, "partition", "an int or None")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, metadata) or None, "
                            f"not {type(on_delivery).__name__}")

        self._acquire()
        try:
            if topic is self._last_topic:
                st = self._last_state
                st.touched = True
            else:
                st = self._topics.get(topic)
                if st is None or st.num_partitions <= 0:
                    return NEED_METADATA
                self._last_topic = topic
                self._last_state = st
                st.touched = True
            n = st.num_partitions
            try:
                khave = _field_bytes(key, &kview, &kptr, &klen, "key")
                vhave = _field_bytes(value, &vview, &vptr, &vlen, "value")
                if headers is not None:
                    nh = self._scratch.fill(headers, 0)

                fixed_p = -1
                if partition is not None:
                    fixed_p = _partition_in_range(want_p, n, topic)
                p = self._place(st, fixed_p, ts, kptr, klen, vptr, vlen, nh, now, &wake)
                if p < 0:
                    if wake and self._wakeup is not None:
                        self._wakeup()
                    return NEED_MEMORY
                b = st.open_batches[p]
                fut = make_future(b.result, b.w.count - 1, ts)
                if on_delivery is not None:
                    b.result.add_delivery(b.w.count - 1, ts, on_delivery)
            finally:
                if khave:
                    PyBuffer_Release(&kview)
                if vhave:
                    PyBuffer_Release(&vview)
        finally:
            self._release()
        if wake and self._wakeup is not None:
            self._wakeup()
        return fut

    def check_fields(self, key, value, headers):
        """Validates a record's key, value and headers (types and size) without queueing
        it: the slow path calls this before waiting for a topic's metadata, so a bad
        record fails at once. A private scratch: the shared one belongs to the lock holder."""
        cdef Py_buffer kview, vview
        cdef bint khave = False, vhave = False
        cdef const uint8_t *ptr
        cdef int64_t klen = -1, vlen = -1
        cdef _HeaderScratch check = _HeaderScratch()
        cdef Py_ssize_t nh = 0, need
        try:
            khave = _field_bytes(key, &kview, &ptr, &klen, "key")
            vhave = _field_bytes(value, &vview, &ptr, &vlen, "value")
            if headers is not None:
                nh = check.fill(headers, 0)
            need = _record_need(klen, vlen, _headers_size(check, nh))
            if need > self.max_request_size or need > self.pool.total:
                self._too_large(need, -1)
        finally:
            if khave:
                PyBuffer_Release(&kview)
            if vhave:
                PyBuffer_Release(&vview)

    cdef int _place(self, _TopicState st, int32_t fixed_p, int64_t ts, const uint8_t *kptr, int64_t klen,
                    const uint8_t *vptr, int64_t vlen, Py_ssize_t nh, int64_t now, bint *wake) except -2:
        """Places one record (the lock is held): its partition is ``fixed_p`` when >= 0,
        else the murmur2 of its key, else the topic's sticky partition (switched when a
        batch fills, KIP-794). Appends to that partition's open batch, or starts a new
        batch from the pool. Returns the partition, or -1 when the pool has no room for a
        new batch (``last_need`` is then the bytes to wait for). Sets ``wake`` when a
        batch became sendable or was started."""
        cdef int32_t p
        cdef int appended
        cdef bint sticky = False
        cdef Py_ssize_t need = _record_need(klen, vlen, 0)
        cdef ProducerBatch b
        cdef kp_status kst
        if nh:
            need += _headers_size(self._scratch, nh)
        if need > self.max_request_size or need > self.pool.total:
            self._too_large(need, -1)
        if fixed_p >= 0:
            p = fixed_p
        elif klen >= 0 and not self.ignore_keys:
            p = kp_murmur2_partition(kptr, <size_t>klen, st.num_partitions)
        else:
            sticky = True
            if st.sticky < 0 or st.sticky >= st.num_partitions:
                st.sticky = self._pick_sticky(st)
                st.sticky_bytes = 0
            p = st.sticky
        appended = self._append_open(st, p, ts, kptr, klen, vptr, vlen, nh)
        if appended == FILLED:
            wake[0] = True   # the full batch is sendable now
            if sticky:
                st.sticky = self._pick_sticky(st)
                st.sticky_bytes = 0
                p = st.sticky
                appended = self._append_open(st, p, ts, kptr, klen, vptr, vlen, nh)
        if appended == NEED_GROWTH:
            wake[0] = True   # a waiter makes every batch sendable (the pool is exhausted)
            return -1        # last_need: the bytes the batch wants to grow by
        if appended != APPENDED:
            # A new batch takes batch.size from buffer.memory, as Java's does, while the pool
            # has BATCH_START_SHARE times that free; when it has less, a 1/BATCH_START_SHARE
            # share of what is free (at least BATCH_START_BYTES), and the batch grows by
            # doubling towards batch.size, charging the pool as it grows
            # (ProducerBatch._grow). Taking batch.size whatever the pool holds left a few
            # records per round trip when partitions x batch.size exceeded buffer.memory
            # (8k records/s: 4 partitions, batch.size 1 MB, buffer.memory 2 MiB); starting
            # every batch small cost reallocs and smaller batches when nothing was short.
            if need < self.batch_size:
                need = min(self.batch_size, max(need, BATCH_START_BYTES,
                                                (self.pool.total - self.pool.used) // BATCH_START_SHARE))
            if not self.pool.try_reserve(need):
                self.last_need = need
                return -1
            b = new_batch(st.topic, p, need, self.batch_size, self.codec, self.level, now, self.pool)
            kst = b.append(ts, kptr, klen, vptr, vlen, self._scratch.items, <size_t>nh, &appended)
            if kst != KP_OK:
                b.free_memory()
                raise_kp_error(kst, NULL, f"append to {st.topic}[{p}]")
            st.queues[p].append(b)
            st.open_batches[p] = b
            self.incomplete.add(b.result)
            wake[0] = True
        if sticky:
            st.sticky_bytes += (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) + 8
            if st.sticky_bytes >= self.batch_size:
                st.sticky = -1
        return p

    cdef int _append_open(self, _TopicState st, int32_t p, int64_t ts, const uint8_t *kptr, int64_t klen,
                          const uint8_t *vptr, int64_t vlen, Py_ssize_t nh) except -1:
        """Appends to partition p's open batch: APPENDED; FILLED when the batch is full
        (it is closed for appends: the next record starts a new one); NO_BATCH;
        NEED_GROWTH when the batch must grow first and the pool has not the bytes yet
        (``last_need`` is set)."""
        cdef ProducerBatch b = st.open_batches[p]
        cdef int appended = 0
        cdef kp_status kst
        if b is None:
            return NO_BATCH
        kst = b.append(ts, kptr, klen, vptr, vlen, self._scratch.items, <size_t>nh, &appended)
        if kst == KP_ERR_FULL:
            self.last_need = b.grow_need
            return NEED_GROWTH
        if kst != KP_OK:
            raise_kp_error(kst, NULL, f"append to {st.topic}[{p}]")
        if appended:
            return APPENDED
        st.open_batches[p] = None
        return FILLED

    cdef int _too_large(self, Py_ssize_t need, Py_ssize_t index) except -1:
        """Raises RecordTooLargeError for a record of ``need`` bytes (record ``index`` of
        a send_many call, or -1): the producer checks max.request.size itself, as Java's
        does, since a broker may not (Tansu never does)."""
        if need > self.max_request_size:
            limit = f"max.request.size={self.max_request_size}"
        else:
            limit = f"buffer.memory={self.pool.total}"
        raise RecordTooLargeError(f"{'' if index < 0 else f'record {index}: '}the record is {need} bytes "
                                  f"when serialized, larger than {limit}")

    def append_many(self, str topic, values, keys=None, partition=None, timestamps=None,
                    headers=None, on_delivery=None, bint futures=False, double max_block_s=60.0):
        """Appends a whole column of records: partitioning, batching and encoding run in
        C, with no Python operation per record (unless per-record headers, callbacks or
        futures are asked for). Returns a SendManyResult; NEED_METADATA when the topic's
        partition count is unknown. Blocks only for buffer memory, up to ``max_block_s``."""
        cdef _ColumnSource vsrc = _ColumnSource(), ksrc = _ColumnSource()
        cdef Py_ssize_t n, i = 0, nh = 0, need
        cdef _TopicState st
        cdef int32_t p, np_
        cdef int32_t fixed_p = -1
        cdef int64_t ts, now, fixed_ts = -1
        cdef const uint8_t *kptr
        cdef const uint8_t *vptr
        cdef int64_t klen, vlen
        cdef ProducerBatch b
        cdef SendManyResult res
        cdef bint wake = False, per_record_headers = False
        cdef PyObject **ts_items = NULL
        cdef PyObject **hdr_items = NULL
        cdef const int64_t *ts_array = NULL
        cdef list fut_list = None
        cdef Py_ssize_t j

        if self.closed:
            raise KafkaError("cannot send: the producer is closed")
        vsrc.setup(values, "values")
        n = vsrc.n
        if n < 0:
            raise TypeError("send_many: values must be a sequence, not None")
        ksrc.setup(keys, "keys")
        if ksrc.n >= 0 and ksrc.n != n:
            raise ValueError(f"send_many: {ksrc.n} keys for {n} values")
        st = self._topics.get(topic)
        if st is None or st.num_partitions <= 0:
            vsrc.release(); ksrc.release()
            return NEED_METADATA
        np_ = st.num_partitions
        st.touched = True
        if partition is not None:
            fixed_p = _partition_in_range(_index_arg(partition, "partition", "an int or None"), np_, topic)
        # timestamps: None (now), one int for all, or one per record (sequence or int64 array)
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"send_many: on_delivery must be callable(err, metadata) or None, "
                            f"not {type(on_delivery).__name__}")
        ts_keep = None
        if timestamps is not None:
            if isinstance(timestamps, (str, bytes, bytearray, memoryview)):
                raise TypeError(f"send_many: timestamps must be an int (ms) or a sequence of them, "
                                f"not {type(timestamps).__name__}")
            if PyIndex_Check(timestamps) and getattr(timestamps, "ndim", 0) == 0:
                fixed_ts = _index_arg(timestamps, "send_many: timestamps", "an int (ms) or a sequence")
                if fixed_ts < 0:
                    raise ValueError(f"send_many: timestamps must be >= 0 (ms), got {fixed_ts}")
            elif hasattr(timestamps, "dtype") and hasattr(timestamps, "__array_interface__"):
                if timestamps.dtype.kind not in "iu" or timestamps.ndim != 1:
                    raise TypeError(f"send_many: a timestamps array must be 1-dimensional of integers "
                                    f"(ms), not {timestamps.ndim}-dimensional {timestamps.dtype}")
                ts_keep = timestamps.astype("int64", copy=False)
                if not ts_keep.flags["C_CONTIGUOUS"]:
                    ts_keep = ts_keep.copy()
                if ts_keep.shape[0] != n:
                    raise ValueError(f"send_many: {ts_keep.shape[0]} timestamps for {n} values")
                ts_array = <const int64_t *><uintptr_t>ts_keep.__array_interface__["data"][0]
                for j in range(n):
                    if ts_array[j] < 0:
                        raise ValueError(f"send_many: timestamps[{j}] must be >= 0 (ms), got {ts_array[j]}")
            else:
                ts_keep = PySequence_Fast(timestamps, b"send_many: timestamps must be an int or a sequence")
                if PySequence_Fast_GET_SIZE(ts_keep) != n:
                    raise ValueError(f"send_many: {PySequence_Fast_GET_SIZE(ts_keep)} timestamps for {n} values")
                ts_items = PySequence_Fast_ITEMS(ts_keep)
                for j in range(n):
                    if ts_items[j] != <PyObject *>None and not (type(<object>ts_items[j]) is int
                                                                and 0 <= <object>ts_items[j] < 2**63):
                        raise TypeError(f"timestamps[{j}] must be an int >= 0 (ms) or None, "
                                        f"not {<object>ts_items[j]!r}")
        # headers: None, one list for every record, or one list per record
        # A sequence of (str, bytes) pairs is one header list for every record; a sequence
        # of lists (or None) gives each record its own.
        hdr_keep = None
        hdr_all = None
        if headers is not None:
            hdr_keep = PySequence_Fast(headers, b"send_many: headers must be a sequence")
            if PySequence_Fast_GET_SIZE(hdr_keep) == 0 or isinstance(hdr_keep[0], tuple):
                hdr_all = hdr_keep
            else:
                if PySequence_Fast_GET_SIZE(hdr_keep) != n:
                    raise ValueError(f"send_many: {PySequence_Fast_GET_SIZE(hdr_keep)} header lists for {n} values")
                per_record_headers = True
                hdr_items = PySequence_Fast_ITEMS(hdr_keep)
        self._check_many(vsrc, ksrc, n, hdr_all, hdr_items)
        res = SendManyResult(n)
        # Per partition, the run of this call's records in its current batch: they are
        # contiguous there while the lock is held, so each batch gets one range.
        cdef PyObject **run_batch = <PyObject **>calloc(np_, sizeof(PyObject *))
        cdef Py_ssize_t *run_first = <Py_ssize_t *>calloc(np_, sizeof(Py_ssize_t))
        cdef Py_ssize_t *run_count = <Py_ssize_t *>calloc(np_, sizeof(Py_ssize_t))
        if run_batch == NULL or run_first == NULL or run_count == NULL:
            free(run_batch); free(run_first); free(run_count)
            raise MemoryError()
        if futures:
            fut_list = []
            res.futures = fut_list
        deadline = time.monotonic() + max_block_s
        try:
            while i < n:
                need = 0
                self._acquire()
                try:
                    now = now_ms()
                    if hdr_all is not None:
                        # The scratch is shared: other appends may have used it while unlocked.
                        nh = self._scratch.fill(hdr_all, 0)
                    while i < n:
                        column_get(&vsrc.col, i, &vptr, &vlen)
                        column_get(&ksrc.col, i, &kptr, &klen)
                        if ts_array != NULL:
                            ts = ts_array[i]
                        elif ts_items != NULL:
                            ts = <object>ts_items[i] if ts_items[i] != <PyObject *>None else now
                        elif fixed_ts >= 0:
                            ts = fixed_ts
                        else:
                            ts = now
                        if per_record_headers:
                            nh = self._scratch.fill(<object>hdr_items[i], i) if hdr_items[i] != <PyObject *>None else 0
                        p = self._place(st, fixed_p, ts, kptr, klen, vptr, vlen, nh, now, &wake)
                        if p < 0:
                            need = self.last_need
                            break           # wait for memory outside the lock
                        need = 0
                        b = st.open_batches[p]
                        if run_batch[p] == <PyObject *>b:
                            run_count[p] += 1
                        else:
                            if run_batch[p] != NULL:
                                (<ProducerBatch>run_batch[p]).result.add_bulk(res, run_first[p], run_count[p])
                            run_batch[p] = <PyObject *>b
                            run_first[p] = b.w.count - 1
                            run_count[p] = 1
                        if on_delivery is not None:
                            b.result.add_delivery(b.w.count - 1, ts, on_delivery)
                        if fut_list is not None:
                            fut_list.append(make_future(b.result, b.w.count - 1, ts))
                        i += 1
                finally:
                    # Register the open runs before the lock goes: the batches may be
                    # drained (and completed) as soon as it is released.
                    for p in range(np_):
                        if run_batch[p] != NULL:
                            (<ProducerBatch>run_batch[p]).result.add_bulk(res, run_first[p], run_count[p])
                            run_batch[p] = NULL
                    self._release()
                if wake and self._wakeup is not None:
                    self._wakeup()
                    wake = False
                if need:
                    # Wait for a quarter of the pool, not just one batch: resuming at the first
                    # freed batch would retake the GIL at once and starve the I/O thread again.
                    self.pool.wait_available(max(need, self.pool.total // 4),
                                             max(0.0, deadline - time.monotonic()))
        except BaseException as exc:
            # Records not appended are failed through the result, never silently dropped;
            # the records before them are queued: the exception carries the result.
            if i < n:
                res.settle(n - i, exc)
            try:
                exc.send_many_result = res
            except AttributeError:
                pass
            raise
        finally:
            vsrc.release()
            ksrc.release()
            free(run_batch); free(run_first); free(run_count)
        return res

    cdef int _check_many(self, _ColumnSource vsrc, _ColumnSource ksrc, Py_ssize_t n, object hdr_all,
                         PyObject **hdr_items) except -1:
        """Checks send_many's headers (types) and record sizes before anything is queued,
        so a bad record fails the whole call. A private scratch: the shared one belongs
        to the lock holder. Sizes are checked one by one only when the longest key, value
        and headers together could exceed a limit."""
        cdef _HeaderScratch check = _HeaderScratch()
        cdef Py_ssize_t j, hsize = 0, hmax = 0
        cdef const uint8_t *ptr
        cdef int64_t klen, vlen
        if hdr_all is not None:
            hmax = _headers_size(check, check.fill(hdr_all, 0))
        elif hdr_items != NULL:
            for j in range(n):
                if hdr_items[j] != <PyObject *>None:
                    hsize = _headers_size(check, check.fill(<object>hdr_items[j], j))
                    if hsize > hmax:
                        hmax = hsize
        if _record_need(ksrc.max_len, vsrc.max_len, hmax) <= min(self.max_request_size, self.pool.total):
            return 0
        for j in range(n):
            column_get(&vsrc.col, j, &ptr, &vlen)
            column_get(&ksrc.col, j, &ptr, &klen)
            if hdr_items != NULL:
                hsize = 0 if hdr_items[j] == <PyObject *>None else \
                    _headers_size(check, check.fill(<object>hdr_items[j], j))
            else:
                hsize = hmax
            if _record_need(klen, vlen, hsize) > min(self.max_request_size, self.pool.total):
                self._too_large(_record_need(klen, vlen, hsize), j)
        return 0

    cdef int32_t _pick_sticky(self, _TopicState st) except -1:
        cdef int32_t p
        if self._choose_sticky is None:
            return (st.sticky + 1) % st.num_partitions if st.sticky >= 0 else 0
        p = self._choose_sticky(st.topic, st.num_partitions)
        if p < 0 or p >= st.num_partitions:
            raise ValueError(f"sticky partitioner returned {p} for {st.topic!r} with {st.num_partitions} partitions")
        return p

    # -- sender side (per poll / per batch) ---------------------------------------------

    cdef inline int64_t _backoff(self, ProducerBatch b):
        """The wait before a retried batch's next attempt (0 for a first attempt):
        what the Sender chose at reenqueue (exponential with jitter), else the
        plain exponential backoff."""
        cdef int64_t backoff
        if b.attempts <= 0:
            return 0
        if b.backoff_ms >= 0:
            return b.backoff_ms
        backoff = self.retry_backoff_ms << (b.attempts - 1 if b.attempts < 20 else 20)
        return backoff if backoff < self.retry_backoff_max_ms else self.retry_backoff_max_ms

    cdef list _heads(self, leader_of, muted, set unknown):
        """(state, partition, deque, leader) of every partition with a queued batch that is
        not muted (the lock is held). Partitions whose leader is unknown are skipped and
        their topic added to ``unknown``."""
        cdef list out = []
        cdef _TopicState st
        cdef int32_t p
        for st in self._topics.values():
            for p in range(st.num_partitions):
                q = st.queues[p]
                if not q or (muted is not None and (st.topic, p) in muted):
                    continue
                leader = leader_of(st.topic, p)
                if leader is None or leader < 0:
                    unknown.add(st.topic)
                    continue
                out.append((st, p, q, leader))
        return out

    def ready(self, leader_of, int64_t now, muted=None):
        """Java's ready(): returns (ready_node_ids, next_check_delay_ms, unknown_leader_topics).
        ``leader_of(topic, partition)`` -> node id or -1; ``muted`` a set of (topic, partition)
        that must not be drained now."""
        cdef set ready_nodes = set()
        cdef set unknown = set()
        cdef int64_t next_delay = 1 << 40
        cdef _TopicState st
        cdef ProducerBatch first
        cdef int32_t p
        cdef int64_t waited, time_to_wait, left
        cdef bint exhausted = self.pool.waiters > 0
        cdef bint full, backing_off
        self._acquire()
        try:
            for st, p, q, leader in self._heads(leader_of, muted, unknown):
                if leader in ready_nodes:
                    continue
                first = q[0]
                waited = now - first.last_attempt_ms
                backing_off = first.attempts > 0
                time_to_wait = self._backoff(first) if backing_off else self.linger_ms
                full = len(q) > 1 or first.closed or st.open_batches[p] is not first
                if waited >= time_to_wait or (not backing_off and (full or exhausted or self.closed
                                                                    or self.flushes_in_progress > 0)):
                    ready_nodes.add(leader)
                else:
                    left = time_to_wait - waited
                    if left < next_delay:
                        next_delay = left
        finally:
            self._release()
        return ready_nodes, next_delay, unknown

    def drain(self, leader_of, set nodes, Py_ssize_t max_request_size, int64_t now, muted=None):
        """Java's drain(): for each ready node, takes at most one batch from each partition
        it leads until ``max_request_size``, starting one partition further each call (as
        Java's drainIndex) so that a full request does not always leave the same partitions
        behind. Returns {node: [ProducerBatch]}; batches come out closed (compressed) but
        not finished."""
        cdef dict out = {}
        cdef _TopicState st
        cdef ProducerBatch first
        cdef int32_t p
        cdef Py_ssize_t size, i, k, start
        cdef dict sizes = {}
        cdef list heads
        self._acquire()
        try:
            heads = self._heads(leader_of, muted, set())
            k = len(heads)
            start = self._drain_index % k if k else 0
            self._drain_index += 1
            for i in range(k):
                st, p, q, leader = heads[(start + i) % k]
                if leader not in nodes:
                    continue
                first = q[0]
                if first.attempts > 0 and now - first.last_attempt_ms < self._backoff(first):
                    continue
                size = sizes.get(leader, 0)
                if size and size + <Py_ssize_t>first.w.buf.len > max_request_size:
                    continue
                q.popleft()
                if st.open_batches[p] is first:
                    st.open_batches[p] = None
                sizes[leader] = size + <Py_ssize_t>first.w.buf.len
                first.drained_ms = now
                out.setdefault(leader, []).append(first)
        finally:
            self._release()
        # Compression runs outside the lock: appends to other partitions go on meanwhile.
        for batches in out.values():
            for b in batches:
                (<ProducerBatch>b).close()
        return out

    def reenqueue(self, ProducerBatch batch, int64_t now, int64_t backoff_ms=-1):
        """Puts a batch being retried back at the head of its partition's deque,
        keeping sequence order among retried batches (Java's insertInSequenceOrder).
        It is not sent again before ``backoff_ms`` (default: exponential, no jitter)."""
        cdef _TopicState st
        cdef int i
        batch.attempts += 1
        batch.last_attempt_ms = now
        batch.backoff_ms = backoff_ms
        self._acquire()
        try:
            st = self._topics[batch.topic]
            q = st.queues[batch.partition]
            if batch.base_sequence >= 0:
                i = 0
                for other in q:
                    if (<ProducerBatch>other).base_sequence < 0 or (<ProducerBatch>other).base_sequence > batch.base_sequence:
                        break
                    i += 1
                q.insert(i, batch)
            else:
                q.appendleft(batch)
        finally:
            self._release()

    def expired(self, int64_t now, int64_t delivery_timeout_ms):
        """Removes and returns batches (not in flight) older than delivery.timeout.ms."""
        cdef list out = []
        cdef _TopicState st
        cdef ProducerBatch b
        cdef int32_t p
        self._acquire()
        try:
            for st in self._topics.values():
                for p in range(st.num_partitions):
                    q = st.queues[p]
                    while q:
                        b = q[0]
                        if now - b.created_ms < delivery_timeout_ms:
                            break
                        q.popleft()
                        if st.open_batches[p] is b:
                            st.open_batches[p] = None
                        out.append(b)
        finally:
            self._release()
        return out

    def abort_all(self):
        """Removes and returns every queued batch (close with timeout, fatal errors)."""
        cdef list out = []
        cdef _TopicState st
        cdef int32_t p
        self._acquire()
        try:
            for st in self._topics.values():
                for p in range(st.num_partitions):
                    out.extend(st.queues[p])
                    st.queues[p].clear()
                    st.open_batches[p] = None
        finally:
            self._release()
        return out

    def take_touched(self):
        """Topics appended to since the last call (the Sender keeps them alive in the
        metadata: Java touches a topic on every send, so a busy topic never expires)."""
        cdef list out = []
        cdef _TopicState st
        for st in list(self._topics.values()):
            if st.touched:
                st.touched = False
                out.append(st.topic)
        return out

    def track(self, *results):
        for r in results:
            self.incomplete.add(r)

    def untrack(self, BatchResult result):
        self.incomplete.discard(result)

    def reset_sequences(self):
        """Forgets every queued batch's sequence number (a new producer id numbers
        them again, in queue order). Returns how many were reset."""
        cdef Py_ssize_t n = 0
        cdef _TopicState st
        cdef ProducerBatch b
        self._acquire()
        try:
            for st in self._topics.values():
                for q in st.queues:
                    for b in q:
                        if b.base_sequence >= 0:
                            b.base_sequence = -1
                            n += 1
        finally:
            self._release()
        return n

    def queued_batches(self):
        cdef Py_ssize_t n = 0
        cdef _TopicState st
        for st in list(self._topics.values()):
            for q in st.queues:
                n += len(q)
        return n

    def queue_sizes(self, str topic):
        """Queued batch count per partition (for the adaptive partitioner)."""
        st = self._topics.get(topic)
        if st is None:
            return []
        return [len(q) for q in (<_TopicState>st).queues]

    def topics(self):
        return list(self._topics)


# ---- the send() fast path ------------------------------------------------------------

# Bumped in a forked child: producers compare it instead of calling os.getpid()
# (a system call, ~200 ns) on every send().
cdef long _fork_generation = 0


def _after_fork_in_child():
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_generation():
    return _fork_generation


cdef class SendPath:
    """``Producer.send`` without Python frames: straight into the accumulator when
    nothing needs Python (no serializer, no custom partitioner, metadata known,
    memory free, same process); otherwise ``slow(...)`` handles the record."""
    cdef RecordAccumulator acc
    cdef object slow
    cdef long generation
    cdef bint needs_python

    def __cinit__(self, RecordAccumulator acc, slow, bint needs_python):
        self.acc = acc
        self.slow = slow
        self.needs_python = needs_python
        self.generation = _fork_generation

    def send(self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None,
             on_delivery=None):
        """Queues one record and returns its future; see Producer.send."""
        cdef object fut
        if self.needs_python or self.generation != _fork_generation or type(topic) is not str:
            return self.slow(topic, value, key, partition, timestamp_ms, headers, on_delivery, None)
        fut = self.acc.append(topic, partition, key, value, timestamp_ms, headers, on_delivery)
        if fut is NEED_METADATA or fut is NEED_MEMORY:
            return self.slow(topic, value, key, partition, timestamp_ms, headers, on_delivery, fut)
        return fut
