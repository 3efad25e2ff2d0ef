"""Failover and long round trips on librdkafka's mock cluster, kproducer against confluent-kafka
in the same run; one client run per process: ``python -m bench.failover SPEC_JSON`` prints one
JSON line.

The cluster is :class:`kproducer.testing.mock_cluster.MockCluster`: three brokers that are
threads of the client's own process (a fresh cluster for every run, so no run inherits another's
state), one topic of 6 partitions with replication 3, partition p led by broker p % 3 + 1 at
the start. Each client is at its defaults, given the broker address only; in ``failover``
confluent-kafka is also given ``enable.idempotence=true``, kproducer's default (without it
librdkafka may reorder or duplicate a key's records on a retry, which the run's check fails);
``rtt`` runs confluent-kafka both ways, at its real defaults (no idempotence: "confluent-kafka
(defaults)") and with idempotence ("confluent-kafka (idempotent)"), and reports kproducer's
ratio to each (each row's ``settings`` says what was given, ``DEFAULTS_NOTE`` what stays in
force). Before the clock each client has one record
per partition acknowledged (failover: on a warm-up topic of its own, so that the measured topic
holds the load alone; rtt: on the measured topic), so connections to every broker and the
producer id are in place.

``failover`` (:func:`run_failover`): ``key:seq`` records over ``KEYS`` keys at ``RATE``
records/s for ``seconds`` (:class:`kproducer.testing.failover.KeyedLoad`), while the faults of
:func:`fault_plan` happen at the same times for both clients of a round (same seed, same
faults): every partition's leader moves to another broker; the broker leading some partitions
goes down, and 0.2 s later (as a controller would) their leadership moves to the other brokers;
it comes back 1.5 s after it went; then every partition's leadership goes back to its first
broker (the preferred leader, as Kafka's leader rebalance does), so the client must reach the
broker that was down again. The times are those of a 6 s load, scaled to ``seconds``; the
mock applies them on a thread of their own (:class:`FaultDriver`, which says why). The topic is
then read back (:func:`kproducer.testing.failover.verify`: every acknowledged record stored
once, each key's records in the order sent, every record settled) and the recovery is measured
per partition a fault took a leader from, as :func:`kproducer.testing.failover.recovery_ms`
does, from the partition's last acknowledgement before the change to its first after it, with
two differences (:func:`_per_fault` says why): the change's time is when the mock had applied
it, and the first acknowledgement after it is that of a record sent after it. That counts the
client's detection of the change (an error answer, a lost connection), its metadata refresh,
its backoffs, reconnecting and the resend; its floor is one batch's wait at this rate (a few
ms) plus, for a broker that went down, the 0.2 s until new leaders are elected. A row also
keeps, per fault and partition, that first acknowledgement counted from the change
(``since_fault_ms``) and, for the broker going down, the first after the election counted from
the election (``since_elect_ms``): what of that recovery the client controls. Acknowledgement
times are those the client reports them at (confluent-kafka: in the ``poll(0)`` after every
produce, so within 0.2 ms at this rate).

``rtt`` (:func:`run_rtt`): every broker answers every request ``rtt_ms`` late
(``set_rtt_all``); ``records`` records of 100 B values with a key each (:mod:`bench.data`;
many round trips' worth, :data:`RECORDS_PER_ROUND_TRIP`) sent
as fast as the client takes them (kproducer: ``Producer.send``; confluent-kafka: ``produce``
and ``poll(0)``, ``poll(0.005)`` on ``BufferError``), then flushed; records/s from the first
send to the last acknowledgement (the flush's return). The topic is read back
(:func:`check_read_back`: stored counts, and the records the mock keeps one by one). The mock
is a functional mock, not a performance reference (its brokers share this process and its
CPUs with the client, and a real broker's costs are not modelled), so these figures do not
stand for a real cluster's throughput; but over a long round trip the round trip dominates:
what a client keeps in flight per round trip (batch sizes, requests in flight, partitions per
request) decides its records/s, which is why the comparison is meaningful there. The 0 ms row
only checks that nothing is lost.
"""

