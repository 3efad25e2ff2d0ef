# Part of the kproducer._core extension (included by _core.pyx): the completion of a batch and of its records (Java's ProduceRequestResult, FutureRecordMetadata).

cdef extern from *:
    """
    /* A RecordMetadata (a namedtuple: a tuple subclass with no instance dict) of four
       items, allocated through its type and filled in place. kp_record_metadata_fits says
       whether the type's layout is a plain tuple's (checked once, at import). */
    static int kp_record_metadata_fits(PyObject *type) {
        PyTypeObject *t = (PyTypeObject *)type;
        return PyType_Check(type) && PyType_IsSubtype(t, &PyTuple_Type)
            && t->tp_basicsize == PyTuple_Type.tp_basicsize
            && t->tp_itemsize == PyTuple_Type.tp_itemsize && t->tp_dictoffset == 0
            && t->tp_alloc != NULL;
    }
    static PyObject *kp_record_metadata(PyObject *type, PyObject *topic, int32_t partition,
                                        int64_t offset, int64_t ts) {
        PyTypeObject *t = (PyTypeObject *)type;
        PyObject *p = PyLong_FromLong(partition), *o = NULL, *s = NULL, *md = NULL;
        if (p == NULL)
            return NULL;
        if ((o = PyLong_FromLongLong(offset)) == NULL || (s = PyLong_FromLongLong(ts)) == NULL)
            goto fail;
        /* Nothing allocates between this and the last item: no collection sees it half
           filled (a tuple's traverse skips NULL items anyway). */
        if ((md = t->tp_alloc(t, 4)) == NULL)
            goto fail;
        Py_INCREF(topic);
        PyTuple_SET_ITEM(md, 0, topic);
        PyTuple_SET_ITEM(md, 1, p);
        PyTuple_SET_ITEM(md, 2, o);
        PyTuple_SET_ITEM(md, 3, s);
        return md;
    fail:
        Py_DECREF(p);
        Py_XDECREF(o);
        Py_XDECREF(s);
        return NULL;
    }
    """
    bint kp_record_metadata_fits(object t)
    object kp_record_metadata(object t, object topic, int32_t partition, int64_t offset,
                              int64_t ts)


# RecordMetadata built in C where its layout is a tuple's (a namedtuple's always is).
cdef bint _MD_IN_C = kp_record_metadata_fits(RecordMetadata)
RECORD_METADATA_IN_C = bool(_MD_IN_C)        # (tests check it is, here)


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
        if _MD_IN_C:
            # Allocated and filled here: one per awaited or delivered record, and the
            # tuple.__new__ call below builds an argument tuple and copies it.
            return kp_record_metadata(RecordMetadata, self.topic, self.partition, offset, ts)
        # tuple.__new__ straight: the namedtuple's own __new__ is a Python function.
        return _tuple_new(RecordMetadata, (self.topic, self.partition, offset, ts))

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

    def complete(self, int64_t base_offset, int64_t log_append_time, object error, object logger=None):
        """Records the outcome and runs every callback (errors in user callbacks are
        logged on ``logger``, the producer's, or this module's: never raised)."""
        if logger is None:
            logger = log
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
            failed_md = None
            if error is not None:
                # Java's callback of a failed record: its topic and partition, offset and
                # timestamp -1. One for every callback of the batch (a tuple: immutable).
                failed_md = _tuple_new(RecordMetadata, (self.topic, self.partition, -1, -1))
            for index, ts, cb in self._deliveries:
                md = failed_md if error is not None else self.metadata_for(index, ts)
                try:
                    cb(error, md)
                except Exception:
                    logger.exception("on_delivery callback %r raised; the producer carries on", cb)
                    if error is not None:
                        # Its frames (a closure may hold an untracked future): see RecordFuture.
                        error.__traceback__ = None
            self._deliveries = None
        if self._done_callbacks:
            for index, fut, fn in self._done_callbacks:
                try:
                    fn(fut)
                except Exception:
                    logger.exception("future done-callback %r raised; the producer carries on", fn)
            self._done_callbacks = None


cdef extern from "Python.h":
    int PyObject_GC_IsTracked(object o)
    void PyObject_GC_Track(void *o)
    void PyObject_GC_UnTrack(void *o)


