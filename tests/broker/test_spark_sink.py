"""The kproducer Spark data source for real: df.write and df.writeStream on local[2] (and
local-cluster) against the real broker, read back with confluent-kafka (and, for exactly-once,
the committed view of the log: Tansu sends no AbortedTransactions list)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pandas  # noqa: F401  (hard imports: a missing PySpark is an error, never a skip)
import pyspark  # noqa: F401
from kafka.partitioner.default import murmur2   # kafka-python: Java's murmur2, pure Python

from kproducer.spark import register
from kproducer.config import ProducerConfig
from kproducer.spark import BULK_DEFAULTS
from kproducer.testing.readback import read_back
from kproducer.testing.txnlog import committed_view

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark():
    from kproducer.testing.spark import local_session

    # local[2,4]: two threads, and a failed task is tried up to 4 times (plain local[2]
    # never retries, whatever spark.task.maxFailures says).
    session = local_session("kproducer-sink-tests", "local[2,4]", **{"spark.sql.shuffle.partitions": "4"})
    register(session)
    try:
        yield session
    finally:
        session.stop()


def writer(df, bootstrap, **options):
    w = df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def java_partition(key: bytes, n: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % n


def ids_read(bootstrap, topic, n_parts, *, check_partition=True):
    """How many times each id was read back (keys are key-<id>), checking Java's partition."""
    counts = {}
    for p in range(n_parts):
        for m in read_back(bootstrap, topic, partitions=[p], timeout=180)[p]:
            i = int(m.key[4:])
            assert m.value == i.to_bytes(100, "big")
            if check_partition:
                assert java_partition(m.key, n_parts) == p, m.key
            counts[i] = counts.get(i, 0) + 1
    return counts


def rows_df(spark, n, tasks=4):
    return spark.range(n, numPartitions=tasks).selectExpr(
        "concat('key-', cast(id as string)) AS key", "unhex(lpad(hex(id), 200, '0')) AS value")


@pytest.mark.slow
def test_batch_write_1m_rows_on_java_partitions(spark, broker):
    n = 1_000_000
    broker.create_topic("bulk", 4)
    writer(rows_df(spark, n), broker.bootstrap, topic="bulk").save()
    counts = ids_read(broker.bootstrap, "bulk", 4)
    assert len(counts) == n and set(counts.values()) == {1}


def test_topic_column_partition_and_headers(spark, broker):
    from pyspark.sql import types as T

    broker.create_topic("ta", 3)
    broker.create_topic("tb", 2)
    header_t = T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                         T.StructField("value", T.BinaryType())]))
    schema = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType()),
                           T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                           T.StructField("headers", header_t)])
    rows = [(f"k{i}", f"v{i}".encode(), "ta" if i % 3 else "tb", (i % 2) if i % 7 == 0 else None,
             [("i", str(i).encode())] if i % 2 else None) for i in range(200)]
    writer(spark.createDataFrame(rows, schema).repartition(3), broker.bootstrap).save()
    expected = {r[1]: r for r in rows}
    seen = set()
    for topic, n in (("ta", 3), ("tb", 2)):
        for p, msgs in read_back(broker.bootstrap, topic, timeout=60).items():
            for m in msgs:
                key, _, t, partition, headers = expected[m.value]
                assert t == topic and m.value not in seen
                seen.add(m.value)
                assert m.headers == [tuple(h) for h in headers or []]
                assert p == (partition if partition is not None else java_partition(key.encode(), n))
    assert seen == set(expected)


