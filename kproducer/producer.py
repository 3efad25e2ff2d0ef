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

import atexit
import importlib
import itertools
import logging
import os
import pickle
import threading
import time

from kproducer._accumulator import (NEED_MEMORY, NEED_METADATA, RecordAccumulator, SendPath,
                                    fork_generation, wall_clock_ms)
from kproducer.config import ProducerConfig
from kproducer.errors import KafkaError, KafkaTimeoutError
from kproducer.tls import tls_context
from kproducer.metadata import Metadata
from kproducer.network import NetworkClient
from kproducer.partitioner import custom_partition
from kproducer.sender import Sender

log = logging.getLogger("kproducer")

_client_ids = itertools.count(1)

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
        self._start()

    # -- construction (again after fork) ------------------------------------------------

    def _start(self) -> None:
        cfg = self._config
        self._pid = os.getpid()
        self._generation = fork_generation()
        self.client_id = cfg.client_id or f"kproducer-{next(_client_ids)}"
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        self._custom_partitioner = cfg.partitioner
        self._max_block_s = cfg.max_block_ms / 1000.0
        self._max_request_size = cfg.max_request_size
        self._metadata = Metadata(metadata_max_age_ms=cfg.metadata_max_age_ms,
                                  metadata_max_idle_ms=cfg.metadata_max_idle_ms,
                                  retry_backoff_ms=cfg.retry_backoff_ms,
                                  retry_backoff_max_ms=cfg.retry_backoff_max_ms)
        self._client = NetworkClient(
            client_id=self.client_id, request_timeout_ms=cfg.request_timeout_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            reconnect_backoff_ms=cfg.reconnect_backoff_ms,
            reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
            connection_setup_timeout_ms=cfg.socket_connection_setup_timeout_ms,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            send_buffer_bytes=cfg.send_buffer_bytes, receive_buffer_bytes=cfg.receive_buffer_bytes,
            sasl=cfg.sasl_credentials, tls=tls_context(cfg))
        self._acc = RecordAccumulator(
            batch_size=max(cfg.batch_size, 1), linger_ms=cfg.linger_ms, compression=cfg.compression_type,
            compression_level=cfg.compression_level, buffer_memory=cfg.buffer_memory,
            ignore_keys=cfg.partitioner_ignore_keys, retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms, max_request_size=cfg.max_request_size,
            wakeup=self._client.wakeup, adaptive=cfg.partitioner_adaptive_partitioning_enable,
            availability_timeout_ms=cfg.partitioner_availability_timeout_ms)
        addresses = cfg.bootstrap_addresses
        self._metadata.bootstrap(addresses)
        for i, (host, port) in enumerate(addresses):
            self._client.set_node(-(i + 1), host, port)
        self._sender = Sender(cfg, self._acc, self._metadata, self._client)
        self._sender.start()
        # send() as a compiled bound method: the per-record path has no Python frame.
        # It defers to _send_python for serializers, custom partitioners, unknown
        # metadata, a full pool or a fork.
        needs_python = (self._key_serializer is not None or self._value_serializer is not None
                        or self._custom_partitioner is not None)
        self.send = SendPath(self._acc, self._send_python, needs_python).send

    def _check_fork(self) -> None:
        if fork_generation() != self._generation and os.getpid() != self._pid:
            # The parent's thread does not exist here and its sockets and epoll set are
            # shared with the parent: leave them untouched (never close or shut them down
            # from the child) and start afresh.
            self._abandoned = (getattr(self, "_abandoned", ()), self._client, self._sender, self._acc)
            log.info("kproducer: fork detected (pid %d -> %d); starting a new producer in the child",
                     self._pid, os.getpid())
            self._start()

    # -- sending ------------------------------------------------------------------------

    def send(self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None,
             on_delivery=None):
        """Queues one record and returns its future (RecordMetadata on success).

        ``value`` and ``key`` are bytes-like or None (or anything the configured
        serializers accept); ``headers`` a sequence of ``(str, bytes | None)``;
        ``on_delivery(err, metadata)`` runs on the I/O thread when the record is
        acknowledged or fails. Blocks only while the topic's metadata is unknown or
        ``buffer.memory`` is full, up to ``max.block.ms``, then raises
        KafkaTimeoutError. (Each instance binds a compiled version of this method.)

        A record that can never be sent raises here and is not queued (its future and
        callback are never made): wrong argument types (TypeError), an invalid topic name,
        partition or timestamp (ValueError), a record larger than ``max.request.size`` or
        ``buffer.memory`` (RecordTooLargeError naming its size and the limit; the producer
        checks this itself, as not every broker does), a closed producer (KafkaError).
        """
        return self._send_python(topic, value, key, partition, timestamp_ms, headers, on_delivery, None)

    def _send_python(self, topic, value, key, partition, timestamp_ms, headers, on_delivery, why):
        if fork_generation() != self._generation:
            self._check_fork()
            return self.send(topic, value, key, partition, timestamp_ms, headers, on_delivery)
        if self._closed:
            raise KafkaError("cannot send: the producer is closed")
        if why is None:
            _check_topic(topic)
            if self._key_serializer is not None and key is not None:
                key = self._key_serializer(key)
            if self._value_serializer is not None and value is not None:
                value = self._value_serializer(value)
            if self._custom_partitioner is not None and partition is None:
                partition = self._custom_partition(topic, key, value)
            why = self._acc.append(topic, partition, key, value, timestamp_ms, headers, on_delivery)
            if why is not NEED_METADATA and why is not NEED_MEMORY:
                return why
        return self._send_slow(topic, value, key, partition, timestamp_ms, headers, on_delivery, why)

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
        """
        if fork_generation() != self._generation:
            self._check_fork()
        if self._closed:
            raise KafkaError("cannot send: the producer is closed")
        _check_topic(topic)
        if self._key_serializer is not None or self._value_serializer is not None:
            raise TypeError("send_many takes bytes columns; serializers apply to send() only")
        if partition is None and self._custom_partitioner is not None:
            raise TypeError("send_many does not call a custom partitioner; pass partition= or use send()")
        deadline = time.monotonic() + self._max_block_s
        while True:
            result = self._acc.append_many(topic, values, keys, partition, timestamps, headers, on_delivery,
                                           futures, max(0.0, deadline - time.monotonic()))
            if result is not NEED_METADATA:
                return result
            self._wait_for_topic(topic, deadline - time.monotonic())

    def _send_slow(self, topic, value, key, partition, timestamp_ms, headers, on_delivery, why):
        deadline = time.monotonic() + self._max_block_s
        _check_topic(topic)
        if why is NEED_METADATA:
            self._acc.check_fields(key, value, headers)   # a bad record fails before any wait
        while True:
            if self._sender.fatal_error is not None:
                raise self._sender.fatal_error
            remaining = deadline - time.monotonic()
            if why is NEED_METADATA:
                self._wait_for_topic(topic, remaining)
                if partition is not None:
                    n = self._acc.partition_count(topic)
                    if not 0 <= partition < n:
                        raise ValueError(f"partition {partition} is not in the range [0...{n - 1}] of topic {topic!r}")
            elif why is NEED_MEMORY:
                self._sender.wakeup()
                self._acc.pool.wait_available(self._acc.last_need, max(remaining, 0.0))
            why = self._acc.append(topic, partition, key, value, timestamp_ms, headers, on_delivery)
            if why is not NEED_METADATA and why is not NEED_MEMORY:
                return why
            if time.monotonic() >= deadline:
                what = "metadata" if why is NEED_METADATA else "buffer memory"
                raise KafkaTimeoutError(f"topic {topic!r}: {what} not available within "
                                        f"max.block.ms={int(self._max_block_s * 1000)}")

    def _wait_for_topic(self, topic: str, timeout_s: float) -> None:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        self._metadata.add(topic, wall_clock_ms())
        while True:
            self._metadata.maybe_raise_for_topic(topic)
            cluster = self._metadata.cluster
            n = cluster.num_partitions(topic)
            if n:
                self._acc.set_partition_count(topic, n, cluster.available_partition_ids(topic))
                return
            version = self._metadata.request_update_for_topic(topic)
            self._sender.wakeup()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # Name the cause when no broker could be reached (DNS failure, refused or
                # silent connection): "not present in metadata" alone sends users looking
                # for a missing topic.
                why = self._client.last_connect_error
                raise KafkaTimeoutError(f"topic {topic!r} not present in metadata after "
                                        f"max.block.ms={int(self._max_block_s * 1000)}"
                                        + (f"; no broker reachable: {why}" if why else ""))
            self._metadata.await_update(version, min(remaining, 0.5))

    def _custom_partition(self, topic, key, value):
        n = self._acc.partition_count(topic)
        if n is None:
            self._wait_for_topic(topic, self._max_block_s)
            n = self._acc.partition_count(topic)
        return custom_partition(self._custom_partitioner, topic, key, value, self._metadata.cluster, n)

    # -- flush, close, introspection ------------------------------------------------------

    def flush(self, timeout=None) -> None:
        """Sends every queued record now and waits until each is acknowledged or failed.
        Raises KafkaTimeoutError if ``timeout`` seconds pass first."""
        timeout = _check_timeout(timeout, "flush")
        if self._closed:
            raise KafkaError("cannot flush: the producer is closed")
        self._check_fork()
        pending = list(self._acc.incomplete)
        self._acc.flushes_in_progress += 1
        try:
            self._sender.wakeup()
            deadline = None if timeout is None else time.monotonic() + timeout
            for r in pending:
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
        self._sender.initiate_close(force=timeout is not None and timeout <= 0)
        if not self._sender.join(timeout if timeout is None or timeout > 0 else None):
            log.warning("kproducer: close timed out after %s s; failing what is left", timeout)
            self._sender.initiate_close(force=True)
            self._sender.join(5)
        self._metadata.close()

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
        retries, producer id resets, buffer memory in use."""
        out = dict(self._sender.stats)
        out.update(buffer_total_bytes=self._acc.pool.total, buffer_available_bytes=self._acc.pool.available,
                   queued_batches=self._acc.queued_batches(), producer_id=self._sender.producer_id,
                   producer_epoch=self._sender.producer_epoch, metadata_version=self._metadata.version)
        return out

    @property
    def config(self) -> ProducerConfig:
        return self._config

    def __repr__(self) -> str:
        return f"<Producer {self.client_id} {self._config!r}{' closed' if self._closed else ''}>"

    def __reduce__(self):
        # A producer pickles as its configuration and unpickles into the receiving
        # process's cached producer for it (see _cached_producer), so one captured in a
        # Spark UDF or foreachPartition closure becomes one producer per worker process.
        plain, refs = {}, {}
        for name, value in self._config.user_config.items():
            if callable(value):
                refs[name] = _callable_ref(name, value)
            else:
                plain[name] = value
        return (_unpickle_producer, (plain, refs))


