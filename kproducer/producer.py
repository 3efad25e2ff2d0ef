"""The public Producer (Java's KafkaProducer).

::

    from kproducer import Producer
    with Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as p:
        fut = p.send("events", b"value", key=b"k")
        print(fut.result(timeout=10))      # RecordMetadata(topic, partition, offset, timestamp)

``send()`` is thread safe and returns at once: the record goes into a batch of its
partition (compiled code) and the I/O thread sends it. Callbacks run on that thread
without the user polling. Every record ends acknowledged or failed through its
future and its ``on_delivery(err, metadata)`` callback.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

from kproducer._core import (NEED_MEMORY, NEED_METADATA, RecordAccumulator, RecordFuture, SendPath,
                             failed_future, failed_send_many, fork_generation, wall_clock_ms)
from kproducer import interceptors as _interceptors
from kproducer import producer_cache
from kproducer.config import ProducerConfig
from kproducer.coordinator import TxnResult
from kproducer.error_reporter import ErrorReporter
from kproducer.errors import (AuthenticationError, BrokerResponseError, BufferExhaustedError,
                              InvalidTxnStateError, KafkaError, KafkaTimeoutError,
                              MetadataTimeoutError, PurgedError, RecordTooLargeError,
                              TransactionTimeoutError)
from kproducer.log_context import LogContext
from kproducer.tls import tls_context
from kproducer.metadata import Metadata
from kproducer.java_metrics import JavaMetrics
from kproducer.network import NetworkClient
from kproducer.partitioner import custom_partition
from kproducer.sender import Sender
from kproducer.serialization import offer_cluster_id, record_serializer, serialize_columns
from kproducer.statistics import StatisticsReporter
from kproducer.transactions import CompleteTxn, PreparedTransaction
from kproducer.turn import StepTurn


_client_ids = itertools.count(1)

# Producer._send_slow's ``why`` once the interceptors' on_send has run: nothing tried yet.
_INTERCEPTED = object()

# The failures of a record that send() has taken (its arguments are valid): they fail its
# future and call its callback instead of raising, as Java's doSend does for an ApiException
# (a metadata or memory timeout, a record too large, a topic the broker refuses, a failed
# authentication).
SEND_FAILURES = (KafkaTimeoutError, RecordTooLargeError, BrokerResponseError, AuthenticationError)

# Legal topic names (Kafka's Topic.validate): [a-zA-Z0-9._-], 1..249 characters, not "." or "..".
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _check_topic(topic) -> None:
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    if not topic or len(topic) > 249 or topic in (".", "..") or not _TOPIC_CHARS.issuperset(topic):
        raise ValueError(f"invalid topic name {topic!r}: 1..249 characters of [a-zA-Z0-9._-], not '.' or '..'")


def _check_timeout(timeout, what: str):
    """``timeout`` in seconds: None (no limit) or a number >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{what}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not timeout >= 0:   # also refuses NaN
        raise ValueError(f"{what}: timeout must be >= 0 seconds, got {timeout!r}")
    return timeout