from __future__ import annotations

import json
import random
import sys
import time

BROKERS = 3
PARTITIONS = 6
REPLICATION = 3
TOPIC = "bench"
WARMUP_TOPIC = "bench-warm-up"
WARMUP_VALUE = b"warm-up"

KPRODUCER = "kproducer"
# confluent-kafka with enable.idempotence=true (kproducer's default), and at its own defaults.
CONFLUENT = "confluent-kafka (idempotent)"
CONFLUENT_DEFAULTS = "confluent-kafka (defaults)"
CLIENTS = (KPRODUCER, CONFLUENT_DEFAULTS, CONFLUENT)
# failover: like for like only (librdkafka without idempotence does not keep a key's order
# across retries, which the run's check would fail); rtt: confluent-kafka both ways.
FAILOVER_CLIENTS = (KPRODUCER, CONFLUENT)
RTT_CLIENTS = (KPRODUCER, CONFLUENT_DEFAULTS, CONFLUENT)
REFERENCE = CONFLUENT
# The rtt scenario's ratios: kproducer's records/s over each of these.
RTT_REFERENCES = (CONFLUENT_DEFAULTS, CONFLUENT)
DISTRIBUTION = {KPRODUCER: "kproducer", CONFLUENT: "confluent-kafka",
                CONFLUENT_DEFAULTS: "confluent-kafka"}
# The producer client of bench.clients each one is (--clients).
USES = {KPRODUCER: "kproducer send()", CONFLUENT: "confluent produce/poll",
        CONFLUENT_DEFAULTS: "confluent produce/poll"}

# The failover load: records/s, keys (round robin, ten per partition on average) and the
# length of the load whose fault times fault_plan scales.
RATE = 5000
KEYS = 60
PLAN_SECONDS = 6.0
# The rtt scenario's value size (its round trips and records: bench.scenarios.Sizes).
VALUE_SIZE = 100
# The rtt scenario's unit of size: about what the larger window of the clients at their
# defaults holds, so that a run of k times this many records lasts at least k round trips
# wherever the round trip decides the rate. kproducer: 3 brokers x 5 requests in flight x
# 1 MiB, about 120,000 of these records; confluent-kafka: queue.buffering.max.messages,
# 100,000. A window's first round trip (the start: connections are up, but nothing is in
# flight yet) is then a small part of the run, not a third of it.
RECORDS_PER_ROUND_TRIP = 120_000

# Fault names, in the order they happen (the table's rows).
MOVE, DOWN, ELECT, UP, MOVE_BACK = ("leaders move", "leader broker down", "leaders elected",
                                    "broker up", "leaders move back")
RECOVERY_FAULTS = (MOVE, DOWN, MOVE_BACK)     # the faults that take leaders from partitions


def settings(client: str, bootstrap: str) -> dict:
    """What ``client`` is given, in its own names: the broker address (and, for the
    idempotent confluent-kafka, idempotence, kproducer's default)."""
    if client == KPRODUCER:
        return {"bootstrap_servers": bootstrap}
    if client == CONFLUENT:
        return {"bootstrap.servers": bootstrap, "enable.idempotence": True}
    if client == CONFLUENT_DEFAULTS:
        return {"bootstrap.servers": bootstrap}
    raise ValueError(f"unknown client {client!r}")


def shown_settings(client: str) -> dict:
    """The settings of a row, without the address (a fresh cluster's ports)."""
    return {k: v for k, v in settings(client, "").items() if "bootstrap" not in k}


