"""Sender: the producer's I/O thread (Java's Sender, with the idempotence parts of its
TransactionManager): what one step does, and the policy -- retries, splits, metadata,
idempotence and sequence resets, transactions.

What runs where
---------------
Compiled, without the GIL: the Selector (csrc/kp_selector.c: every socket read and write,
framing, TLS); batches (csrc/kp_batch.c, the accumulator: records appended, compressed,
CRC'd); the Produce request and response (csrc/kp_produce.c: encoded and decoded in C, called
by the step); the turn's watcher (csrc/kp_turn.c), which raises ``pending`` when a step is
wanted; the courier (csrc/kp_courier.c), which sends lingering batches and reads their
acknowledgements between two steps.

Python, one *step* at a time under the step lock, on whichever thread runs it
(:mod:`kproducer.turn`: an application thread that holds the GIL, a thread waiting for what
the steps settle, or the I/O thread). Between steps the courier sends
(:mod:`kproducer.courier_handover`: armed as a step ends, taken as the next begins).

One step (:meth:`Sender.run_once`, Java's runOnce): take the courier's requests, ``poll(0)``
for the responses that arrived, refresh metadata when due, obtain a producer id when
idempotent, then ``ready`` -> ``drain`` -> one Produce request per broker -> ``poll(0)``,
which writes them -> arm the courier, and name the next step's deadline. Responses complete
batches, retry them (back to the head of their partition's queue, in sequence order, after
a backoff), split them (MESSAGE_TOO_LARGE) or fail them with an error that names the
broker's error code.

Idempotence: InitProducerId gives a producer id and epoch; each partition's
batches carry consecutive BaseSequence numbers. DUPLICATE_SEQUENCE_NUMBER counts
as success for a resent batch; for a batch's first send it means another batch holds its
sequence (two producers given one id) and is handled as UNKNOWN_PRODUCER_ID. A sequence gap
(OUT_OF_ORDER_SEQUENCE_NUMBER with no earlier retry to explain it, a sequenced batch that
failed for good) or UNKNOWN_PRODUCER_ID (the broker forgot us, as after a restart) is
recovered from by waiting until nothing is in flight, obtaining a fresh producer id and
renumbering every unacknowledged batch from 0, in the same order. (KIP-360's epoch bump is
the Java way; a fresh producer id works on every broker, Tansu included.)
"""

from __future__ import annotations

import threading
from collections import defaultdict

from kproducer._core import SenderTurn, batch_from_records
from kproducer.codec import decode_batch
from kproducer.counters import SenderCounters
from kproducer.courier_handover import CourierHandover
from kproducer.coordinator import CoordinatorRequests
from kproducer.metadata_updater import MetadataUpdater
from kproducer.errors import DeliveryTimeoutError, KafkaError, KafkaTimeoutError, NetworkError, PurgedError
from kproducer.backoff import ExponentialBackoff
from kproducer.clock import SYSTEM_TIME
from kproducer.error_reporter import ErrorReporter
from kproducer.log_context import LogContext
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.protocol.produce import decode_produce_response, encode_produce_request
from kproducer.protocol.errors_table import (ErrorCode, broker_error, is_invalid_metadata,
                                             is_retriable)
from kproducer.transactions import TransactionManager


_SEQ_MOD = 1 << 31   # BaseSequence wraps at Integer.MAX_VALUE (Java's DefaultRecordBatch)
# The counters of Producer.metrics(), there from the start (0 until counted).
COUNTERS = ("records_acked", "records_failed", "requests", "batches", "batch_bytes",
            "max_batch_bytes", "retries", "producer_id_resets", "duplicates_on_first_send",
            "steps_by_application", "steps_by_io_thread", "step_wait_us_total",
            "step_wait_us_max", "requests_by_courier", "responses_by_courier", "rebootstraps",
            "sequence_violations")