class Producer:
    """A Kafka producer; see the module docstring. Configuration: a dict of Kafka's
    dotted names, keyword arguments with underscores, or both."""

    def __init__(self, config=None, /, **settings):
        self._config = config if isinstance(config, ProducerConfig) and not settings \
            else ProducerConfig(config, **settings)
        self._lock = threading.Lock()
        self._closed = False
        # interceptor.classes and the instrumentations' (kproducer.otel); None: none, and
        # send() keeps its compiled path. Made once: a forked child keeps them.
        self._interceptors = _interceptors.for_producer(self, self._config)
        self._start()
        offer_cluster_id(self, (self._config.key_serializer, self._config.value_serializer))

    # -- construction (again after fork) ------------------------------------------------

    def _start(self) -> None:
        cfg = self._config
        self._pid = os.getpid()
        self._generation = fork_generation()
        self.client_id = cfg.client_id or f"kproducer-{next(_client_ids)}"
        # Every part logs on its module's logger (or the ``logger`` setting's) with
        # "[Producer clientId=...] " in front (kproducer.log_context); error_cb is called from
        # the steps (kproducer.error_reporter).
        self._log_context = context = LogContext(self.client_id, cfg.transactional_id, cfg.logger)
        self._log = context.logger(__name__)
        self._errors = errors = ErrorReporter(cfg.error_cb, self._log)
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        # Serializers taking (obj, ctx): decided here, once (kproducer.serialization).
        self._serialize = record_serializer(cfg.key_serializer, cfg.value_serializer)
        self._custom_partitioner = cfg.partitioner
        self._max_block_s = cfg.max_block_ms / 1000.0
        self._max_request_size = cfg.max_request_size
        self._metadata = Metadata(metadata_max_age_ms=cfg.metadata_max_age_ms,
                                  metadata_max_idle_ms=cfg.metadata_max_idle_ms,
                                  retry_backoff_ms=cfg.retry_backoff_ms,
                                  retry_backoff_max_ms=cfg.retry_backoff_max_ms,
                                  log=context.logger("kproducer.metadata"))
        self._client = NetworkClient(
            client_id=self.client_id, request_timeout_ms=cfg.request_timeout_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            reconnect_backoff_ms=cfg.reconnect_backoff_ms,
            reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
            connection_setup_timeout_ms=cfg.socket_connection_setup_timeout_ms,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            send_buffer_bytes=cfg.send_buffer_bytes, receive_buffer_bytes=cfg.receive_buffer_bytes,
            sasl=cfg.sasl_credentials, tls=tls_context(cfg), log_context=context, errors=errors)
        # Which thread runs the Sender's next step: the accumulator names its batches'
        # deadlines to the turn's watcher, and its sends and waits run the steps through it.
        self._turn = turn = StepTurn(self._client.selector.fileno())
        self._acc = RecordAccumulator(
            batch_size=max(cfg.batch_size, 1), batch_max_size=max(cfg.batch_max_size, cfg.batch_size, 1),
            linger_ms=cfg.linger_ms, compression=cfg.compression_type,
            compression_level=cfg.compression_level, buffer_memory=cfg.buffer_memory,
            ignore_keys=cfg.partitioner_ignore_keys, retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms, max_request_size=cfg.max_request_size,
            wakeup=self._client.wakeup, adaptive=cfg.partitioner_adaptive_partitioning_enable,
            availability_timeout_ms=cfg.partitioner_availability_timeout_ms,
            turn=turn.watcher, step=turn.step_from_app, run_steps_until=turn.run_steps_until)
        addresses = cfg.bootstrap_addresses
        self._metadata.bootstrap(addresses)
        for i, (host, port) in enumerate(addresses):
            self._client.set_node(-(i + 1), host, port)
        self._sender = Sender(cfg, self._acc, self._metadata, self._client, turn,
                              log_context=context, errors=errors)
        # metrics()'s Java-named metrics, whose samples the Sender's steps end as they come
        # due, and the statistics.interval.ms reporter, whose documents its steps build:
        # both before the I/O thread starts.
        self._java_metrics = JavaMetrics(self._sender, self._acc.pool, self._metadata,
                                         cfg.metrics_sample_window_ms, cfg.metrics_num_samples)
        self._sender.sampler = self._java_metrics.sampler
        if cfg.statistics_interval_ms > 0 and cfg.stats_cb is not None:
            self._sender.statistics = StatisticsReporter(self, cfg.statistics_interval_ms, cfg.stats_cb)
        self._sender.start()
        if self._sender.statistics is not None:
            self._sender.wakeup()   # a first step, which names the first document's deadline
        # send() is the compiled SendPath.send bound here (the class's send() below calls the
        # same): the per-record path has no Python frame. What it cannot do alone (a fork,
        # serializers, a custom partitioner, interceptors, waiting for metadata or memory) it
        # hands to _send_slow.
        needs_python = (self._key_serializer is not None or self._value_serializer is not None
                        or self._custom_partitioner is not None or self._interceptors is not None)
        self._txn = self._sender.txn
        self._send_path = SendPath(self._acc, self._send_slow, needs_python or self._txn is not None,
                                   turn.watcher, turn.step_from_app)
        if self._txn is not None:
            # Outside an open transaction send() goes through _send_slow, which raises the
            # transaction's state error.
            path = self._send_path
            self._txn.on_state_change = lambda open_txn: setattr(path, "needs_python",
                                                                  needs_python or not open_txn)
        self.send = self._send_path.send
        self._send_path.slow_poll = self._poll
        self.poll = self._send_path.poll

    def _check_fork(self) -> None:
        if self._closed:
            return  # a closed producer stays closed in a child; nothing to start
        if fork_generation() != self._generation and os.getpid() != self._pid:
            # The parent's thread does not exist here and its sockets and epoll set are
            # shared with the parent: leave them untouched (never close or shut them down
            # from the child) and start afresh.
            self._abandoned = (getattr(self, "_abandoned", ()), self._client, self._sender, self._acc)
            self._log.info("fork detected (pid %d -> %d); starting a new producer in the child",
                     self._pid, os.getpid())
            self._start()

    # -- sending ------------------------------------------------------------------------

    def send(self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None,
             on_delivery=None):
        """Queues one record and returns its future (RecordMetadata on success).

        ``value`` and ``key`` are bytes-like or None (or anything the configured
        serializers accept: one taking two arguments is given a SerializationContext,
        see kproducer.serialization); ``headers`` a sequence of ``(str, bytes | None)``;
        ``on_delivery(err, metadata)`` runs on the I/O thread when the record is
        acknowledged or fails. Blocks only while the topic's metadata (with ``partition``)
        is unknown or ``buffer.memory`` is full, up to ``max.block.ms``.

        Once its arguments are valid, every failure of the record settles its future and
        calls ``on_delivery(err, metadata)`` once, ``metadata`` carrying its topic and
        partition (-1 when none was chosen) with offset -1, as Java's send() does: a
        metadata timeout (MetadataTimeoutError, also for a ``partition`` the topic has not
        got), no ``buffer.memory`` in time (BufferExhaustedError), a record larger than
        ``max.request.size`` or ``buffer.memory`` (RecordTooLargeError naming its size and
        the limit; the producer checks this itself, as not every broker does), a topic the
        broker refuses, and every failure of its delivery later. These fail before send()
        returns: the callback runs on the calling thread, the future is done.

        Programming errors raise and queue nothing: wrong argument types (TypeError), an
        invalid topic name, a negative partition or timestamp (ValueError), a closed
        producer (KafkaError), a serializer's exception, a transaction's state.

        How it runs: each producer binds ``send`` to its compiled ``SendPath.send``
        (``_core_parts/send_path.pxi``), which this method calls too. It appends
        straight into the accumulator, whose ``append`` makes every check of the record;
        the rest (forks, serializers, a custom partitioner, interceptors (whose ``on_send``
        runs first: kproducer.interceptors), the waits) is ``_send_slow``.
        """
        return self._send_path.send(topic, value, key, partition, timestamp_ms, headers, on_delivery)

    def _send_slow(self, topic, value, key, partition, timestamp_ms, headers, on_delivery, why):
        """``send()`` beyond the compiled fast path, and the one place where it waits.
        SendPath.send calls it with ``why=None`` when it tried nothing (a fork, serializers,
        a custom partitioner, a topic that is not a str), else with what the accumulator
        answered: NEED_METADATA or NEED_MEMORY. The checks of the record itself (types,
        sizes, partition range, a closed producer) are the accumulator's.

        With interceptors, their on_send runs first (as in Java, before anything else),
        then this again through ``_send_intercepted`` (``why=_INTERCEPTED``)."""
        if why is None and self._interceptors is not None:
            return self._interceptors.send(self._send_intercepted, topic, value, key, partition,
                                           timestamp_ms, headers, on_delivery)
        if fork_generation() != self._generation:
            self._check_fork()
            why = None      # a new accumulator in a child
        self._acc.ensure_open()
        if self._txn is not None:
            self._txn.check_send()
        _check_topic(topic)
        if isinstance(why, KafkaError):     # the accumulator refused the record (too large)
            return self._send_failed(topic, partition, why, on_delivery)
        if why is None or why is _INTERCEPTED:
            why = None
            if self._serialize is not None:     # a serializer takes (obj, ctx)
                key, value, headers = self._serialize(topic, key, value, headers)
            else:
                if self._key_serializer is not None and key is not None:
                    key = self._key_serializer(key)
                if self._value_serializer is not None and value is not None:
                    value = self._value_serializer(value)
        custom = self._custom_partitioner if partition is None else None
        deadline = time.monotonic() + self._max_block_s
        checked = False
        try:
            while True:
                if why is None:
                    n = self._acc.partition_count(topic) if custom is not None else None
                    if custom is not None and n is None:
                        why = NEED_METADATA      # the custom partitioner needs the partition count
                    else:
                        if custom is not None:
                            partition = custom_partition(custom, topic, key, value, self._metadata.cluster, n)
                            custom = None        # called once per record; None: the built-in choice
                        why = self._acc.append(topic, partition, key, value, timestamp_ms, headers, on_delivery)
                        if type(why) is RecordFuture:
                            if self._turn.watcher.pending:
                                self._turn.step_from_app()
                            return why
                        if isinstance(why, KafkaError):
                            raise why
                if why is NEED_METADATA and not checked:
                    self._acc.check_fields(key, value, headers)   # a bad record fails before any wait
                    checked = True
                self._wait(topic, why, deadline, partition)
                why = None
        except SEND_FAILURES as exc:
            return self._send_failed(topic, partition, exc, on_delivery)

    def _send_failed(self, topic: str, partition, exc: KafkaError, on_delivery):
        """Java's doSend for a record it took but could not queue: a future failed with
        ``exc``, whose ``on_delivery`` (the interceptors' on_acknowledgement first, when
        there are any) is called here with the record's topic and partition; a transaction
        must abort (Java's maybeTransitionToErrorState)."""
        exc.__traceback__ = None       # its frames hold this call's locals: the future keeps it
        if self._txn is not None:
            self._txn.abortable(exc)
        self._sender.stats["records_failed"] += 1
        return failed_future(topic, _partition_or_none(partition), exc, on_delivery)

    def _send_intercepted(self, topic, value, key, partition, timestamp_ms, headers, on_delivery):
        """send() past the interceptors' on_send (kproducer.interceptors): the record they
        returned, with an on_delivery that runs their on_acknowledgement first."""
        return self._send_slow(topic, value, key, partition, timestamp_ms, headers, on_delivery,
                               _INTERCEPTED)

    def _wait(self, topic: str, why, deadline: float, partition=None) -> None:
        """Waits, until ``deadline`` (time.monotonic()), for what the accumulator lacked:
        the topic's metadata, with ``partition`` if one is given (NEED_METADATA), or buffer
        memory (NEED_MEMORY). Raises MetadataTimeoutError or BufferExhaustedError past the
        deadline, and the I/O thread's fatal error if it has one."""
        remaining = self._wait_left(topic, why, deadline, partition)
        if why is NEED_METADATA:
            self._wait_for_topic(topic, remaining, partition)
        else:
            self._sender.wakeup()
            self._acc.pool.wait_available(self._acc.last_need, remaining)

    def send_many(self, topic, values, keys=None, *, partition=None, timestamps=None, headers=None,
                  on_delivery=None, futures=False):
        """Queues a whole column of records at C speed and returns a SendManyResult.

        ``values`` (and ``keys``, same length) may be a list or tuple of ``bytes``/None, a
        NumPy object array of bytes or a fixed-width ``S`` array, or an Arrow
        binary/string array (read through its buffers; pyarrow is not required by
        kproducer). ``timestamps``: one int for all records or one per record (sequence or
        int64 array). ``headers``: one list of ``(str, bytes | None)`` pairs for every
        record, or one list per record. Partitioning, batching and encoding run in C with
        no Python operation per record; per-record futures are made only with
        ``futures=True`` (then ``result.futures``). The result counts acknowledged and
        failed records and keeps the first error: ``result.wait()`` then
        ``result.raise_for_errors()``, or ``flush()``.

        Every argument, header and record size is checked before anything is queued: a
        bad element raises (as in ``send()``) naming its index, and no record of the
        call is sent.

        With ``key.serializer``/``value.serializer`` set, ``keys``/``values`` are columns of
        the objects they take (a list, tuple, NumPy or Arrow array): each is serialized
        once per record, in Python, before anything is queued (a serializer taking a
        context gets one per record: see kproducer.serialization); an exception of a
        serializer propagates with a note naming the record's index, and nothing is sent.
        Interceptors with ``on_send_many``/``on_acknowledgement_many`` are called once per
        call, never per record (kproducer.interceptors).
        """
        if self._interceptors is not None and self._interceptors.intercepts_send_many:
            return self._interceptors.send_many(
                self._send_many,
                _interceptors.SendManyColumns(topic, values, keys, partition, timestamps, headers),
                on_delivery, futures)
        return self._send_many(topic, values, keys, partition, timestamps, headers, on_delivery, futures)

    def _send_many(self, topic, values, keys, partition, timestamps, headers, on_delivery, futures):
        """send_many() past the interceptors (their on_send_many, if any, has run)."""
        if fork_generation() != self._generation:
            self._check_fork()
        self._acc.ensure_open()
        if self._txn is not None:
            self._txn.check_send()
        _check_topic(topic)
        if partition is None and self._custom_partitioner is not None:
            raise TypeError("send_many does not call a custom partitioner; pass partition= or use send()")
        if self._key_serializer is not None or self._value_serializer is not None:
            values, keys, headers = serialize_columns(self._key_serializer, self._value_serializer,
                                                      topic, values, keys, headers)
        deadline = time.monotonic() + self._max_block_s
        while True:
            # append_many waits for buffer memory itself (between chunks of the column), and
            # fails the records it had no memory for within max.block.ms through the result.
            result = self._acc.append_many(topic, values, keys, partition, timestamps, headers, on_delivery,
                                           futures, max(0.0, deadline - time.monotonic()))
            if result is not NEED_METADATA:
                if self._turn.watcher.pending:
                    self._turn.step_from_app()
                return result
            try:
                self._wait(topic, NEED_METADATA, deadline, partition)
            except SEND_FAILURES as exc:
                # No metadata in time: every record fails through the result, its callback
                # and its future, as send()'s would.
                exc.__traceback__ = None
                if self._txn is not None:
                    self._txn.abortable(exc)
                self._sender.stats["records_failed"] += len(values)
                return failed_send_many(topic, len(values), _partition_or_none(partition), exc,
                                        on_delivery, futures)

    def _cluster_id(self) -> str:
        """The cluster's id from the brokers' metadata, waiting for it up to max.block.ms
        (the resolver confluent's Schema Registry serializers are offered:
        kproducer.serialization.offer_cluster_id)."""
        deadline = time.monotonic() + self._max_block_s
        while (cluster_id := self._metadata.cluster.cluster_id) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                raise MetadataTimeoutError(f"the cluster id is not known within "
                                        f"max.block.ms={int(self._max_block_s * 1000)}")
            version = self._metadata.request_update()
            self._sender.wakeup()
            self._metadata.await_update(version, min(remaining, 0.5))
        return cluster_id

    def _wait_left(self, topic: str, why, deadline: float, partition=None) -> float:
        """The seconds a wait for ``why`` may take (kproducer.aio's waits ask too): raises
        the I/O thread's fatal error, or past the deadline MetadataTimeoutError
        (NEED_METADATA) or BufferExhaustedError (NEED_MEMORY)."""
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if why is NEED_METADATA:
                raise self._no_metadata(topic, partition)
            raise BufferExhaustedError(f"topic {topic!r}: buffer memory not available within "
                                       f"max.block.ms={int(self._max_block_s * 1000)}")
        return remaining

    def _wait_for_topic(self, topic: str, timeout_s: float, partition=None) -> None:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        self._metadata.add(topic, wall_clock_ms())
        while (version := self._topic_unknown(topic, partition)) is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._no_metadata(topic, partition)
            self._metadata.await_update(version, min(remaining, 0.5))

    def _topic_unknown(self, topic: str, partition=None):
        """None once ``topic``'s partitions are known, more than ``partition`` when one is
        given (they are handed to the accumulator); until then the metadata version an
        update must pass: one is requested and the I/O thread woken. Raises the topic's
        fatal error (and the metadata's)."""
        self._metadata.maybe_raise_for_topic(topic)
        cluster = self._metadata.cluster
        n = cluster.num_partitions(topic)
        if n:
            self._acc.set_partition_count(topic, n, cluster.available_partition_ids(topic))
            if partition is None or partition < n:
                return None
        version = self._metadata.request_update_for_topic(topic)
        self._sender.wakeup()
        return version

    def _no_metadata(self, topic: str, partition=None) -> MetadataTimeoutError:
        n = self._metadata.cluster.num_partitions(topic)
        if partition is not None and n:
            return MetadataTimeoutError(
                f"partition {partition} of topic {topic!r} with partition count {n} is not present "
                f"in metadata after max.block.ms={int(self._max_block_s * 1000)}")
        # Name the cause when no broker could be reached (DNS failure, refused or silent
        # connection): "not present in metadata" alone sends users looking for a missing topic.
        why = self._client.last_connect_error
        return MetadataTimeoutError(f"topic {topic!r} not present in metadata after "
                                    f"max.block.ms={int(self._max_block_s * 1000)}"
                                    + (f"; no broker reachable: {why}" if why else ""))

    # -- transactions (Java's KafkaProducer methods) --------------------------------------

    def _txn_call(self, what: str, timeout):
        """The transaction manager and the call's deadline (``timeout`` seconds, default
        ``max.block.ms``)."""
        timeout = _check_timeout(timeout, what)
        if self._closed:
            raise KafkaError(f"cannot {what}: the producer is closed")
        self._check_fork()
        if self._txn is None:
            raise InvalidTxnStateError(f"{what} needs a transactional producer: set transactional.id")
        return self._txn, time.monotonic() + (self._max_block_s if timeout is None else timeout)

    def init_transactions(self, timeout=None) -> None:
        """Finds the transaction coordinator and obtains the producer id and epoch of
        ``transactional.id``: an older producer with the same id is fenced, and whatever
        transaction it left open is aborted. Call once, before the first transaction. On
        TransactionTimeoutError it goes on in the background: call it again to wait."""
        txn, deadline = self._txn_call("init_transactions", timeout)
        res = txn.init()
        self._sender.wakeup()
        res.wait(max(0.0, deadline - time.monotonic()))

    def begin_transaction(self) -> None:
        """Starts a transaction: records sent until commit_transaction() or
        abort_transaction() become visible to read_committed consumers together, or never."""
        txn, _ = self._txn_call("begin_transaction", None)
        txn.begin()

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout=None) -> None:
        """Commits consumer offsets as part of the transaction (consume-transform-produce).

        ``offsets``: ``{(topic, partition): offset}`` (or ``(offset, metadata)`` values), or
        objects with ``topic``, ``partition`` and ``offset`` (confluent-kafka's
        TopicPartition); the offset is the next one to consume. ``group_metadata``: the
        group id, or an object/dict with ``group_id`` (and ``generation_id``, ``member_id``,
        ``group_instance_id`` as Java's ConsumerGroupMetadata)."""
        txn, deadline = self._txn_call("send_offsets_to_transaction", timeout)
        res = txn.add_offsets(_offsets_arg(offsets), _group_arg(group_metadata))
        self._sender.wakeup()
        res.wait(max(0.0, deadline - time.monotonic()))

    def commit_transaction(self, timeout=None) -> None:
        """Flushes the transaction's records, then commits it. Raises the error that made
        the transaction abortable (TransactionAbortableError: call abort_transaction()) or
        ProducerFencedError; TransactionTimeoutError leaves the commit going on: call it
        again to wait."""
        txn, deadline = self._txn_call("commit_transaction", timeout)
        res = txn.begin_commit()
        self._flush_for(txn, deadline, "commit_transaction")
        self._turn.run_steps_until(lambda: res.done, deadline)    # EndTxn, as flush()
        res.wait(max(0.0, deadline - time.monotonic()))

    def abort_transaction(self, timeout=None) -> None:
        """Aborts the transaction: records not yet sent fail with TransactionAbortedError,
        those sent are discarded by read_committed consumers (an abort marker is written)."""
        txn, deadline = self._txn_call("abort_transaction", timeout)
        res = txn.begin_abort()
        self._flush_for(txn, deadline, "abort_transaction")
        self._turn.run_steps_until(lambda: res.done, deadline)
        res.wait(max(0.0, deadline - time.monotonic()))

    def prepare_transaction(self, timeout=None) -> PreparedTransaction:
        """Flushes the transaction and registers all of it with the coordinator without
        ending it; returns a picklable PreparedTransaction that any producer, in any
        process, can pass to complete_transaction(). This producer may also finish it
        with commit_transaction() or abort_transaction(); it takes no new transaction
        until then. (Brokers abort a transaction left open past transaction.timeout.ms.)"""
        txn, deadline = self._txn_call("prepare_transaction", timeout)
        txn.begin_prepare()
        self._flush_for(txn, deadline, "prepare_transaction")
        return txn.finish_prepare()

    def complete_transaction(self, prepared: PreparedTransaction, commit: bool = True,
                             timeout=None) -> None:
        """Commits (or, with ``commit=False``, aborts) a transaction that
        prepare_transaction() prepared, possibly in another process. Any producer can do
        it, transactional or not. Finishing a transaction again the same way succeeds;
        one whose transactional.id has been initialized since raises ProducerFencedError."""
        if not isinstance(prepared, PreparedTransaction):
            raise TypeError(f"complete_transaction takes a PreparedTransaction, not {type(prepared).__name__}")
        timeout = _check_timeout(timeout, "complete_transaction")
        if self._closed:
            raise KafkaError("cannot complete_transaction: the producer is closed")
        self._check_fork()
        txn = self._txn
        if (txn is not None and txn.transactional_id == prepared.transactional_id
                and txn.state.value == "PREPARED"
                and (self._sender.producer_id, self._sender.producer_epoch) == (prepared.producer_id, prepared.epoch)):
            return self.commit_transaction(timeout) if commit else self.abort_transaction(timeout)
        timeout_s = self._max_block_s if timeout is None else timeout
        res = TxnResult("complete_transaction")
        deadline_ms = int(time.monotonic() * 1000) + int(timeout_s * 1000)
        self._sender.coordinator.enqueue(CompleteTxn(prepared, bool(commit), res, deadline_ms))
        self._sender.wakeup()
        # The handler gives up at the deadline with the last error it saw; wait a little
        # longer than that so its message, not a bare timeout, is what the caller gets.
        res.wait(timeout_s + 1.0)

    def _flush_for(self, txn, deadline: float, what: str) -> None:
        try:
            self.flush(max(0.0, deadline - time.monotonic()))
        except KafkaTimeoutError as exc:
            if isinstance(exc, TransactionTimeoutError):
                raise
            raise TransactionTimeoutError(f"{what}: {exc}; it goes on in the background: call it "
                                          f"again to wait") from None

    # -- the application's own turn ---------------------------------------------------------

    def poll(self, timeout=0) -> int:
        """Runs the Sender's wanted work on this thread now, if there is any: writes what is
        ready, reads responses, settles their futures and runs their delivery callbacks here.
        Never needed (the I/O thread does all of it); it is for an application that computes
        in Python for long stretches without sending. Such a thread keeps the GIL, and the I/O
        thread gets it only after the interpreter's switch interval (5 ms) for each step: a
        batch's request waited that long after its ``linger.ms``, and its callbacks as long
        again. Called now and then in such a loop, ``poll()`` does that work at once, and the
        I/O thread leaves it to this thread while it keeps polling (as it does for a sending
        thread). It costs about one attribute load when nothing is wanted.

        ``timeout`` (seconds, None: no limit) is how long to wait, without the GIL, for at
        least one record to be settled; 0 (the default) never waits. Returns how many records
        were settled (acknowledged or failed) while it ran, by its steps or the I/O thread's;
        0 at once when no record is in flight. From a delivery callback it returns 0: that
        thread is stepping already.

        How it runs: each producer binds ``poll`` to its compiled ``SendPath.poll``, which
        answers 0 without a Python frame when no step is wanted (about 0.03 us), and calls
        ``_poll`` otherwise."""
        return self._send_path.poll(timeout)

    def _poll(self, timeout) -> int:
        timeout = _check_timeout(timeout, "poll")
        if self._closed:
            raise KafkaError("cannot poll: the producer is closed")
        self._check_fork()
        if self._turn.in_step():
            return 0
        stats, acc = self._sender.stats, self._acc
        before = stats["records_acked"] + stats["records_failed"]
        deadline = None if timeout is None else time.monotonic() + timeout

        def settled() -> int:
            return stats["records_acked"] + stats["records_failed"] - before
        self._turn.run_steps_until(lambda: settled() or not acc.incomplete, deadline)
        return settled()

    # -- purge, flush, close, introspection ------------------------------------------------

    def purge(self, in_queue=True, in_flight=True, blocking=True) -> None:
        """Fails records without waiting for them (confluent-kafka's ``Producer.purge``,
        librdkafka's ``rd_kafka_purge``): ``in_queue``, those not sent yet; ``in_flight``,
        those whose request awaits an answer (the answer is ignored when it comes). Each
        fails with :class:`~kproducer.errors.PurgedError` (``in_flight`` says which),
        through its future and its callback, on this thread; records sent afterwards are
        not affected. With idempotence a purge of records in flight makes the producer take
        a new producer id before it sends more (librdkafka bumps the epoch), so that later
        records are accepted and in order; in a transaction, it must be aborted.

        ``blocking=False`` does not wait for a Sender step under way: the next step purges
        (callbacks then run on the thread running it) and this returns at once."""
        if self._closed:
            raise KafkaError("cannot purge: the producer is closed")
        self._check_fork()
        if not (in_queue or in_flight):
            return
        self._sender.purge(bool(in_queue), bool(in_flight), bool(blocking))

    # -- flush, close, introspection ------------------------------------------------------

    def flush(self, timeout=None) -> None:
        """Sends every queued record now and waits until each is acknowledged or failed.
        Raises KafkaTimeoutError if ``timeout`` seconds pass first."""
        timeout = _check_timeout(timeout, "flush")
        if self._closed:
            raise KafkaError("cannot flush: the producer is closed")
        if self._turn.in_step():
            # The records it would wait for complete in the step this callback runs in.
            raise KafkaError("cannot flush from a delivery callback: it would wait for itself")
        self._check_fork()
        pending = list(self._acc.incomplete)
        self._acc.flushes_in_progress += 1
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            # This thread runs the steps itself (as poll() does): the first sends what the
            # flush made sendable, the next read the answers.
            first = 0

            def flushed() -> bool:
                nonlocal first
                while first < len(pending) and pending[first].wait(0):
                    first += 1
                return first == len(pending)
            self._sender.wakeup()           # a step under way elsewhere steps again
            # The first step sends what the flush made sendable, now.
            self._turn.run_steps_until(flushed, deadline, step_first=True)
            for r in pending[first:]:      # the Sender is closing (its thread steps), or timeout
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not r.wait(remaining):
                    left = sum(1 for x in pending if not x.done)
                    raise KafkaTimeoutError(f"flush timed out after {timeout} s with {left} batches pending")
        finally:
            self._acc.flushes_in_progress -= 1

    def close(self, timeout=None) -> None:
        """Sends what is queued (up to ``timeout`` seconds), then stops the I/O thread.
        With ``timeout=0`` pending records fail at once with an error. Closing again
        does nothing."""
        timeout = _check_timeout(timeout, "close")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if fork_generation() != self._generation and os.getpid() != self._pid:
            return  # the parent's producer is not ours to close
        self._acc.closed = True
        if self._turn.in_step():
            # From a delivery callback: waiting would wait for this very step. As Java's
            # close() from its I/O thread, the timeout is 0: what is pending fails.
            self._log.warning("close() called from a delivery callback; closing with timeout 0")
            self._sender.initiate_close(force=True)
            self._metadata.close()
            if self._interceptors is not None:
                self._interceptors.close()
            return
        self._sender.initiate_close(force=timeout is not None and timeout <= 0)
        if not self._sender.join(timeout if timeout is None or timeout > 0 else None):
            self._log.warning("close timed out after %s s; failing what is left", timeout)
            self._sender.initiate_close(force=True)
            self._sender.join(5)
        self._metadata.close()
        if self._interceptors is not None:
            # After the I/O thread: the last acknowledgements have run (Java's order).
            self._interceptors.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if not self._closed and fork_generation() == self._generation:
                self._acc.closed = True
                self._sender.initiate_close(force=False)
        except Exception:
            pass

    def partitions_for(self, topic: str):
        """The topic's partitions (PartitionInfo), waiting for metadata up to max.block.ms."""
        if self._closed:
            raise KafkaError("cannot get partitions: the producer is closed")
        self._check_fork()
        _check_topic(topic)
        self._wait_for_topic(topic, self._max_block_s)
        return list(self._metadata.cluster.partitions_for(topic))

    def metrics(self) -> dict:
        """Counters of the producer: records acknowledged and failed, requests, batches,
        retries, producer id resets, buffer memory in use; and who ran the Sender's steps
        (``steps_by_application``: inside send() calls, ``steps_by_io_thread``) with how long
        a wanted step waited for a thread holding the GIL (``step_wait_us_total``,
        ``step_wait_us_max``); ``steps_for_a_sleeping_sender``: steps the I/O thread ran at
        once because the application thread that sent last was asleep (see kp_turn.h);
        ``requests_by_courier`` and ``responses_by_courier``: Produce requests the courier
        wrote, and responses it read and settled, between steps (csrc/kp_courier.h);
        ``request_latency_avg_ms``, ``_max_ms``, ``_p50_ms``, ``_p99_ms`` and ``_count``: the
        round trips of the requests answered since the producer started, from the request's
        write to the read of its response (Java's request-latency-avg and -max, librdkafka's
        ``rtt``; None before the first answer); ``produce_throttled_responses``,
        ``produce_throttle_time_ms_total`` and ``_max``: the quota throttles brokers asked for
        in Produce answers (KIP-219), each honoured by sending nothing to that broker for as
        long; ``rebootstraps``: how often no known broker answered and the producer started
        again from bootstrap.servers (metadata.recovery.strategy).

        Beside them, Java's producer metrics under Java's names (kproducer.java_metrics):
        the ``producer-metrics`` group at the top level (``record-send-rate``,
        ``request-latency-avg``, ``buffer-available-bytes``, ...), and the
        ``producer-topic-metrics`` and ``producer-node-metrics`` groups as dicts under those
        keys, by topic and by ``node-<id>``; rates over metrics.num.samples samples of
        metrics.sample.window.ms."""
        out = dict(self._sender.stats)
        client = self._sender.client
        out.update(produce_throttled_responses=client.throttled_responses,
                   produce_throttle_time_ms_total=client.throttle_time_ms_total,
                   produce_throttle_time_ms_max=client.throttle_time_ms_max)
        out["steps_for_a_sleeping_sender"] = self._turn.watcher.asleep_steps
        out.update(self._sender.client.request_latency.summary_ms("request_latency"))
        out.update(buffer_total_bytes=self._acc.pool.total, buffer_available_bytes=self._acc.pool.available,
                   queued_batches=self._acc.queued_batches(), producer_id=self._sender.producer_id,
                   producer_epoch=self._sender.producer_epoch, metadata_version=self._metadata.version)
        out.update(self._java_metrics.read())
        return out

    @property
    def config(self) -> ProducerConfig:
        return self._config

    def __repr__(self) -> str:
        return f"<Producer {self.client_id} {self._config!r}{' closed' if self._closed else ''}>"

    def __reduce__(self):
        # A producer pickles as its configuration and unpickles into the receiving
        # process's cached producer for it (kproducer.producer_cache), so one captured in a
        # Spark UDF or foreachPartition closure becomes one producer per worker process.
        return producer_cache.reduce_producer(self)


