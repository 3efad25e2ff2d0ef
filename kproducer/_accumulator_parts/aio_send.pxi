# Part of the kproducer._accumulator extension (included by _accumulator.pyx): the asyncio
# front's send (kproducer.aio.AIOProducer.send) without a coroutine frame when the record is
# queued at once, the common case; kproducer.aio keeps every wait and says why.


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
    return make_ready(fut)