DEFAULTS_NOTE = {
    KPRODUCER: "acks=all, idempotence on, linger.ms 5, batch.size 16 KiB growing to "
               "batch.max.size 256 KiB, buffer.memory 32 MiB, "
               "max.in.flight.requests.per.connection 5, "
               "retry.backoff.ms 100 (max 1000), reconnect.backoff.ms 50 (max 1000), "
               "request.timeout.ms 30000, delivery.timeout.ms 120000",
    CONFLUENT: "acks=all, linger.ms 5, batch.size 1 MB, batch.num.messages 10000, "
               "max.in.flight 5 (idempotence), queue.buffering.max.messages 100000, "
               "retry.backoff.ms 100 (max 1000), reconnect.backoff.ms 100 (max 10000), "
               "topic.metadata.refresh.fast.interval.ms 100, request.timeout.ms 30000, "
               "message.timeout.ms 300000 (librdkafka 2.16)",
    CONFLUENT_DEFAULTS: "acks=all, idempotence off, linger.ms 5, batch.size 1 MB, "
                        "batch.num.messages 10000, max.in.flight 1000000, "
                        "queue.buffering.max.messages 100000, retry.backoff.ms 100 (max 1000), "
                        "reconnect.backoff.ms 100 (max 10000), request.timeout.ms 30000, "
                        "message.timeout.ms 300000 (librdkafka 2.16)",
}


# ---- the faults -----------------------------------------------------------------------------

def fault_plan(seed: int, seconds: float = PLAN_SECONDS) -> dict:
    """The faults of a round, as data: ``initial`` leaders (partition p on broker p % 3 + 1,
    two each), then ``events`` of ``{"at_s", "name", "leaders" (after it), "down" (broker or
    None), "up", "partitions" (those it takes a leader from)}``, at the times of a
    ``PLAN_SECONDS`` load scaled to ``seconds``. ``seed`` picks where leaders go and which
    broker goes down (one that leads at least one partition then)."""
    rng = random.Random(seed)
    k = seconds / PLAN_SECONDS
    brokers = list(range(1, BROKERS + 1))
    initial = [p % BROKERS + 1 for p in range(PARTITIONS)]
    moved = [rng.choice([b for b in brokers if b != lead]) for lead in initial]
    victim = rng.choice(sorted(set(moved)))
    led = [p for p, b in enumerate(moved) if b == victim]
    others = [b for b in brokers if b != victim]
    elected = [rng.choice(others) if p in led else b for p, b in enumerate(moved)]
    back = [p for p in range(PARTITIONS) if elected[p] != initial[p]]
    events = [
        {"at_s": 1.0 * k, "name": MOVE, "leaders": moved, "down": None, "up": None,
         "partitions": [p for p in range(PARTITIONS) if moved[p] != initial[p]]},
        {"at_s": 2.0 * k, "name": DOWN, "leaders": moved, "down": victim, "up": None,
         "partitions": led},
        {"at_s": 2.2 * k, "name": ELECT, "leaders": elected, "down": None, "up": None,
         "partitions": []},
        {"at_s": 3.5 * k, "name": UP, "leaders": elected, "down": None, "up": victim,
         "partitions": []},
        {"at_s": 4.5 * k, "name": MOVE_BACK, "leaders": initial, "down": None, "up": None,
         "partitions": back},
    ]
    return {"seed": seed, "seconds": seconds, "initial": initial, "victim": victim,
            "events": events}