def _partition_or_none(partition) -> int:
    """A failed record's partition for its RecordMetadata: -1 when none was chosen (or the
    one asked for is no partition number)."""
    if partition is None or isinstance(partition, bool):
        return -1
    try:
        p = partition.__index__()
    except (AttributeError, TypeError):
        return -1
    return p if 0 <= p < 2**31 else -1


# -- arguments of send_offsets_to_transaction -----------------------------------------------

def _offsets_arg(offsets) -> dict:
    """``{(topic, partition): (offset, metadata)}`` from the forms send_offsets_to_transaction takes."""
    out = {}
    items = offsets.items() if isinstance(offsets, dict) else (
        ((o.topic, o.partition), (o.offset, getattr(o, "metadata", None))) for o in offsets)
    for key, value in items:
        try:
            topic, partition = key
        except (TypeError, ValueError):
            raise TypeError(f"send_offsets_to_transaction: offsets key {key!r} is not (topic, partition)") from None
        offset, meta = value if isinstance(value, tuple) else (value, None)
        _check_topic(topic)
        if not isinstance(partition, int) or partition < 0:
            raise ValueError(f"send_offsets_to_transaction: partition {partition!r} of {topic!r} is not a partition number")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"send_offsets_to_transaction: offset {offset!r} for {topic}-{partition} "
                             f"is not a non-negative int")
        out[(topic, partition)] = (offset, meta)
    if not out:
        raise ValueError("send_offsets_to_transaction: no offsets given")
    return out


def _group_arg(group) -> dict:
    """Java's ConsumerGroupMetadata fields from a group id, a dict or an object."""
    if isinstance(group, str):
        group = {"group_id": group}
    get = group.get if isinstance(group, dict) else (lambda name, default=None: getattr(group, name, default))
    group_id = get("group_id")
    if not isinstance(group_id, str) or not group_id:
        raise TypeError("send_offsets_to_transaction: group_metadata needs a group id (a str, or "
                        "an object or dict with group_id)")
    return {"group_id": group_id, "generation_id": get("generation_id", -1) if get("generation_id") is not None else -1,
            "member_id": get("member_id") or "", "group_instance_id": get("group_instance_id")}


# Old private names of what kproducer.producer_cache now holds: kproducer.spark (being
# restructured on another branch) and pickles made before the move refer to them.
_cached_producer = producer_cache.cached_producer
_unpickle_producer = producer_cache.unpickle_producer
