"""asyncio: awaitable sends that never block the event loop.

::

    from kproducer.aio import AIOProducer

    async with AIOProducer(bootstrap_servers="broker:9092") as p:     # or await p.start()
        fut = await p.send("events", b"value", key=b"k")     # queued; the loop never blocks
        md = await fut                                         # RecordMetadata, or raises
        md = await p.send_and_wait("events", b"v")             # both in one
        res = await p.send_many("events", values)              # SendManyResult
        await res                                              # every record settled
        await p.flush()

The shape is aiokafka's (``start``/``stop``/``send``/``send_and_wait``/``flush``), over the
same compiled producer as :class:`kproducer.Producer`, whose futures (``send()``'s
RecordFuture and ``send_many()``'s SendManyResult) are awaitable from any running loop.

- ``send`` queues the record without blocking: the compiled path first; when the record needs
  a wait (the topic's metadata, room in ``buffer.memory``) or Python (serializers, a custom
  partitioner, a transaction's checks), the blocking ``Producer.send`` runs in the loop's
  default executor and is awaited, so ``max.block.ms`` and every error are as in the sync API.
- ``send`` keeps the loop's turns short whatever the number of sending tasks: the sends of one
  turn of the loop share a slice of ``_SLICE_S`` (2 ms); a send that finds the slice spent
  waits, with nothing queued yet, until the loop has run everything else that was ready (its
  timers, its I/O, other tasks), then queues its record. ``await p.send(...)`` rarely
  suspends otherwise (its record is queued at once), so without the slice a hundred tasks
  each sending a hundred records per turn would hold the loop a hundred milliseconds.
- Completions reach a loop in bulk: the I/O thread appends settled futures to the loop's
  queue and wakes the loop (``call_soon_threadsafe``) only when the queue was empty, so one
  wake-up serves every record settled until the loop runs. Several loops in several threads
  each get their own completions.
- Cancelling a task that awaits a record's future does not unsend the record: it is already
  queued and ends acknowledged or failed like any other (its callbacks still run). Cancelling
  ``await p.send(...)`` while that send waits (for metadata or memory, in the executor) does
  not stop the blocking send either: the record is queued once it can be, and ends
  acknowledged or failed once; only the caller no longer gets its future.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import sys
import threading
import time
import weakref

from kproducer import _accumulator
from kproducer.producer import Producer

__all__ = ["AIOProducer", "loop_future"]

_clock = time.perf_counter
_running_loop = asyncio.get_running_loop
_get_running_loop = asyncio._get_running_loop
_DRAIN_AT_ONCE = 512
# The loop time the sends of one turn of the loop may take together (steps of the Sender
# that a send runs included) before later sends wait for the loop's next turn.
_SLICE_S = 0.002


class _LoopQueue:
    """Settled futures waiting for one event loop; drained by one callback per wake-up."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.thread = threading.get_ident()      # the loop's (loop_future runs in it)
        self.items: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.scheduled = False
        # The sends' slice of the loop's turn (send_slot): when it ends (0.0: none begun)
        # and the sends waiting for the next one (a future each: one waiter's cancellation
        # must not cancel the others).
        self.slice_end = 0.0
        self.slice_waiters: list = []

    def push(self, waiter: asyncio.Future, source) -> None:      # any thread
        self.items.append((waiter, source))
        with self.lock:
            if self.scheduled:
                return
            self.scheduled = True
        try:
            if threading.get_ident() == self.thread:
                # Settled on the loop's own thread (a step its send() ran): no wake-up.
                self.loop.call_soon(self.drain)
            else:
                self.loop.call_soon_threadsafe(self.drain)
        except RuntimeError:        # the loop is closed: nobody is waiting any more
            pass

    def drain(self) -> None:                                       # the loop's thread
        items = self.items
        # At most _DRAIN_AT_ONCE per callback, then the loop's other work: a full queue
        # (the I/O thread settles whole batches) must not hold the loop for long.
        for _ in range(min(len(items), _DRAIN_AT_ONCE)):
            waiter, source = items.popleft()
            if waiter.done():       # cancelled: the record goes on regardless
                continue
            if hasattr(source, "result"):
                exc = source.exception(0)
                if exc is not None:
                    waiter.set_exception(exc)
                else:
                    waiter.set_result(source.result(0))
            else:                   # a SendManyResult: settled as a whole
                waiter.set_result(source)
        with self.lock:
            if items:
                self.loop.call_soon(self.drain)      # still scheduled: no wake-up needed
            else:
                self.scheduled = False

    def begin_slice(self, now: float) -> None:          # the loop's thread
        self.slice_end = now + _SLICE_S
        # The next turn of the loop ends the slice (and lets its waiters send): it runs
        # after every handle that was ready when the slice began.
        self.loop.call_soon(self.end_slice)

    def end_slice(self) -> None:                           # the loop's thread
        self.slice_end = 0.0
        waiters = self.slice_waiters
        if waiters:
            self.slice_waiters = []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def slice_waiter(self) -> asyncio.Future:             # the loop's thread
        w = self.loop.create_future()
        self.slice_waiters.append(w)
        return w


