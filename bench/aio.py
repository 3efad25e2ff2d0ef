"""The asyncio scenario, one client in a process of its own:
``python -m bench.aio SPEC_JSON`` prints one JSON line.

An asyncio application's use of a producer: ``tasks`` tasks on the default event loop share
the records (100 B values, keyed); each awaits every send call and keeps at most ``window``
of its records unacknowledged, awaiting their futures in the order sent: after every send it
collects the ones settled meanwhile, and when its window is full it awaits the oldest. When
every task has sent its share, the final flush runs while the tasks await what is left.
Every client at its own defaults (only the bootstrap servers given):

- ``kproducer AIOProducer``: ``fut = await p.send(topic, value, key=key)`` (kproducer.aio);
  ``fut`` is a RecordFuture, awaitable (a settled one answers without the loop).
- ``confluent asyncio``: confluent-kafka's own asyncio producer,
  ``confluent_kafka.aio.AIOProducer``: ``fut = await p.produce(topic, value, key=key)``
  (its defaults: 1,000 messages per ``produce_batch`` in a thread pool of 4, delivery
  reports served by the ``poll(0)`` after each batch or by a flush after 1 s without new
  messages). With a confluent-kafka that has no ``confluent_kafka.aio``, the pattern of its
  asyncio example instead: ``produce()`` with an ``on_delivery`` callback that settles an
  asyncio future through ``loop.call_soon_threadsafe``, and a thread calling ``poll()``.
- ``aiokafka``: ``fut = await p.send(topic, value, key=key)`` (``AIOKafkaProducer``).

Beside them, once per round, the same loop with no producer (``LOOP_ONLY``: ``send``
returns a settled future, nothing is sent): the most records/s any client can reach here.

Figures: records/s and CPU seconds (user + system time of the process, every thread) over
the whole timed part (send loops and final flush, until every record is settled);
acknowledgement latency per record, from just before its send call to the return of the
task's ``await`` on its future (what the application sees; no client gets a per-record
callback), as p50 / p99 / p99.9 / max: with the window full this is about
``tasks * window / records/s`` (Little's law); and the event loop's longest stall: a
heartbeat task sleeps 1 ms at a time and keeps its worst lateness (``loop_stall_max_ms``),
and the same less the time the loop's thread waited for a CPU (``loop_stall_own_max_ms``:
on a shared machine that wait alone reaches a hundred milliseconds). One warm-up record
(``b"warm-up"``) is sent and acknowledged first.
"""

from __future__ import annotations

import asyncio
import gc
import collections
import json
import sys
import threading
import time

from bench.data import make_keys, make_values
from bench.latency import percentiles
from kproducer.testing.procfs import runqueue_clock

KPRODUCER = "kproducer AIOProducer"
CONFLUENT = "confluent asyncio"
AIOKAFKA = "aiokafka"
CLIENTS = (KPRODUCER, CONFLUENT, AIOKAFKA)
REFERENCE = AIOKAFKA                  # the goals are against aiokafka
DISTRIBUTION = {KPRODUCER: "kproducer", CONFLUENT: "confluent-kafka", AIOKAFKA: "aiokafka"}
# Pure-Python fronts, ~5x slower here: the base scenario's fraction of the records (compared
# by rate, as in the producer scenarios).
SLOW_CLIENTS = (CONFLUENT, AIOKAFKA)
TASKS = 100
WINDOW = 100                          # unacknowledged records per task
WARMUP_VALUE = b"warm-up"
HEARTBEAT_S = 0.001



class Heartbeat:
    """A task that sleeps 1 ms at a time and keeps its worst lateness: the longest time
    the loop could not run anything else (``worst``); and the same less the time the loop's
    thread waited for a CPU meanwhile (``worst_own``: what the process itself held the loop
    for, not the machine's other jobs; None where the kernel does not say)."""

    def __init__(self):
        self.worst = 0.0
        self.worst_own = None
        self.beats = 0
        self._task = None
        self._waited = runqueue_clock()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        clock = time.perf_counter
        waited = self._waited
        if waited is not None:
            self.worst_own = 0.0
        q0 = waited() if waited is not None else 0.0
        while True:
            # One read of the wait per beat: the last beat's ends where this one begins.
            t0 = clock()
            await asyncio.sleep(HEARTBEAT_S)
            late = clock() - t0 - HEARTBEAT_S
            self.beats += 1
            if late > self.worst:
                self.worst = late
            if waited is not None:
                q1 = waited()
                own, q0 = late - (q1 - q0), q1
                if own > self.worst_own:
                    self.worst_own = own

    def stop(self) -> None:
        self._task.cancel()


