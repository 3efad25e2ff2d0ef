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

- ``send`` queues the record without blocking: the compiled path first
  (``_core.aio_send``). A record it can queue at once is queued by the call itself,
  and what the call returns (a coroutine in form: ``create_task`` takes it) answers the
  record's future without suspending and without a coroutine frame. A record that must
  wait for the topic's metadata or for room in ``buffer.memory`` waits on the loop itself
  (the metadata calls back at its next update, the pool as memory is released), with no
  thread of its own; it is then queued from the loop's thread, with ``max.block.ms`` and every
  error as in the sync API. A record that needs Python (serializers, a custom partitioner,
  interceptors, a transaction's checks) goes through the blocking ``Producer.send`` in the
  executor, in a copy of the task's context (context variables, an OpenTelemetry span).
- ``send`` and awaiting a settled future keep the loop's turns short whatever the number of
  tasks: they share a slice of ``_SLICE_S`` (2 ms) of the loop's time; past it they wait,
  first come first served and with nothing queued yet, for a later turn of the loop (its
  timers, its I/O, other tasks run meanwhile). ``await p.send(...)`` rarely suspends
  otherwise (its record is queued at once), so a hundred tasks each sending a hundred
  records per turn would hold the loop a hundred milliseconds.
- The Sender's steps run on the loop's thread (:class:`_LoopTurn`): the I/O thread never
  queues for the GIL while the loop runs Python.
- Completions reach a loop in bulk: the thread that settles futures appends them to the
  loop's queue and wakes the loop (``call_soon_threadsafe``) only when the queue was empty,
  so one wake-up serves every record settled until the loop runs. Several loops in several
  threads each get their own completions.
- Cancelling a task that awaits a record's future does not unsend the record: it is already
  queued and ends acknowledged or failed like any other (its callbacks still run). Cancelling
  ``await p.send(...)`` while that send waits for metadata or memory does not stop it either
  (the wait runs in a task of its own): the record is queued once it can be, and ends
  acknowledged or failed once; only the caller no longer gets its future. Cancelled while it
  waits for the loop's next turn, a send has queued nothing and will not.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import os
import sys
import threading
import time
import weakref

from kproducer import _core
from kproducer._core import NEED_MEMORY, NEED_METADATA, UNTRIED, LoopSlice, bind_slice
from kproducer._core import bound_loop as _bound_loop
from kproducer._core import wall_clock_ms
from kproducer.errors import BufferExhaustedError, KafkaError
from kproducer.producer import SEND_FAILURES, Producer, _check_topic

__all__ = ["AIOProducer", "loop_future"]

_clock = time.monotonic          # CLOCK_MONOTONIC: the clock LoopSlice.end is read against
_running_loop = asyncio.get_running_loop
_get_running_loop = asyncio._get_running_loop
_current_task = asyncio.current_task
_DRAIN_AT_ONCE = 512
# Waiting sends and awaits let go per turn of the loop (end_slice).
_WAKE_AT_ONCE = 2
# How long the I/O thread leaves a wanted Sender step to the attached loop (_LoopTurn) before
# it runs the step itself: only a loop held up by its application's own work takes longer.
_LOOP_GRACE_MS = 20
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
        self.slice = LoopSlice()                 # what sends and awaits read (in C)
        self.slice.loop = loop
        self.slice_waiters: collections.deque = collections.deque()
        self.ending = False                      # end_slice is scheduled
        self.woken: set = set()                  # the tasks the last end_slice let go
        self.slice.woken = self.woken
        self.resumed: collections.deque = collections.deque()   # ... whose slice ran out

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
            if not waiter.done():   # cancelled: the record goes on regardless
                source._settle(waiter)
        with self.lock:
            if items:
                self.loop.call_soon(self.drain)      # still scheduled: no wake-up needed
            else:
                self.scheduled = False

    def begin_slice(self, now: float) -> None:          # the loop's thread
        self.slice.end = now + _SLICE_S
        if not self.ending:
            # The next turn of the loop ends the slice: it runs after every handle that was
            # ready when the slice began.
            self.ending = True
            self.loop.call_soon(self.end_slice)

    def end_slice(self) -> None:                           # the loop's thread
        """A turn of the loop: the slice ends, and the first _WAKE_AT_ONCE waiting tasks go
        on, each with at least one send or await (none waits for ever): first those let go
        before whose slice ran out (in their order), then the others in the order they came.
        Until the next end_slice, tasks not let go wait behind them rather than barge in.
        The others wait for later turns: all woken at once, most would only wait again (a
        hundred tasks woken and suspended every turn)."""
        self.ending = False
        self.slice.end = 0.0
        woken = self.woken
        woken.clear()
        for waiters in (self.resumed, self.slice_waiters):
            while waiters and len(woken) < _WAKE_AT_ONCE:
                w, task = waiters.popleft()
                if not w.done():        # not cancelled
                    w.set_result(None)
                    woken.add(task)
        if self.resumed or self.slice_waiters:
            self.ending = True
            self.loop.call_soon(self.end_slice)
        else:
            self.slice.waiting = False

    def slice_waiter(self, task) -> asyncio.Future:       # the loop's thread
        w = self.loop.create_future()
        # A task let go whose slice ran out keeps its place: first in the next turn.
        (self.resumed if task in self.woken else self.slice_waiters).append((w, task))
        self.slice.waiting = True
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


class _LoopTurn:
    """The Sender's steps run on the event loop's thread: the watcher (csrc/kp_turn.c) makes
    an eventfd readable as a step is wanted, and the loop runs it as one of its callbacks.
    The I/O thread then never queues for the GIL while the loop runs Python (each such hand-
    off stalls the loop for up to a switch interval, and far longer on a loaded machine,
    where the thread holding the GIL may wait for a CPU); it runs a step only when the loop
    has not within _LOOP_GRACE_MS."""

    def __init__(self, producer: Producer, loop: asyncio.AbstractEventLoop):
        self.turn = producer._turn          # kproducer.turn.StepTurn
        self.watcher = self.turn.watcher
        self.loop = loop
        self.fd = os.dup(self.watcher.loop_fd())    # ours: the watcher closes its own
        loop.add_reader(self.fd, self._wanted)
        self.watcher.attach_loop(1, _LOOP_GRACE_MS)
        self.send_path = producer._send_path
        self.send_path.loop_steps = True     # one step per turn, not one mid-slice
        self._closing = threading.Lock()
        self.turn.before_io_step = self._io_thread_steps

    def _io_thread_steps(self) -> None:     # the I/O thread, past the loop's grace
        # A loop that ended without stop() (asyncio.run returned) never steps again: without
        # this, every later step of a synchronous user would wait out the grace.
        if not self.loop.is_running():
            self.close()

    def _wanted(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        if self.watcher.pending:
            self.turn.step_from_app()

    def close(self) -> None:     # the loop's thread, or the I/O thread once the loop stopped
        with self._closing:
            if self.fd < 0:
                return
            fd, self.fd = self.fd, -1
            if self.turn.before_io_step == self._io_thread_steps:
                self.turn.before_io_step = None
            self.send_path.loop_steps = False
            self.watcher.attach_loop(-1)
            try:
                self.loop.remove_reader(fd)
            except RuntimeError:        # the loop is closed already
                pass
            os.close(fd)


async def _send_waiting(p: Producer, why, topic, value, key, partition, timestamp_ms, headers,
                        on_delivery):
    """AIOProducer.send for a record that try_send could not queue: ``why`` is what it
    lacked (NEED_METADATA, NEED_MEMORY) or None (it needs Python: the blocking send in the
    executor). The waits run in a task of their own, shielded: a caller that stops waiting
    does not unsend the record, which is queued once it can be (see the module docstring)."""
    loop = asyncio.get_running_loop()
    if why is None:
        return await _in_executor(loop, p.send, topic, value, key, partition, timestamp_ms,
                                  headers, on_delivery)
    task = loop.create_task(_queue_when_possible(
        p, why, (topic, value, key, partition, timestamp_ms, headers, on_delivery)))
    task.add_done_callback(_retrieved)
    return await asyncio.shield(task)


def _in_executor(loop, fn, *args):
    """``fn(*args)`` in the loop's default executor, in a copy of the caller's context
    (as asyncio.to_thread): serializers and interceptors (an OpenTelemetry span's parent,
    kproducer.otel) see the task's context variables as in a sync send()."""
    return loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, fn, *args))