def test_wrong_options_schema_and_mode_fail_before_any_task(spark, broker):
    from pyspark.errors import AnalysisException

    broker.create_topic("t", 1)
    df = rows_df(spark, 100, tasks=1)
    cases = [
        (lambda: writer(df, broker.bootstrap, topic="t").mode("overwrite").save(), 'mode\\("append"\\)'),
        (lambda: writer(df, broker.bootstrap, topic="t", **{"kafka.key.serializer": "x"}).save(),
         "Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer"),
        # Spark's refusals, each saying what to write instead.
        (lambda: writer(df, broker.bootstrap, topic="t", **{"kafka.value.serializer": "x"}).save(),
         "Kafka option 'value.serializer' is not supported as values are serialized with "
         "ByteArraySerializer: cast the 'value' column to string or binary in Spark instead"),
        (lambda: writer(df, broker.bootstrap, topic="t", **{"kafka.key.serializer": "x"}).save(),
         "cast the 'key' column to string or binary in Spark instead"),
        (lambda: writer(df, broker.bootstrap, topic="t", **{"kafka.partitioner": "x"}).save(),
         "Kafka option 'partitioner' is not supported .* add an int 'partition' column instead"),
        (lambda: writer(df, broker.bootstrap, topic="t", exactlyOnce="true",
                        **{"kafka.transactional.id": "x"}).save(),
         "Kafka option 'transactional.id' is not supported .*set the transactionalIdPrefix option instead"),
        # What the tasks' transactional producers would refuse, refused on the driver.
        (lambda: writer(df, broker.bootstrap, topic="t", exactlyOnce="true",
                        **{"kafka.enable.idempotence": "false"}).save(),
         "exactlyOnce: transactional.id needs idempotence.*leave these settings at their defaults"),
        (lambda: writer(df, broker.bootstrap, topic="t", exactlyOnce="true", taskMaxFailures="many").save(),
         "taskMaxFailures must be a whole number"),
        (lambda: writer(df, broker.bootstrap, topics="t").save(), "unknown option 'topics'.*taskMaxFailures"),
        (lambda: writer(df, broker.bootstrap, topic="t", **{"kafka.linger.ms": "-1"}).save(), "linger.ms"),
        (lambda: writer(df, broker.bootstrap, topic="t", **{"kafka.lingr.ms": "5"}).save(), "linger.ms"),
        (lambda: writer(df, broker.bootstrap).save(), "'topic' column"),
        (lambda: writer(df.selectExpr("key"), broker.bootstrap, topic="t").save(), "'value' column"),
        (lambda: writer(df.selectExpr("key", "1 AS value"), broker.bootstrap, topic="t").save(),
         "'value' must be string or binary"),
        (lambda: writer(df, broker.bootstrap, topic="t", exactlyOnce="maybe").save(), "exactlyOnce"),
        (lambda: df.write.format("kproducer").mode("append").option("topic", "t").save(),
         "kafka.bootstrap.servers' is required"),
        # Spark's own refusal of the default save mode says what to write instead.
        (lambda: df.write.format("kproducer").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "t").save(), "Append"),
    ]
    for run, pattern in cases:
        with pytest.raises(AnalysisException, match=pattern):
            run()
    assert read_back(broker.bootstrap, "t", timeout=30) == {0: []}


def test_bulk_defaults_apply_unless_set():
    from pyspark.sql import types as T

    from kproducer.spark_sink import sink_settings

    schema = T.StructType([T.StructField("value", T.BinaryType())])
    opts = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    assert sink_settings(opts, schema, False, streaming=False).user_config["batch.size"] == \
        BULK_DEFAULTS["batch.size"] == 1_000_000
    mine = sink_settings({**opts, "kafka.batch.size": "16384"}, schema, False, streaming=False)
    assert ProducerConfig(mine.user_config).batch_size == 16384


# -- exactly-once ---------------------------------------------------------------------------