# -- pickling and the per-process producer cache ------------------------------------------
#
# One producer per process and configuration, made on first use and closed (after sending
# what is queued) when the interpreter exits. Fork-safe: the cache remembers the pid that
# filled it, and a child that inherited it starts with an empty one (the parent's producers'
# I/O threads do not exist in the child; their sockets are left alone, as in _check_fork).
# Processes that end with os._exit (PySpark's forked workers do) skip atexit: callers that
# need delivery guarantees flush themselves (kproducer.spark flushes after every task).

_cache: dict = {}
_cache_pid: int | None = None
_cache_lock = threading.Lock()
_abandoned_caches: list = []   # a forked child's copies of the parent's producers, kept untouched
_atexit_registered = False


def _callable_ref(name: str, fn) -> tuple[str, str]:
    """(module, qualname) of a callable setting, checked to import back to the same object:
    callables pickle by reference, so lambdas, nested functions and instances cannot."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    ok = isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname
    if ok:
        try:
            ok = _resolve_ref(module, qualname) is fn
        except (ImportError, AttributeError, ValueError):
            ok = False
    if not ok:
        raise pickle.PicklingError(
            f"cannot pickle Producer: config {name!r} holds {fn!r}, which cannot be pickled by "
            f"reference; a pickled Producer carries its configuration and callables in it must be "
            f"module-level functions or classes importable where it is unpickled (not lambdas, "
            f"nested functions or instances)")
    return module, qualname


def _resolve_ref(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _cached_producer(user_config: dict) -> Producer:
    """This process's producer for ``user_config`` (dotted names as in
    ``ProducerConfig.user_config``), made on first use; a closed one is replaced."""
    global _cache, _cache_pid, _atexit_registered
    key = tuple(sorted((str(k), _freeze(v)) for k, v in ProducerConfig(user_config).user_config.items()))
    with _cache_lock:
        if _cache_pid != os.getpid():
            if _cache:
                _abandoned_caches.append(_cache)
            _cache, _cache_pid = {}, os.getpid()
        producer = _cache.get(key)
        if producer is None or producer._closed:
            producer = _cache[key] = Producer(user_config)
        if not _atexit_registered:
            atexit.register(_close_cached)
            _atexit_registered = True
        return producer


def _unpickle_producer(plain: dict, refs: dict) -> Producer:
    config = dict(plain)
    for name, (module, qualname) in refs.items():
        config[name] = _resolve_ref(module, qualname)
    return _cached_producer(config)


def _close_cached() -> None:
    """At interpreter exit: close this process's cached producers (an inherited cache is
    the parent's and is left alone)."""
    if _cache_pid != os.getpid():
        return
    for producer in list(_cache.values()):
        try:
            producer.close(timeout=producer.config.delivery_timeout_ms / 1000.0)
        except Exception:
            log.exception("kproducer: closing a cached producer at exit failed")
    _cache.clear()