class FaultDriver:
    """Applies the plan's events to the mock cluster on a thread of its own, in order, and
    notes when each took effect: per partition, when the call that changed it (its leader's
    move, its leader's broker going down) returned.

    Not in the load's thread: a control call on the mock returns when the mock's thread has
    applied it, and that thread sometimes took the call only when its poll timed out, up to
    a second later (``rdkafka_mock.c``, ``rd_kafka_mock_cluster_thread_main`` polls for at
    most 1 s). Called from the load's thread (KeyedLoad runs its faults inline), 1 of the 6
    leader moves of a round took 1,001 ms in 4 of 4 kproducer runs of the 0.6 s plan, and
    94 ms once in 4 confluent-kafka runs: the load stopped meanwhile, the client fell silent,
    and the recovery counted the mock's second. On this thread, with the load going on, no
    call took more than about 7 ms in the runs since; and a recovery counts from the moment
    the change took effect."""

    def __init__(self, mc, plan: dict):
        import queue
        import threading

        self.mc, self.plan = mc, plan
        self.applied: dict[str, dict] = {}     # event name -> {"at", "partitions": {p: t}}
        self.calls: list[tuple[str, float]] = []   # (call, ms)
        self.error: BaseException | None = None
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="bench-faults", daemon=True)
        self._thread.start()

    def faults(self):
        """The plan's events as :class:`kproducer.testing.failover.Fault` (each action hands
        its event to the driver's thread)."""
        from kproducer.testing.failover import Fault

        out, before = [], self.plan["initial"]
        for e in self.plan["events"]:
            out.append(Fault(e["at_s"], e["name"], lambda e=e, b=before: self._queue.put((e, b)),
                             partitions=e["partitions"]))
            before = e["leaders"]
        return out

    def _call(self, what: str, fn, *args) -> float:
        t0 = time.monotonic()
        fn(*args)
        t1 = time.monotonic()
        self.calls.append((what, (t1 - t0) * 1000.0))
        return t1

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            event, before = item
            if self.error is not None:
                continue
            try:
                done: dict[int, float] = {}
                if event["down"] is not None:
                    t = self._call("broker_down", self.mc.broker_down, event["down"])
                    done.update((p, t) for p in event["partitions"])
                if event["up"] is not None:
                    self._call("broker_up", self.mc.broker_up, event["up"])
                for p, b in enumerate(event["leaders"]):
                    if b != before[p]:
                        done[p] = self._call("set_leader", self.mc.set_leader, TOPIC, p, b)
                self.applied[event["name"]] = {"at": time.monotonic(), "partitions": done}
            except BaseException as exc:     # re-raised by join()
                self.error = exc

    def join(self) -> None:
        self._queue.put(None)
        self._thread.join(60)
        if self.error is not None:
            raise self.error


# ---- the clients ----------------------------------------------------------------------------

def _cluster(rtt_ms: int = 0):
    from kproducer.testing.mock_cluster import MockCluster

    mc = MockCluster(BROKERS)
    mc.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=REPLICATION)
    mc.create_topic(WARMUP_TOPIC, partitions=PARTITIONS, replication_factor=REPLICATION)
    for p in range(PARTITIONS):
        for topic in (TOPIC, WARMUP_TOPIC):
            mc.set_leader(topic, p, p % BROKERS + 1)
    if rtt_ms:
        mc.set_rtt_all(rtt_ms)
    return mc


def _producer(client: str, bootstrap: str):
    """(the producer, a :mod:`kproducer.testing.failover` client wrapping it)."""
    from kproducer.testing.failover import ConfluentClient, KProducerClient

    conf = settings(client, bootstrap)
    if client == KPRODUCER:
        from kproducer import Producer
        p = Producer(**conf)
        return p, KProducerClient(p)
    from confluent_kafka import Producer
    p = Producer(conf)
    return p, ConfluentClient(p)


def _warm_up(client: str, p, topic: str, value: bytes = WARMUP_VALUE) -> None:
    """One record to every partition of ``topic``, each acknowledged: connections to every
    broker, metadata and the producer id in place before the clock."""
    if client == KPRODUCER:
        for f in [p.send(topic, value, partition=i) for i in range(PARTITIONS)]:
            f.result(120)
        return
    errors = []
    for i in range(PARTITIONS):
        p.produce(topic, value, partition=i, on_delivery=lambda err, msg: errors.append(err))
    if p.flush(120) != 0 or errors != [None] * PARTITIONS:
        raise RuntimeError(f"confluent-kafka warm-up not delivered: {errors}")


def _close(client: str, p) -> None:
    if client == KPRODUCER:
        p.close(30)
    else:
        p.flush(30)


