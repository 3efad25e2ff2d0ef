# Part of the kproducer._accumulator extension (included by _accumulator.pyx): the asyncio
# front's send (kproducer.aio.AIOProducer.send) without a coroutine frame when the record is
# queued at once, the common case; kproducer.aio keeps every wait and says why.


cdef class QueuedSend:
    """What ``AIOProducer.send`` returns for a record it queued at once: awaiting it gives the
    record's future without suspending. It has a coroutine's methods (send, throw, close),
    so ``asyncio.create_task`` and ``ensure_future`` take it as they take a coroutine."""
    cdef object fut

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration(self.fut)

    def send(self, value):
        raise StopIteration(self.fut)

    def throw(self, typ, val=None, tb=None):
        raise typ if val is None else val

    def close(self):
        pass


cdef extern from *:
    """
    /* `await` on a QueuedSend: its am_send slot answers the record's future as the await's
       value (PYGEN_RETURN), with no StopIteration made and no traceback added for it, as a
       Cython __next__ that raises would (a microsecond per send). Installed only where the
       slot exists (3.10+) and the object's layout is the one written here (a cdef class
       with no cdef methods: the field after the header). */
    typedef struct { PyObject_HEAD PyObject *fut; } kp_queued_send_layout;
    #if PY_VERSION_HEX >= 0x030A0000
    static PySendResult kp_queued_send_am_send(PyObject *self, PyObject *arg, PyObject **result) {
        (void)arg;
        *result = ((kp_queued_send_layout *)self)->fut;
        Py_INCREF(*result);
        return PYGEN_RETURN;
    }
    static int kp_queued_send_install(PyObject *o) {
        PyTypeObject *t = (PyTypeObject *)o;
        if (t->tp_as_async == NULL || t->tp_basicsize != (Py_ssize_t)sizeof(kp_queued_send_layout))
            return 0;
        t->tp_as_async->am_send = kp_queued_send_am_send;
        PyType_Modified(t);
        return 1;
    }
    #else
    static int kp_queued_send_install(PyObject *o) { (void)o; return 0; }
    #endif
    """
    int kp_queued_send_install(object t)


# True where awaiting a QueuedSend goes through its am_send slot (tests check it does here).
QUEUED_SEND_FAST = bool(kp_queued_send_install(QueuedSend))


# kproducer.aio's marker for "nothing tried yet" (AIOProducer._send's ``why``).
UNTRIED = object()


def aio_send(self, topic, value=None, key=None, partition=None, timestamp_ms=None,
             headers=None, on_delivery=None):
    """Queues one record and returns an awaitable of its future (await that for the
    RecordMetadata). A record queued at once is queued by the call itself; the waits of the
    others (the topic's metadata, room in buffer memory, the loop's next turn once this turn's
    sends had their slice: cancelling that wait queues nothing) are awaited, never blocking
    the loop."""
    cdef object p = self._producer
    cdef object waiter, t, fut
    cdef QueuedSend q
    if p is None:
        return self._send(None, UNTRIED, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery)                          # raises: not started
    waiter = turn_check()
    t = self._turn
    if waiter is not None or (t is not None and bound_loop_c() is not t.loop):
        return self._send(waiter, UNTRIED, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery)
    fut = (<SendPath?>p._send_path).try_queue(topic, value, key, partition, timestamp_ms,
                                               headers, on_delivery)
    if fut is None or fut is NEED_MEMORY or fut is NEED_METADATA:
        return self._send(None, fut, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery)
    q = QueuedSend.__new__(QueuedSend)
    q.fut = fut
    return q
