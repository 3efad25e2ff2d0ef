"""kproducer.aio against the real broker, under asyncio's default loop and uvloop: awaited
sends read back record by record, the loop's longest stall while buffer.memory is full and a
new topic's metadata is fetched, completions delivered in bulk, several loops at once,
cancelled awaits, a closed producer, a broker that disappears."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import sys
import threading
import time

import pytest
import uvloop

from bench.data import make_values
from bench.verify import check_topic
from kproducer import Producer, RecordMetadata, _core
from kproducer.aio import AIOProducer
from kproducer.errors import KafkaError, KafkaTimeoutError
from kproducer.testing.procfs import runqueue_clock
from kproducer.testing.readback import read_back

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def run(kind: str, coro):
    loop = LOOPS[kind]()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()



# The loop's longest stall of this process's making: a heartbeat's lateness less the time the
# loop's thread waited for a CPU meanwhile (two shared cores, the broker and other jobs on
# them: that wait alone reaches 100+ ms). Sends that held the loop for a turn of every task
# (before the loop turn's slice, kproducer.aio) stalled it 40-90 ms here; the Sender's steps
# (0.1-3 ms each) and the slice (2 ms) leave 5-15 ms.
OWN_STALL_LIMIT_S = 0.030


@contextlib.contextmanager
def frozen_heap():
    """What the process holds already (the test's own data; in a whole-suite run, what two
    thousand tests before it left) out of the garbage collector's sight while a loop's stalls
    are measured: a full collection walks all of it, 96 ms in one CI run (the heartbeat's
    printout: the loop's thread ran the whole beat, in a collection). A stall of the
    application's making, not the producer's."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Heartbeat:
    """A task that sleeps 1 ms at a time and keeps its worst lateness: how long the loop
    could not run anything else (``worst``), and the same less the time the loop's thread
    waited for a CPU (``worst_own``: what the process itself held the loop for; ``worst``
    where the kernel does not say)."""

    def __init__(self):
        self.worst = 0.0
        self.worst_own = 0.0
        self.longest_gc = 0.0           # printed beside the stall: was a collection it?
        self.worst_cpu = 0.0            # the loop thread's CPU time in the worst beat
        self._gc_began = None
        self._task = None
        self._waited = runqueue_clock()

    def _on_gc(self, phase, info):
        if phase == "start":
            self._gc_began = time.perf_counter()
        elif self._gc_began is not None:
            self.longest_gc = max(self.longest_gc, time.perf_counter() - self._gc_began)

    def start(self):
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.ensure_future(self._beat())

    async def _beat(self):
        waited = self._waited or (lambda: 0.0)
        q0 = waited()
        while True:
            t0 = time.perf_counter()
            c0 = time.thread_time()
            await asyncio.sleep(0.001)
            late = time.perf_counter() - t0 - 0.001
            if late > self.worst:
                # Was the loop's thread running (its own code) or blocked (the GIL, a lock)?
                self.worst_cpu = time.thread_time() - c0
            q1 = waited()                   # (the last beat's end is this one's start)
            self.worst = max(self.worst, late)
            self.worst_own = max(self.worst_own, late - (q1 - q0))
            q0 = q1

    def stop(self):
        self._task.cancel()
        gc.callbacks.remove(self._on_gc)

    def check(self, label: str) -> None:
        print(f"{label}: longest loop stall {self.worst * 1000:.1f} ms, "
              f"{self.worst_own * 1000:.1f} ms of it not waiting for a CPU; "
              f"longest garbage collection {self.longest_gc * 1000:.1f} ms; the loop's thread "
              f"ran {self.worst_cpu * 1000:.1f} ms of the worst beat")
        assert self.worst < 0.5, f"the event loop stalled {self.worst * 1000:.1f} ms"
        assert self.worst_own < OWN_STALL_LIMIT_S, (
            f"the event loop stalled {self.worst_own * 1000:.1f} ms (besides waiting for a CPU)")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_a_million_awaited_sends_are_read_back_and_the_loop_keeps_running(broker, kind):
    n, tasks = 1_000_000, 8
    values = make_values(n, 100)
    # The test's own 1,000,000 values would make each full garbage collection walk them
    # (tens of ms: a stall of the application's making, not the producer's): frozen_heap.
    topic = f"aio-{kind}"        # not created: the first sends wait for its metadata

    async def main():
        beat = Heartbeat()
        beat.start()
        # 1 MiB of buffer.memory: the pool is full most of the time, so sends wait for it.
        async with AIOProducer(bootstrap_servers=broker.bootstrap, buffer_memory=1 << 20,
                               batch_size=64 * 1024) as p:
            async def sender(lo, hi):
                pending = []
                for i in range(lo, hi):
                    pending.append(await p.send(topic, values[i]))
                    if len(pending) == 10_000:
                        # Each await suspends only if that record is not settled yet
                        # (asyncio.gather would wrap every one in a Task of its own); a
                        # well-behaved application yields now and then, as send() does.
                        for j, f in enumerate(pending):
                            md = await f
                            assert isinstance(md, RecordMetadata) and md.offset >= 0
                            if j % 256 == 255:
                                await asyncio.sleep(0)
                        pending = []
                for f in pending:
                    await f

            step = n // tasks
            await asyncio.gather(*(sender(t * step, (t + 1) * step) for t in range(tasks)))
            waits = p.metrics()
        beat.stop()
        return beat, waits

    with frozen_heap():
        beat, metrics = run(kind, main())
    assert metrics["records_acked"] == n and metrics.get("records_failed", 0) == 0
    check = check_topic(broker.bootstrap, topic, n, warmups=0, timeout=300)
    assert check["ok"], check["error"]
    # The loop never waits for a metadata fetch or for buffer memory
    # (test_waits_do_not_stall_the_loop makes those last a second), nor for the GIL held by
    # the I/O thread (the Sender's steps run on the loop); the sends and awaits of a turn
    # share a 2 ms slice. Besides waiting for a CPU, the worst stall is 5-15 ms.
    beat.check(kind)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_waits_do_not_stall_the_loop(proxied_broker, kind):
    """Every broker answer held 1 s by the proxy: the first send to a new topic waits a second
    for its metadata and, with 64 KiB of buffer.memory, later sends wait for acknowledgements
    to free memory. A send that blocked the loop would stall it about a second each time."""
    broker, proxy = proxied_broker
    values = make_values(3000, 100)

    async def main():
        executor = CountingExecutor()
        asyncio.get_running_loop().set_default_executor(executor)
        async with AIOProducer(bootstrap_servers=proxy.bootstrap, buffer_memory=64 * 1024,
                               batch_size=16 * 1024, linger_ms=0, max_block_ms=30000) as p:
            await p.partitions_for("warm")        # connected before the delay begins
            proxy.delay(1.0)
            beat = Heartbeat()
            beat.start()
            t0 = time.perf_counter()
            futs = [await p.send("slow", v) for v in values]
            for f in futs:
                await f
            elapsed = time.perf_counter() - t0
            beat.stop()
            proxy.delay(0)
            return beat, elapsed, executor.submitted

    with frozen_heap():
        beat, elapsed, submitted = run(kind, main())
    assert elapsed >= 2.0, elapsed          # it did wait: metadata, then memory, a second each
    # Both waits were awaited on the loop itself: no thread was asked to wait for them.
    assert submitted == 0, f"{submitted} calls went to the loop's executor"
    beat.check(f"{kind}, waits of {elapsed:.1f} s")
    check = check_topic(broker.bootstrap, "slow", len(values), warmups=0, timeout=120)
    assert check["ok"], check["error"]


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting what it is given."""
    submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


class CountingLoop(asyncio.SelectorEventLoop):
    wakeups = 0

    def call_soon_threadsafe(self, *args, **kwargs):
        CountingLoop.wakeups += 1
        return super().call_soon_threadsafe(*args, **kwargs)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_send_is_awaitable_and_taken_as_a_coroutine(broker, kind):
    """AIOProducer.send: a record it can queue at once is queued by the call itself (no
    coroutine frame; awaiting what it returns answers the future without suspending); what it
    returns is taken by asyncio.create_task and ensure_future as a coroutine is; a record sent
    to a topic whose metadata is not there yet goes through the awaited waits."""
    broker.create_topic("shape", 1)

    async def main():
        async with AIOProducer(bootstrap_servers=broker.bootstrap) as p:
            first = await p.send("shape", b"first", partition=0)       # waits for metadata
            pending = p.send("shape", b"queued", partition=0)
            assert type(pending) is _core.Ready                 # queued already
            in_task = await asyncio.create_task(p.send("shape", b"in-task", partition=0))
            ensured = await asyncio.ensure_future(p.send("shape", b"ensured", partition=0))
            queued = await pending
            mds = [await f for f in (first, queued, in_task, ensured)]
            assert [md.offset for md in mds] == [0, 1, 2, 3]
            with pytest.raises(TypeError):
                await p.send(42, b"bad topic")
            return _core.READY_AM_SEND

    fast = run(kind, main())
    # CPython 3.10+: awaiting a Ready goes through its am_send slot (no StopIteration).
    assert fast is (sys.version_info >= (3, 10))
    got = read_back(broker.bootstrap, "shape", timeout=30)[0]
    assert [m.value for m in got] == [b"first", b"queued", b"in-task", b"ensured"]


def test_completions_reach_the_loop_in_bulk(broker):
    broker.create_topic("bulk", 1)
    n = 20_000
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as p:
        async def main():
            futs = [p.send("bulk", b"v%d" % i, partition=0) for i in range(n)]
            return await asyncio.gather(*futs)

        CountingLoop.wakeups = 0
        loop = CountingLoop()
        try:
            got = loop.run_until_complete(main())
        finally:
            loop.close()
        batches = p.metrics()["batches"]
    assert [md.offset for md in got] == list(range(n))
    # At most one wake-up per drain of the loop's queue, never one per record (none for
    # what a send() on the loop's own thread settled: no wake-up is needed for that).
    assert 0 <= CountingLoop.wakeups <= batches + 1 < n // 10


def test_several_loops_in_several_threads_get_their_own_completions(broker):
    broker.create_topic("loops", 3)
    results, errors = {}, []
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        def worker(name, kind):
            async def main():
                me = threading.get_ident()
                futs = [p.send("loops", f"{name}-{i}".encode(), partition=i % 3) for i in range(2000)]
                mds = await asyncio.gather(*futs)
                assert threading.get_ident() == me
                # asyncio.wait_for (any awaitable) works on them too.
                extra = await asyncio.wait_for(p.send("loops", f"{name}-last".encode(), partition=0), 30)
                return mds + [extra]
            try:
                results[name] = run(kind, main())
            except BaseException as exc:        # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(f"t{i}", ("asyncio", "uvloop")[i % 2]))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    assert sorted(results) == ["t0", "t1", "t2", "t3"]
    assert all(len(mds) == 2001 and all(md.offset >= 0 for md in mds) for mds in results.values())
    got = read_back(broker.bootstrap, "loops", timeout=60)
    assert sum(len(v) for v in got.values()) == 4 * 2001


def test_a_cancelled_await_does_not_lose_or_duplicate_the_record(broker):
    broker.create_topic("cancel", 1)

    async def main():
        async with AIOProducer(bootstrap_servers=broker.bootstrap, linger_ms=300) as p:
            fut = await p.send("cancel", b"kept", partition=0)
            waiter = asyncio.ensure_future(_await(fut))
            await asyncio.sleep(0)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await p.flush(30)
            return fut.result(0)

    async def _await(fut):
        return await fut

    md = run("asyncio", main())
    assert md.offset == 0
    assert [m.value for m in read_back(broker.bootstrap, "cancel", timeout=30)[0]] == [b"kept"]


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_send_many_is_awaitable_and_so_is_its_result(broker, kind):
    broker.create_topic("many", 2)
    values = make_values(5000, 100)

    async def main():
        async with AIOProducer(bootstrap_servers=broker.bootstrap) as p:
            res = await p.send_many("many", values, keys=[b"k%d" % (i % 7) for i in range(5000)])
            assert await res is res
            again = await res                       # settled: answers at once
            plain = p.producer.send_many("many", values[:10], partition=1)
            await plain                             # a Producer's result, awaited
            return again, plain

    res, plain = run(kind, main())
    assert (res.acked, res.failed, res.first_error) == (5000, 0, None)
    assert (plain.acked, plain.failed) == (10, 0)
    got = read_back(broker.bootstrap, "many", timeout=60)
    assert sorted(m.value for msgs in got.values() for m in msgs) == sorted(values + values[:10])


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_cancelling_a_send_that_waits_for_metadata_neither_loses_nor_duplicates(broker, kind):
    """A send that waits (here for the new topic's metadata) waits in a task of its own;
    cancelling the task that awaits it cannot unsend it: the wait goes on, and the record
    ends acknowledged once, like any other queued record."""
    broker.create_topic("cancel-exec", 1)

    async def main():
        async with AIOProducer(bootstrap_servers=broker.bootstrap) as p:
            task = asyncio.ensure_future(p.send("cancel-exec", b"kept", partition=0))
            await asyncio.sleep(0)                  # the send is waiting for the metadata
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The wait goes on: it queues the record once the metadata is in.
            deadline = time.monotonic() + 30
            while not p.metrics().get("records_acked"):
                assert time.monotonic() < deadline, "the cancelled send never completed"
                await p.flush(30)
                await asyncio.sleep(0.01)
            return p.metrics()

    metrics = run(kind, main())
    assert metrics["records_acked"] == 1
    assert [m.value for m in read_back(broker.bootstrap, "cancel-exec", timeout=30)[0]] == [b"kept"]


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_a_closed_producer_and_a_vanished_broker_are_clear_errors(broker, kind):
    broker.create_topic("gone", 1)

    async def main():
        p = AIOProducer(bootstrap_servers=broker.bootstrap, delivery_timeout_ms=1500,
                        request_timeout_ms=1000, linger_ms=0, max_block_ms=2000)
        with pytest.raises(KafkaError, match="not started"):
            await p.send("gone", b"x")
        await p.start()
        assert (await p.send_and_wait("gone", b"before", partition=0)).offset == 0
        broker.stop()
        with pytest.raises(KafkaTimeoutError, match="delivery.timeout.ms"):
            await p.send_and_wait("gone", b"after", partition=0)
        # Every record ends acknowledged or failed: none is left unsettled.
        futs = [await p.send("gone", b"lost-%d" % i, partition=0) for i in range(50)]
        outcomes = await asyncio.gather(*futs, return_exceptions=True)
        assert all(isinstance(o, KafkaTimeoutError) for o in outcomes), outcomes[:3]
        m = p.metrics()
        assert m["records_acked"] == 1 and m["records_failed"] == 51
        # A topic whose metadata never comes: max.block.ms, then the sync API's error, which
        # names the unreachable broker; the loop meanwhile goes on (awaited, not blocked).
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="'never' not present in metadata after "
                                                    "max.block.ms=2000; no broker reachable"):
            await (await p.send("never", b"x"))     # a failed future, as Java's send()
        with pytest.raises(KafkaTimeoutError, match="'never-2' not present in metadata"):
            await p.partitions_for("never-2")
        assert 3.9 <= time.monotonic() - t0 < 30
        await p.stop()
        with pytest.raises(KafkaError, match="closed"):
            await p.send("gone", b"x", partition=0)

    run(kind, main())


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_a_send_cancelled_while_it_waits_for_the_next_turn_queues_nothing(broker, kind, monkeypatch):
    """Past the loop turn's slice a send waits for a later turn before it queues anything:
    cancelled then, its record is not sent (and the sends before it are)."""
    import kproducer.aio as aio
    broker.create_topic("turn-cancel", 1)

    async def main():
        async with AIOProducer(bootstrap_servers=broker.bootstrap) as p:
            await p.partitions_for("turn-cancel")
            monkeypatch.setattr(aio, "_SLICE_S", 0.0)     # every slice is spent at once

            async def two():
                await p.send("turn-cancel", b"first", partition=0)    # begins the slice
                await p.send("turn-cancel", b"second", partition=0)   # waits for a turn

            task = asyncio.ensure_future(two())
            await asyncio.sleep(0)          # the task sent "first" and waits for a turn
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            monkeypatch.setattr(aio, "_SLICE_S", 0.002)
            third = await p.send("turn-cancel", b"third", partition=0)
            await p.flush(30)
            return third.result(0), p.metrics()

    md, metrics = run(kind, main())
    assert metrics["records_acked"] == 2 and md.offset == 1
    got = read_back(broker.bootstrap, "turn-cancel", timeout=30)[0]
    assert [m.value for m in got] == [b"first", b"third"]


def test_a_producer_started_in_one_loop_sends_from_the_next(broker):
    """``asyncio.run(p.start())`` then another ``asyncio.run``: the Sender's steps follow the
    sending loop (the first one, which watched for them, is gone), so acknowledgements do
    not wait for the I/O thread's grace."""
    broker.create_topic("next-loop", 1)
    p = AIOProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    run("asyncio", p.start())

    async def main():
        t0 = time.perf_counter()
        for i in range(200):
            await (await p.send("next-loop", b"%d" % i, partition=0))   # one at a time
        elapsed = time.perf_counter() - t0
        await p.stop()
        return elapsed

    elapsed = run("uvloop", main())
    # Each acknowledgement waiting out the I/O thread's 20 ms grace would take 4 s or more.
    assert elapsed < 3.0, elapsed
    assert len(read_back(broker.bootstrap, "next-loop", timeout=30)[0]) == 200


def test_a_loop_that_ended_without_stop_lets_the_io_thread_step_at_once(broker):
    """``asyncio.run`` returned without ``stop()``: its loop never steps again, so the first
    step the I/O thread runs past the loop's grace lets the loop go, and a synchronous user
    of the producer no longer waits out that grace at every step."""
    broker.create_topic("loop-gone", 1)

    async def main():
        p = AIOProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        await p.start()
        await (await p.send("loop-gone", b"from the loop"))
        return p

    aio = run("asyncio", main())
    p = aio.producer
    assert p._send_path.loop_steps                 # still attached to the ended loop
    # A response is read by the step that waited out the loop's grace, on the I/O thread,
    # which lets the loop go. (The send's own step reads it when the broker answers within
    # that step's last poll: then the next record's does.)
    deadline = time.monotonic() + 10
    warm = 0
    while p._send_path.loop_steps:
        assert time.monotonic() < deadline, "the I/O thread never let the ended loop go"
        p.send("loop-gone", b"w%d" % warm).result(10)
        warm += 1
    assert p._turn.before_io_step is None
    t0 = time.perf_counter()
    for i in range(1, 101):
        p.send("loop-gone", b"%d" % i).result(10)
    elapsed = time.perf_counter() - t0
    p.close()
    # Each of the 100 acknowledgements waiting out the 20 ms grace would take 2 s or more.
    assert elapsed < 1.5, elapsed
    assert len(read_back(broker.bootstrap, "loop-gone", timeout=30)[0]) == 101 + warm
