"""The ``kproducer`` Spark data source: ``df.write`` and ``df.writeStream`` to Kafka.

::

    df.write.format("kproducer").mode("append") \\
        .option("kafka.bootstrap.servers", "broker:9092").option("topic", "events").save()
    df.writeStream.format("kproducer").option("kafka.bootstrap.servers", "broker:9092") \\
        .option("topic", "events").option("checkpointLocation", "/chk").start()

Options are those of Spark's own Kafka sink: ``kafka.bootstrap.servers`` (required),
``topic`` (overrides the ``topic`` column), ``kafka.<any producer setting>``; the input is
Spark's Kafka sink schema (``value``, optional ``key``, ``topic``, ``partition``,
``headers``). Each task hands its Arrow record batches to ``send_many`` whole.

``exactlyOnce=true``: each task writes its rows in a transaction and prepares it
(``Producer.prepare_transaction``); the driver's ``commit`` completes every prepared
transaction of the job (or micro-batch) and ``abort`` aborts them, so a task attempt that
failed or was superseded never becomes visible to read_committed consumers. Transactional
ids are ``<prefix>-p<partition>-a<attempt>`` (``-b<batch>-`` for streams); a later attempt
of a partition first fences the earlier ones, which aborts whatever a killed attempt left
open. When a job (or micro-batch) is aborted, the driver also fences attempts
``0 .. taskMaxFailures - 1`` of every partition whose task left no commit message (a
killed attempt reports nothing). Option ``taskMaxFailures`` (default 4, Spark's default
``spark.task.maxFailures``) must be at least the job's real setting: set it when
``spark.task.maxFailures`` (or ``F`` of a ``local[N,F]`` master) is higher. The sink cannot
read that setting itself: PySpark runs ``DataSource.writer()`` and the writer's
``commit``/``abort`` in Python worker processes that have no SparkContext or active
SparkSession, and Python data sources get no session configs as options.

Streams record each decided micro-batch in a ledger topic first
(:mod:`kproducer.spark_ledger`; option ``ledgerTopic``, default ``<prefix>-ledger``), so a
replay after a commit writes nothing. See docs/spark.md for what this covers and what it cannot.

PySpark finds this source by itself when kproducer is installed (the top-level module
``pyspark_kproducer``); ``kproducer.spark.register(spark)`` registers it explicitly.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from kproducer import spark_ledger
from kproducer.config import ProducerConfig
from kproducer.producer import Producer, _check_topic
from kproducer.producer_cache import cached_producer
from kproducer.spark import BULK_DEFAULTS, check_delivered, input_columns, send_batches
from kproducer.transactions import PreparedTransaction

NAME = "kproducer"

# Options Spark itself may pass along (lower case: Spark hands options case-insensitively).
_SPARK = {"checkpointlocation", "path", "queryname"}
# Spark's Kafka sink refuses these, with this reason (KafkaSourceProvider), and what to
# write instead.
_REFUSED = {
    "key.serializer": "keys are serialized with ByteArraySerializer: cast the 'key' column to "
                      "string or binary in Spark instead "
                      "(e.g. selectExpr(\"CAST(key AS STRING) AS key\", ...))",
    "value.serializer": "values are serialized with ByteArraySerializer: cast the 'value' column "
                        "to string or binary in Spark instead "
                        "(e.g. selectExpr(\"to_json(struct(*)) AS value\"))",
    "partitioner": "the partition comes from the 'partition' column or the key's murmur2 hash: "
                   "add an int 'partition' column instead",
    "transactional.id": "with exactlyOnce the sink derives one transactional id per task "
                        "(set the transactionalIdPrefix option instead)",
}
_OPTIONS = ("topic", "exactlyOnce", "transactionalIdPrefix", "ledgerTopic", "taskMaxFailures")
DEFAULT_TASK_MAX_FAILURES = 4       # spark.task.maxFailures' default


@dataclasses.dataclass(frozen=True)
class SinkSettings:
    user_config: dict
    topic: str | None
    columns: tuple
    exactly_once: bool
    prefix: str | None
    ledger: str | None = None                   # exactly-once streams: the decisions topic
    decided: frozenset = frozenset()            # micro-batches already committed (replays skip)
    task_max_failures: int = DEFAULT_TASK_MAX_FAILURES   # attempts fenced on abort


def sink_settings(options, schema, overwrite: bool, *, streaming: bool) -> SinkSettings:
    """Checks everything on the driver, before any task runs."""
    if overwrite:
        mode = '.outputMode("append")' if streaming else '.mode("append")'
        raise ValueError(f"the {NAME} data source appends to Kafka topics: write {mode} "
                         f"(overwrite cannot delete what a topic holds)")
    producer_settings, topic, exactly_once, prefix, ledger = {}, None, False, None, None
    max_failures = DEFAULT_TASK_MAX_FAILURES
    for key, value in options.items():
        k = key.lower()
        if k.startswith("kafka."):
            name = k[len("kafka."):]
            if name in _REFUSED:
                raise ValueError(f"Kafka option '{name}' is not supported as {_REFUSED[name]}.")
            producer_settings[name] = value
        elif k == "topic":
            topic = value
        elif k == "exactlyonce":
            if str(value).lower() not in ("true", "false"):
                raise ValueError(f"option exactlyOnce must be true or false, not {value!r}")
            exactly_once = str(value).lower() == "true"
        elif k == "transactionalidprefix":
            prefix = value
        elif k == "ledgertopic":
            ledger = value
        elif k == "taskmaxfailures":
            try:
                max_failures = int(value)
            except ValueError:
                max_failures = 0
            if max_failures < 1:
                raise ValueError(f"option taskMaxFailures must be a whole number >= 1 (the job's "
                                 f"spark.task.maxFailures), not {value!r}")
        elif k not in _SPARK:
            raise ValueError(f"unknown option {key!r} for the {NAME} data source: producer settings "
                             f"are given as 'kafka.<setting>' (e.g. kafka.linger.ms); the others "
                             f"are {', '.join(sorted(_OPTIONS))}")
    if "bootstrap.servers" not in producer_settings:
        raise ValueError(f"option 'kafka.bootstrap.servers' is required by the {NAME} data source")
    if topic is not None:
        _check_topic(topic)
    for name, value in BULK_DEFAULTS.items():
        producer_settings.setdefault(name, value)
    user_config = ProducerConfig(producer_settings).user_config      # names and values checked
    if exactly_once:
        # What the tasks' transactional producers will be (idempotence, acks=all...): refused
        # here rather than in every task attempt.
        try:
            ProducerConfig({**producer_settings, "transactional.id": f"{NAME}-check"})
        except ValueError as exc:
            raise ValueError(f"exactlyOnce: {exc}; each task writes with a transactional "
                             f"producer, so leave these settings at their defaults") from None
    columns = tuple(input_columns(schema, topic, f"the {NAME} data source"))
    if exactly_once and prefix is None:
        if streaming:
            chk = options.get("checkpointLocation")
            if chk is None:
                raise ValueError("exactlyOnce on a stream needs a transactionalIdPrefix option (or a "
                                 "checkpointLocation to derive it from): it must stay the same when "
                                 "the query restarts")
            prefix = f"{NAME}-{uuid.uuid5(uuid.NAMESPACE_URL, chk).hex[:16]}"
        else:
            prefix = f"{NAME}-{uuid.uuid4().hex[:16]}"
    if exactly_once and streaming:
        ledger = ledger or f"{prefix}-ledger"
        _check_topic(ledger)
    return SinkSettings(user_config, topic, columns, exactly_once, prefix, ledger,
                        task_max_failures=max_failures)


@dataclasses.dataclass
class SinkCommitMessage(WriterCommitMessage):
    partition: int
    attempt: int
    rows: int
    prepared: PreparedTransaction | None = None


class KafkaSink(DataSource):
    """``format("kproducer")``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema, overwrite: bool):
        return KafkaBatchWriter(sink_settings(self.options, schema, overwrite, streaming=False))

    def streamWriter(self, schema, overwrite: bool):
        settings = sink_settings(self.options, schema, overwrite, streaming=True)
        if settings.exactly_once:
            settings = _recover(settings)
        return KafkaStreamWriter(settings)


