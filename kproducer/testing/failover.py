"""Keyed load through a cluster that fails, and the verdict on what it stored.

A :class:`KeyedLoad` sends ``key:sequence`` records at a steady rate while scheduled faults
happen (leaders move, brokers go down, answers carry errors), noting when each record was
sent and when and how it ended. :func:`verify` reads the topic back with an independent
client (confluent-kafka's consumer) and says what went wrong: records acknowledged but not
stored (lost), stored twice (duplicated), stored in another order than sent for their key
(out of order), or never ended (neither acknowledged nor failed). :func:`recovery_ms` is the
time from the last acknowledgement before a fault to the first after it, per partition.

The client is anything with ``send(topic, key, value, on_done)`` and ``flush(timeout)``:
:class:`KProducerClient` wraps a kproducer ``Producer``, :class:`ConfluentClient` a
confluent-kafka ``Producer`` (the benchmark's failover scenario runs both through the same
load).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .readback import read_back

__all__ = ["Fault", "KeyedLoad", "KProducerClient", "ConfluentClient", "Sent", "Verdict",
           "verify", "recovery_ms"]


@dataclass
class Sent:
    """One record of the load: ``key``'s ``seq``-th, and how it ended."""

    key: bytes
    seq: int
    sent_at: float
    done_at: float | None = None
    partition: int = -1
    error: BaseException | str | None = None

    @property
    def value(self) -> bytes:
        return self.key + b":%d" % self.seq


@dataclass
class Fault:
    """``action()`` at ``at_s`` seconds into the load; ``partitions`` it takes a leader from
    (for :func:`recovery_ms`; empty when it moves none)."""

    at_s: float
    name: str
    action: Callable[[], object]
    partitions: Sequence[int] = ()
    happened_at: float | None = None


class KProducerClient:
    """A kproducer ``Producer`` as a load's client."""

    def __init__(self, producer):
        self.producer = producer

    def send(self, topic: str, key: bytes, value: bytes, on_done) -> None:
        def done(f, on_done=on_done):
            exc = f.exception(0)
            on_done(-1 if exc is not None else f.result(0).partition, exc)
        self.producer.send(topic, value, key=key).add_done_callback(done)

    def flush(self, timeout: float) -> None:
        self.producer.flush(timeout)


class ConfluentClient:
    """A confluent-kafka ``Producer`` as a load's client (delivery reports served by
    ``poll(0)`` after every send and by ``flush``)."""

    def __init__(self, producer):
        self.producer = producer

    def send(self, topic: str, key: bytes, value: bytes, on_done) -> None:
        def report(err, msg, on_done=on_done):
            on_done(msg.partition() if err is None else -1, None if err is None else str(err))
        while True:
            try:
                self.producer.produce(topic, value, key, on_delivery=report)
                break
            except BufferError:          # its queue is full: serve reports, then again
                self.producer.poll(0.005)
        self.producer.poll(0)

    def flush(self, timeout: float) -> None:
        left = self.producer.flush(timeout)
        if left:
            raise TimeoutError(f"confluent-kafka flush left {left} record(s) after {timeout} s")


class KeyedLoad:
    """``rate`` records/s for ``duration_s`` seconds over ``keys`` keys (``b"k0"``, ...),
    round robin, each record's value ``key:seq``; ``faults`` happen at their times.
    ``seed`` shuffles the key order so that runs differ."""

    def __init__(self, topic: str, *, keys: int = 24, rate: int = 5000, duration_s: float = 5.0,
                 faults: Iterable[Fault] = (), seed: int = 0):
        self.topic = topic
        rng = random.Random(seed)
        self.keys = [b"k%d" % i for i in range(keys)]
        rng.shuffle(self.keys)
        self.rate = rate
        self.duration_s = duration_s
        self.faults = sorted(faults, key=lambda f: f.at_s)
        self.records: list[Sent] = []
        self.started_at = 0.0

    def run(self, client, *, flush_timeout: float = 120.0) -> list[Sent]:
        """Sends the load through ``client``, then flushes; returns every record sent."""
        seqs = dict.fromkeys(self.keys, 0)
        pending = list(self.faults)
        t0 = self.started_at = time.monotonic()
        n = 0
        total = int(self.rate * self.duration_s)
        while n < total:
            now = time.monotonic()
            while pending and pending[0].at_s <= now - t0:
                f = pending.pop(0)
                f.happened_at = time.monotonic()
                f.action()
            key = self.keys[n % len(self.keys)]
            rec = Sent(key, seqs[key], time.monotonic())
            seqs[key] += 1
            self.records.append(rec)
            client.send(self.topic, key, rec.value, lambda p, err, rec=rec: self._done(rec, p, err))
            n += 1
            if n % 25 == 0:
                lag = t0 + n / self.rate - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
        for f in pending:                # faults scheduled after the last send
            f.happened_at = time.monotonic()
            f.action()
        client.flush(flush_timeout)
        return self.records

    def _done(self, rec: Sent, partition: int, err) -> None:
        rec.done_at = time.monotonic()
        rec.partition = partition
        rec.error = err