def _flaky(df, marker_dir, mode, bootstrap, topic, n_parts, *, after=4, deadline=60.0):
    """``df`` through a Python step that breaks each Spark partition's first attempt once
    the writer has sent some of that attempt's rows. After ``after`` Arrow batches went
    downstream it reads the topic read_uncommitted (open transactions included) until rows
    it yielded itself are in the log (keys are unique, so they are this task's), then
    ``raise`` raises, ``kill`` SIGKILLs its own Python worker and ``kill-writer`` SIGKILLs
    the writer's Python worker and carries on (the writer's death fails the task). Several
    batches first: PySpark flushes a worker's output only at its end, so the last batch
    yielded may still sit in this worker's socket buffer, out of the writer's reach.

    Every attempt leaves ``<partition>-a<attempt>.json`` in ``marker_dir``; a first attempt
    records the ids it saw in the log before it broke, or why it could not break as meant
    (``error``), which the tests assert on: a retry would otherwise hide it.

    Everything the step uses is inside it: cloudpickle ships nested functions by value, a
    module-level helper of this test file by reference, which executors cannot import."""
    def find_writer(broker_port):
        """The writer's Python worker: the other live child of this worker's daemon that
        has kproducer loaded and an established connection to the broker. Reliable only
        where the daemon runs one task at a time and workers are not reused (idle workers
        keep the plain sink's cached producer and its connections)."""
        import os

        def sockets_to_broker():
            inodes = set()
            with open("/proc/net/tcp") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if int(fields[2].split(":")[1], 16) == broker_port and fields[3] == "01":
                        inodes.add(fields[9])
            return inodes

        to_broker = sockets_to_broker()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
                if int(ppid) != os.getppid() or state in "ZX":
                    continue
                with open(f"/proc/{entry}/maps") as f:
                    if "/kproducer/_" not in f.read():
                        continue
                fds = os.listdir(f"/proc/{entry}/fd")
                links = {os.readlink(f"/proc/{entry}/fd/{fd}") for fd in fds}
            except OSError:                     # it exited meanwhile
                continue
            if any(link[len("socket:["):-1] in to_broker for link in links if link.startswith("socket:[")):
                found.append(int(entry))
        return found

    def step(batches):
        import json
        import os
        import signal
        import time
        import uuid

        from confluent_kafka import Consumer, TopicPartition
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        marker = os.path.join(marker_dir, f"{partition}-a{attempt}.json")

        def mark(**fields):
            with open(marker + ".tmp", "w") as f:
                json.dump({"partition": partition, "attempt": attempt, "mode": mode, **fields}, f)
            os.rename(marker + ".tmp", marker)          # the test never reads half a file

        mark()
        mine = set()
        for i, b in enumerate(batches):
            yield b
            if attempt:
                continue
            mine.update(b.column("key").to_pylist())
            if i + 1 != after:
                continue
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"flaky-{uuid.uuid4().hex}",
                                 "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                                 "fetch.wait.max.ms": 100})
            # Offset 0: Tansu's "earliest" can be a later batch (kproducer.testing.readback).
            consumer.assign([TopicPartition(topic, p, 0) for p in range(n_parts)])
            seen = []
            end = time.monotonic() + deadline
            try:
                while not seen and time.monotonic() < end:
                    for m in consumer.consume(1000, timeout=0.2):
                        if m.error() is None and m.key() is not None and m.key().decode() in mine:
                            seen.append(int(m.key()[4:]))
            finally:
                consumer.close()
            if not seen:
                mark(seen=[], error=f"the writer never sent: none of the {len(mine)} rows this "
                                    f"attempt yielded reached {topic} within {deadline} s")
                raise RuntimeError(f"partition {partition}: the writer never sent")
            if mode == "kill-writer":
                port = int(bootstrap.rsplit(":", 1)[1])
                found = find_writer(port)
                end = time.monotonic() + deadline
                while len(found) != 1 and time.monotonic() < end:
                    time.sleep(0.1)
                    found = find_writer(port)
                if len(found) != 1:
                    mark(seen=seen, error=f"not one writer worker among the daemon's children: {found}")
                    raise RuntimeError(f"partition {partition}: the writer's worker not found: {found}")
                mark(seen=seen, killed=found[0])
                os.kill(found[0], signal.SIGKILL)
                continue                                # the writer's death fails the task
            mark(seen=seen)
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("injected failure after the writer sent rows of this attempt")
    return df.mapInArrow(step, df.schema)


def _marks(marker_dir, tasks):
    """The markers of _flaky: each partition's first attempt broke after it saw rows of its
    own in the log, and the partition ran again. Returns {partition: ids seen}."""
    import json

    marks = [json.loads(p.read_text()) for p in Path(marker_dir).glob("*.json")]
    first = {m["partition"]: m for m in marks if m["attempt"] == 0}
    assert sorted(first) == list(range(tasks)), marks
    for m in first.values():
        assert "error" not in m and m.get("seen"), m       # it broke as meant, after a send
    retried = {m["partition"] for m in marks if m["attempt"] >= 1}
    assert retried == set(range(tasks)), marks             # every first attempt failed
    return {p: m["seen"] for p, m in first.items()}


def _broken_write(spark, broker, tmp_path, mode, topic, n, tasks, **options):
    """Writes ``n`` rows in ``tasks`` tasks through _flaky; returns {partition: ids its
    first attempt saw in the log before it broke}."""
    broker.create_topic(topic, 4)
    marks = tmp_path / "marks"
    marks.mkdir()
    # 1000-row Arrow batches: each task yields several before it breaks (_flaky's ``after``).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        writer(_flaky(rows_df(spark, n, tasks), str(marks), mode, broker.bootstrap, topic, 4),
               broker.bootstrap, topic=topic, **options).save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    return _marks(marks, tasks)