# ---- the clients --------------------------------------------------------------------------
# Each has start()/flush()/stop() coroutines and ``send``: the client's own coroutine
# function, called as ``await send(topic, value, key=key)``, which returns the record's future.

class _Kproducer:
    api = "kproducer.aio.AIOProducer: fut = await p.send(topic, value, key=key)"

    def __init__(self, bootstrap: str):
        from kproducer.aio import AIOProducer
        self.settings = {"bootstrap_servers": bootstrap}
        self.p = AIOProducer(**self.settings)
        self.send = self.p.send              # its future: a RecordFuture, awaitable

    async def start(self) -> None:
        await self.p.start()

    async def flush(self) -> None:
        await self.p.flush()

    async def stop(self) -> None:
        await self.p.stop()


class _ConfluentAIO:
    api = "confluent_kafka.aio.AIOProducer: fut = await p.produce(topic, value, key=key)"

    def __init__(self, bootstrap: str):
        self.settings = {"bootstrap.servers": bootstrap}
        self.p = None

    async def start(self) -> None:
        from confluent_kafka.aio import AIOProducer
        self.p = AIOProducer(dict(self.settings))     # needs the running loop
        self.send = self.p.produce                    # its future: an asyncio.Future

    async def flush(self) -> None:
        await self.p.flush()

    async def stop(self) -> None:
        await self.p.close()


class _ConfluentThread:
    """confluent-kafka's documented asyncio pattern (its asyncio example): produce() with a
    delivery callback settling an asyncio future through call_soon_threadsafe, and a
    thread serving the callbacks with poll()."""
    api = "confluent_kafka.Producer.produce + on_delivery -> call_soon_threadsafe, poll thread"

    def __init__(self, bootstrap: str):
        from confluent_kafka import Producer
        self.settings = {"bootstrap.servers": bootstrap}
        self.p = Producer(dict(self.settings))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_loop, daemon=True)

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self.p.poll(0.1)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._thread.start()

    async def send(self, topic, value, key=None):
        loop = self.loop
        fut = loop.create_future()

        def ack(err, msg):
            if err is not None:
                loop.call_soon_threadsafe(_set_exception, fut, RuntimeError(str(err)))
            else:
                loop.call_soon_threadsafe(_set_result, fut, msg)

        while True:
            try:
                self.p.produce(topic, value, key=key, on_delivery=ack)
                return fut
            except BufferError:          # the local queue is full: let the poll thread drain
                await asyncio.sleep(0.001)

    async def flush(self) -> None:
        await self.loop.run_in_executor(None, self.p.flush)

    async def stop(self) -> None:
        self._stop.set()
        await self.loop.run_in_executor(None, self._thread.join)


def _set_result(fut, value) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut, exc) -> None:
    if not fut.done():
        fut.set_exception(exc)


class _AIOKafka:
    api = "aiokafka.AIOKafkaProducer: fut = await p.send(topic, value, key=key)"

    def __init__(self, bootstrap: str):
        self.settings = {"bootstrap_servers": bootstrap}
        self.p = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer
        self.p = AIOKafkaProducer(**self.settings)    # needs the running loop
        self.send = self.p.send                       # its future: an asyncio.Future
        await self.p.start()

    async def flush(self) -> None:
        await self.p.flush()

    async def stop(self) -> None:
        await self.p.stop()


def _confluent(bootstrap: str):
    try:
        import confluent_kafka.aio  # noqa: F401  (recent confluent-kafka 2.x)
    except ImportError:
        return _ConfluentThread(bootstrap)
    return _ConfluentAIO(bootstrap)