def _task():
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0, None
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return ctx.partitionId(), ctx.attemptNumber(), batch


def _txn_id(settings: SinkSettings, partition: int, attempt: int, batch) -> str:
    mid = f"-b{batch}" if batch is not None else ""
    return f"{settings.prefix}{mid}-p{partition}-a{attempt}"


def _plain_config(settings: SinkSettings) -> dict:
    return {k: v for k, v in settings.user_config.items() if k != "transactional.id"}


def _recover(settings: SinkSettings) -> SinkSettings:
    """At query (re)start: the micro-batches the ledger says were decided are skipped if
    Spark replays them, and the last one's transactions are completed again (the driver may
    have died between the decision and the commits; finishing twice is harmless)."""
    with Producer(_plain_config(settings)) as p:
        decided = spark_ledger.read(p, settings.ledger)
        if decided:
            for prepared in decided[max(decided)]:
                p.complete_transaction(prepared, commit=True)
    return dataclasses.replace(settings, decided=frozenset(decided))


def _write(settings: SinkSettings, batches) -> SinkCommitMessage:
    partition, attempt, batch = _task()
    if batch is not None and int(batch) in settings.decided:
        return SinkCommitMessage(partition, attempt, 0)      # committed before a restart
    if not settings.exactly_once:
        producer = cached_producer(settings.user_config)
        rows, _, _, results = send_batches(producer, batches, settings.topic)
        producer.flush()
        check_delivered(results, rows)
        return SinkCommitMessage(partition, attempt, rows)
    # Earlier attempts of this partition may have left a transaction open (a killed Python
    # worker): initializing their ids fences them and aborts it.
    for earlier in range(attempt):
        with Producer(settings.user_config, transactional_id=_txn_id(settings, partition, earlier, batch)) as old:
            old.init_transactions()
    producer = Producer(settings.user_config, transactional_id=_txn_id(settings, partition, attempt, batch))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        try:
            rows, _, _, results = send_batches(producer, batches, settings.topic)
            prepared = producer.prepare_transaction()
            check_delivered(results, rows)
        except BaseException:
            try:
                producer.abort_transaction(timeout=10)
            except Exception:
                pass          # the next attempt fences this id and aborts it
            raise
        return SinkCommitMessage(partition, attempt, rows, prepared)
    finally:
        producer.close()