def _retrieved(task: asyncio.Task) -> None:
    # The caller may have stopped waiting: its error is not "never retrieved".
    if not task.cancelled():
        task.exception()


async def _queue_when_possible(p: Producer, why, args: tuple):
    """Waits on the loop, up to max.block.ms as Producer.send does, for what the record lacks
    (the topic's metadata, room in buffer.memory), then queues it; a record that fails
    (a timeout, too large) gets a failed future and its callback, as from Producer.send."""
    topic, value, key, partition = args[0], args[1], args[2], args[3]
    deadline = time.monotonic() + p._max_block_s
    checked = False
    loop = asyncio.get_running_loop()
    try:
        while True:
            if isinstance(why, KafkaError):     # try_send's: the record cannot be sent
                raise why
            if why is NEED_METADATA:
                if not checked:
                    p._acc.check_fields(key, value, args[5])    # a bad record fails before any wait
                    checked = True
                await _metadata(p, loop, topic, deadline, partition)
            else:
                await _memory(p, loop, deadline)
            why = p._send_path.try_send(*args)
            if why is None:
                return await _in_executor(loop, p.send, *args)
            if why is not NEED_MEMORY and why is not NEED_METADATA and not isinstance(why, KafkaError):
                return why
    except SEND_FAILURES as exc:
        return p._send_failed(topic, partition, exc, args[6])