class _LoopOnly:
    """No producer at all: ``send`` returns an already-settled future and nothing is sent.
    Its records/s, measured in the same run, is the most any client can reach in this loop:
    what the tasks' own Python (the loop, the window, the latency stamps) leaves."""
    api = "async def send(topic, value, key=None): return a settled future (nothing sent)"

    def __init__(self, bootstrap: str):
        self.settings = {}

    async def start(self) -> None:
        self._done = asyncio.get_running_loop().create_future()
        self._done.set_result(None)

    async def send(self, topic, value, key=None):
        return self._done

    async def flush(self) -> None:
        pass

    async def stop(self) -> None:
        pass


# The ceiling of the scenario (see _LoopOnly): run beside the clients, never read back.
LOOP_ONLY = "the loop alone (no producer)"
FACTORIES = {KPRODUCER: _Kproducer, CONFLUENT: _confluent, AIOKAFKA: _AIOKafka, LOOP_ONLY: _LoopOnly}


# ---- one run ------------------------------------------------------------------------------

async def _main(spec: dict, values: list, keys: list) -> dict:
    client = FACTORIES[spec["client"]](spec["bootstrap"])
    topic = spec["topic"]
    n = len(values)
    tasks = max(1, min(spec.get("tasks", TASKS), n))
    window = max(1, spec.get("window", WINDOW))
    clock = time.perf_counter_ns
    t_send = [0] * n
    lat = [0] * n               # > 0 acknowledged (ns), -1 failed, 0 never settled
    # The benchmark's own bookkeeping (two lists of a million slots) out of the collector's
    # sight as well: the young collections that walked them stalled the loop 15-18 ms.
    gc.freeze()
    errors: list[str] = []

    await client.start()
    beat = Heartbeat()
    try:
        warm = await client.send(topic, WARMUP_VALUE)
        await client.flush()
        await warm

        send = client.send
        nk = len(keys)
        all_sent = asyncio.Event()
        senders_done = [0]

        async def sender(t: int) -> None:
            # Each record's future is awaited in the order sent (one settled already answers
            # without suspending); the latency is stamped as the await returns.
            pending: collections.deque = collections.deque()
            for i in range(t, n, tasks):
                t_send[i] = clock()
                pending.append((i, await send(topic, values[i], key=keys[i % nk])))
                # What has settled meanwhile (oldest first), then room in the window.
                while pending and (pending[0][1].done() or len(pending) >= window):
                    j, fut = pending.popleft()
                    try:
                        await fut
                        lat[j] = max(1, clock() - t_send[j])
                    except Exception as exc:
                        lat[j] = -1
                        if not errors:
                            errors.append(repr(exc))
            senders_done[0] += 1
            if senders_done[0] == tasks:
                all_sent.set()
            while pending:
                j, fut = pending.popleft()
                try:
                    await fut
                    lat[j] = max(1, clock() - t_send[j])
                except Exception as exc:
                    lat[j] = -1
                    if not errors:
                        errors.append(repr(exc))

        async def final_flush() -> None:
            await all_sent.wait()
            await client.flush()

        beat.start()
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(final_flush(), *(sender(t) for t in range(tasks)))
        t1, c1 = time.perf_counter(), time.process_time()
        beat.stop()
    finally:
        await client.stop()
    failed = sum(1 for v in lat if v < 0)
    ok = [v for v in lat if v > 0]
    seconds = t1 - t0
    out = {"client": spec["client"], "api": client.api, "records": n, "tasks": tasks,
           "window": window, "failed": failed, "missing": n - len(ok) - failed,
           "first_error": errors[0] if errors else None,
           "seconds": seconds, "cpu_seconds": c1 - c0,
           "records_per_s": n / seconds if seconds > 0 else 0.0,
           "cpu_us_per_record": (c1 - c0) / n * 1e6,
           "loop_stall_max_ms": beat.worst * 1000,
           "loop_stall_own_max_ms": None if beat.worst_own is None else beat.worst_own * 1000,
           "heartbeats": beat.beats,
           "settings": {k: v for k, v in client.settings.items() if "bootstrap" not in k}
                       or {"own defaults": True}}
    out.update(percentiles(ok))
    return out


def run(spec: dict) -> dict:
    values = make_values(spec["records"], spec.get("value_size", 100))
    keys = make_keys(1000)
    # The pre-generated records are the benchmark's, not the client's: out of the garbage
    # collector's sight, or every full collection walks them (tens of ms per million records,
    # a loop stall that grows with the record count each client is given).
    gc.freeze()
    return asyncio.run(_main(spec, values, keys))


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