def _stats(client: str, p) -> dict:
    """The client's own counters worth keeping beside a run (kproducer's metrics)."""
    if client != KPRODUCER:
        return {}
    m = p.metrics()
    return {k: m.get(k) for k in ("requests", "batches", "retries", "records_failed",
                                  "producer_id_resets", "rebootstraps", "max_batch_bytes",
                                  "request_latency_p50_ms", "request_latency_p99_ms")}


# ---- failover -------------------------------------------------------------------------------

def _per_fault(records, driver: FaultDriver) -> list[dict]:
    """Per fault that took leaders and per partition it took one from: the recovery, from
    the partition's last acknowledgement before the change took effect to the first
    acknowledgement after it of a record sent after it; that first acknowledgement counted
    from the change (``since_fault_ms``); and (broker down) the first acknowledgement after
    the election of a record sent after the broker went down, counted from the election
    (``since_elect_ms``).

    Why "of a record sent after it": an acknowledgement the client reports just after the
    change may be for a record the broker stored before it (its answer was on its way, or
    the client had not yet handed it to the application). Counted as the first after, it
    made a broker that went down look recovered in 1-11 ms while no record sent after it was
    acknowledged for another 500 ms (confluent-kafka, measured). A record sent after the
    change can only be stored by the cluster as it is after the change (the rule of
    :func:`kproducer.testing.failover.recovery_ms`, which counts from when the load asked
    for the fault instead)."""
    acks: dict[int, list[tuple[float, float]]] = {}
    for r in records:
        if r.error is None and r.done_at is not None:
            acks.setdefault(r.partition, []).append((r.done_at, r.sent_at))
    for times in acks.values():
        times.sort()
    elect = driver.applied.get(ELECT)
    out = []
    for name in RECOVERY_FAULTS:
        applied = driver.applied.get(name)
        if applied is None:
            continue
        for p, at in sorted(applied["partitions"].items()):
            times = acks.get(p, [])
            before = [done for done, _ in times if done <= at]
            after = [done for done, sent in times if sent > at]
            if not (before and after):
                continue
            row = {"fault": name, "partition": p, "recovery_ms": (after[0] - before[-1]) * 1000.0,
                   "since_fault_ms": (after[0] - at) * 1000.0}
            if name == DOWN and elect is not None:
                elected_at = elect["partitions"].get(p, elect["at"])
                later = [done for done, sent in times if sent > at and done > elected_at]
                if later:
                    row["since_elect_ms"] = (later[0] - elected_at) * 1000.0
            out.append(row)
    return out


def run_failover(spec: dict) -> dict:
    from kproducer.testing.failover import KeyedLoad, recovery_ms, verify

    client, seconds, rate = spec["client"], spec["seconds"], spec.get("rate", RATE)
    plan = fault_plan(spec["seed"], seconds)
    mc = _cluster()
    try:
        p, wrapped = _producer(client, mc.bootstrap)
        try:
            _warm_up(client, p, WARMUP_TOPIC)
            driver = FaultDriver(mc, plan)
            faults = driver.faults()
            load = KeyedLoad(TOPIC, keys=spec.get("keys", KEYS), rate=rate, duration_s=seconds,
                             faults=faults, seed=spec["seed"])
            t0 = time.monotonic()
            try:
                records = load.run(wrapped, flush_timeout=spec.get("flush_timeout", 180.0))
            finally:
                driver.join()
            elapsed = time.monotonic() - t0
            stats = _stats(client, p)
        finally:
            _close(client, p)
        for b in list(mc.down):             # a fault plan cut short: read back from every broker
            mc.broker_up(b)
        verdict = verify(mc.bootstrap, TOPIC, records, timeout=120)
    finally:
        mc.close()
    per_fault = _per_fault(records, driver)
    fault_times = {f.name: {
        "requested_ms": None if f.happened_at is None
        else round((f.happened_at - load.started_at) * 1000.0, 1),
        "applied_ms": None if f.name not in driver.applied
        else round((driver.applied[f.name]["at"] - load.started_at) * 1000.0, 1)}
        for f in faults}
    return {"sent": verdict.sent, "acked": verdict.acked, "failed": len(verdict.failed),
            "first_failure": verdict.failed[0][2] if verdict.failed else None,
            "not_ended": len(verdict.not_ended), "lost": len(verdict.lost),
            "duplicated": len(verdict.duplicated), "out_of_order": len(verdict.out_of_order),
            "unknown": len(verdict.unknown), "read": verdict.read,
            "problems": _problems(verdict),
            "recovery_ms": [x["recovery_ms"] for x in per_fault], "per_fault": per_fault,
            # The same, timed from when the load asked for each fault (recovery_ms as is):
            # these include the mock's delay in applying it.
            "recovery_ms_from_request": recovery_ms(records, faults),
            "control_call_max_ms": max((ms for _, ms in driver.calls), default=None),
            "fault_times_ms": fault_times,
            "plan": plan, "seconds": elapsed, "achieved_rate": verdict.sent / elapsed,
            "client_stats": stats}