def _check_at_least_once(counts, seen, n):
    """Without exactlyOnce: every row, and the duplicates a broken attempt leaves: each row
    its first attempt was seen to have sent is there twice (its retry sent all its rows
    again)."""
    assert sorted(counts) == list(range(n)), "every row at least once"
    assert set(counts.values()) <= {1, 2}, "one broken attempt per task: no row three times"
    for p, ids in seen.items():
        assert {counts[i] for i in ids} == {2}, f"partition {p}: its first attempt's rows twice"


def _check_exactly_once(view, seen, n):
    """With exactlyOnce: the committed view holds every row once; the rows the first attempts
    sent are in the log, aborted; nothing stays open."""
    got = [int(r.key[4:]) for rs in view.records.values() for r in rs]
    assert sorted(got) == list(range(n)), "the committed view holds every row exactly once"
    assert not any(view.open.values())
    aborted = {int(r.key[4:]) for rs in view.aborted.values() for r in rs}
    for p, ids in seen.items():
        assert set(ids) <= aborted, f"partition {p}: its first attempt's rows sent, then aborted"


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_without_exactly_once_broken_attempts_write_duplicates(spark, broker, tmp_path, mode):
    """The twin of the next test without exactlyOnce: at-least-once, like Spark's own Kafka
    sink. Every task's first attempt sends rows and breaks (raises, or its Python worker is
    killed); every row arrives, and the rows the broken attempts sent arrive twice."""
    n, tasks = 40_000, 4
    topic = f"alo-{mode}"
    seen = _broken_write(spark, broker, tmp_path, mode, topic, n, tasks)
    _check_at_least_once(ids_read(broker.bootstrap, topic, 4), seen, n)


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_exactly_once_survives_failed_and_killed_attempts(spark, broker, tmp_path, mode):
    """Every task's first attempt sends rows in its transaction, then breaks (raises, or its
    Python worker is killed): its rows stay in the log, aborted, and the committed view
    holds each row exactly once."""
    n, tasks = 40_000, 4
    topic = f"eo-{mode}"
    seen = _broken_write(spark, broker, tmp_path, mode, topic, n, tasks, exactlyOnce="true")
    _check_exactly_once(committed_view(broker.bootstrap, topic), seen, n)


