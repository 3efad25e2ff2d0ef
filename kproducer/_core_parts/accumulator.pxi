# Part of the kproducer._core extension (included by _core.pyx): RecordAccumulator,
# the per-partition queues of batches being filled (Java's RecordAccumulator): append and
# append_many, ready and drain for the Sender's step, and the courier's arm/take entry points
# (the courier itself is courier.pxi). Built with the turn's watcher and its step functions
# (kproducer.turn.StepTurn), which it hands to its BufferPool.

cdef class _TopicState:
    cdef str topic
    cdef int32_t num_partitions
    cdef list queues          # partition -> deque of ProducerBatch
    cdef list open_batches    # partition -> the last batch if still appendable, else None
    cdef BuiltInPartitioner partitioner   # the sticky partition for unkeyed records
    cdef bint touched         # appended to since the Sender last asked (metadata idle expiry)
    # partition -> the courier's slot in its current plan (-1: none; courier.pxi)
    cdef int32_t *courier_slot
    cdef int32_t slots
    # partition -> the accumulator's txn_generation when a batch of it was last started
    # (a partition new to the open transaction asks for a step: RecordAccumulator._place)
    cdef uint32_t *txn_mark
    cdef int32_t marks
    # partition -> how many partitions with batches queued its leader had at the last ready()
    # (0: not known): a request to that leader takes one batch of each (RecordAccumulator.
    # _append_open grows a batch past batch.max.size only to its share of a request)
    cdef int32_t *sharing
    cdef int32_t n_sharing

    def __cinit__(self, str topic, rng, bint adaptive):
        self.topic = topic
        self.num_partitions = -1
        self.queues = []
        self.open_batches = []
        self.partitioner = BuiltInPartitioner(topic, self.queues, rng, adaptive)

    def __dealloc__(self):
        free(self.courier_slot)
        free(self.txn_mark)
        free(self.sharing)

    cdef int ensure_slots(self) except -1:
        cdef int32_t *grown
        cdef int32_t p
        if self.slots >= self.num_partitions:
            return 0
        grown = <int32_t *>realloc(self.courier_slot, self.num_partitions * sizeof(int32_t))
        if grown == NULL:
            raise MemoryError()
        for p in range(self.slots, self.num_partitions):
            grown[p] = -1
        self.courier_slot = grown
        self.slots = self.num_partitions
        return 0

    cdef int first_in_txn(self, int32_t p, uint32_t generation) except -1:
        """1 the first time partition p starts a batch in transaction ``generation``."""
        cdef uint32_t *grown
        cdef int32_t q
        if p >= self.marks:
            grown = <uint32_t *>realloc(self.txn_mark, self.num_partitions * sizeof(uint32_t))
            if grown == NULL:
                raise MemoryError()
            for q in range(self.marks, self.num_partitions):
                grown[q] = 0
            self.txn_mark = grown
            self.marks = self.num_partitions
        if self.txn_mark[p] == generation:
            return 0
        self.txn_mark[p] = generation
        return 1

    cdef int set_sharing(self, int32_t p, int32_t k) except -1:
        cdef int32_t *grown
        cdef int32_t q
        if p >= self.n_sharing:
            grown = <int32_t *>realloc(self.sharing, self.num_partitions * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            for q in range(self.n_sharing, self.num_partitions):
                grown[q] = 0
            self.sharing = grown
            self.n_sharing = self.num_partitions
        self.sharing[p] = k
        return 0

    cdef inline int32_t get_sharing(self, int32_t p):
        return self.sharing[p] if p < self.n_sharing else 0


cdef class RecordAccumulator:
    """Per-partition deques of ProducerBatch; see the module docstring."""
    cdef readonly Py_ssize_t batch_size
    # KIP-782: a batch at batch_size is sendable; it takes records up to batch_max_size while
    # its leader cannot take a request yet (its ProducerBatch.limit).
    cdef readonly Py_ssize_t batch_max_size
    # And while every leader's window is full (``windows_full``), up to its share of this:
    # max.request.size less REQUEST_RESERVE, at least batch_max_size; batch_max_size itself
    # when it equals batch_size (Java's batches, or batching off: no growth at all). Over a
    # long round trip the window's bytes bound the throughput: max.in.flight requests, each
    # of at most one batch per partition; batches that stopped at batch.max.size (a quarter
    # of max.request.size at the defaults) left requests half empty on a leader of two
    # partitions while records queued behind them (_append_open).
    cdef readonly Py_ssize_t batch_max_size_busy
    cdef readonly int64_t linger_ms
    cdef readonly int codec
    cdef readonly object level
    cdef Compressor _compressor     # the steps' C codec (None: no codec, or cramjam's)
    cdef readonly BufferPool pool
    cdef readonly bint ignore_keys
    cdef dict _topics
    cdef object _last_topic       # the str of the last append, with its state: most sends
    cdef _TopicState _last_state  # go to one topic, so this skips the dict lookup
    # The lock (every queue) and the courier thread that sends lingering batches while the
    # GIL is busy elsewhere (courier.pxi).
    cdef Courier _courier
    cdef bytes _courier_client_id     # borrowed by the courier's plan while it is armed
    cdef bytes _courier_txn_id        # the same
    cdef _HeaderScratch _scratch
    cdef object _wakeup
    # The turn's watcher (kproducer.turn.StepTurn.watcher): a batch that became sendable, or
    # will be after linger.ms, names its deadline to it. Without one, ``wakeup()``.
    cdef readonly SenderTurn turn
    # The step for a thread that holds the GIL (StepTurn.step_from_app): append_many runs it
    # between chunks when the watcher wants one, as send() does.
    cdef readonly object step
    # The sticky partitioner's inputs: its random draws, adaptive partitioning, and the
    # per-node (ready_ms, drain_ms) of Java's NodeLatencyStats (written by the Sender through
    # update_node_latency, read by ready(): both on the I/O thread).
    cdef object _rng
    cdef readonly bint adaptive
    cdef readonly int64_t availability_timeout_ms
    cdef dict _node_stats
    cdef public int flushes_in_progress
    cdef public bint closed
    # The Sender's last step found every connection's window full (max.in.flight requests
    # out, or its next request waiting for its pace: NetworkClient.windows_full): a batch
    # that fills then asks for no step of its own (_notify), and one at batch.max.size keeps
    # growing towards its share of a request (_append_open).
    cdef public bint windows_full
    cdef readonly Py_ssize_t last_need
    # The size of the last record _place refused as too large (read under the lock).
    cdef Py_ssize_t too_large_need
    cdef readonly Py_ssize_t max_request_size
    cdef Py_ssize_t _drain_index
    # BatchResults of batches not yet completed: flush() waits for a snapshot of these.
    cdef readonly set incomplete
    cdef object _retry_backoff    # for reenqueue without a backoff (split batches): no jitter
    # A transactional producer's (transactions.py): the open transaction's number (0: none),
    # and whether a partition new to it asks for a step at once (none is being added):
    # AddPartitionsToTxn goes out at the transaction's first records, as Java's does (its
    # send() wakes the Sender for a new batch), not a linger.ms later, when the first
    # batches are sendable and would wait a round trip more for it.
    cdef public uint32_t txn_generation
    cdef public bint txn_add_step

    def __cinit__(self, *, Py_ssize_t batch_size=16384, Py_ssize_t batch_max_size=0, int64_t linger_ms=5, str compression="none",
                  compression_level=None, Py_ssize_t buffer_memory=33554432, bint ignore_keys=False,
                  int64_t retry_backoff_ms=100, int64_t retry_backoff_max_ms=1000,
                  Py_ssize_t max_request_size=1048576, wakeup=None, bint adaptive=True,
                  int64_t availability_timeout_ms=0, rng=None, SenderTurn turn=None, step=None,
                  run_steps_until=None):
        # ``turn``, ``step`` and ``run_steps_until``: the watcher and the two ways a thread
        # runs steps (kproducer.turn.StepTurn), None when no Sender steps (tests).
        self._courier = Courier()
        self.turn = turn
        self.step = step
        self.batch_size = batch_size
        self.batch_max_size = batch_max_size if batch_max_size > batch_size else batch_size
        self.linger_ms = linger_ms
        self.codec = _compression.codec_id(compression)
        self.level = _compression.resolve_level(compression, compression_level)
        if self.codec != 0 and kp_compress_available(self.codec):
            self._compressor = Compressor()
        self.pool = BufferPool(buffer_memory, run_steps_until)
        self.ignore_keys = ignore_keys
        self._topics = {}
        self.incomplete = set()
        self._scratch = _HeaderScratch()
        self._wakeup = wakeup
        self._rng = rng if rng is not None else random.Random()
        self.adaptive = adaptive
        self.availability_timeout_ms = availability_timeout_ms
        self._node_stats = {}
        self._retry_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, 0)
        self.max_request_size = max_request_size
        self.batch_max_size_busy = self.batch_max_size
        if self.batch_max_size > self.batch_size and max_request_size - REQUEST_RESERVE > self.batch_max_size:
            self.batch_max_size_busy = max_request_size - REQUEST_RESERVE

    cdef inline void _acquire(self):
        self._courier.lock()

    cdef inline void _release(self):
        self._courier.unlock()

    # -- metadata the hot path needs -------------------------------------------------

    def set_partition_count(self, str topic, int32_t n, available=None):
        """Called when metadata knows the topic: its partition count (partitions never
        shrink in Kafka) and the partitions that have a leader (``available``, None: all),
        among which the sticky partitioner chooses."""
        cdef _TopicState st
        self._acquire()
        try:
            st = self._topics.get(topic)
            if st is None:
                st = _TopicState(topic, self._rng, self.adaptive)
                self._topics[topic] = st
            if n > st.num_partitions:
                while len(st.queues) < n:
                    st.queues.append(deque())
                    st.open_batches.append(None)
                st.num_partitions = n
            st.partitioner.set_partitions(st.num_partitions, available)
        finally:
            self._release()

    def partition_count(self, str topic):
        st = self._topics.get(topic)
        return None if st is None or (<_TopicState>st).num_partitions < 0 else (<_TopicState>st).num_partitions

    # -- append (per record) -------------------------------------------------------

    cdef inline int _check_open(self) except -1:
        if self.closed:
            raise KafkaError("cannot send: the producer is closed")
        return 0

    def ensure_open(self):
        """Raises KafkaError once the producer is closed (``closed``): the one check every
        send path makes, here and in append/append_many."""
        self._check_open()

    cpdef object append(self, str topic, object partition, object key, object value,
                        object timestamp, object headers, object on_delivery):
        """Appends one record; returns its RecordFuture, or NEED_METADATA (partition
        count unknown, or not above ``partition``) / NEED_MEMORY (pool exhausted: reserve,
        then call again), or the RecordTooLargeError of a record that can never be sent
        (not raised: the caller fails its future with it)."""
        cdef _TopicState st
        cdef int32_t p, n
        cdef int64_t ts, now
        cdef const uint8_t *kptr = NULL
        cdef const uint8_t *vptr = NULL
        cdef int64_t klen = -1, vlen = -1
        cdef Py_ssize_t nh = 0
        cdef ProducerBatch b
        cdef int64_t due = NO_DUE
        cdef int32_t fixed_p
        cdef int64_t want_p = -1
        cdef Py_buffer kview, vview
        cdef bint khave = False, vhave = False
        cdef RecordFuture fut

        self._check_open()
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
                    if want_p >= n:
                        # Java waits for metadata that has the partition, up to max.block.ms
                        # (the topic may be growing): the caller's wait, then a failed future.
                        return NEED_METADATA
                    fixed_p = _partition_in_range(want_p, n, topic)
                p = self._place(st, fixed_p, ts, kptr, klen, vptr, vlen, nh, now, &due)
                if p < 0:
                    if p == PLACE_TOO_LARGE:
                        # Not queued: the record's error, which the caller gives to a failed
                        # future and the callback (Java's doSend), never raised from here.
                        return self._too_large_error(self.too_large_need, -1)
                    self._notify(due, now, False)      # the wait for memory needs the steps
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
        if due != NO_DUE:
            self._notify(due, now)
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
                    const uint8_t *vptr, int64_t vlen, Py_ssize_t nh, int64_t now, int64_t *due) except -2:
        """Places one record (the lock is held): its partition is ``fixed_p`` when >= 0,
        else the murmur2 of its key, else the topic's sticky partition (switched when a
        batch fills, KIP-794). Appends to that partition's open batch, or starts a new
        batch from the pool. Returns the partition, or -1 when the pool has no room for a
        new batch (``last_need`` is then the bytes to wait for), or PLACE_TOO_LARGE when the
        record is larger than max.request.size or buffer.memory (``too_large_need`` is its
        size). Lowers ``due`` (ms from now)
        to when a batch it filled (0) or started (linger.ms) becomes sendable."""
        cdef int32_t p
        cdef int appended
        cdef bint sticky = False
        cdef BuiltInPartitioner sp = st.partitioner
        cdef Py_ssize_t need = _record_need(klen, vlen, 0)
        cdef ProducerBatch b
        cdef kp_status kst
        if nh:
            need += _headers_size(self._scratch, nh)
        if need > self.max_request_size or need > self.pool.total:
            self.too_large_need = need
            return PLACE_TOO_LARGE
        if fixed_p >= 0:
            p = fixed_p
        elif klen >= 0 and not self.ignore_keys:
            p = kp_murmur2_partition(kptr, <size_t>klen, st.num_partitions)
        else:
            sticky = True
            p = sp.partition if sp.partition >= 0 else sp.next_partition()
        appended = self._append_open(st, p, ts, kptr, klen, vptr, vlen, nh)
        if appended == FILLED:
            due[0] = 0       # the full batch is sendable now
            if sticky:
                p = sp.next_partition()
                appended = self._append_open(st, p, ts, kptr, klen, vptr, vlen, nh)
        if appended == REACHED:
            due[0] = 0       # at batch.size: sendable now, growing while its leader is busy
            appended = APPENDED
        if appended == NEED_GROWTH:
            due[0] = 0       # a waiter makes every batch sendable (the pool is exhausted)
            return -1        # last_need: the bytes the batch wants to grow by
        if appended != APPENDED:
            # A new batch takes batch.size from buffer.memory, as Java's does, while the pool
            # has BATCH_START_SHARE times that free; when it has less, a 1/BATCH_START_SHARE
            # share of what is free (at least BATCH_START_BYTES), and the batch grows by
            # doubling towards batch.size, charging the pool as it grows
            # (ProducerBatch._grow): taking batch.size whatever the pool holds leaves a few
            # records per round trip when partitions x batch.size exceed buffer.memory, and
            # starting every batch small costs reallocs when nothing is short.
            if need < self.batch_size:
                need = min(self.batch_size, max(need, BATCH_START_BYTES,
                                                (self.pool.total - self.pool.used) // BATCH_START_SHARE))
            if not self.pool.try_reserve(need):
                self.last_need = need
                return -1
            b = new_batch(st.topic, p, need, self.batch_max_size, self.codec, self.level,
                          self._compressor, now, self.pool)
            kst = b.append(ts, kptr, klen, vptr, vlen, self._scratch.items, <size_t>nh, &appended)
            if kst != KP_OK:
                b.free_memory()
                raise_kp_error(kst, NULL, f"append to {st.topic}[{p}]")
            q = st.queues[p]
            if st.slots > p and st.courier_slot[p] >= 0 and kp_courier_armed(self._courier.c):
                # Its partition's queue is the courier's (first attempts only): it sends this
                # batch after those ahead of it, when linger.ms is over, if no step has.
                kp_courier_offer(self._courier.c, st.courier_slot[p], &b.w, <void *>b,
                                 kp_turn_wall_to_mono_us(now + self.linger_ms))
            q.append(b)
            st.open_batches[p] = b
            self.incomplete.add(b.result)
            if self.linger_ms < due[0]:
                due[0] = self.linger_ms
            if self.txn_generation and st.first_in_txn(p, self.txn_generation) and self.txn_add_step:
                self.txn_add_step = False
                due[0] = 0   # a step now adds the partition to the transaction
        if sticky:
            # A batch's worth went to this partition: the next unkeyed record chooses again.
            sp.produced_bytes += (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) + 8
            if sp.produced_bytes >= self.batch_size:
                sp.partition = -1
        return p

    cdef int _notify(self, int64_t due, int64_t now, bint may_wait=True) except -1:
        """A batch is sendable ``due`` ms after ``now`` (wall ms, its created_ms's clock):
        the watcher steps by then. Unless it is sendable now (it filled) and every window
        was full at the last step (``windows_full``; ``may_wait``: no thread waits for memory,
        no transaction needs the step to add a partition, and partitioner.availability.timeout.ms
        is off: its ready pass times the leaders that leave batches waiting, on every new batch
        as Java's does): a step could send it only once an answer makes room, and an answer
        brings a step (beside a send() loop that outruns the broker, such a step finds
        nothing to send)."""
        if due == NO_DUE:
            return 0
        if (due == 0 and may_wait and self.windows_full and not self.txn_generation
                and self.availability_timeout_ms <= 0):
            return 0
        if self.turn is not None:
            self.turn.due_at_wall(now + due)
        elif self._wakeup is not None:
            self._wakeup()
        return 0

    cdef int _append_open(self, _TopicState st, int32_t p, int64_t ts, const uint8_t *kptr, int64_t klen,
                          const uint8_t *vptr, int64_t vlen, Py_ssize_t nh) except -1:
        """Appends to partition p's open batch: APPENDED; REACHED when this record took it to
        batch.size (sendable now, still open up to batch.max.size); FILLED when the batch
        is full at batch.max.size, or at its share of batch_max_size_busy while every window
        is full (closed for appends: the next record starts a new one); NO_BATCH;
        NEED_GROWTH when the batch must grow first and the pool has not the bytes yet
        (``last_need`` is set)."""
        cdef ProducerBatch b = st.open_batches[p]
        cdef int appended = 0
        cdef int32_t k
        cdef kp_status kst
        if b is None:
            return NO_BATCH
        if b.w.sealed:
            # The courier sent it (the next step takes it out of the queue), or is compressing
            # it to send it, or compressed it and could not (the next step drains it).
            st.open_batches[p] = None
            return NO_BATCH
        if b.limit > self.batch_max_size and not self.windows_full:
            # It grew past batch.max.size while every window was full, and one has room now:
            # full at batch.max.size, as a batch that never grew (it is sendable already).
            b.limit = self.batch_max_size
        kst = b.append(ts, kptr, klen, vptr, vlen, self._scratch.items, <size_t>nh, &appended)
        if not appended and kst == KP_OK and b.reached_size and self.windows_full:
            # Full at batch.max.size, sendable, and no leader can take a request: it keeps
            # taking records until one can, up to its share of a request. A request to its
            # leader takes one batch of each of the leader's partitions that have some (the
            # last ready() counted them), so k of them grow to a k-th of batch_max_size_busy
            # each and go out together, in requests as full as one large batch would make
            # (past that share, a request would take fewer of them and leave the others to
            # requests of their own). Growing charges the pool, and waits for it as a new
            # batch would (ProducerBatch.append).
            k = st.get_sharing(p)
            if k > 0 and self.batch_max_size_busy // k > b.limit:
                b.limit = self.batch_max_size_busy // k
                kst = b.append(ts, kptr, klen, vptr, vlen, self._scratch.items, <size_t>nh, &appended)
        if kst == KP_ERR_FULL:
            self.last_need = b.grow_need
            return NEED_GROWTH
        if kst != KP_OK:
            raise_kp_error(kst, NULL, f"append to {st.topic}[{p}]")
        if appended:
            if not b.reached_size and <Py_ssize_t>b.w.buf.len >= self.batch_size:
                b.reached_size = True
                return REACHED
            return APPENDED
        b.w.full = 1        # takes no more records: a paced request need not wait for it
        st.open_batches[p] = None
        return FILLED

    cdef int _too_large(self, Py_ssize_t need, Py_ssize_t index) except -1:
        """Raises _too_large_error's error."""
        raise self._too_large_error(need, index)

    cdef object _too_large_error(self, Py_ssize_t need, Py_ssize_t index):
        """RecordTooLargeError for a record of ``need`` bytes (record ``index`` of a
        send_many call, or -1): the producer checks max.request.size itself, as Java's
        does, since a broker may not (Tansu never does)."""
        if need > self.max_request_size:
            limit = f"max.request.size={self.max_request_size}"
        else:
            limit = f"buffer.memory={self.pool.total}"
        return RecordTooLargeError(f"{'' if index < 0 else f'record {index}: '}the record is {need} bytes "
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
        cdef bint per_record_headers = False
        cdef int64_t due = NO_DUE
        cdef PyObject **ts_items = NULL
        cdef PyObject **hdr_items = NULL
        cdef const int64_t *ts_array = NULL
        cdef list fut_list = None
        cdef Py_ssize_t j
        cdef bint step_now = False
        cdef SenderTurn turn = self.turn
        cdef int64_t fixed_p64

        self._check_open()
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
            fixed_p64 = _index_arg(partition, "partition", "an int or None")
            if fixed_p64 >= np_:
                vsrc.release(); ksrc.release()
                return NEED_METADATA        # as append(): wait for metadata with the partition
            fixed_p = _partition_in_range(fixed_p64, np_, topic)
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
                        p = self._place(st, fixed_p, ts, kptr, klen, vptr, vlen, nh, now, &due)
                        if p == PLACE_TOO_LARGE:     # _check_many checked every size first
                            self._too_large(self.too_large_need, i)
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
                        # This loop holds the GIL and runs no bytecode, so the interpreter
                        # never makes it let go: a column of a million records would keep
                        # the I/O thread from every step (responses, the next requests)
                        # until it ends. Every STEP_CHECK records it looks at the turn, and
                        # runs a wanted step itself outside the lock.
                        if (i & (STEP_CHECK - 1)) == 0 and turn is not None:
                            # The batches' deadlines go to the watcher now, not at the end
                            # of the chunk: the step they call for is wanted meanwhile.
                            if due != NO_DUE:
                                self._notify(due, now)
                                due = NO_DUE
                            now = now_ms()
                            if turn.wanted() and self.step is not None:
                                step_now = True
                                break
                finally:
                    # Register the open runs before the lock goes: the batches may be
                    # drained (and completed) as soon as it is released.
                    for p in range(np_):
                        if run_batch[p] != NULL:
                            (<ProducerBatch>run_batch[p]).result.add_bulk(res, run_first[p], run_count[p])
                            run_batch[p] = NULL
                    self._release()
                if due != NO_DUE:
                    self._notify(due, now, not need)
                    due = NO_DUE
                if step_now or (need and turn is not None and turn.wanted() and self.step is not None):
                    # (Before a wait for memory too: the step may complete batches and free it.)
                    step_now = False
                    if not self.step():
                        # Another thread is mid-step (in its poll, without the GIL) and
                        # needs the GIL back to finish, which this loop would not give up
                        # until the column ends: wait (without the GIL) until it is done.
                        turn.wait_clear(1)
                if need:
                    # Wait for a quarter of the pool, not just one batch: resuming at the first
                    # freed batch would retake the GIL at once and starve the I/O thread again.
                    self.pool.wait_available(max(need, self.pool.total // 4),
                                             max(0.0, deadline - time.monotonic()))
        except BufferExhaustedError as exc:
            # No memory for the rest within max.block.ms: they fail as send()'s would, each
            # through the result, its callback and its future (Java's doSend); the records
            # before them are queued.
            fail_records(res, topic, fixed_p, n - i, exc, on_delivery, fut_list)
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

    # -- sender side (per poll / per batch) ---------------------------------------------

    cdef inline int64_t _backoff(self, ProducerBatch b):
        """The wait before a retried batch's next attempt (0 for a first attempt), chosen
        at reenqueue."""
        return b.backoff_ms if b.attempts > 0 else 0

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

    cdef inline int64_t _wait_left(self, _TopicState st, int32_t p, object q, int64_t now):
        """How long the head batch of partition ``p`` (deque ``q``) has yet to wait before it
        is sendable on its own; 0: now. A first attempt waits linger.ms unless it is full
        (batch.size reached, more batches behind it), memory is short, or the producer is
        flushing or closing; a retry waits its backoff, whatever else."""
        cdef ProducerBatch first = q[0]
        cdef int64_t waited = now - first.last_attempt_ms
        if first.attempts > 0:
            return max(0, self._backoff(first) - waited)
        if (waited >= self.linger_ms or len(q) > 1 or first.closed or first.reached_size
                or st.open_batches[p] is not first or self.pool.waiters > 0 or self.closed
                or self.flushes_in_progress > 0):
            return 0
        return self.linger_ms - waited

    def ready(self, leader_of, int64_t now, muted=None):
        """Java's ready(): returns (ready_node_ids, next_check_delay_ms, unknown_leader_topics).
        ``leader_of(topic, partition)`` -> node id or -1; ``muted`` a set of (topic, partition)
        that must not be drained now. A node is ready when one of its partitions' batches is
        sendable (_wait_left); the delay is the soonest wait of those that are not, on every
        node: drain() leaves them where they are."""
        cdef set ready_nodes = set()
        cdef set unknown = set()
        cdef int64_t next_delay = 1 << 40
        cdef _TopicState st
        cdef int32_t p
        cdef int64_t left
        self._acquire()
        try:
            if self.availability_timeout_ms > 0:
                # Java's partitionReady: which leaders are stalled, for the topics that
                # have unkeyed records (keyed-only topics never ask).
                for st in self._topics.values():
                    if st.partitioner.used:
                        st.partitioner.update_availability(leader_of, self._node_stats,
                                                           self.availability_timeout_ms)
            heads = self._heads(leader_of, muted, unknown)
            if self.batch_max_size_busy > self.batch_max_size:
                self._count_sharing(heads)
            for st, p, q, leader in heads:
                left = self._wait_left(st, p, q, now)
                if left == 0:
                    ready_nodes.add(leader)
                elif left < next_delay:
                    next_delay = left
        finally:
            self._release()
        return ready_nodes, next_delay, unknown

    cdef int _count_sharing(self, list heads) except -1:
        """Notes, for each partition of ``heads`` (_heads': those with batches queued, not
        muted, with a leader), how many of them its leader has: the batches a request to it
        takes (_append_open)."""
        cdef dict per_leader = {}
        cdef _TopicState st
        for st, p, q, leader in heads:
            per_leader[leader] = per_leader.get(leader, 0) + 1
        for st, p, q, leader in heads:
            st.set_sharing(p, per_leader[leader])
        return 0

    cdef inline bint _head_full(self, _TopicState st, int32_t p, object q):
        """Whether partition ``p``'s head batch takes no more records: closed at its size
        bound (``w.full``), behind another, closed, or a retry."""
        cdef ProducerBatch first = q[0]
        return (first.w.full or len(q) > 1 or first.closed or first.attempts > 0
                or st.open_batches[p] is not first)

    def drain(self, leader_of, set nodes, Py_ssize_t max_request_size, int64_t now, muted=None,
              bint lingering=False, paced=None):
        """Java's drain(): for each ready node, takes at most one batch from each partition
        it leads until ``max_request_size``, starting one partition further each call (as
        Java's drainIndex) so that a full request does not always leave the same partitions
        behind. Returns {node: [ProducerBatch]}; batches come out closed (compressed) but
        not finished.

        Unlike Java's, only batches sendable on their own (_wait_left) are taken: each
        partition lingers on its own clock, as librdkafka's do, instead of every partition
        of a node riding along with the first one ready: a broker that answers a request
        later the more partitions it holds, one connection's requests at a time (Tansu),
        delays every acknowledgement for the riders. Under load every batch is full and the
        requests are the same.
        ``lingering=True`` takes lingering batches too (a node's records failed at once);
        retries still wait for their backoff.
        ``paced``: nodes whose next request waits for its batches to fill (the Sender's pacing,
        NetworkClient.paced_until): such a node gets a request only when every batch it would
        take is full (_head_full) or they fill ``max_request_size`` between them."""
        cdef dict out = {}
        cdef _TopicState st
        cdef ProducerBatch first
        cdef int32_t p
        cdef Py_ssize_t size, i, k, start
        cdef dict sizes = {}
        cdef list heads
        self._acquire()
        try:
            self._check_disarmed()
            heads = self._heads(leader_of, muted, set())
            if paced:
                nodes = self._unpaced(heads, nodes, paced, max_request_size, now)
            k = len(heads)
            start = self._drain_index % k if k else 0
            self._drain_index += 1
            for i in range(k):
                st, p, q, leader = heads[(start + i) % k]
                if leader not in nodes:
                    continue
                first = q[0]
                if (first.attempts > 0 or not lingering) and self._wait_left(st, p, q, now) > 0:
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

    cdef set _unpaced(self, list heads, set nodes, object paced, Py_ssize_t max_request_size,
                      int64_t now):
        """``nodes`` less the ``paced`` ones whose request would not be full yet (drain)."""
        cdef dict sizes = {}
        cdef set waiting = set()
        cdef _TopicState st
        cdef ProducerBatch first
        for st, p, q, leader in heads:
            if leader not in nodes or leader not in paced:
                continue
            first = q[0]
            if self._wait_left(st, p, q, now) > 0:
                continue
            sizes[leader] = sizes.get(leader, 0) + <Py_ssize_t>first.w.buf.len
            if not self._head_full(st, p, q):
                waiting.add(leader)
        for leader, size in sizes.items():
            if size >= max_request_size:
                waiting.discard(leader)
        return nodes - waiting if waiting else nodes

    def reenqueue(self, ProducerBatch batch, int64_t now, int64_t backoff_ms=-1):
        """Puts a batch being retried back at the head of its partition's deque,
        keeping sequence order among retried batches (Java's insertInSequenceOrder).
        It is not sent again before ``backoff_ms`` (default: retry.backoff.ms doubling per
        attempt up to retry.backoff.max.ms, without jitter)."""
        cdef _TopicState st
        cdef int i
        batch.attempts += 1
        batch.last_attempt_ms = now
        batch.backoff_ms = backoff_ms if backoff_ms >= 0 else self._retry_backoff.backoff(batch.attempts - 1)
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
            self._check_disarmed()
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
            self._check_disarmed()
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

    def partitions_with_batches(self):
        """(topic, partition) of every non-empty queue (the transactional producer adds
        these to its transaction before their batches may be drained)."""
        cdef list out = []
        cdef _TopicState st
        cdef int32_t p
        self._acquire()
        try:
            for st in self._topics.values():
                for p in range(st.num_partitions):
                    if st.queues[p]:
                        out.append((st.topic, p))
        finally:
            self._release()
        return out

    def queue_stats(self):
        """``[(topic, partition, batches, records, bytes)]`` of every non-empty queue: the
        batches not sent yet, read under the lock (the statistics' ``msgq_cnt`` and
        ``msgq_bytes``; nothing is counted per record)."""
        cdef list out = []
        cdef _TopicState st
        cdef ProducerBatch b
        cdef int32_t p
        cdef Py_ssize_t records, size
        self._acquire()
        try:
            for st in self._topics.values():
                for p in range(st.num_partitions):
                    q = st.queues[p]
                    if not q:
                        continue
                    records = size = 0
                    for b in q:
                        records += b.w.count
                        size += <Py_ssize_t>b.w.buf.len
                    out.append((st.topic, p, len(q), records, size))
        finally:
            self._release()
        return out

    def queued_batches(self):
        cdef Py_ssize_t n = 0
        cdef _TopicState st
        for st in list(self._topics.values()):
            for q in st.queues:
                n += len(q)
        return n

    def update_node_latency(self, node, int64_t now, bint drained):
        """Java's updateNodeLatencyStats, called by the Sender for every node ready() named:
        ``drained`` when the node could take its batches. ready_ms - drain_ms is then how long
        the node has left ready batches waiting; past partitioner.availability.timeout.ms its
        partitions get no new unkeyed records. Kept only while that timeout is on."""
        if self.availability_timeout_ms <= 0:
            return
        last = self._node_stats.get(node)
        # One tuple per node, replaced whole: a reader never sees half an update.
        self._node_stats[node] = (now, now if drained or last is None else last[1])

    def node_latency(self):
        """{node: (ready_ms, drain_ms)}: a copy of the figures the availability check reads."""
        return dict(self._node_stats)

    # -- the courier (courier.pxi) ------------------------------------------------------

    def arm_courier(self, selector_io, dict nodes, dict leaders, muted, next_seq, int64_t producer_id,
                    int producer_epoch, int acks, int32_t timeout_ms, bytes client_id, *,
                    only=None, bytes transactional_id=None, dict pacing=None):
        """The Sender, as its step ends: until the next step, the courier may send Produce
        requests to ``nodes`` ({node_id: (connection id, Produce version, first reserved
        correlation id, ids reserved, max.in.flight, [(correlation id, api key, version) of
        the requests in flight, in order]): it reads their responses, and its own}), holding
        the queued batches of the partitions they lead
        (``leaders``: {topic: [leader node id by partition]}) as they become sendable;
        ``selector_io`` is Selector.courier_io(), ``next_seq`` {(topic, partition):
        BaseSequence} (None without idempotence). A transactional producer names its
        ``transactional_id`` and the partitions its transaction has added (``only``): the
        others wait for AddPartitionsToTxn, which a step sends. ``pacing`` {node_id: (pace µs,
        when its last Produce request in flight went out: µs, -1)}: the courier paces those
        nodes' requests as the step does (kp_courier.h)."""
        self._acquire()
        try:
            _courier_arm(self, selector_io, nodes, leaders, muted, only, next_seq, producer_id,
                         producer_epoch, acks, timeout_ms, client_id, transactional_id, pacing)
        finally:
            self._release()

    def take_courier_sends(self, int64_t now):
        """The Sender, as its step begins: disarms the courier and returns what it sent and
        what it read, one :class:`CourierRequest` per request in the order it wrote them
        (courier.pxi), the batches out of their queues, finished as they went out."""
        self._acquire()
        try:
            return _courier_take(self, now)
        finally:
            self._release()

    @property
    def courier_sent(self):
        """Produce requests the courier wrote."""
        return self._courier.sent

    @property
    def courier_answered(self):
        """Responses the courier read and found good (the step's requests' and its own)."""
        return self._courier.answered

    @property
    def courier_armed(self):
        """Whether the courier may send now (between a step's end and the next step)."""
        return kp_courier_armed(self._courier.c) != 0

    cdef inline int _check_disarmed(self) except -1:
        # Only a step removes batches from the queues, after take_courier_sends.
        if kp_courier_armed(self._courier.c):
            raise RuntimeError("the courier is armed: take_courier_sends() comes first")
        return 0

    def partitioner(self, str topic):
        """The topic's BuiltInPartitioner (None before its metadata is known)."""
        st = self._topics.get(topic)
        return None if st is None else (<_TopicState>st).partitioner

    def topics(self):
        return list(self._topics)