def _problems(verdict) -> str | None:
    try:
        verdict.check(allow_failed=True)
    except AssertionError as exc:
        return str(exc)[:1500]
    return None


# ---- long round trips -----------------------------------------------------------------------

def _send_all(client: str, p, topic: str, values, keys) -> None:
    if client == KPRODUCER:
        send = p.send
        for v, k in zip(values, keys):
            send(topic, v, key=k)
        p.flush()
        return
    produce, poll = p.produce, p.poll
    for v, k in zip(values, keys):
        while True:
            try:
                produce(topic, v, k)
                break
            except BufferError:          # queue full: serve delivery reports, then retry
                poll(0.005)
        poll(0)
    left = p.flush(600)
    if left:
        raise RuntimeError(f"confluent-kafka: {left} messages still queued after flush")


def check_read_back(bootstrap: str, topic: str, expected: int, *, warmups: int,
                    timeout: float | None = None) -> dict:
    """Reads ``topic`` back (confluent-kafka's consumer, CRC checks on) and checks what a
    mock partition keeps.

    The mock keeps the last 5 MiB (and 100,000 batches) of each partition and drops the
    oldest batches beyond that (``rdkafka_mock.c``, ``rd_kafka_mock_partition_log_append``:
    ``max_size``, fixed); the rtt scenario's 1,200,000 records of 100 B over 6 partitions are
    about 25 MB each, so most of every partition is gone before the read-back. So: every
    partition's log end offset counts what it stored (the offsets go on from 0), and their sum
    must be ``expected + warmups`` exactly; each record still there is checked one by one (an
    index of :mod:`bench.data` in range, seen once, each partition's indices rising in offset
    order: one producer sent them in index order) and the offsets kept must follow each other;
    and every index from ``checked_from`` on (the first index kept in the partition trimmed
    the most: past it, no partition dropped anything) must be there. Returns ``{"ok", "read",
    "stored", "dropped_by_mock", "checked_from", "lost", "duplicated", "out_of_order",
    "per_partition", "error", "seconds"}`` (``lost``: missing from the checked indices, or
    fewer stored than sent; ``duplicated``: seen twice, or more stored than sent)."""
    from bench.data import INDEX_BYTES
    from kproducer.testing.readback import messages_to_end, verifying_consumer

    started = time.monotonic()
    deadline = started + (timeout if timeout is not None else 60.0 + expected / 20_000)
    consumer = verifying_consumer(bootstrap, "kproducer-bench-failover", None)
    seen = bytearray(expected)
    parts = list(range(PARTITIONS))
    first_offset = {p: None for p in parts}      # the oldest offset the mock kept
    first_index = {p: None for p in parts}       # the first record index kept
    next_offset = {p: None for p in parts}
    count = {p: 0 for p in parts}
    last = {p: -1 for p in parts}
    read = warm = duplicated = out_of_order = stray = gaps = 0
    error = None
    try:
        for m in messages_to_end(consumer, topic, parts, deadline, f"topic {topic!r}"):
            read += 1
            p, value, offset = m.partition(), m.value(), m.offset()
            count[p] += 1
            if first_offset[p] is None:
                first_offset[p] = offset
            elif offset != next_offset[p]:
                gaps += 1
            next_offset[p] = offset + 1
            if value == WARMUP_VALUE:
                warm += 1
                continue
            i = int.from_bytes(value[-INDEX_BYTES:], "big") if value else -1
            if not 0 <= i < expected:
                stray += 1
                continue
            if first_index[p] is None:
                first_index[p] = i
            if seen[i]:
                duplicated += 1
                continue
            seen[i] = 1
            if i < last[p]:
                out_of_order += 1
            last[p] = max(last[p], i)
    except Exception as exc:             # TimeoutError, ReadBackError
        error = f"{exc} ({read} records read)"
    finally:
        consumer.close()
    stored = {p: next_offset[p] or 0 for p in parts}
    dropped = sum(first_offset[p] or 0 for p in parts)
    # Past the first index kept in every trimmed partition nothing was dropped anywhere.
    checked_from = max([first_index[p] for p in parts
                        if first_offset[p] and first_index[p] is not None] or [0])
    missing = expected - checked_from - sum(seen[checked_from:])
    # The stored count against what was sent, less what the records kept explain: the rest
    # was lost or duplicated in what the mock dropped.
    unexplained = sum(stored.values()) - (expected + warmups) - (duplicated - missing)
    lost = missing + max(0, -unexplained)
    duplicated += max(0, unexplained)
    problems = [error] if error else []
    for n, what in ((lost, "lost"), (duplicated, "duplicated"), (out_of_order, "out of order"),
                    (stray, "with unexpected values"), (gaps, "after a gap in the offsets")):
        if n:
            problems.append(f"{n} records {what}")
    if warm > warmups:
        problems.append(f"{warm} warm-up records, expected {warmups}")
    return {"ok": not problems, "read": read, "stored": sum(stored.values()),
            "dropped_by_mock": dropped, "checked_from": checked_from, "lost": lost,
            "duplicated": duplicated, "out_of_order": out_of_order,
            "per_partition": {p: stored[p] for p in parts},
            "error": "; ".join(problems) or None, "seconds": time.monotonic() - started}