# Untracked by the garbage collector while nothing can make a cycle through it (make_future):
# an application holds many (a window of sends per task), and collections that walked them
# stalled event loops. A future refers only to its BatchResult; the cycles through it are a
# done-callback or on_delivery closure that holds it (broken when the batch completes, as
# every batch does, at the latest at close) and a failed record's error: one object, kept by
# the BatchResult, that takes a traceback through the frames it is raised in, and a frame
# that holds the future closes a cycle. So the future that hands out its error is tracked
# first (_exposing), and the traceback a delivery callback gives the error is dropped after
# it is logged; otherwise each such frame leaked with all its locals.
@cython.freelist(64)
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

    cdef inline bint _settled(self):
        self._follow()
        return self._result._done and self._result._redirect is None

    def done(self):
        return self._settled()

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

    cdef inline object _exposing(self):
        # The error, about to reach the application: from now on the collector may have to
        # free a cycle through this future (see above).
        if not PyObject_GC_IsTracked(self):
            PyObject_GC_Track(<void *>self)
        return self._result.error

    def result(self, timeout=None):
        if not self._settled():         # a settled one answers without _wait's Python call
            self._wait(timeout)
        if self._result.error is not None:
            raise self._exposing()
        return self._result.metadata_for(self._index, self._timestamp)

    def exception(self, timeout=None):
        if not self._settled():
            self._wait(timeout)
        if self._result.error is not None:
            return self._exposing()
        return None

    def add_done_callback(self, fn):
        """Calls ``fn(future)`` when done (at once if already done). It runs on the
        producer's I/O thread: keep it short."""
        if self._settled():
            try:
                fn(self)
            except Exception:
                log.exception("future done-callback %r raised", fn)
        else:
            self._result.add_done_callback_for(self._index, self, fn)

    def _settle(self, waiter):
        """Gives ``waiter`` (an asyncio future) this settled future's outcome."""
        cdef BatchResult r
        self._follow()
        r = self._result
        if r.error is not None:
            waiter.set_exception(self._exposing())
        else:
            waiter.set_result(r.metadata_for(self._index, self._timestamp))

    def __await__(self):
        """``await future`` in any running event loop: the RecordMetadata, or the record's
        error raised. Completions reach each loop in bulk (kproducer.aio); a settled future
        answers at once, without the loop, within the loop turn's slice (kproducer.aio)."""
        cdef BatchResult r
        if self._settled():
            r = self._result
            if _aio is not None:
                waiter = turn_check()
                if waiter is not None:           # this turn's slice is spent: the next one
                    return _record_after(waiter, self)
            if r.error is None:
                return make_ready(r.metadata_for(self._index, self._timestamp))
            return _settled_record(self)
        return _aio_module().loop_future(self).__await__()


# Made and dropped once per await of a settled future: a freelist spares the allocator.
@cython.freelist(64)
cdef class Ready:
    """An awaitable whose value is known already: awaiting it gives ``value`` without
    suspending. ``AIOProducer.send`` returns one for a record it queued at once (the value:
    its future), and a settled RecordFuture or SendManyResult gives one to ``await``. It has
    a coroutine's methods (send, throw, close), so ``asyncio.create_task`` and
    ``ensure_future`` take it as they take a coroutine."""
    cdef object value

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration(self.value)

    def send(self, value):
        raise StopIteration(self.value)

    def throw(self, typ, val=None, tb=None):
        raise typ if val is None else val

    def close(self):
        pass


cdef extern from *:
    """
    /* `await` on a Ready: its am_send slot answers its value as the await's result
       (PYGEN_RETURN), with no StopIteration made and no traceback added for it, as a
       Cython __next__ that raises would (a microsecond per send). Installed only where the
       slot exists (3.10+) and the object's layout is the one written here (a cdef class
       with no cdef methods: the field after the header). */
    typedef struct { PyObject_HEAD PyObject *value; } kp_ready_layout;
    #if PY_VERSION_HEX >= 0x030A0000
    static PySendResult kp_ready_am_send(PyObject *self, PyObject *arg, PyObject **result) {
        (void)arg;
        *result = ((kp_ready_layout *)self)->value;
        Py_INCREF(*result);
        return PYGEN_RETURN;
    }
    static int kp_ready_install(PyObject *o) {
        PyTypeObject *t = (PyTypeObject *)o;
        if (t->tp_as_async == NULL || t->tp_basicsize != (Py_ssize_t)sizeof(kp_ready_layout))
            return 0;
        t->tp_as_async->am_send = kp_ready_am_send;
        PyType_Modified(t);
        return 1;
    }
    #else
    static int kp_ready_install(PyObject *o) { (void)o; return 0; }
    #endif
    """
    int kp_ready_install(object t)


# True where awaiting a Ready goes through its am_send slot (tests check it does here).
READY_AM_SEND = bool(kp_ready_install(Ready))


