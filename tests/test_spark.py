"""kproducer.spark.write_kafka on PySpark local mode against the real broker, read back with
confluent-kafka; and pickling a Producer into the per-process cache."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import textwrap

import pytest

# Hard imports: a missing PySpark or pandas (mapInArrow needs it) is an error, never a skip.
import pandas  # noqa: F401,E402
import pyspark  # noqa: F401,E402

from kafka.partitioner.default import murmur2  # kafka-python: Java's murmur2

from kproducer import Producer
from kproducer.producer import _cached_producer
from kproducer.spark import write_kafka
from kproducer.testing.readback import read_back


def java_partition(key: bytes, n: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % n


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("kproducer-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def test_write_kafka_200k_rows_on_java_partitions(spark, broker):
    n_rows, n_parts = 200_000, 4
    broker.create_topic("bulk", n_parts)
    df = spark.range(n_rows, numPartitions=4).selectExpr(
        "concat('key-', cast(id as string)) AS key",
        "unhex(lpad(hex(id), 200, '0')) AS value")  # 100 bytes, unique per row
    summary = write_kafka(df, bootstrap_servers=broker.bootstrap, topic="bulk", linger_ms=5)
    assert summary["rows"] == n_rows
    assert summary["per_topic"] == {"bulk": n_rows}
    key_bytes = sum(len(f"key-{i}") for i in range(n_rows))
    assert summary["bytes"] == n_rows * 100 + key_bytes
    assert summary["seconds"] > 0
    print(f"write_kafka: {n_rows} rows in {summary['seconds']:.2f} s")

    got = read_back(broker.bootstrap, "bulk", timeout=120)
    seen = set()
    for p, msgs in got.items():
        for m in msgs:
            i = int(m.key[4:])
            assert m.value == i.to_bytes(100, "big"), m.key
            assert p == java_partition(m.key, n_parts), m.key
            assert m.key not in seen, f"{m.key!r} read twice"
            seen.add(m.key)
        # Each Spark partition holds a range of ids: its records keep their order.
        ids = [int(m.key[4:]) for m in msgs]
        for spark_part in range(4):
            run = [i for i in ids if i * 4 // n_rows == spark_part]
            assert run == sorted(run)
    assert len(seen) == n_rows


def test_write_kafka_topic_partition_headers_null_keys(spark, broker):
    from pyspark.sql import types as T

    broker.create_topic("ta", 3)
    broker.create_topic("tb", 2)
    header_t = T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                         T.StructField("value", T.BinaryType())]))
    schema = T.StructType([
        T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
        T.StructField("headers", header_t), T.StructField("ignored", T.StringType())])
    rows = []
    for i in range(300):
        topic = "ta" if i % 3 else "tb"
        key = None if i % 5 == 0 else f"k{i % 17}"
        partition = (i % 2) if i % 7 == 0 else None
        headers = [("i", str(i).encode()), ("none", None)] if i % 4 == 0 else ([] if i % 4 == 1 else None)
        rows.append((key, f"v{i}".encode(), topic, partition, headers, "x"))
    df = spark.createDataFrame(rows, schema).repartition(3)
    summary = write_kafka(df, bootstrap_servers=broker.bootstrap)
    assert summary["rows"] == 300
    assert summary["per_topic"] == {"ta": 200, "tb": 100}

    n_parts = {"ta": 3, "tb": 2}
    for topic in ("ta", "tb"):
        got = read_back(broker.bootstrap, topic, timeout=60)
        expected = {r[1]: r for r in rows if r[2] == topic}
        seen = set()
        for p, msgs in got.items():
            for m in msgs:
                key, _, _, partition, headers, _ = expected[m.value]
                assert m.value not in seen
                seen.add(m.value)
                assert m.key == (None if key is None else key.encode())
                assert m.headers == [tuple(h) for h in headers or []]
                if partition is not None:
                    assert p == partition, m.value
                elif key is not None:
                    assert p == java_partition(key.encode(), n_parts[topic]), m.value
        assert seen == set(expected)

    # Binary keys, string values, the topic argument over the column, null values.
    broker.create_topic("tc", 2)
    rows2 = [(None if i == 3 else f"k{i}".encode(), None if i == 5 else f"s{i}", "ignored-topic")
             for i in range(50)]
    df2 = spark.createDataFrame(rows2, "key binary, value string, topic string")
    summary = write_kafka(df2, bootstrap_servers=broker.bootstrap, topic="tc")
    assert summary == {**summary, "rows": 50, "per_topic": {"tc": 50}}
    got = read_back(broker.bootstrap, "tc", timeout=60)
    records = sorted(((m.key, m.value) for msgs in got.values() for m in msgs), key=repr)
    assert records == sorted(((k, None if v is None else v.encode()) for k, v, _ in rows2), key=repr)
    for p, msgs in got.items():
        for m in msgs:
            if m.key is not None:
                assert p == java_partition(m.key, 2)


def test_producer_captured_in_a_spark_closure(spark, broker):
    # The closure pickles the Producer as its configuration; each Python worker unpickles
    # it into its one cached producer, reused by every task the worker runs.
    broker.create_topic("closure", 2)
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=1)

    def send_partition(items):
        n = 0
        for i in items:
            p.send("closure", str(i).encode(), key=str(i).encode())
            n += 1
        p.flush()
        yield os.getpid(), p.client_id, n

    try:
        out = spark.sparkContext.parallelize(range(400), 8).mapPartitions(send_partition).collect()
    finally:
        p.close()
    assert sum(n for _, _, n in out) == 400
    producers = {}
    for pid, client_id, _ in out:
        producers.setdefault(pid, set()).add(client_id)
    assert all(len(ids) == 1 for ids in producers.values()), producers
    assert len(producers) < len(out)  # some worker ran several tasks with its one producer
    got = read_back(broker.bootstrap, "closure", timeout=60)
    values = sorted(int(m.value) for msgs in got.values() for m in msgs)
    assert values == list(range(400))
    for part, msgs in got.items():
        assert all(part == java_partition(m.key, 2) for m in msgs)


def test_write_kafka_rejects_bad_schemas(spark):
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(TypeError, match="'value' must be string or binary"):
        write_kafka(df, bootstrap_servers="127.0.0.1:1", topic="t")
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(ValueError, match="'topic' column"):
        write_kafka(df, bootstrap_servers="127.0.0.1:1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_write_kafka_failing_broker_fails_the_job(spark):
    df = spark.range(1000, numPartitions=2).selectExpr("cast(id as string) AS value")
    with pytest.raises(Exception, match="KafkaTimeoutError|not present in metadata"):
        write_kafka(df, bootstrap_servers=f"127.0.0.1:{_free_port()}", topic="nowhere",
                    max_block_ms=1500, request_timeout_ms=1000, delivery_timeout_ms=2000)


def test_partition_writer_raises_when_records_fail_after_queueing(broker):
    # The executor side without Spark: records queued by send_many that then fail (the
    # broker went away after metadata was known) make the task raise at its end.
    import pyarrow as pa

    from kproducer.spark import _write_batches

    broker.create_topic("gone", 2)
    config = {"bootstrap.servers": broker.bootstrap, "max.block.ms": 1000,
              "request.timeout.ms": 500, "delivery.timeout.ms": 1500, "retry.backoff.ms": 50}
    producer = _cached_producer(config)
    try:
        producer.partitions_for("gone")  # metadata known, so send_many queues at once
        broker.stop()
        batch = pa.RecordBatch.from_pydict({"value": ["a", "b", "c"], "key": ["x", None, "z"]})
        with pytest.raises(RuntimeError, match="3 of 3 records failed"):
            list(_write_batches(config, "gone", iter([batch])))
    finally:
        producer.close(0)


def test_pickled_producer_is_the_process_cached_one(broker):
    broker.create_topic("pk", 1)
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=1)
    try:
        blob = pickle.dumps(p)
        a, b = pickle.loads(blob), pickle.loads(blob)
        assert a is b
        assert a is _cached_producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
        assert a.send("pk", b"same-process").result(timeout=30).partition == 0

        # Another process: a fresh, working producer of the same configuration.
        code = textwrap.dedent("""
            import pickle, sys
            p = pickle.loads(sys.stdin.buffer.read())
            print(p.config.linger_ms, p.send("pk", b"subprocess").result(timeout=30).partition)
        """)
        out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                             timeout=120, check=True)
        assert out.stdout.split() == [b"1", b"0"]

        # A forked child must not reuse the parent's cached instance.
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (child)
            status = 1
            try:
                c = pickle.loads(blob)
                ok = c is not a and c.send("pk", b"forked").result(timeout=30).partition == 0
                os.write(w, b"ok" if ok else b"reused")
                c.flush()
                status = 0
            finally:
                os._exit(status)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            assert f.read() == b"ok"
        assert os.waitpid(pid, 0)[1] == 0
        assert pickle.loads(blob) is a  # the parent's cache is unchanged
        a.close()
        assert pickle.loads(blob) is not a  # a closed cached producer is replaced
        pickle.loads(blob).close()
    finally:
        p.close()
    got = read_back(broker.bootstrap, "pk", timeout=60)
    assert sorted(m.value for m in got[0]) == [b"forked", b"same-process", b"subprocess"]


def plain_serializer(value):
    return value


def test_pickling_callables_by_reference():
    p = Producer(bootstrap_servers="127.0.0.1:1", value_serializer=plain_serializer)
    try:
        q = pickle.loads(pickle.dumps(p))
        assert q.config.value_serializer is plain_serializer
        q.close(0)
    finally:
        p.close(0)
    p = Producer(bootstrap_servers="127.0.0.1:1", key_serializer=lambda k: k)
    try:
        with pytest.raises(pickle.PicklingError, match="'key.serializer'.*cannot be pickled by reference"):
            pickle.dumps(p)
    finally:
        p.close(0)
