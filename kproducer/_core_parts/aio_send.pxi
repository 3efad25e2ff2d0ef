# Part of the kproducer._core extension (included by _core.pyx): the asyncio
# front's send (kproducer.aio.AIOProducer.send) without a coroutine frame when the record is
# queued at once, the common case; kproducer.aio keeps every wait and says why.


# kproducer.aio's marker for "nothing tried yet" (AIOProducer._send's ``why``).
UNTRIED = object()


cdef class AIOSendState:
    """What ``aio_send`` reads per call, in C fields (one attribute lookup of the
    AIOProducer, not four): the started producer's SendPath and the loop its Sender's steps
    run on (None: no loop turn). kproducer.aio keeps it current as the producer starts,
    follows a loop and stops (None then: every send takes the Python path)."""
    cdef SendPath path
    cdef object loop

    def __cinit__(self, SendPath path not None, loop):
        self.path = path
        self.loop = loop


def aio_send(self, topic, value=None, key=None, partition=None, timestamp_ms=None,
             headers=None, on_delivery=None):
    """Queues one record and returns an awaitable of its future (await that for the
    RecordMetadata). A record queued at once is queued by the call itself; the waits of the
    others (the topic's metadata, room in buffer memory, the loop's next turn once this turn's
    sends had their slice: cancelling that wait queues nothing) are awaited, never blocking
    the loop."""
    cdef object state = self._send_state
    cdef AIOSendState st
    cdef LoopSlice s
    cdef object waiter, fut
    if state is None:                                           # not started, or stopped
        return self._send(None, UNTRIED, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery)
    st = <AIOSendState?>state
    s = current_slice()
    waiter = slice_check(s)
    if waiter is not None or (st.loop is not None and (s is None or s.loop is not st.loop)):
        return self._send(waiter, UNTRIED, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery)
    fut = st.path.try_queue(topic, value, key, partition, timestamp_ms, headers, on_delivery)
    if type(fut) is not RecordFuture:      # a wait, Python, or a record that failed
        return self._send(None, fut, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery)
    return make_ready(fut)