def run_rtt(spec: dict) -> dict:
    from bench.data import make_keys, make_values

    client, n = spec["client"], spec["records"]
    values = make_values(n, spec.get("value_size", VALUE_SIZE))
    keys = make_keys(n)
    mc = _cluster(spec["rtt_ms"])
    try:
        p, _ = _producer(client, mc.bootstrap)
        try:
            # On the measured topic: its metadata too is in place before the clock.
            _warm_up(client, p, TOPIC)
            t0, c0 = time.perf_counter(), time.process_time()
            _send_all(client, p, TOPIC, values, keys)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            stats = _stats(client, p)
        finally:
            _close(client, p)
        mc.set_rtt_all(0)                  # the read-back is not timed
        check = check_read_back(mc.bootstrap, TOPIC, n, warmups=PARTITIONS)
    finally:
        mc.close()
    # process_time() counts every thread of this process: the client's and the mock
    # brokers' (they are threads here too), so the CPU per record carries the mock's share.
    return {"seconds": seconds, "records_per_s": n / seconds,
            "process_cpu_seconds": cpu, "cpu_us_per_record": cpu / n * 1e6, "verify": check,
            "client_stats": stats}


def run(spec: dict) -> dict:
    if spec["scenario"] == "failover":
        out = run_failover(spec)
    elif spec["scenario"] == "rtt":
        out = run_rtt(spec)
    else:
        raise SystemExit(f"unknown scenario {spec['scenario']!r}")
    return {**out, "settings": shown_settings(spec["client"]),
            "defaults": DEFAULTS_NOTE[spec["client"]]}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
