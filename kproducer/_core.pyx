# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The producer's compiled core: everything between ``send()`` and the socket that runs per
record or without the GIL, in one extension module (asyncpg's layout: one concern per
included file, no cross-module call cost between them). What lives where:

- ``_core_parts/accumulator.pxi``: :class:`RecordAccumulator`, per-partition queues of
  batches being filled (Java's RecordAccumulator): ``append`` (one record), ``append_many``
  (a column), ``ready``/``drain`` for the Sender's step, the courier's arm/take entry points;
- ``batch.pxi``: :class:`ProducerBatch` over the C batch writer (csrc/kp_batch.h);
- ``pool.pxi``: :class:`BufferPool`, ``buffer.memory`` (Java's BufferPool);
- ``results.pxi``: :class:`RecordFuture`, :class:`BatchResult`, :class:`SendManyResult`
  (Java's ProduceRequestResult and FutureRecordMetadata);
- ``record_args.pxi``, ``columns.pxi``: the checks of one record's arguments, and the input
  columns of ``send_many`` (sequences, NumPy and Arrow arrays);
- ``partitioner.pxi``: the sticky partitioner (Java's BuiltInPartitioner);
- ``compress.pxi``: the C codecs (csrc/kp_compress.h);
- ``io_turn.pxi``: :class:`SenderTurn`, the watcher of the Sender's turn (csrc/kp_turn.h;
  kproducer.turn decides which thread runs the step);
- ``courier.pxi``: the courier, a C thread that sends lingering batches between two steps
  (csrc/kp_courier.h), and :class:`CourierRequest`, what a step takes back from it
  (kproducer.courier_handover is the Sender's side);
- ``send_path.pxi``: :class:`SendPath`, ``Producer.send`` and ``poll`` without Python frames,
  and fork detection;
- ``loop_slice.pxi``, ``aio_send.pxi``: the asyncio front's slice and send (kproducer.aio).

``send()`` runs through :meth:`RecordAccumulator.append` once per record: choose the
partition (murmur2 in C, or the topic's sticky partition), append into the partition's open
batch with the C writer, hand back a :class:`RecordFuture`. No Python function is called on
that path unless a batch fills up or the partition switches.

Thread safety: one lock per accumulator guards every queue; the pool has its own condition
for the (rare) blocking path. The lock is never held while user code (callbacks) runs. It is
a plain C mutex (csrc/kp_courier.h) because a C thread takes it too: the courier.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.unicode cimport PyUnicode_Check
from cpython.long cimport PyLong_CheckExact
from cpython.number cimport PyIndex_Check
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free, realloc

from cpython.ref cimport PyObject
cimport cython
from kproducer._cdefs.common cimport *
from kproducer._cdefs.batch cimport *
from kproducer._cdefs.buf cimport kp_buf_resize
from kproducer._cdefs.murmur2 cimport kp_murmur2_partition
from kproducer._codec cimport _HeaderScratch, raise_kp_error

include "_record_common.pxi"

import logging
import os
import random
import threading
import time
from collections import deque, namedtuple

from kproducer import compression as _compression
from kproducer.backoff import ExponentialBackoff
from kproducer.errors import (BufferExhaustedError, KafkaError, KafkaTimeoutError,
                              RecordTooLargeError)

# Callbacks that raised outside a producer's step; a step's settlements log on the
# producer's logger (BatchResult.complete's ``logger``).
log = logging.getLogger("kproducer.accumulator")

RecordMetadata = namedtuple("RecordMetadata", "topic partition offset timestamp")
RecordMetadata.__doc__ = ("Where an acknowledged record was written (offset -1 with acks=0); for a "
                          "failed record its topic and partition (-1 when none was chosen), "
                          "offset and timestamp -1.")
_tuple_new = tuple.__new__

# Sentinels append() returns when the caller must take the slow path.
NEED_METADATA = object()
NEED_MEMORY = object()

cdef enum:
    # RecordAccumulator._place: the record is larger than max.request.size or buffer.memory.
    PLACE_TOO_LARGE = -3
    # Outcomes of RecordAccumulator._append_open.
    NO_BATCH = 0
    APPENDED = 1
    FILLED = 2
    NEED_GROWTH = 3     # the open batch must grow and the pool has not the bytes yet
    REACHED = 4         # the open batch reached batch.size: sendable, still open (KIP-782)
    # A record in a batch of its own is at most its key, value and header bytes plus this
    # (csrc/kp_batch.h): what max.request.size and buffer.memory are checked against.
    RECORD_OVERHEAD = KP_BATCH_HEADER_SIZE + KP_RECORD_MAX_FRAMING
    # The smallest first capacity (and pool charge) of a new batch when batch.size is
    # larger and the pool is short: Java's default batch.size.
    BATCH_START_BYTES = 16384
    # How many new batches can start at batch.size before the pool counts as short.
    BATCH_START_SHARE = 16
    # How far short of max.request.size a batch stops growing while every window is full
    # (RecordAccumulator.batch_max_size_busy). Besides its records, client id, transactional
    # id and topic name (at most 249 bytes), a Produce request of one batch takes at most 40
    # bytes in v3-v11 (kp_produce_request_size): such a request stays within max.request.size
    # while its client and transactional ids take 735 bytes or fewer together.
    REQUEST_RESERVE = 1024
    # append_many looks at the Sender's turn every STEP_CHECK records (a power of two): a
    # few microseconds of appends between looks.
    STEP_CHECK = 1024

# No batch deadline named (RecordAccumulator._place's ``due``).
cdef int64_t NO_DUE = 1 << 62


def wall_clock_ms():
    """The clock record timestamps use (ms since the epoch)."""
    return now_ms()


# One concern per included file (the module docstring lists them).
include "_core_parts/loop_slice.pxi"
include "_core_parts/results.pxi"
include "_core_parts/record_args.pxi"
include "_core_parts/columns.pxi"
include "_core_parts/pool.pxi"
include "_core_parts/compress.pxi"
include "_core_parts/batch.pxi"
include "_core_parts/partitioner.pxi"
include "_core_parts/io_turn.pxi"
include "_core_parts/accumulator.pxi"
include "_core_parts/courier.pxi"
include "_core_parts/send_path.pxi"
include "_core_parts/aio_send.pxi"