class Sender:
    """Runs the producer's network loop in a daemon thread; see the module docstring."""

    def __init__(self, config, accumulator, metadata, client, turn, *, on_complete=None, time=None,
                 log_context=None, errors=None):
        """``turn``: the kproducer.turn.StepTurn that ``accumulator`` was built with; it runs
        this Sender's steps. ``log_context``: the producer's (kproducer.log_context);
        ``errors``: its error_cb reporter (kproducer.error_reporter), the client's too."""
        self.config = config
        if log_context is None:
            log_context = getattr(client, "log_context", None) or LogContext(
                config.client_id or "kproducer", config.transactional_id)
        self.log_context = log_context
        self.log = log_context.logger(__name__)
        self.errors = errors if errors is not None else ErrorReporter()
        # The clocks (kproducer.clock): tests pass a mock and run the steps themselves.
        self.time = time if time is not None else SYSTEM_TIME
        self.acc = accumulator
        self.metadata = metadata
        self.client = client
        self.acks = config.acks
        self.idempotent = config.enable_idempotence
        self.max_request_size = config.max_request_size
        self.request_timeout_ms = config.request_timeout_ms
        self.delivery_timeout_ms = config.delivery_timeout_ms
        self.retries = config.retries
        # retry.backoff.ms doubling per attempt up to retry.backoff.max.ms, +/-20 % jitter.
        self.retry_backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self.on_complete = on_complete
        self.running = True
        self.force_close = False
        self.producer_id = -1
        self.producer_epoch = -1
        self._need_pid = self.idempotent
        self._pid_in_flight = False
        self._pid_retry_at = 0
        self.next_seq: dict = {}
        self.in_flight: dict = defaultdict(list)       # (topic, partition) -> [batch] in send order
        self.muted: set = set()                         # partitions waiting for in-flight retries
        # (topic, partition) -> the batches put back for a retry and not sent again yet: while
        # a partition has one, nothing more of it is sent while anything of it is in flight
        # (Java's RecordAccumulator.shouldStopDrainBatchesForPartition): a retry sent while an
        # earlier retry is in flight could be written before it, should the earlier fail again
        # (its leader moved once more, a broker that answered it with an error).
        self.requeued: dict = {}
        # (topic, partition) -> the node its in-flight batches went to. A partition sends to
        # one node at a time: when metadata names another leader while batches are in flight
        # to the old one, the partition is muted until they are answered (_on_metadata), so
        # that a batch sent to the new leader cannot be written before earlier ones the old
        # leader refuses, on a broker that does not check sequences (librdkafka's mock does
        # not, for a producer without a transactional id) as on one that does.
        self.in_flight_node: dict = {}
        # Partitions whose leader refused a batch as not its leader, until the next metadata
        # snapshot (_await_new_leader).
        self.awaiting_leader: set = set()
        self.acks0_nodes: set = set()                   # nodes that received acks=0 records
        # Batches purged while in flight (purge()): their answers are ignored when they come.
        self.purged: set = set()
        # A purge() that did not wait for the step lock (blocking=False): (in_queue,
        # in_flight), done as the next step begins.
        self.pending_purge = None
        self.stats = defaultdict(int, dict.fromkeys(COUNTERS, 0))
        # Per partition and per batch counts of the statistics and the Java-named metrics
        # (kproducer.counters); ``statistics``: the statistics.interval.ms reporter, and
        # ``sampler``: the samples of the Java-named metrics' rates, both set by the
        # producer (kproducer.statistics, kproducer.sampled); each takes one comparison
        # per step when nothing is due.
        self.counters = SenderCounters()
        self.statistics = None
        self.sampler = None
        self.fatal_error: Exception | None = None
        # Requests to a transaction or group coordinator (transactions, complete_transaction).
        self.coordinator = CoordinatorRequests(client, retry_backoff_ms=config.retry_backoff_ms,
                                               retry_backoff_max_ms=config.retry_backoff_max_ms,
                                               time=self.time,
                                               log=log_context.logger("kproducer.coordinator"))
        self.metadata_updater = MetadataUpdater(config, metadata, client, time=self.time,
                                                stats=self.stats, on_update=self._on_metadata_update,
                                                log=log_context.logger("kproducer.metadata_updater"),
                                                errors=self.errors)
        client.node_lost_listeners.append(self._on_node_lost)
        self.transactional_id = config.transactional_id
        self.txn = None
        if self.transactional_id is not None:
            # The transaction manager obtains the producer id (InitProducerId with the id).
            self.txn = TransactionManager(self.transactional_id, config.transaction_timeout_ms, self)
            self._need_pid = False
        # Which thread runs the next step (kproducer.turn): this Sender's steps from now on.
        self.turn = turn
        turn.bind(self)
        self._thread = threading.Thread(target=self._run, name="kproducer-network-thread", daemon=True)
        # The courier (csrc/kp_courier.h) writes the requests of batches it can compress in
        # C between steps; the steps write everything else.
        self.courier = CourierHandover(self)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        self.client.wakeup()

    def initiate_close(self, force: bool = False) -> None:
        self.force_close = self.force_close or force
        self.running = False
        self.wakeup()

    def join(self, timeout=None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        """The I/O thread (Java's Sender.run): the turns it gets, then the graceful close."""
        self.log.debug("sender thread started")
        turn = self.turn
        while self.running:
            turn.io_turn()
        # Graceful close: send what is queued and wait for what is in flight, holding the
        # step lock: nobody else steps any more.
        with turn.held():
            while self._closing_has_work():
                turn.step_safely()
                if not self._closing_has_work():
                    break       # the step settled the last: no step is wanted to wake this
                turn.watcher.wait()
            if self.force_close:
                self._fail_all(KafkaError("the producer was closed before this record was sent"))
            elif self.acks == 0:
                self._acks0_barrier()
            # Disarmed before the turn and the selector it writes to go (the courier's plan
            # points at both).
            self.courier.take(self.time.mono_ms())
            turn.close()
            self.client.close()
        self.log.debug("sender thread stopped")

    def _closing_has_work(self) -> bool:
        """A graceful close goes on while batches are queued or in flight."""
        return not self.force_close and bool(self.acc.queued_batches() or self._in_flight_batches())

    def _acks0_barrier(self) -> None:
        """Before a graceful close with acks=0: one request that does get a response, on
        every connection that carried records. Brokers answer a connection's requests in
        order, so its response means every record before it was processed; closing
        earlier could reset the connection (unread bytes in the receive buffer make the
        kernel send RST) and lose what the broker had not read yet."""
        now = self.time.mono_ms()
        waiting = set()
        for node_id in list(self.acks0_nodes):
            if self.client.state(node_id) != "READY":
                continue
            waiting.add(node_id)
            self.client.send(node_id, v.METADATA, m.MetadataRequest(topics=[], allow_auto_topic_creation=False),
                             lambda resp, err, n=node_id: waiting.discard(n), now)
        deadline = now + self.request_timeout_ms
        while waiting and self.time.mono_ms() < deadline:
            self.client.poll(min(100, max(0, deadline - self.time.mono_ms())), self.time.mono_ms())
        self.acks0_nodes.clear()

    def _in_flight_batches(self) -> int:
        return sum(len(b) for b in self.in_flight.values())

    # -- one step ----------------------------------------------------------------------

    def run_once(self) -> tuple:
        """One step's work, without waiting (Java's runOnce; the turn runs it, under the
        step lock): a poll(0) that reads and completes, metadata and a producer id when due,
        then ``ready`` -> ``drain`` -> one Produce request per broker -> a poll(0) that
        writes them. Returns ``(due_us, at_once)``: when the next step is due
        (``SenderTurn.now_us()``'s clock) and whether it is wanted at once (this step did
        I/O whose consequences may be sendable now)."""
        now = self.time.mono_ms()
        wall = self.time.wall_ms()
        self.courier.take(now)
        if self.pending_purge is not None:
            self._purge(*self.pending_purge)
        for node, exc in self.client.take_auth_failures():
            self._on_auth_failure(node, exc, wall)
        for topic in self.acc.take_touched():
            self.metadata.add(topic, wall)      # in use: not idle (metadata.max.idle.ms)
        # Responses first, as Java's Sender reads them (its poll) before its next
        # sendProducerData: an acknowledgement does not wait for the requests this step
        # builds and writes, and what it frees (in-flight room, a retry, a new producer id)
        # is seen below.
        answered = self.client.poll(0, now)
        if self.errors.pending:     # error_cb (kproducer.error_reporter), on this thread
            self.errors.deliver()
        if answered:
            now = self.time.mono_ms()
            wall = self.time.wall_ms()
        cap = self.metadata_updater.maybe_update(now, wall)
        sampler = self.sampler
        if sampler is not None and now >= sampler.next_roll_ms:
            sampler.roll(now)
        reporter = self.statistics
        if reporter is not None:
            # Here, with what the courier did taken and the answers read: the document's
            # counts of queued, in-flight and acknowledged records agree.
            if now >= reporter.due_ms:
                reporter.emit(now)
            elif now >= reporter.compact_ms:
                reporter.compact(now)
            cap = min(cap, max(0, reporter.due_ms - now))
        muted = self.muted
        if self.txn is not None:
            # Partitions new to the transaction wait for AddPartitionsToTxn, asked for here,
            # before the coordinator runs, so that the request goes out in this step.
            muted = self.txn.unsendable(self.acc.partitions_with_batches(), muted)
        if self.coordinator.pending():
            cap = min(cap, self.coordinator.run(now))
        if self.idempotent and not self._maybe_init_producer_id(now):
            cap = min(cap, 50)
            timeout = self._expire(wall, cap)
        else:
            timeout = min(cap, self._send_producer_data(now, wall, muted))
        now = self.time.mono_ms()
        # What the first poll handled was seen above (its consequences drained, their
        # deadlines in ``timeout``); what the second one handles was not: step again at once.
        # (Stepping again after the first poll's events too would cost a step that finds
        # nothing.) Until the next step, a batch that fills wakes no step while every
        # leader's window is full (RecordAccumulator._notify): the answer that makes room does.
        self.acc.windows_full = self.client.windows_full(
            self.courier.leader_nodes(),
            paced_at_us=None if self.acc.closed or self.acc.flushes_in_progress > 0
            else self.time.mono_us())
        if self.client.poll(0, now) or self.client.selector.needs_poll():
            self._arm_courier()
            return 0, True
        self._arm_courier()
        timeout = max(0, min(timeout, self.client.poll_timeout(now), 1 << 40))
        # The accumulator's deadlines are whole ms of the wall clock (batches' created_ms):
        # the watcher wakes at the instant ``wall`` + timeout begins, not up to 1 ms later.
        return SenderTurn.wall_to_mono_us(wall + timeout), timeout == 0

    def _arm_courier(self) -> None:
        """As the step ends, the courier may send until the next step begins
        (kproducer.courier_handover): not while a producer id is wanted or the producer
        closes; in a transaction, only to the partitions it has added, and only while it is
        open."""
        if not self.running or self.force_close:
            return
        if self.idempotent and (self._need_pid or self.producer_id < 0):
            return
        only = None
        if self.txn is not None:
            if not self.txn.courier_may_send():
                return
            only = self.txn.partitions_in_txn
        self.courier.arm(only)

    def _on_auth_failure(self, node: int, exc, wall: int) -> None:
        """A failed SASL authentication is not retried (Java's AuthenticationException):
        metadata waits raise it and the records queued for that broker fail with it, as do
        those of partitions with no leader now (the lost connection may have taken the
        metadata back to the bootstrap servers: no later answer would name a leader for them).
        Batches still in a retry backoff are failed at the next attempt, which fails too."""
        self.metadata.fatal_error(exc)
        known = self._leader_of_fn()

        def leader_of(topic, partition):
            leader = known(topic, partition)
            return node if leader < 0 else leader

        while True:
            drained = self.acc.drain(leader_of, {node}, 1 << 62, wall, lingering=True).get(node)
            if not drained:
                return
            for b in drained:
                self._fail(b, exc, wall)

    def _expire(self, wall: int, timeout: int) -> int:
        for b in self.acc.expired(wall, self.delivery_timeout_ms):
            self._fail(b, DeliveryTimeoutError(
                f"expiring {b.record_count} record(s) for {b.topic}-{b.partition}: "
                f"{wall - b.created_ms} ms has passed since batch creation "
                f"(delivery.timeout.ms={self.delivery_timeout_ms})"), wall)
        return timeout

    def _leader_of_fn(self):
        cluster = self.metadata.cluster

        def leader_of(topic, partition):
            node = cluster.leader_for(topic, partition)
            return -1 if node is None else node.node_id
        return leader_of

    def _send_producer_data(self, now: int, wall: int, muted: set) -> int:
        """ready -> drain -> Produce requests, but not to ``muted`` partitions."""
        leader_of = self._leader_of_fn()
        ready, next_delay, unknown = self.acc.ready(leader_of, wall, muted)
        if unknown:
            for topic in unknown:
                self.metadata.request_update_for_topic(topic)
            next_delay = min(next_delay, self.config.retry_backoff_ms)
        for node in list(ready):
            if node not in self.client.nodes:
                broker = self.metadata.cluster.node(node)
                if broker is not None:
                    self.client.set_node(node, broker.host, broker.port)
            if not self.client.ready(node, now):
                ready.discard(node)
                next_delay = min(next_delay, max(self.client.connection_delay(node, now), 5))
                self.acc.update_node_latency(node, now, False)   # the sticky partitioner's figures
            else:
                self.acc.update_node_latency(node, now, True)
        paced = self._paced(ready) if ready else None
        batches = self.acc.drain(leader_of, ready, self.max_request_size, wall, muted,
                                 paced=paced) if ready else {}
        if paced:
            for node, wait_ms in paced.items():
                if node not in batches:
                    next_delay = min(next_delay, wait_ms)
        for node, node_batches in batches.items():
            self._send_produce(node, node_batches, now)
        self._expire(wall, 0)
        if batches:
            return 0
        return max(0, min(next_delay, 1 << 30))

    def _paced(self, nodes) -> dict:
        """{node: ms left} of ``nodes`` whose next Produce request waits for its batches to
        fill (NetworkClient.paced_until_us; the courier paces its own the same way,
        kp_courier.h), none while the producer flushes or closes (every batch is as full as
        it will get then)."""
        acc = self.acc
        if acc.closed or acc.flushes_in_progress > 0:
            return {}
        now_us = self.time.mono_us()
        paced = {}
        for node in nodes:
            until = self.client.paced_until_us(node, now_us)
            if until:
                paced[node] = max(1, -(-(until - now_us) // 1000))
        return paced

    def _on_node_lost(self, node_id: int) -> None:
        """A connection failed or was lost (NetworkClient.node_lost_listeners): metadata is
        refreshed as soon as its backoff allows, since a leader may have moved off that
        broker or the broker may be gone (Java's handleServerDisconnect), and the
        coordinators on it are looked up again."""
        self.metadata_updater.node_lost(node_id)
        self.coordinator.node_lost(node_id)

    # -- produce -----------------------------------------------------------------------

    def _prepare(self, b) -> None:
        if not self.idempotent:
            if not b.finished:
                b.finish(-1, -1, -1)
            return
        if b.base_sequence < 0:
            tp = (b.topic, b.partition)
            seq = self.next_seq.get(tp, 0)
            self.next_seq[tp] = (seq + b.record_count) % _SEQ_MOD
            b.finish(self.producer_id, self.producer_epoch, seq, self.txn is not None)
        elif b.producer_id != self.producer_id or b.producer_epoch != self.producer_epoch or not b.finished:
            b.finish(self.producer_id, self.producer_epoch, b.base_sequence, self.txn is not None)

    def into_flight(self, batches: list, node: int) -> list:
        """The batches of one Produce request go in flight (a step's, or the courier's),
        counted in the metrics; returns the request's topics, [(topic, [(partition,
        batch)])] (batches export their bytes through the buffer protocol)."""
        by_topic = defaultdict(list)
        stats = self.stats
        requeued = self.requeued
        counters = self.counters
        parts = counters.partitions
        queue_ms = 0
        windows = counters.windows
        for b in batches:
            by_topic[b.topic].append((b.partition, b))
            tp = (b.topic, b.partition)
            self.in_flight[tp].append(b)
            self.in_flight_node[tp] = node
            if requeued:
                self._resent(tp, b)
            size = b.size_in_bytes
            stats["batch_bytes"] += size
            if size > stats["max_batch_bytes"]:
                stats["max_batch_bytes"] = size
            if size > counters.batch_size_peak:
                counters.batch_size_peak = size
            n = b.record_count
            pc = parts.get(tp) or counters.partition(tp)
            pc.txmsgs += n
            pc.txbytes += size
            waited = b.drained_ms - b.created_ms
            queue_ms += waited
            if waited > counters.queue_time_peak_ms:
                counters.queue_time_peak_ms = waited
            if windows:
                self._window_batch(b, node, size, n, waited)
        counters.queue_time_total_ms += queue_ms
        counters.queue_time_count += len(batches)
        stats["requests"] += 1
        stats["batches"] += len(batches)
        return list(by_topic.items())

    def _window_batch(self, b, node: int, size: int, records: int, waited_ms: int) -> None:
        """The statistics windows of a batch going out (statistics.interval.ms on): its
        topic's batchsize and batchcnt, its broker's int_latency (µs, one sample per batch:
        the time its first record waited)."""
        sizes, counts = self.counters.topic_window(b.topic)
        sizes.add(size)
        counts.add(records)
        ns = self.client.nodes.get(node)
        if ns is not None and ns.counters.int_latency is not None:
            ns.counters.int_latency.add(max(0, waited_ms) * 1000)

    def _send_produce(self, node: int, batches: list, now: int) -> None:
        for b in batches:
            self._prepare(b)
        topics = self.into_flight(batches, node)
        acks, timeout_ms, txn_id = self.acks, self.request_timeout_ms, self.transactional_id

        def encode(version, correlation_id, client_id):
            # Copies each batch once, into the request frame: the batches may be re-finished
            # (new producer id) for a retry afterwards.
            return encode_produce_request(version, correlation_id, client_id, acks, timeout_ms, topics, txn_id)

        if self.acks == 0:
            self.acks0_nodes.add(node)
        try:
            self.client.send(node, v.PRODUCE, topics,
                             lambda resp, err, batches=batches: self.on_produce(batches, resp, err, node),
                             now, expect_response=self.acks != 0, encoder=encode,
                             decoder=decode_produce_response)
        except KafkaError as exc:
            self.on_produce(batches, None, exc)

    def on_produce(self, batches: list, resp, err, node: int = -1) -> None:
        """The answer to a Produce request of ``batches`` (a step's, or one the courier wrote
        and did not see acknowledged): ``resp`` is decode_produce_response's
        (correlation_id, [(topic, partition, error_code, base_offset, log_append_time_ms,
        error_message)], throttle_time_ms, trailing bytes, leaders, endpoints), None with
        acks=0 (tests answer with the first two or four only); ``err`` when the request
        failed (the connection was lost, a timeout)."""
        wall = self.time.wall_ms()
        if resp is not None and len(resp) > 2:
            self.client.produce_answered(node, resp[2], resp[3])
            if len(resp) > 4 and resp[4]:
                self._leaders_named(resp[4], resp[5])
        if self.purged:
            batches = self._unpurged(batches)
        if err is not None:
            # Connection lost, request timed out: every batch of the request is retriable.
            for b in batches:
                self._retry_or_fail(b, err, wall, retriable=True)
            self._after_responses(batches)
            return
        if resp is None:  # acks=0: written is as good as it gets
            for b in batches:
                self._remove_in_flight(b)
                self._complete(b, -1, -1)
            self._after_responses(batches)
            return
        results = {(t, p): (code, off, lat, msg) for t, p, code, off, lat, msg in resp[1]}
        for b in batches:
            r = results.get((b.topic, b.partition))
            if r is None:
                self._retry_or_fail(b, NetworkError(
                    f"Produce response has no entry for {b.topic}-{b.partition}"), wall, retriable=True)
                continue
            code, base_offset, lat, msg = r
            self._handle_partition(b, code, base_offset, lat, msg, wall)
        self._after_responses(batches)

    def on_acknowledged(self, req, err) -> None:
        """A request whose response the courier read and found acknowledging every batch
        (``req``, a CourierRequest: ``req.results`` [(base_offset, log_append_time_ms)] by
        batch), once the responses ahead of it on its connection have been handled. ``err``:
        the connection was lost before they were, and the request fails as any in flight
        then does."""
        batches = req.batches
        if err is not None:
            self.on_produce(batches, None, err, req.node_id)
            return
        results = req.results
        if self.purged:
            kept = self._unpurged(batches)
            results = [r for b, r in zip(batches, results) if b in kept]
            batches = kept
        for b, (base_offset, log_append_time) in zip(batches, results):
            self._acknowledged(b, base_offset, log_append_time)
        self._after_responses(batches)

    # -- purge -------------------------------------------------------------------------

    def purge(self, in_queue: bool, in_flight: bool, blocking: bool) -> None:
        """Producer.purge: fails the batches not yet sent (``in_queue``) and those awaiting
        an answer (``in_flight``) with PurgedError, under the step lock; with ``blocking``
        False and a step under way, the next step does it (librdkafka's
        RD_KAFKA_PURGE_F_NON_BLOCKING) and this returns at once."""
        turn = self.turn
        if turn.in_step():              # a delivery callback: this thread is stepping
            self._purge(in_queue, in_flight)
            return
        if not turn.lock.acquire(blocking):
            q, f = self.pending_purge or (False, False)
            self.pending_purge = (q or in_queue, f or in_flight)
            self.wakeup()               # the step under way ends; the watcher wants the next
            return
        try:
            turn.owner = threading.get_ident()
            self.courier.take(self.time.mono_ms())
            self._purge(in_queue, in_flight)
            turn.step_safely()          # re-arms the courier, sends what came after
        finally:
            turn.owner = None
            turn.lock.release()
        self.wakeup()

    def _purge(self, in_queue: bool, in_flight: bool) -> None:
        """The purge itself, on the thread holding the step lock, the courier disarmed
        (its sends taken: in flight now). A batch purged in flight had its sequence numbers
        taken: with idempotence the producer takes a new producer id before it sends more
        (as librdkafka bumps the epoch after purging in-flight messages), so later records
        are accepted and in order; a transaction must abort."""
        self.pending_purge = None
        wall = self.time.wall_ms()
        if in_queue:
            err = PurgedError("purged before it was sent (purge(in_queue=True))", in_flight=False)
            for b in self.acc.abort_all():
                self._fail(b, err, wall)
        if in_flight:
            err = PurgedError("purged while its request awaited an answer (purge(in_flight=True)); "
                              "the answer is ignored", in_flight=True)
            batches = [b for lst in self.in_flight.values() for b in lst]
            for b in batches:
                self._remove_in_flight(b)
                if self.acks != 0:
                    self.purged.add(b)
                self._fail(b, err, wall)
            self._after_responses(batches)

    def _unpurged(self, batches: list) -> list:
        """``batches`` of an answered request without those purge() failed (whose answers
        are ignored: they are forgotten here)."""
        purged = self.purged
        kept = []
        for b in batches:
            if b in purged:
                purged.discard(b)
            else:
                kept.append(b)
        return kept

    def _resent(self, tp, b) -> None:
        """``b`` goes in flight: if it was put back for a retry it is no longer waiting; while
        others of its partition are, the partition sends nothing more until what is in flight
        is answered (muted; _after_responses lifts it)."""
        waiting = self.requeued.get(tp)
        if waiting is None:
            return
        waiting.discard(b)
        if waiting:
            self.muted.add(tp)
        else:
            del self.requeued[tp]

    def _check_sequence_kept(self, tp, b) -> None:
        """``b`` was stored while an earlier batch of its partition, refused, waits for its
        retry: a broker that checks sequences (Kafka, as every idempotent producer expects)
        refuses ``b`` with OUT_OF_ORDER_SEQUENCE_NUMBER instead. This one stored it, so the
        retried batch will land after it. Nothing can undo that; it is counted
        (``sequence_violations``) and logged, as librdkafka reports it (it raises a fatal
        error: "succeeded when expecting failure")."""
        seq = b.base_sequence
        if seq < 0 or not any(0 <= w.base_sequence < seq for w in self.requeued.get(tp, ())):
            return
        self.stats["sequence_violations"] += 1
        if self.stats["sequence_violations"] == 1:
            self.log.warning("%s-%s: the broker stored the batch of sequence %d while an earlier one, "
                        "refused, waits for its retry: it does not check idempotent sequences, "
                        "and this partition's records are stored out of order (counted in "
                        "metrics()['sequence_violations'])", tp[0], tp[1], seq)

    def _await_new_leader(self, tp) -> bool:
        """``tp``'s leader refused a batch as not (or no longer) its leader: while the
        metadata still names that node, the partition sends nothing (its retry would be
        refused again, and wait a doubled backoff after); the next snapshot lifts it
        (_on_metadata_update), whatever it names. False when the metadata names another
        leader already (the answer said which: KIP-951)."""
        node = self.in_flight_node.get(tp)
        leader = self.metadata.cluster.leader_for(tp[0], tp[1])
        if leader is not None and node is not None and leader.node_id != node:
            return False
        self.awaiting_leader.add(tp)
        self.muted.add(tp)
        return True

    def _after_responses(self, batches: list) -> None:
        for b in batches:
            tp = (b.topic, b.partition)
            if tp in self.muted and not self.in_flight.get(tp) and tp not in self.awaiting_leader:
                self.muted.discard(tp)

    def _remove_in_flight(self, b) -> None:
        tp = (b.topic, b.partition)
        lst = self.in_flight.get(tp)
        if lst is not None:
            try:
                lst.remove(b)
            except ValueError:
                pass
            if not lst:
                del self.in_flight[tp]
                self.in_flight_node.pop(tp, None)

    def _acknowledged(self, b, base_offset: int, log_append_time: int) -> None:
        """``b`` is written at ``base_offset`` (error code 0)."""
        if self.requeued and self.idempotent:
            self._check_sequence_kept((b.topic, b.partition), b)
        self._remove_in_flight(b)
        self._complete(b, base_offset, log_append_time)

    def _handle_partition(self, b, code: int, base_offset: int, log_append_time: int, message, wall: int) -> None:
        tp = (b.topic, b.partition)
        if log_append_time is None:
            log_append_time = -1
        if code == 0:
            self._acknowledged(b, base_offset, log_append_time)
            return
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and b.attempts > 0:
            # A resend: the broker has the batch already.
            self._remove_in_flight(b)
            self._complete(b, -1, log_append_time)
            return
        exc = broker_error(code, f"{b.topic}-{b.partition}" + (f": {message}" if message else ""))
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            # On a batch's first send it is no resend: the broker holds another batch under
            # this producer id, epoch and sequence (another producer given the same id), and
            # ours was not written. Counted as success, its records would vanish; instead the
            # producer takes a new id and renumbers, as for UNKNOWN_PRODUCER_ID below.
            self.stats["duplicates_on_first_send"] += 1
            exc = KafkaError(f"{exc}: the broker answered the first send of this batch as a "
                             f"duplicate, so it holds another producer's batch under producer id "
                             f"{b.producer_id}, epoch {b.producer_epoch}, sequence {b.base_sequence}")
            self.log.warning("%s; obtaining a new producer id", exc)
            code = ErrorCode.UNKNOWN_PRODUCER_ID
        if self.txn is not None:
            exc = self.txn.produce_error(code, exc)
        if code == ErrorCode.MESSAGE_TOO_LARGE and b.record_count > 1:
            self._remove_in_flight(b)
            self._split(b, wall)
            return
        if self.idempotent and code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and tp in self.muted:
                # An earlier batch of this partition is being retried: this one follows it.
                self._retry_or_fail(b, exc, wall, retriable=True)
                return
            if self.txn is not None:
                # Inside a transaction the sequence cannot be renumbered under a new id:
                # the transaction aborts and the next one starts at a new epoch (Java).
                self._remove_in_flight(b)
                self._fail(b, exc, wall)
                return
            self.log.info("%s for %s: obtaining a new producer id and renumbering unacknowledged batches",
                     exc, tp)
            self._request_new_producer_id()
            self._retry_or_fail(b, exc, wall, retriable=True)
            return
        if is_retriable(code):
            if is_invalid_metadata(code):
                self.metadata.request_update()
                if not self._await_new_leader(tp):
                    # The answer named the new leader (KIP-951): no backoff, as Java's
                    # RecordAccumulator.shouldBackoff when the leader changed.
                    self._retry_or_fail(b, exc, wall, retriable=True, backoff=False)
                    return
            self._retry_or_fail(b, exc, wall, retriable=True)
            return
        self._remove_in_flight(b)
        self._fail(b, exc, wall)

    def _retry_or_fail(self, b, exc, wall: int, *, retriable: bool, backoff: bool = True) -> None:
        """``backoff`` False: the retry may go at once (its partition has a new leader)."""
        self._remove_in_flight(b)
        tp = (b.topic, b.partition)
        if isinstance(exc, NetworkError) or isinstance(exc, KafkaTimeoutError):
            self.metadata.request_update()
        if (retriable and not self.force_close and b.attempts < self.retries
                and wall - b.created_ms < self.delivery_timeout_ms):
            self.stats["retries"] += 1
            self.counters.partition(tp).retried += b.record_count
            self.log.debug("retrying %r after %s", b, exc)
            self.muted.add(tp)
            self.requeued.setdefault(tp, set()).add(b)
            self.acc.reenqueue(b, wall, self.retry_backoff.backoff(b.attempts) if backoff else 0)
            return
        self._fail(b, exc, wall)

    def _split(self, b, wall: int) -> None:
        """MESSAGE_TOO_LARGE: re-batch the records in halves, keeping each record's future."""
        decoded = decode_batch(b.wire_bytes())
        records = [(r.key, r.value, r.timestamp, r.headers) for r in decoded.records]
        half = max(1, len(records) // 2)
        targets, parts = [], []
        for start in range(0, len(records), half):
            part = batch_from_records(b.topic, b.partition, records[start:start + half],
                                      self.acc.codec, self.acc.level)
            parts.append(part)
            targets.extend((part.result, i) for i in range(part.record_count))
        b.result.redirect(targets)
        self.counters.splits += 1
        b.free_memory()
        self.acc.track(*[p.result for p in parts])
        for part in reversed(parts):
            part.base_sequence = -1
            self.acc.reenqueue(part, wall)
        self.log.info("split %r into %d batches after MESSAGE_TOO_LARGE", b, len(parts))

    def _complete(self, b, base_offset: int, log_append_time: int) -> None:
        n = b.record_count                              # before complete() frees the batch
        self.stats["records_acked"] += n
        self.counters.partition((b.topic, b.partition)).acked += n
        b.complete(base_offset, log_append_time, None, self.log)
        self.acc.untrack(b.result)

    def _fail(self, b, exc, wall: int) -> None:
        if self.idempotent and b.base_sequence >= 0 and b.finished:
            # A sequenced batch failed for good: later batches of its partition would hit a
            # gap. Renumber them under a new producer id.
            self._request_new_producer_id(exc)
        waiting = self.requeued.get((b.topic, b.partition))
        if waiting is not None:
            waiting.discard(b)
            if not waiting:
                del self.requeued[(b.topic, b.partition)]
        self.stats["records_failed"] += b.record_count
        self.counters.partition((b.topic, b.partition)).failed += b.record_count
        b.complete(-1, -1, exc, self.log)
        self.acc.untrack(b.result)
        self.log.debug("failed %r: %s", b, exc)
        if self.txn is not None:
            self.txn.on_batch_failed(exc)

    def _fail_all(self, exc) -> None:
        self.courier.take(self.time.mono_ms())
        wall = self.time.wall_ms()
        for b in self.acc.abort_all():
            self._fail(b, exc, wall)
        for lst in list(self.in_flight.values()):
            for b in list(lst):
                self._fail(b, exc, wall)
        self.in_flight.clear()
        self.in_flight_node.clear()

    # -- producer id -----------------------------------------------------------------

    def _request_new_producer_id(self, exc=None) -> None:
        if self.txn is not None:
            self.txn.on_sequence_error(exc or KafkaError("a sequenced batch failed"))
        elif self.idempotent:
            self._need_pid = True

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """A producer id from the transaction manager's InitProducerId: sequences restart."""
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.counters.producer_ids += 1
        self.next_seq.clear()
        self.acc.reset_sequences()

    def abort_undrained(self, exc) -> None:
        """abort_transaction: batches not yet sent fail with ``exc``; those in flight
        finish first (Java's abortUndrainedBatches). What the courier sent meanwhile is in
        flight: it is taken first, under the step lock, and a step follows (one the watcher
        handed to the I/O thread while this held the lock would otherwise wait)."""
        turn = self.turn
        if turn.in_step():              # a delivery callback: the courier is not armed
            self._abort_undrained(exc)
            return
        with turn.held():
            self.courier.take(self.time.mono_ms())
            self._abort_undrained(exc)
            turn.step_safely()
        self.wakeup()

    def _abort_undrained(self, exc) -> None:
        wall = self.time.wall_ms()
        for b in self.acc.abort_all():
            self._fail(b, exc, wall)

    def _maybe_init_producer_id(self, now: int) -> bool:
        """True when batches may be sent (a producer id is held and nothing needs renumbering)."""
        if not self._need_pid:
            return True
        if self._pid_in_flight or self._in_flight_batches() or now < self._pid_retry_at:
            return False
        node = self.client.least_loaded_node(now)
        if node is None or not self.client.ready(node, now):
            return False
        req = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
        self._pid_in_flight = True
        self.client.send(node, v.INIT_PRODUCER_ID, req, self._on_init_producer_id, now)
        return False

    def _on_init_producer_id(self, resp, err) -> None:
        self._pid_in_flight = False
        if err is not None or resp.error_code != 0:
            why = err if err is not None else broker_error(resp.error_code, "InitProducerId")
            self.log.info("InitProducerId failed (%s); retrying", why)
            self._pid_retry_at = self.time.mono_ms() + self.config.retry_backoff_ms
            if err is None and not is_retriable(resp.error_code) and resp.error_code not in (
                    ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self.fatal_error = why
                self.errors.report(("fatal",), why)
            return
        renumber = self.producer_id >= 0
        self.counters.producer_ids += 1
        self.producer_id = resp.producer_id
        self.producer_epoch = resp.producer_epoch
        self.next_seq.clear()
        if renumber:
            n = self.acc.reset_sequences()
            self.log.info("new producer id %d epoch %d; %d queued batches renumbered",
                     self.producer_id, self.producer_epoch, n)
        self._need_pid = False
        self.stats["producer_id_resets"] += renumber

    # -- metadata ----------------------------------------------------------------------

    def _leaders_named(self, leaders: dict, endpoints) -> None:
        """A Produce answer named new leaders (KIP-951: with NOT_LEADER_OR_FOLLOWER, the
        leader and its address): the metadata takes them now, without waiting for the
        refresh asked for (which confirms them), and the retries go there."""
        if self.metadata.update_leaders(leaders, endpoints):
            for node_id, (host, port) in (endpoints or {}).items():
                if node_id not in self.client.nodes:
                    self.client.set_node(node_id, host, port)
            self._on_metadata_update(self.metadata.cluster, named=leaders)

    def _on_metadata_update(self, cluster, named=None) -> None:
        """A new snapshot (MetadataUpdater, or leaders a Produce answer ``named``): partitions
        that waited for it to name their leader may send; those whose leader moved while batches of theirs are in flight wait
        for those; the accumulator learns the partition counts."""
        if self.awaiting_leader:
            # A refresh names every leader; a Produce answer (``named``) only some.
            lifted = self.awaiting_leader if named is None else self.awaiting_leader & named.keys()
            for tp in lifted:
                if not self.in_flight.get(tp):
                    self.muted.discard(tp)
            self.awaiting_leader -= set(lifted)
        self._mute_moved_partitions(cluster)
        for name, info in cluster.topics.items():
            if info.partitions:
                self.acc.set_partition_count(name, len(info.partitions), cluster.available_partition_ids(name))

    def _mute_moved_partitions(self, cluster) -> None:
        """The partitions whose batches are in flight to a node that no longer leads them
        send nothing to their new leader until those are answered (see in_flight_node):
        what the old leader refuses is retried first, in order."""
        for tp, node in self.in_flight_node.items():
            leader = cluster.leader_for(tp[0], tp[1])
            if leader is None or leader.node_id != node:
                self.muted.add(tp)