def _fails_while_flag(df, flag):
    """Spark partition 1 fails on every attempt while the file ``flag`` exists."""
    def step(batches):
        import os

        from pyspark import TaskContext

        for b in batches:
            yield b
        if TaskContext.get().partitionId() == 1 and os.path.exists(flag):
            raise RuntimeError("partition 1 fails while the flag is set")
    return df.mapInArrow(step, df.schema)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_failed_job_run_again(spark, broker, tmp_path, exactly_once):
    """A job whose partition 1 fails every attempt, then the same job again once it can
    succeed (what a scheduler does). Exactly-once: the failed run leaves nothing visible and
    the rerun writes every row once. At-least-once: partition 0's rows of the failed run
    stay, and the rerun writes them again: the duplicates it allows."""
    n = 4000
    topic = "rerun-eo" if exactly_once else "rerun-alo"
    broker.create_topic(topic, 2)
    flag = tmp_path / "fail"
    flag.touch()
    df = _fails_while_flag(rows_df(spark, n, tasks=2), str(flag))
    options = {"topic": topic, **({"exactlyOnce": "true"} if exactly_once else {})}
    with pytest.raises(Exception, match="partition 1 fails while the flag is set"):
        writer(df, broker.bootstrap, **options).save()
    if exactly_once:
        view = committed_view(broker.bootstrap, topic)
        assert view.values() == [] and not any(view.open.values())
        assert sum(len(rs) for rs in view.aborted.values()) >= n // 2    # partition 0's, aborted
    flag.unlink()
    writer(df, broker.bootstrap, **options).save()
    if exactly_once:
        view = committed_view(broker.bootstrap, topic)
        assert sorted(int(r.key[4:]) for rs in view.records.values() for r in rs) == list(range(n))
    else:
        counts = ids_read(broker.bootstrap, topic, 2)
        assert set(counts) == set(range(n))
        assert sorted(i for i, c in counts.items() if c == 2) == list(range(n // 2))   # Spark partition 0


# -- streaming ------------------------------------------------------------------------------

def _json_files(directory: Path, n: int, files: int) -> None:
    import json

    per = n // files
    for f in range(files):
        with open(directory / f"part-{f}.json", "w") as out:
            for i in range(f * per, (f + 1) * per):
                out.write(json.dumps({"key": f"key-{i}", "id": i}) + "\n")


@pytest.mark.parametrize("exactly_once", [False, True])
def test_stream_available_now_from_files(spark, broker, tmp_path, exactly_once):
    # 1,000,000 rows at-least-once (the figure); the exactly-once variant reads its
    # committed view through the control-batch reader, which is slower: 200,000.
    n = 200_000 if exactly_once else 1_000_000
    topic = "stream-eo" if exactly_once else "stream"
    broker.create_topic(topic, 4)
    src = tmp_path / "in"
    src.mkdir()
    _json_files(src, n, 5)
    stream = (spark.readStream.schema("key string, id long").option("maxFilesPerTrigger", 2).json(str(src))
              .selectExpr("key", "unhex(lpad(hex(id), 200, '0')) AS value"))
    w = (stream.writeStream.format("kproducer").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", topic).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True))
    if exactly_once:
        w = w.option("exactlyOnce", "true")
    query = w.start()
    query.awaitTermination(300)
    assert query.exception() is None
    assert len(query.recentProgress) >= 3           # several micro-batches (2 files each)
    if exactly_once:
        view = committed_view(broker.bootstrap, topic)
        assert sorted(int(r.key[4:]) for rs in view.records.values() for r in rs) == list(range(n))
        assert not any(view.open.values())
    counts = ids_read(broker.bootstrap, topic, 4)
    assert len(counts) == n and set(counts.values()) == {1}


@pytest.mark.parametrize("exactly_once", [True, False])
def test_stream_replayed_after_its_commit_writes_nothing_twice(spark, broker, tmp_path, exactly_once):
    """The driver dies after the sink committed micro-batch N and before Spark's commit log
    recorded it: the restarted query replays N. Simulated by deleting commits/N from the
    checkpoint (what Spark finds after such a crash) and starting the query again."""
    n = 30_000
    topic = "replay-eo" if exactly_once else "replay"
    broker.create_topic(topic, 2)
    src, chk = tmp_path / "in", tmp_path / "chk"
    src.mkdir()
    _json_files(src, n, 3)

    def run():
        stream = (spark.readStream.schema("key string, id long").option("maxFilesPerTrigger", 1)
                  .json(str(src)).selectExpr("key", "unhex(lpad(hex(id), 200, '0')) AS value"))
        w = (stream.writeStream.format("kproducer").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", topic).option("checkpointLocation", str(chk)).trigger(availableNow=True))
        if exactly_once:
            w = w.option("exactlyOnce", "true")
        q = w.start()
        q.awaitTermination(300)
        assert q.exception() is None
        return q

    run()
    commits = sorted((chk / "commits").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1)
    last = commits[-1]
    assert last.name == "2"                          # three micro-batches, one file each
    last.unlink()
    (chk / "commits" / f".{last.name}.crc").unlink(missing_ok=True)     # its checksum too
    replay = run()
    assert [p["batchId"] for p in replay.recentProgress if p["numInputRows"]] == [2]   # batch 2 again
    counts = ids_read(broker.bootstrap, topic, 2)
    assert set(counts) == set(range(n))
    if exactly_once:
        assert set(counts.values()) == {1}
        view = committed_view(broker.bootstrap, topic)
        assert sum(len(rs) for rs in view.records.values()) == n and not any(view.open.values())
    else:
        assert sorted(i for i, c in counts.items() if c == 2) == list(range(2 * n // 3, n))


def test_stream_fails_the_query_when_the_broker_is_gone(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _json_files(src, 100, 1)
    stream = spark.readStream.schema("key string, id long").json(str(src)).selectExpr(
        "key", "cast(id AS string) AS value")
    query = (stream.writeStream.format("kproducer").option("kafka.bootstrap.servers", "127.0.0.1:1")
             .option("kafka.max.block.ms", "2000").option("kafka.delivery.timeout.ms", "3000")
             .option("kafka.request.timeout.ms", "1000").option("topic", "t")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="KafkaTimeoutError|not available within max.block.ms|failed"):
        query.awaitTermination(300)


# -- found without register() ----------------------------------------------------------------

def test_format_kproducer_is_found_without_register(tmp_path, broker):
    """PySpark looks up top-level pyspark_* modules; the wheel installs pyspark_kproducer
    (from kproducer/_spark_discovery). Put that package on a fresh session's path as an
    install would, and write without calling register()."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "kproducer" / "_spark_discovery", site / "pyspark_kproducer")
    broker.create_topic("found", 1)
    script = textwrap.dedent(f"""
        from kproducer.testing.spark import local_session
        spark = local_session("discovery", "local[1]")
        spark.range(10).selectExpr("cast(id as string) AS value").write.format("kproducer") \\
            .mode("append").option("kafka.bootstrap.servers", {broker.bootstrap!r}) \\
            .option("topic", "found").save()
        spark.stop()
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(m.value for m in read_back(broker.bootstrap, "found", timeout=60)[0]) == \
        sorted(str(i).encode() for i in range(10))


# -- options, failures, triggers ---------------------------------------------------------------

def test_abort_fences_every_attempt_task_max_failures_allows(broker):
    """The driver's abort fences attempts 0 .. taskMaxFailures-1 of each partition whose task
    left no message: an attempt killed after it sent rows (here attempt 5 of partition 1,
    possible with spark.task.maxFailures=6) leaves an open transaction only a fence ends.
    The driver side is called directly: PySpark runs abort() in a Python worker with no
    SparkContext, so the setting comes from the taskMaxFailures option."""
    from pyspark.sql import types as T

    from kproducer import Producer
    from kproducer.spark_sink import SinkCommitMessage, _complete, _txn_id, sink_settings

    broker.create_topic("fence", 2)
    schema = T.StructType([T.StructField("value", T.BinaryType())])
    opts = {"kafka.bootstrap.servers": broker.bootstrap, "topic": "fence", "exactlyOnce": "true",
            "transactionalIdPrefix": "job-7"}
    default = sink_settings(opts, schema, False, streaming=False)
    six = sink_settings({**opts, "taskMaxFailures": "6"}, schema, False, streaming=False)
    assert (default.task_max_failures, six.task_max_failures) == (4, 6)

    def open_txn(settings, partition, attempt, prepare):
        p = Producer(settings.user_config, transactional_id=_txn_id(settings, partition, attempt, None))
        p.init_transactions(timeout=20)
        p.begin_transaction()
        for i in range(10):
            p.send("fence", b"p%d-a%d-%d" % (partition, attempt, i), partition=partition)
        p.flush(timeout=20)
        prepared = p.prepare_transaction(timeout=20) if prepare else None
        p.close(0)                        # a killed worker: nothing ends the transaction
        return prepared

    prepared0 = open_txn(default, 0, 0, prepare=True)
    open_txn(default, 1, 5, prepare=False)
    _complete(default, [SinkCommitMessage(0, 0, 10, prepared0), None], commit=False)
    view = committed_view(broker.bootstrap, "fence")
    assert [r.value for r in view.aborted[0]] == [b"p0-a0-%d" % i for i in range(10)]
    assert len(view.open[1]) == 10, "attempt 5 is beyond the default's reach: still open"
    _complete(six, [None, None], commit=False)
    view = committed_view(broker.bootstrap, "fence")
    assert not any(view.open.values()) and view.values() == []
    assert [r.value for r in view.aborted[1]] == [b"p1-a5-%d" % i for i in range(10)]
    with pytest.raises(ValueError, match="taskMaxFailures must be a whole number >= 1"):
        sink_settings({**opts, "taskMaxFailures": "0"}, schema, False, streaming=False)


def _wait_for(cond, timeout, what):
    import time

    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def _init_and_end_txn_ids(proxy):
    """The transactional ids of every InitProducerId and EndTxn request on the wire."""
    from kproducer.protocol import messages as m
    from kproducer.protocol import versions as v
    from kproducer.protocol.primitives import Reader

    out = {"init": set(), "end": set()}
    for direction, _conn, api, _cid, frame in proxy.requests_log():
        if direction != "request" or api not in (v.INIT_PRODUCER_ID, v.END_TXN):
            continue
        cls = m.InitProducerIdRequest if api == v.INIT_PRODUCER_ID else m.EndTxnRequest
        r = Reader(frame, 4)
        _api, version, _ = r.int16("api_key"), r.int16("api_version"), r.int32("correlation_id")
        r.nullable_string("client_id")
        if cls.SCHEMA.is_flexible(version):
            r.skip_tagged_fields("header")
        body = cls.SCHEMA.decode_body(r, version)
        if body.transactional_id is not None:        # None: a plain idempotent producer
            out["init" if api == v.INIT_PRODUCER_ID else "end"].add(body.transactional_id)
    return out


def test_exactly_once_stream_uses_the_prefix_and_ledger_options(spark, proxied_broker, tmp_path):
    """transactionalIdPrefix names every transactional id the tasks and the driver use (read
    off the wire through the proxy), and the decisions go to the ledgerTopic named, not to
    the default <prefix>-ledger."""
    import json

    from confluent_kafka.admin import AdminClient

    from kproducer.protocol import versions as v

    broker, proxy = proxied_broker
    n = 1000
    broker.create_topic("orders", 2)
    broker.create_topic("orders-decisions", 1)
    proxy.record_requests(keep_frames={v.INIT_PRODUCER_ID, v.END_TXN})
    src = tmp_path / "in"
    src.mkdir()
    _json_files(src, n, 2)
    stream = (spark.readStream.schema("key string, id long").option("maxFilesPerTrigger", 1).json(str(src))
              .selectExpr("key", "unhex(lpad(hex(id), 200, '0')) AS value"))
    query = (stream.writeStream.format("kproducer").option("kafka.bootstrap.servers", proxy.bootstrap)
             .option("topic", "orders").option("exactlyOnce", "true")
             .option("transactionalIdPrefix", "etl-orders").option("ledgerTopic", "orders-decisions")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    ids = _init_and_end_txn_ids(proxy)
    assert ids["init"] and ids["end"]
    assert all(t.startswith("etl-orders-b") for t in ids["init"] | ids["end"]), ids
    ledger = read_back(broker.bootstrap, "orders-decisions", timeout=60)[0]
    decided = {int(msg.key): json.loads(msg.value) for msg in ledger}
    assert sorted(decided) == [0, 1]                # one decision per micro-batch
    in_ledger = {t for txns in decided.values() for t, _pid, _epoch in txns}
    assert in_ledger == ids["end"]                  # what was decided is what was committed
    assert all(t.startswith(f"etl-orders-b{b}-p") for b, txns in decided.items() for t, _, _ in txns)
    topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20).topics
    assert "etl-orders-ledger" not in topics
    view = committed_view(broker.bootstrap, "orders")
    assert sorted(int(r.key[4:]) for rs in view.records.values() for r in rs) == list(range(n))
    assert not any(view.open.values())


def test_stream_with_a_processing_time_trigger_picks_up_a_new_file(spark, broker, tmp_path):
    """A running query (1 s processing-time trigger) sees a second file appear: both files'
    rows are written exactly once, in separate micro-batches, and the query stops cleanly."""
    n_file = 500
    broker.create_topic("ticks", 2)
    src, staging = tmp_path / "in", tmp_path / "staging"
    src.mkdir()
    staging.mkdir()
    _json_files(staging, 2 * n_file, 2)
    os.rename(staging / "part-0.json", src / "part-0.json")      # whole files appear at once
    stream = (spark.readStream.schema("key string, id long").json(str(src))
              .selectExpr("key", "unhex(lpad(hex(id), 200, '0')) AS value"))
    query = (stream.writeStream.format("kproducer").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", "ticks").option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(processingTime="1 second").start())

    def rows_written():
        assert query.exception() is None and query.isActive
        return sum(p["numInputRows"] for p in query.recentProgress)

    try:
        _wait_for(lambda: rows_written() == n_file, 120, "the first file's micro-batch")
        first_batches = len([p for p in query.recentProgress if p["numInputRows"]])
        os.rename(staging / "part-1.json", src / "part-1.json")
        _wait_for(lambda: rows_written() == 2 * n_file, 120, "the second file's micro-batch")
        assert query.isActive
    finally:
        query.stop()
    assert not query.isActive and query.exception() is None
    with_rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert first_batches == 1 and with_rows == [n_file, n_file]
    counts = ids_read(broker.bootstrap, "ticks", 2)
    assert sorted(counts) == list(range(2 * n_file)) and set(counts.values()) == {1}


@pytest.mark.parametrize("exactly_once", [False, True])
def test_batch_write_fails_with_the_producers_error_when_the_broker_is_gone(spark, broker, exactly_once):
    """A batch job against a broker that was there and is gone: the tasks fail with the
    producer's error and, once Spark's retries are used up, the job fails with it."""
    topic = "gone-eo" if exactly_once else "gone"
    broker.create_topic(topic, 2)
    opts = {"topic": topic, "kafka.max.block.ms": "1000", "kafka.request.timeout.ms": "500",
            "kafka.delivery.timeout.ms": "1000", "kafka.linger.ms": "0",
            **({"exactlyOnce": "true"} if exactly_once else {})}
    df = rows_df(spark, 200, tasks=2)
    writer(df, broker.bootstrap, **opts).save()      # the workers' producers know the broker
    assert sum(ids_read(broker.bootstrap, topic, 2, check_partition=False).values()) == 200
    bootstrap = broker.bootstrap
    broker.stop()
    with pytest.raises(Exception) as failed:
        writer(df, bootstrap, **opts).save()
    message = str(failed.value)
    # The producer's own error, not a success with rows lost nor a bare Spark failure:
    # "topic not present in metadata after max.block.ms" or records that failed after
    # being queued (plain); the transactional producer's init_transactions timing out.
    assert re.search(r"kproducer\.errors\.(KafkaTimeoutError|MetadataTimeoutError|TransactionTimeoutError): "
                     r"|kproducer: \d+ of \d+ records failed to be delivered", message), message[-3000:]


# -- local-cluster ---------------------------------------------------------------------------

_CLUSTER_DRIVER = textwrap.dedent("""
    import os, sys
    from pyspark.sql import SparkSession

    sys.path.insert(0, sys.argv[1])                # tests/broker/: _flaky, rows_df, writer
    from test_spark_sink import _flaky, rows_df, writer
    from kproducer.spark import register

    bootstrap, marks, n, tasks = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("kproducer-sink-cluster")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             # Retries (4 is the cluster default; set so the test does not depend on it).
             .config("spark.task.maxFailures", "4")
             # Each task's Python workers are fresh and end with it: with one core per
             # executor, _flaky's kill-writer finds the writer's worker as the one other live
             # child of its daemon with kproducer loaded and a connection to the broker.
             .config("spark.python.worker.reuse", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    for job in sys.argv[6:]:
        mode, exactly_once = job.split(":")
        topic = f"lc-{mode}-{exactly_once}"
        marker_dir = os.path.join(marks, topic)
        os.mkdir(marker_dir)
        options = {"exactlyOnce": "true"} if exactly_once == "eo" else {}
        writer(_flaky(rows_df(spark, n, tasks), marker_dir, mode, bootstrap, topic, 4), bootstrap,
               topic=topic, **options).save()
    spark.stop()
    print("DONE", flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broken_attempts_on_local_cluster(tmp_path, broker):
    """The data source on local-cluster (two executor JVMs, each with its own Python
    daemon), every task's first attempt broken after it sent rows: exactly-once with the
    attempt raising, and with the writer's own Python worker killed (found through /proc,
    which one task per executor makes unambiguous): the committed view holds each row once.
    Without exactlyOnce, with the attempt raising: the duplicates."""
    # Two tasks: one per executor, so each job is two rounds (first attempts, then retries).
    n, tasks = 20_000, 2
    # The upstream worker killed is tested on local[2,4] (the killed writer is the stronger
    # case); each job here costs about ten seconds on 2 cores.
    jobs = ["raise:eo", "kill-writer:eo", "raise:alo"]
    for job in jobs:
        mode, exactly_once = job.split(":")
        broker.create_topic(f"lc-{mode}-{exactly_once}", 4)
    # SPARK_HOME: pip's pyspark package (bin/spark-class, jars) seen through links, so that
    # the standalone workers' work directories (SPARK_HOME/work) land in tmp_path.
    spark_home = tmp_path / "spark-home"
    spark_home.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        (spark_home / entry.name).symlink_to(entry)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(_CLUSTER_DRIVER)
    env = dict(os.environ, SPARK_HOME=str(spark_home), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(script), str(ROOT / "tests" / "broker"), broker.bootstrap, str(marks),
                           str(n), str(tasks), *jobs], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=840, check=False)
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-6000:]
    for job in jobs:
        mode, exactly_once = job.split(":")
        topic = f"lc-{mode}-{exactly_once}"
        seen = _marks(marks / topic, tasks)
        if exactly_once == "eo":
            _check_exactly_once(committed_view(broker.bootstrap, topic), seen, n)
        else:
            _check_at_least_once(ids_read(broker.bootstrap, topic, 4), seen, n)