@dataclass
class Verdict:
    """What :func:`verify` found; :meth:`check` raises AssertionError naming the first few."""

    sent: int = 0
    acked: int = 0
    failed: list = field(default_factory=list)          # [(key, seq, error)]
    not_ended: list = field(default_factory=list)       # [(key, seq)]
    lost: list = field(default_factory=list)            # acknowledged, not read back
    duplicated: list = field(default_factory=list)      # read back more than once
    out_of_order: list = field(default_factory=list)    # (key, seq, after seq, partition, offset)
    unknown: list = field(default_factory=list)         # read back, never sent
    read: int = 0

    def check(self, *, allow_failed: bool = False) -> None:
        problems = []
        for what in ("not_ended", "lost", "duplicated", "out_of_order", "unknown"):
            got = getattr(self, what)
            if got:
                problems.append(f"{len(got)} {what.replace('_', ' ')} (first: {got[:3]})")
        if self.failed and not allow_failed:
            problems.append(f"{len(self.failed)} failed (first: {self.failed[:3]})")
        if problems:
            raise AssertionError(f"of {self.sent} records ({self.acked} acknowledged, "
                                 f"{self.read} read back): " + "; ".join(problems))


def verify(bootstrap: str, topic: str, records: Sequence[Sent], *, timeout: float = 60.0,
           consumer_config=None) -> Verdict:
    """Reads ``topic`` back (confluent-kafka's consumer) and compares it with ``records``.

    Per key, the sequences read must rise by one each time, in offset order within the
    key's partition, and hold every acknowledged record once. A failed record may have been
    stored (its fate was unknown when it failed): it may appear, in its place, but not twice.
    With ``consumer_config={"isolation.level": "read_committed"}`` only committed
    transactions are read.
    """
    v = Verdict(sent=len(records))
    by_value = {}
    for r in records:
        by_value[r.value] = r
        if r.done_at is None:
            v.not_ended.append((r.key, r.seq))
        elif r.error is None:
            v.acked += 1
        else:
            v.failed.append((r.key, r.seq, str(r.error)))
    got = read_back(bootstrap, topic, timeout=timeout, consumer_config=consumer_config)
    seen: dict = {}
    last: dict = {}
    for partition, msgs in got.items():
        for m in msgs:
            v.read += 1
            r = by_value.get(m.value)
            if r is None or m.key != r.key:
                v.unknown.append((m.key, m.value, partition, m.offset))
                continue
            if m.value in seen:
                v.duplicated.append((r.key, r.seq, partition, m.offset))
                continue
            seen[m.value] = True
            prev = last.get(r.key, -1)
            if r.seq < prev:
                v.out_of_order.append((r.key, r.seq, prev, partition, m.offset))
            last[r.key] = max(prev, r.seq)
    for r in records:
        if r.done_at is not None and r.error is None and r.value not in seen:
            v.lost.append((r.key, r.seq))
    return v


def recovery_ms(records: Sequence[Sent], faults: Sequence[Fault]) -> list[float]:
    """For each fault that took leaders from partitions and each such partition: the time
    from the last acknowledgement there before the fault to the first acknowledgement of a
    record sent after it, in ms. (An acknowledgement that comes just after the fault may be
    for a record the broker stored before it: counted, it makes a client look recovered
    while nothing sent since is acknowledged.)"""
    acks: dict = {}
    for r in records:
        if r.error is None and r.done_at is not None:
            acks.setdefault(r.partition, []).append((r.done_at, r.sent_at))
    for times in acks.values():
        times.sort()
    out = []
    for f in faults:
        if f.happened_at is None:
            continue
        for p in f.partitions:
            times = acks.get(p, [])
            before = [done for done, _ in times if done <= f.happened_at]
            after = [done for done, sent in times if sent > f.happened_at]
            if before and after:
                out.append((after[0] - before[-1]) * 1000.0)
    return out