cdef inline Ready make_ready(value):
    cdef Ready r = Ready.__new__(Ready)
    r.value = value
    return r


def _settled_record(RecordFuture f):
    """A settled RecordFuture's outcome, as ``__await__``'s iterator: no suspension (the
    never-taken ``yield`` makes it a generator; one after the return was unreachable code to
    Cython, a warning of every build)."""
    cdef BatchResult r = f._result
    if r.error is not None:
        raise f._exposing()
    if False:
        yield
    return r.metadata_for(f._index, f._timestamp)


def _value_after(waiter, value):
    yield from waiter.__await__()
    return value


def _record_after(waiter, RecordFuture f):
    """A settled RecordFuture's outcome once ``waiter`` (the loop's next turn) is done."""
    yield from waiter.__await__()
    return (yield from _settled_record(f))


cdef inline RecordFuture make_future(BatchResult result, int32_t index, int64_t timestamp):
    cdef RecordFuture f = RecordFuture.__new__(RecordFuture)
    PyObject_GC_UnTrack(<void *>f)      # see RecordFuture
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
    cdef list _callbacks      # add_done_callback's, until settled (then None)

    def __cinit__(self, Py_ssize_t records):
        self.records = records
        self._cond = threading.Condition(threading.Lock())
        self._callbacks = []

    cdef void settle(self, Py_ssize_t count, object error):
        if error is None:
            self.acked += count
        else:
            self.failed += count
            if self.first_error is None:
                self.first_error = error
        cdef list callbacks = None
        if self.acked + self.failed >= self.records:
            with self._cond:
                self._cond.notify_all()
                callbacks, self._callbacks = self._callbacks, None
            if callbacks:
                self._run_callbacks(callbacks)

    cdef void _run_callbacks(self, list callbacks):
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("send_many done-callback %r raised", fn)

    def add_done_callback(self, fn):
        """Calls ``fn(result)`` once every record is settled (at once if already); on the
        I/O thread: keep it short."""
        with self._cond:
            if self._callbacks is not None and self.acked + self.failed < self.records:
                self._callbacks.append(fn)
                return
        self._run_callbacks([fn])

    def _settle(self, waiter):
        """Gives ``waiter`` (an asyncio future) this settled result."""
        waiter.set_result(self)

    def __await__(self):
        """``await result`` in any running event loop: this result, once every record is
        acknowledged or failed (then ``raise_for_errors()``)."""
        if self.done():
            if _aio is not None:
                waiter = turn_check()
                if waiter is not None:           # this turn's slice is spent: the next one
                    return _value_after(waiter, self)
            return make_ready(self)
        return _aio_module().loop_future(self).__await__()

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



def failed_future(str topic, int32_t partition, object error, object on_delivery):
    """A RecordFuture failed with ``error`` (Java's doSend for a record it could not queue:
    a metadata or memory timeout, a record too large): ``on_delivery(error,
    RecordMetadata(topic, partition, -1, -1))`` runs first, here, on the calling thread.
    ``partition``: -1 when none was chosen."""
    cdef BatchResult r = BatchResult.__new__(BatchResult, topic, partition)
    cdef RecordFuture fut = make_future(r, 0, -1)
    if on_delivery is not None:
        r.add_delivery(0, -1, on_delivery)
    r.complete(-1, -1, error)
    return fut


cdef int fail_records(SendManyResult res, str topic, int32_t partition, Py_ssize_t count,
                      object error, object on_delivery, list fut_list) except -1:
    """The last ``count`` records of a send_many call fail with ``error`` without being
    queued: counted in ``res``, each one's on_delivery called and future (``fut_list``, if
    asked for) failed, as failed_future does for one record."""
    cdef BatchResult r = BatchResult.__new__(BatchResult, topic, partition)
    cdef Py_ssize_t j
    if count <= 0:
        return 0
    for j in range(count):
        if on_delivery is not None:
            r.add_delivery(<int32_t>j, -1, on_delivery)
        if fut_list is not None:
            fut_list.append(make_future(r, <int32_t>j, -1))
    r.add_bulk(res, 0, count)
    r.complete(-1, -1, error)
    return 0


def failed_send_many(str topic, Py_ssize_t count, int32_t partition, object error,
                     object on_delivery, bint futures):
    """A SendManyResult of ``count`` records that all failed with ``error`` before any was
    queued (send_many's metadata timeout), their callbacks called and futures failed."""
    cdef SendManyResult res = SendManyResult(count)
    cdef list fut_list = None
    if futures:
        fut_list = []
        res.futures = fut_list
    fail_records(res, topic, partition, count, error, on_delivery, fut_list)
    return res
