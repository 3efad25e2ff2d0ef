# Part of the kproducer._core extension (included by _core.pyx): BufferPool,
# buffer.memory as a bound on the bytes of unfinished batches (Java's BufferPool).

cdef class BufferPool:
    """``buffer.memory`` as a hard bound on the bytes of batches not yet completed.
    Java pools ByteBuffers; here the C writer mallocs and the pool keeps the count.
    A full pool blocks appenders up to ``max.block.ms`` in FIFO spirit: while anyone
    waits, the fast path does not barge in."""
    cdef readonly Py_ssize_t total
    cdef readonly Py_ssize_t used
    cdef readonly int waiters
    cdef object _cond
    cdef list _listeners      # add_listener's, until the next release
    # kproducer.turn.StepTurn.run_steps_until (None: wait on the condition only): a thread
    # that waits for memory runs the steps that free it, as flush() does, rather than leave
    # them to the watcher's grace for a thread that has just sent and then to the I/O thread.
    cdef readonly object run_steps_until
    # Java's bufferpool-wait-time-ns-total and buffer-exhausted-total: time send() and
    # send_many() spent waiting for memory (ns), and the waits that ran out of max.block.ms.
    # Counted by the waits only, never on the path that finds memory free.
    cdef readonly int64_t wait_time_ns_total
    cdef readonly int64_t exhausted

    def __cinit__(self, Py_ssize_t total, run_steps_until=None):
        self.total = total
        self.used = 0
        self.waiters = 0
        self._cond = threading.Condition(threading.Lock())
        self.run_steps_until = run_steps_until

    cdef inline bint try_reserve(self, Py_ssize_t n):
        if self.waiters == 0 and self.used + n <= self.total:
            self.used += n
            return True
        return False

    def wait_available(self, Py_ssize_t n, double timeout_s):
        """Blocks until ``n`` bytes are free (without taking them) or raises
        BufferExhaustedError (a KafkaTimeoutError) after ``timeout_s``; the caller then
        retries its append."""
        if n > self.total:
            raise KafkaError(f"a batch of {n} bytes can never fit buffer.memory={self.total}")
        started = time.perf_counter_ns()
        try:
            self._wait_available(n, timeout_s)
        finally:
            self.wait_time_ns_total += time.perf_counter_ns() - started

    def _wait_available(self, Py_ssize_t n, double timeout_s):
        deadline = time.monotonic() + timeout_s
        if self.run_steps_until is not None and self.used + n > self.total:
            self.waiters += 1       # meanwhile every batch is sendable (RecordAccumulator.ready)
            try:
                self.run_steps_until(lambda: self.used + n <= self.total, deadline)
            finally:
                self.waiters -= 1
        with self._cond:            # at once when there is room; else the timeout, or a
            self.waiters += 1       # closing Sender's steps (run_steps_until returns then)
            try:
                while self.used + n > self.total:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self.exhausted += 1
                        raise BufferExhaustedError(
                            f"failed to allocate {n} bytes of buffer.memory ({self.used} of "
                            f"{self.total} in use) within max.block.ms={int(timeout_s * 1000)}")
                    self._cond.wait(remaining)
            finally:
                self.waiters -= 1

    def add_listener(self, fn):
        """Calls ``fn()`` once, at the next release of memory, on the thread that releases
        it (an asyncio send waiting for memory wakes its loop); keep it short."""
        if self._listeners is None:
            self._listeners = []
        self._listeners.append(fn)

    def waited(self, int64_t ns, bint exhausted=False):
        """A wait for memory that did not go through wait_available (kproducer.aio's):
        ``ns`` nanoseconds, and whether it ran out of max.block.ms."""
        self.wait_time_ns_total += ns
        self.exhausted += exhausted

    cpdef void release(self, Py_ssize_t n):
        cdef list listeners
        self.used -= n
        if self.waiters:
            with self._cond:
                self._cond.notify_all()
        if self._listeners:
            listeners, self._listeners = self._listeners, None
            for fn in listeners:
                try:
                    fn()
                except Exception:
                    log.exception("buffer.memory listener %r raised", fn)

    @property
    def available(self):
        return self.total - self.used