_queues: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue]" = weakref.WeakKeyDictionary()
_queues_lock = threading.Lock()


def _queue(loop) -> _LoopQueue:
    q = _queues.get(loop)
    if q is None:
        with _queues_lock:
            q = _queues.get(loop)
            if q is None:
                q = _queues[loop] = _LoopQueue(loop)
    return q


class _Local(threading.local):
    lq = None       # the _LoopQueue of the loop that ran last in this thread


_local = _Local()


def turn_waiter():
    """Where kproducer's awaitables take part in the loop turn's slice (``send``, and
    awaiting a settled future): None while the running loop's current turn has slice left
    (a slice begins with the turn's first such await), else a future to await first, done
    at the loop's next turn; None outside a running loop."""
    loop = _get_running_loop()
    if loop is None:
        return None
    lq = _local.lq
    if lq is None or lq.loop is not loop:
        lq = _local.lq = _queue(loop)
    if lq.slice_waiters:
        return lq.slice_waiter()        # behind those already waiting
    now = _clock()
    if lq.slice_end == 0.0:
        lq.begin_slice(now)
        return None
    if now >= lq.slice_end:
        return lq.slice_waiter()
    return None


def loop_future(source) -> asyncio.Future:
    """An asyncio future of the running loop that settles with ``source`` (a RecordFuture
    or a SendManyResult)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    source.add_done_callback(functools.partial(_queue(loop).push, waiter))
    return waiter


class AIOProducer:
    """A producer for asyncio applications; see the module docstring. Configuration as
    :class:`kproducer.Producer` (a dict of Kafka's dotted names and/or keywords)."""

    def __init__(self, config=None, /, **settings):
        self._config, self._settings = config, settings
        self._producer: Producer | None = None

    @property
    def producer(self) -> Producer:
        """The underlying (synchronous, thread-safe) Producer."""
        if self._producer is None:
            from kproducer.errors import KafkaError
            raise KafkaError("the AIOProducer is not started: await start() (or use 'async with')")
        return self._producer

    async def start(self) -> None:
        if self._producer is None:
            self._producer = Producer(self._config, **self._settings)

    async def stop(self, timeout=None) -> None:
        """Sends what is queued (up to ``timeout`` seconds), then closes; in an executor, so
        the loop goes on meanwhile."""
        if self._producer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._producer.close, timeout)

    async def __aenter__(self) -> "AIOProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def send(self, topic, value=None, key=None, partition=None, timestamp_ms=None,
                   headers=None, on_delivery=None):
        """Queues one record and returns its future (await it for the RecordMetadata). Waits
        for metadata or buffer memory are awaited, never blocking the loop; so is the next
        turn of the loop when this turn's sends have had their slice (cancelling that wait
        queues nothing)."""
        p = self._producer
        if p is None:
            p = self.producer       # raises: not started
        waiter = turn_waiter()
        if waiter is not None:
            await waiter            # this turn's slice is spent: the next one, then send
        fut = p._send_path.try_send(topic, value, key, partition, timestamp_ms, headers, on_delivery)
        if fut is None:
            fut = await _running_loop().run_in_executor(None, functools.partial(
                p.send, topic, value, key, partition, timestamp_ms, headers, on_delivery))
        return fut

    async def send_and_wait(self, topic, value=None, key=None, partition=None, timestamp_ms=None,
                            headers=None):
        """Queues one record and waits for its acknowledgement: the RecordMetadata."""
        fut = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await fut

    async def send_many(self, topic, values, keys=None, **kwargs):
        """``Producer.send_many`` (a whole column at C speed) in an executor: it may wait for
        metadata or memory. Returns the SendManyResult; ``await`` it for every outcome."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(
            self.producer.send_many, topic, values, keys, **kwargs))

    async def flush(self, timeout=None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, timeout)

    async def partitions_for(self, topic: str):
        return await asyncio.get_running_loop().run_in_executor(None, self.producer.partitions_for, topic)

    def metrics(self) -> dict:
        return self.producer.metrics()


_accumulator._bind_aio(sys.modules[__name__])
