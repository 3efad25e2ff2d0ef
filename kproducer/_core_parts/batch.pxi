# Part of the kproducer._core extension (included by _core.pyx): one record batch being filled (Java's ProducerBatch).

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
    # Reached batch.size: sendable now; it grows towards ``limit`` while nothing drains it
    # (KIP-782), waiting for the pool's bytes as a new batch would.
    cdef public bint reached_size
    cdef readonly Py_ssize_t pool_bytes
    cdef Py_ssize_t grow_need       # bytes _grow wanted and the pool did not have
    # Its size bound, 0: none. batch.max.size; the accumulator raises it towards
    # batch_max_size_busy while every window is full, and lowers it back once one has room
    # (RecordAccumulator._append_open).
    cdef Py_ssize_t limit
    cdef int codec
    cdef object level
    cdef Compressor compressor     # the producer's C codec (None: cramjam's, or a split's own)
    cdef bint compressing          # close() compresses it, the GIL let go
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
            # The buffer is at its capacity (and the batch below its limit): grow it by
            # doubling, charging buffer.memory first. When the pool has not got the bytes
            # now, KP_ERR_FULL tells the caller to wait for them (grow_need), past batch.size
            # too: closing the batch instead would start a new one, which waits for the pool
            # all the same, and under a long round trip (the pool always short, every window
            # full) it cut the batches at whatever power of two the pool allowed, leaving
            # requests a quarter empty. When it never could grow, it is full as it is.
            st = self._grow(ts, klen, vlen, h, nh)
            if st == KP_OK:
                return kp_batch_append_inline(&self.w, <size_t>self.limit, ts, k, klen, v, vlen,
                                              h, nh, appended)
            if st == KP_ERR_FULL and self.w.count > 0 and (
                    self.pool_bytes + self.grow_need > self.pool.total):
                # Full as it is: it could never grow.
                appended[0] = 0
                return KP_OK
        return st

    cdef kp_status _grow(self, int64_t ts, int64_t klen, int64_t vlen, const kp_header *h, size_t nh):
        """Doubles the capacity (at least to fit the record, at most to ``limit`` or the one
        record) after charging the pool for the extra bytes: KP_ERR_FULL when the pool has
        no room (or others wait for it)."""
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
        cdef kp_status st
        cdef kp_error err
        if self.closed:
            return
        self.closed = True
        # The compressed section may outgrow what the pool was charged for (incompressible
        # data gains the codec's framing): it is replaced in place, uncharged, as before.
        self.w.buf.fixed = 0
        if self.codec == 0 or not self.w.count or self.w.compressed:
            return
        if kp_compress_available(self.codec):
            err.field = NULL
            err.offset = 0
            err.value = 0
            self.compressing = True
            st = compress_records(&self.w, self.codec, 0 if self.level is None else <int>self.level,
                                  self.compressor, &err.value)
            self.compressing = False
            if st != KP_OK:
                raise_kp_error(st, &err, f"compress {self.topic}[{self.partition}]'s batch", None,
                               0, None, "the library failed")
        else:
            section = memoryview(<char[:self.w.buf.len - KP_BATCH_HEADER_SIZE]>(
                <char *>self.w.buf.data + KP_BATCH_HEADER_SIZE))
            compressed = _compression.compress(self.codec, section, self.level)
            del section
            st = kp_batch_replace_records(&self.w, <const uint8_t *>PyBytes_AS_STRING(compressed),
                                          <size_t>PyBytes_GET_SIZE(compressed))
            if st != KP_OK:
                raise_kp_error(st, NULL, "batch close")

    def finish(self, int64_t producer_id, int producer_epoch, int32_t base_sequence,
               bint transactional=False):
        """Back-patches producer id, epoch and BaseSequence (and the transactional
        attribute bit) and the CRC; callable again when a retry needs new values (epoch
        bump, new producer id)."""
        if not self.closed:
            self.close()
        if self.compressing:
            raise RuntimeError("batch finish: another thread is closing the batch (compressing it)")
        if self.exports:
            raise BufferError("batch bytes are still exported; cannot re-finish")
        self.producer_id = producer_id
        self.producer_epoch = <int16_t>producer_epoch
        self.base_sequence = base_sequence
        st = kp_batch_finish(&self.w, <int16_t>(self.codec | (KP_ATTR_TRANSACTIONAL if transactional else 0)),
                             producer_id, <int16_t>producer_epoch, base_sequence)
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

    def complete(self, int64_t base_offset, int64_t log_append_time, object error, object logger=None):
        """Completes every record of the batch and gives its memory back; ``logger``: where
        an exception of a callback is logged (the producer's; None: kproducer.accumulator)."""
        self.result.complete(base_offset, log_append_time, error, logger)
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
                             int codec, object level, Compressor compressor, int64_t now,
                             BufferPool pool):
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
    b.compressor = compressor
    b.pool = pool
    b.pool_bytes = capacity
    return b


def batch_from_records(str topic, int32_t partition, list records, int codec, object level,
                       BatchResult result_owner=None):
    """Builds a closed batch from (key, value, timestamp, headers) tuples: the split
    path after MESSAGE_TOO_LARGE. Memory is not charged to the pool."""
    cdef ProducerBatch b = new_batch(topic, partition, 256, 0, codec, level, None, now_ms(), None)
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