def _complete(settings: SinkSettings, messages, commit: bool, batch=None) -> None:
    """On the driver: commits (or aborts) every prepared transaction of the job; on abort,
    also fences the ids of partitions whose task left no message (killed attempts)."""
    if not settings.exactly_once:
        return
    done = [m for m in messages if m is not None and m.prepared is not None]
    with Producer(_plain_config(settings)) as p:
        if commit and settings.ledger is not None and done:
            # The decision first, stored before any transaction ends (see spark_ledger).
            spark_ledger.record(p, settings.ledger, int(batch), [m.prepared for m in done])
        for m in done:
            p.complete_transaction(m.prepared, commit=commit)
    if not commit:
        for i, m in enumerate(messages):
            if m is None:
                for attempt in range(settings.task_max_failures):
                    with Producer(settings.user_config,
                                  transactional_id=_txn_id(settings, i, attempt, batch)) as old:
                        old.init_transactions()


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, settings: SinkSettings):
        self.settings = settings
        self.started = time.monotonic()

    def write(self, iterator):
        return _write(self.settings, iterator)

    def commit(self, messages) -> None:
        _complete(self.settings, messages, commit=True)

    def abort(self, messages) -> None:
        _complete(self.settings, messages, commit=False)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: SinkSettings):
        self.settings = settings

    def write(self, iterator):
        return _write(self.settings, iterator)

    def commit(self, messages, batchId) -> None:
        _complete(self.settings, messages, commit=True, batch=batchId)

    def abort(self, messages, batchId) -> None:
        _complete(self.settings, messages, commit=False, batch=batchId)