async def _metadata(p: Producer, loop, topic: str, deadline: float, partition=None) -> None:
    """Until ``topic``'s partitions are known, more than ``partition`` if given
    (Producer._wait_for_topic's loop, awaited: the metadata calls back at its next update), up
    to ``deadline`` with the sync API's errors."""
    p._wait_left(topic, NEED_METADATA, deadline, partition)
    md = p._metadata
    md.add(topic, wall_clock_ms())
    while (version := p._topic_unknown(topic, partition)) is not None:
        if md.closed:
            raise KafkaError("requested metadata update after close")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise p._no_metadata(topic, partition)
        waiter = loop.create_future()
        md.add_listener(functools.partial(_wake_threadsafe, loop, waiter))
        if md.version > version:    # updated before the listener was in
            continue
        # At most 0.5 s at a time, as the sync wait: a refresh that failed is retried.
        timer = loop.call_later(min(remaining, 0.5), _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()


async def _memory(p: Producer, loop, deadline: float) -> None:
    """Until buffer.memory may have room for the batch the last append wanted (the next
    release of memory: the caller tries again), without blocking the loop."""
    if p._sender.fatal_error is not None:
        raise p._sender.fatal_error
    pool = p._acc.pool
    need = p._acc.last_need
    if need > pool.total:
        raise KafkaError(f"a batch of {need} bytes can never fit buffer.memory={pool.total}")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        pool.waited(0, True)        # buffer-exhausted-total (the time was counted below)
        raise BufferExhaustedError(
            f"failed to allocate {need} bytes of buffer.memory ({pool.used} of {pool.total} in "
            f"use) within max.block.ms={int(p._max_block_s * 1000)}")
    waiter = loop.create_future()
    pool.add_listener(functools.partial(_wake_threadsafe, loop, waiter))
    if pool.available >= need:      # released before the listener was in
        return
    p._sender.wakeup()
    # At most 100 ms at a time: a closed producer or a fatal error is noticed meanwhile.
    timer = loop.call_later(min(remaining, 0.1), _wake, waiter)
    started = time.perf_counter_ns()
    try:
        await waiter
    finally:
        timer.cancel()
        pool.waited(time.perf_counter_ns() - started)   # bufferpool-wait-time-ns-total


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _wake_threadsafe(loop, waiter: asyncio.Future) -> None:      # any thread
    try:
        loop.call_soon_threadsafe(_wake, waiter)
    except RuntimeError:        # the loop is closed
        pass


class _Local(threading.local):
    lq = None       # the _LoopQueue of the loop that ran last in this thread


_local = _Local()


def turn_waiter():
    """Where kproducer's awaitables take part in the loop turn's slice (``send``, and
    awaiting a settled future): None while the running loop's current slice lasts (a slice
    begins with the first such await after one ended), else a future to await first, done
    at a later turn of the loop (first come, first woken); None outside a running loop.
    The compiled check (``_core.turn_waiter``) answers the common case, a slice
    under way, by itself, and calls this for the rest."""
    lq = _local.lq
    if lq is None or not lq.loop.is_running():
        # (asyncio's get_running_loop costs a getpid() system call: once per loop run here)
        loop = _get_running_loop()
        if loop is None:
            return None
        lq = _local.lq = _queue(loop)
        bind_slice(lq.slice)
    loop = lq.loop
    now = _clock()
    if lq.slice.end == 0.0:
        lq.begin_slice(now)
    elif now >= lq.slice.end:
        return lq.slice_waiter(_current_task(loop))
    if lq.slice_waiters or lq.resumed:
        task = _current_task(loop)
        if task not in lq.woken:
            return lq.slice_waiter(task)        # behind those waiting
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
        self._turn: _LoopTurn | None = None
        # What the compiled send reads (its SendPath and the turn's loop); None: not
        # started or stopped, and every send goes through _send.
        self._send_state: _core.AIOSendState | None = None

    @property
    def producer(self) -> Producer:
        """The underlying (synchronous, thread-safe) Producer."""
        if self._producer is None:
            raise KafkaError("the AIOProducer is not started: await start() (or use 'async with')")
        return self._producer

    async def start(self) -> None:
        """Creates the producer; its Sender's steps then run on this loop (see _LoopTurn)."""
        if self._producer is None:
            self._producer = Producer(self._config, **self._settings)
            self._run_steps_on(asyncio.get_running_loop())

    def _run_steps_on(self, loop) -> None:
        """The Sender's steps run on ``loop`` (a new _LoopTurn), and the compiled send reads
        the turn's loop with the producer's SendPath from ``_send_state``: set together."""
        self._turn = _LoopTurn(self._producer, loop)
        self._send_state = _core.AIOSendState(self._producer._send_path, loop)

    async def stop(self, timeout=None) -> None:
        """Sends what is queued (up to ``timeout`` seconds), then closes; in an executor, so
        the loop goes on meanwhile."""
        self._send_state = None
        if self._turn is not None:
            self._turn.close()      # the I/O thread sends what is left
            self._turn = None
        if self._producer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._producer.close, timeout)

    async def __aenter__(self) -> "AIOProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # Queues one record, returns an awaitable of its future: compiled (aio_send.pxi), so a
    # record queued at once costs no coroutine frame; the rest goes through _send.
    send = _core.aio_send

    async def _send(self, waiter, why, topic, value, key, partition, timestamp_ms, headers,
                    on_delivery):
        """send's Python part: ``waiter`` (the loop's next turn) awaited first; ``why`` is
        what try_send answered (UNTRIED: not tried yet)."""
        p = self.producer       # raises: not started
        if waiter is not None:
            await waiter            # this turn's slice is spent: the next one, then send
        if why is UNTRIED:
            t = self._turn
            if t is not None and _bound_loop() is not t.loop:
                self._follow_loop()
            why = p._send_path.try_send(topic, value, key, partition, timestamp_ms, headers,
                                        on_delivery)
        if why is None or why is NEED_MEMORY or why is NEED_METADATA or isinstance(why, KafkaError):
            return await _send_waiting(p, why, topic, value, key, partition, timestamp_ms,
                                       headers, on_delivery)
        return why

    def _follow_loop(self) -> None:
        """Sending from another loop than the one whose turn runs the steps: when that one
        has stopped (``asyncio.run(p.start())`` then another ``asyncio.run``), this loop
        takes the steps over; while it runs (a producer shared by loops in several
        threads), it keeps them."""
        loop = _bound_loop()
        if loop is None or self._turn is None or self._turn.loop.is_running():
            return
        self._turn.close()
        self._run_steps_on(loop)

    async def send_and_wait(self, topic, value=None, key=None, partition=None, timestamp_ms=None,
                            headers=None):
        """Queues one record and waits for its acknowledgement: the RecordMetadata."""
        fut = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await fut

    async def send_many(self, topic, values, keys=None, **kwargs):
        """``Producer.send_many`` (a whole column at C speed) in an executor: it may wait for
        metadata or memory. Returns the SendManyResult; ``await`` it for every outcome."""
        return await _in_executor(asyncio.get_running_loop(), functools.partial(
            self.producer.send_many, topic, values, keys, **kwargs))

    async def purge(self, in_queue=True, in_flight=True, blocking=True) -> None:
        """``Producer.purge``; with ``blocking`` it waits for a step under way in an
        executor, so the loop goes on meanwhile."""
        p = self.producer
        if not blocking:
            p.purge(in_queue, in_flight, False)
            return
        await asyncio.get_running_loop().run_in_executor(None, p.purge, in_queue, in_flight, True)

    async def flush(self, timeout=None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, timeout)

    async def partitions_for(self, topic: str):
        """The topic's partitions (PartitionInfo); the wait for its metadata (up to
        max.block.ms) is awaited on the loop."""
        p = self.producer
        if p._closed:
            raise KafkaError("cannot get partitions: the producer is closed")
        _check_topic(topic)
        await _metadata(p, asyncio.get_running_loop(), topic, time.monotonic() + p._max_block_s)
        return p.partitions_for(topic)      # known now: answers at once

    def metrics(self) -> dict:
        return self.producer.metrics()


_core._bind_aio(sys.modules[__name__], asyncio.tasks._current_tasks)
