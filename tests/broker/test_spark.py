"""kproducer.spark on PySpark against the real broker, read back with confluent-kafka:
write_kafka on local mode (one session for the module); ship() to a local-cluster whose
executors' Python lacks kproducer (in a subprocess: one SparkContext per process); the
self-extracting import from a zip on its own; pickling a Producer into the per-process cache."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import socket
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

# Hard imports: a missing PySpark or pandas (mapInArrow needs it) is an error, never a skip.
import pandas  # noqa: F401,E402
import pyspark  # noqa: F401,E402

from kafka.partitioner.default import murmur2  # kafka-python: Java's murmur2, pure Python

import kproducer
from kproducer import Producer
from kproducer.codec import murmur2_partition
from kproducer.producer import _cached_producer
from kproducer.spark import ship, write_kafka
from kproducer.testing.readback import read_back

ROOT = Path(__file__).resolve().parents[2]


def java_partition(key: bytes, n: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % n


@pytest.fixture(scope="module")
def spark():
    from kproducer.testing.spark import local_session

    session = local_session("kproducer-tests", **{"spark.sql.shuffle.partitions": "4"})
    try:
        yield session
    finally:
        session.stop()


@pytest.mark.slow
def test_write_kafka_1m_rows_exactly_once_on_java_partitions(spark, broker):
    n_rows, n_parts, n_tasks = 1_000_000, 4, 4
    broker.create_topic("bulk", n_parts)
    df = spark.range(n_rows, numPartitions=n_tasks).selectExpr(
        "concat('key-', cast(id as string)) AS key",
        "unhex(lpad(hex(id), 200, '0')) AS value")  # 100 bytes, unique per row
    summary = write_kafka(df, bootstrap_servers=broker.bootstrap, topic="bulk", linger_ms=5)
    assert summary["rows"] == n_rows
    assert summary["per_topic"] == {"bulk": n_rows}
    key_bytes = sum(len(f"key-{i}") for i in range(n_rows))
    assert summary["bytes"] == n_rows * 100 + key_bytes
    assert summary["seconds"] > 0
    print(f"write_kafka: {n_rows} rows in {summary['seconds']:.2f} s")

    seen = bytearray(n_rows)   # times each id was read
    for p in range(n_parts):   # one partition at a time: a million Msg objects at once is a lot
        msgs = read_back(broker.bootstrap, "bulk", partitions=[p], timeout=180)[p]
        last = [-1] * n_tasks  # Spark partition t holds a range of ids, sent in order
        for m in msgs:
            i = int(m.key[4:])
            assert m.key == b"key-%d" % i and m.value == i.to_bytes(100, "big"), m.offset
            assert murmur2_partition(m.key, n_parts) == p, m.key
            assert seen[i] == 0, f"{m.key!r} read twice"
            seen[i] = 1
            t = i * n_tasks // n_rows
            assert i > last[t], f"{m.key!r} after key-{last[t]} in partition {p}"
            last[t] = i
        # The partitioner check above uses kproducer's C murmur2; an independent oracle on a sample.
        for m in msgs[:: max(1, len(msgs) // 2000)]:
            assert java_partition(m.key, n_parts) == p, m.key
    assert seen.count(1) == n_rows   # every row exactly once


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


def test_a_task_stops_at_the_first_group_of_which_nothing_was_queued():
    # Two topics, two send_many calls; the first fails whole (no metadata within
    # max.block.ms): the task raises its error at once instead of waiting again for the next.
    import pyarrow as pa

    from kproducer.errors import MetadataTimeoutError
    from kproducer.spark import send_batches

    calls = []

    class Counting:
        def __init__(self, producer):
            self.producer = producer

        def send_many(self, *args, **kwargs):
            calls.append(args[0])
            return self.producer.send_many(*args, **kwargs)

    batch = pa.RecordBatch.from_pydict({"topic": ["t1", "t2", "t1"], "value": ["a", "b", "c"]})
    with Producer({"bootstrap.servers": f"127.0.0.1:{_free_port()}", "max.block.ms": 300}) as p:
        with pytest.raises(MetadataTimeoutError, match="t1"):
            send_batches(Counting(p), [batch], None)
        p.close(0)
    assert calls == ["t1"]


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


@pytest.mark.parametrize("make", [
    lambda pa: pa.array([b"ab", None, b"cde", b""], pa.binary()),
    lambda pa: pa.array(["x" * 5, None, "yy", "\u00e9t\u00e9"]),
    lambda pa: pa.array([b"a" * 7, None, b"bb"], pa.large_binary()),
    lambda pa: pa.array(["q" * 9, "w", None], pa.large_string()).slice(1),
    lambda pa: pa.array([b"ab", None, b"cde", b"zzzz"], pa.binary()).slice(1, 2),
    lambda pa: pa.array([None, None], pa.binary()),
    lambda pa: pa.array([], pa.string()),
], ids=["binary", "string", "large_binary", "large_string_slice", "binary_slice", "nulls", "empty"])
def test_column_bytes_and_binary_view_match_arrow_compute(make):
    # The summary's byte count comes from the offsets and strings are viewed as binary:
    # both must agree with Arrow's own compute on slices, nulls and 64-bit offsets.
    import pyarrow as pa
    import pyarrow.compute as pc

    from kproducer.spark import _binary, _byte_count

    arr = make(pa)
    as_binary = _binary(arr)
    assert pa.types.is_binary(as_binary.type) or pa.types.is_large_binary(as_binary.type)
    assert as_binary.to_pylist() == [None if v is None else (v.encode() if isinstance(v, str) else v)
                                     for v in arr.to_pylist()]
    assert _byte_count(as_binary) == (pc.sum(pc.binary_length(as_binary)).as_py() or 0)


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


# -- shipping kproducer to executors whose Python lacks it ---------------------------------

def _site_dirs() -> list[str]:
    import site

    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> str:
    """A Python without kproducer but with everything else: this interpreter run with -S
    (no site-packages, no .pth files, so no editable-install finder) and PYTHONPATH set to
    a directory of links to every installed distribution except kproducer's entries."""
    tmp = tmp_path_factory.mktemp("executor-python")
    site = tmp / "site-packages"
    site.mkdir()
    for d in _site_dirs():
        for name in sorted(os.listdir(d)):
            if name.startswith(("kproducer", "__editable__")) or name.endswith(".pth") \
                    or name == "__pycache__" or (site / name).exists():
                continue
            (site / name).symlink_to(os.path.join(d, name))
    wrapper = tmp / "python"
    # Keeps the PYTHONPATH Spark gives its workers (its own pyspark.zip and py4j).
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}"{shlex.quote(str(site))} '
                       f'exec {shlex.quote(sys.executable)} -S "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _clean_env(**extra) -> dict:
    """This environment without anything that could put kproducer on a child's path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
           and not k.startswith("KPRODUCER_")}
    env.update(extra)
    return env


def _run(cmd, *, env, cwd, timeout=120):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


_CLUSTER_DRIVER = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    from kproducer.config import ProducerConfig
    from kproducer.spark import ship, write_kafka

    bootstrap, n_rows = sys.argv[1], int(sys.argv[2])
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("kproducer-ship")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             # A failed task fails the job: no retry may hide an error or duplicate records.
             .config("spark.task.maxFailures", "1")
             .config("spark.executorEnv.KPRODUCER_CACHE_DIR", os.environ["KPRODUCER_CACHE_DIR"])
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = {}
    df = spark.range(n_rows, numPartitions=4).selectExpr(
        "concat('key-', cast(id as string)) AS key", "unhex(lpad(hex(id), 200, '0')) AS value")
    try:
        write_kafka(df, bootstrap_servers=bootstrap, topic="never")
        out["without_ship"] = None
    except Exception as exc:
        out["without_ship"] = [type(exc).__name__, str(exc), str(exc.__cause__)]
    # The wheel to ship, if given (tests/broker/test_wheel.py: the release wheel); else a wheelhouse
    # folder: the running kproducer under this interpreter's tag beside wheels for other
    # Pythons and machines, which ship() chooses from by asking the executors.
    if len(sys.argv) > 3:
        out["shipped"] = ship(spark, sys.argv[3])
    else:
        import platform, shutil
        import kproducer
        from kproducer import spark as kspark
        folder = os.path.join(os.getcwd(), "wheelhouse")
        os.makedirs(folder)
        running, tag = kspark._pack_running_package(), kspark._interpreter_tag()
        py = tag.split("-")[0]
        machine = platform.machine()
        other = "aarch64" if machine == "x86_64" else "x86_64"
        names = {"fits": f"kproducer-{kproducer.__version__}-{tag}.whl",
                 "other_python": f"kproducer-{kproducer.__version__}-cp39-cp39-manylinux2014_{machine}.whl",
                 "other_machine": f"kproducer-{kproducer.__version__}-{py}-{py}-manylinux2014_{other}.whl",
                 "musl": f"kproducer-{kproducer.__version__}-{py}-{py}-musllinux_1_2_{machine}.whl"}
        for name in names.values():
            shutil.copyfile(running, os.path.join(folder, name))
        out["wheelhouse"] = names
        out["shipped"] = ship(spark, folder)
    settings = {"linger_ms": 5}
    out["summaries"] = [write_kafka(df, bootstrap_servers=bootstrap, topic=t, **settings)
                        for t in ("lc1", "lc2")]
    # write_kafka's producers: these settings plus its bulk defaults.
    from kproducer.spark import BULK_DEFAULTS
    user_config = {**BULK_DEFAULTS, **ProducerConfig(settings, bootstrap_servers=bootstrap).user_config}

    def probe(batches):
        # Runs in the same pool of Arrow Python workers as write_kafka's tasks.
        import pyarrow as pa
        import kproducer, kproducer._codec
        from kproducer.producer import _cached_producer
        for _ in batches:
            pass
        p = _cached_producer(user_config)
        yield pa.RecordBatch.from_pydict({
            "pid": [os.getpid()], "package": [kproducer.__file__],
            "codec": [kproducer._codec.__file__], "producer": [id(p)],
            "acked": [p.metrics().get("records_acked", 0)]})

    schema = "pid long, package string, codec string, producer long, acked long"
    out["probe"] = [r.asDict() for r in
                    spark.range(4, numPartitions=4).mapInArrow(probe, schema).collect()]
    # The data source, exactly-once, on the same executors (kproducer shipped, not installed).
    from kproducer.spark import register
    register(spark)
    df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", "lc3").option("exactlyOnce", "true").save()
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ship_to_local_cluster_executors_without_kproducer(tmp_path, broker, executor_python):
    env = _clean_env()
    # The executors' Python really lacks kproducer, and has what a PySpark worker needs.
    proc = _run([executor_python, "-c", "import kproducer"], env=env, cwd=tmp_path)
    assert proc.returncode != 0 and "No module named 'kproducer'" in proc.stderr, proc.stderr
    proc = _run([executor_python, "-c", "import pyspark, pyarrow, pandas, cramjam"], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

    # SPARK_HOME: pip's pyspark package (bin/spark-class, jars), seen through links so that
    # the standalone workers' work directories (SPARK_HOME/work) land in tmp_path.
    spark_home = tmp_path / "spark-home"
    spark_home.mkdir()
    package = Path(pyspark.__file__).parent
    for entry in package.iterdir():
        (spark_home / entry.name).symlink_to(entry)
    cache = tmp_path / "cache"
    n_rows = 20_000
    for topic in ("never", "lc1", "lc2", "lc3"):
        broker.create_topic(topic, 3)
    script = tmp_path / "driver.py"
    script.write_text(_CLUSTER_DRIVER)
    env = _clean_env(SPARK_HOME=str(spark_home), PYSPARK_PYTHON=executor_python,
                     KPRODUCER_CACHE_DIR=str(cache))
    # The driver runs this interpreter, with kproducer installed (editable) as usual.
    # tests/broker/test_wheel.py runs this test in a venv holding only the release wheel and names
    # that wheel in KPRODUCER_TEST_SHIP_WHEEL: then it is shipped with ship(spark, wheel).
    wheel = os.environ.get("KPRODUCER_TEST_SHIP_WHEEL")
    proc = _run([sys.executable, str(script), broker.bootstrap, str(n_rows), *([wheel] if wheel else [])],
                env=env, cwd=tmp_path, timeout=840)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    out = json.loads(lines[0][len("RESULT "):])

    # Without ship(): the job fails, saying why.
    kind, message, cause = out["without_ship"]
    assert kind == "ImportError" and "kproducer.spark.ship" in message, out["without_ship"]
    assert "No module named 'kproducer'" in cause, cause

    shipped = out["shipped"]
    assert shipped.startswith(str(cache / "shipped")) and shipped.endswith(".zip")
    if not wheel:
        # From the wheelhouse, the executors' probe chose the wheel that fits them.
        fits = out["wheelhouse"]["fits"]
        assert os.path.basename(shipped).startswith(fits[: -len(".whl")] + "-"), (shipped, fits)
    assert zipfile.ZipFile(shipped).getinfo("kproducer/_archive.py")
    for summary, topic in zip(out["summaries"], ("lc1", "lc2")):
        assert summary["rows"] == n_rows and summary["per_topic"] == {topic: n_rows}

    # The executors imported kproducer from the shipped archive, extracted into the cache.
    probes = out["probe"]
    assert len(probes) == 4
    for p in probes:
        for path in (p["package"], p["codec"]):
            assert path.startswith(str(cache) + os.sep) and str(ROOT) not in path, p
        assert p["codec"].endswith(".so")
    extracted = [d.name for d in cache.iterdir() if d.name != "shipped"]
    assert len(extracted) == 1 and extracted[0].startswith("kproducer-"), extracted

    # One producer per worker process, reused by every write_kafka task it ran in both
    # jobs: the producers the workers still hold acknowledged all 2 * n_rows records.
    producers = {}
    for p in probes:
        producers.setdefault(p["pid"], set()).add((p["producer"], p["acked"]))
    assert all(len(v) == 1 for v in producers.values()), producers
    assert sum(acked for v in producers.values() for _, acked in v) == 2 * n_rows, producers

    assert read_back(broker.bootstrap, "never", timeout=60) == {0: [], 1: [], 2: []}
    from kproducer.testing.txnlog import committed_view
    view = committed_view(broker.bootstrap, "lc3")
    assert sorted(int(r.key[4:]) for rs in view.records.values() for r in rs) == list(range(n_rows))
    assert not any(view.open.values()) and len(view.markers) >= 3
    for topic in ("lc1", "lc2"):
        got = read_back(broker.bootstrap, topic, timeout=60)
        keys = sorted(int(m.key[4:]) for msgs in got.values() for m in msgs)
        assert keys == list(range(n_rows)), topic
        for p, msgs in got.items():
            for m in msgs:
                assert m.value == int(m.key[4:]).to_bytes(100, "big")
                assert p == java_partition(m.key, 3), m.key


class _Context:
    """Stands in for a SparkContext: records what ship() adds (the real one is tested above)."""

    def __init__(self):
        self.added = []

    def addPyFile(self, path):
        self.added.append(path)


_CHECK_IMPORT = ("import kproducer, kproducer.codec as c, kproducer._codec as m; "
                 "assert c.crc32c(b'123456789') == 0xE3069283; "
                 "print(kproducer.__file__, m.__file__)")


def test_zip_import_extracts_once_for_racing_workers(tmp_path, monkeypatch, executor_python):
    monkeypatch.setenv("KPRODUCER_CACHE_DIR", str(tmp_path / "driver-cache"))
    context = _Context()
    archive = ship(context)
    assert context.added == [archive]
    assert ship(context) == archive   # same running package: same archive, not packed again
    names = zipfile.ZipFile(archive).namelist()
    assert "kproducer/__init__.py" in names and "kproducer/spark.py" in names
    assert not [n for n in names if n.endswith((".c", ".pyx", ".pxd", ".pyc"))], names
    assert sorted(n for n in names if n.endswith(".so")) == sorted(
        f"kproducer/{m}" for m in os.listdir(os.path.dirname(kproducer.__file__))
        if m.endswith(sysconfig.get_config_var("EXT_SUFFIX")))

    # Several workers import from the zip at once into an empty cache: one extraction wins.
    cache = tmp_path / "cache"
    env = _clean_env(PYTHONPATH=archive, KPRODUCER_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([executor_python, "-c", _CHECK_IMPORT], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    entries = os.listdir(cache)
    assert len(entries) == 1 and entries[0].startswith("kproducer-"), entries   # no temp leftovers
    package = cache / entries[0] / "kproducer"
    codec = package / f"_codec{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert {out for out, _ in outputs} == {f"{package / '__init__.py'} {codec}\n"}
    assert {p.name for p in package.iterdir()} >= {"__init__.py", "spark.py", "protocol", "testing"}


def _retagged(archive: str, dest: Path, py: str) -> Path:
    """A copy of ``archive`` claiming to be built for CPython ``py`` (e.g. "39")."""
    ours = sysconfig.get_config_var("EXT_SUFFIX")   # .cpython-311-x86_64-linux-gnu.so
    theirs = ours.replace(f"-{sys.version_info[0]}{sys.version_info[1]}-", f"-{py}-")
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(dest, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            name = info.filename
            if name.endswith(ours):
                name = name[: -len(ours)] + theirs
            elif name.endswith("/WHEEL"):
                data = data.replace(f"cp{sys.version_info[0]}{sys.version_info[1]}".encode(), f"cp{py}".encode())
            out.writestr(name, data)
    return dest


def test_archive_for_another_python_fails_clearly(tmp_path, monkeypatch, executor_python):
    monkeypatch.setenv("KPRODUCER_CACHE_DIR", str(tmp_path / "driver-cache"))
    archive = ship(_Context())
    wheel = _retagged(archive, tmp_path / "kproducer-0.1.0-cp39-cp39-linux_x86_64.whl", "39")

    # On the driver: shipped as a .zip copy (PySpark puts only .zip/.egg/.jar on sys.path),
    # with a warning that this Python could not load it.
    context = _Context()
    with pytest.warns(RuntimeWarning, match="wheel tag cp39-cp39-linux_x86_64"):
        shipped = ship(context, wheel_path=wheel)
    assert context.added == [shipped] and shipped.endswith(".zip")
    assert Path(shipped).read_bytes() == wheel.read_bytes()

    # On an executor: an ImportError naming the wheel's tag and the executor's Python.
    env = _clean_env(PYTHONPATH=shipped, KPRODUCER_CACHE_DIR=str(tmp_path / "cache"))
    proc = _run([executor_python, "-c", "import kproducer"], env=env, cwd=tmp_path)
    assert proc.returncode != 0
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("ImportError: kproducer: ") and "wheel tag cp39-cp39-linux_x86_64" in error, error
    assert f"Python {sys.version_info[0]}.{sys.version_info[1]}." in error, error
    assert not (tmp_path / "cache").exists() or not os.listdir(tmp_path / "cache")  # nothing extracted


def test_ship_rejects_what_cannot_work(tmp_path, monkeypatch):
    monkeypatch.setenv("KPRODUCER_CACHE_DIR", str(tmp_path / "driver-cache"))
    with pytest.raises(ValueError, match="cannot read"):
        ship(_Context(), wheel_path=tmp_path / "missing.whl")
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("somepackage/__init__.py", "")
    with pytest.raises(ValueError, match="no kproducer/__init__.py"):
        ship(_Context(), wheel_path=other)
    old = tmp_path / "kproducer-0.0.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(old, "w") as zf:
        zf.writestr("kproducer/__init__.py", "")
        zf.writestr("kproducer/_codec.cpython-311-x86_64-linux-gnu.so", b"")
    with pytest.raises(ValueError, match="without the self-extracting import"):
        ship(_Context(), wheel_path=old)


class _Probed(_Context):
    """A SparkContext whose jobs run on the real local session (the executors' probe), and
    whose addPyFile is only recorded."""

    def __init__(self, sc):
        super().__init__()
        self.sc = sc
        self.defaultParallelism = sc.defaultParallelism

    def parallelize(self, *args):
        return self.sc.parallelize(*args)


def test_ship_from_a_wheelhouse_without_a_fitting_wheel_names_need_and_find(spark, tmp_path, monkeypatch):
    import platform

    monkeypatch.setenv("KPRODUCER_CACHE_DIR", str(tmp_path / "driver-cache"))
    running = ship(_Context())
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    other = "aarch64" if platform.machine() == "x86_64" else "x86_64"
    decoy = f"kproducer-{kproducer.__version__}-cp39-cp39-manylinux2014_{platform.machine()}.whl"
    (folder / decoy).write_bytes(Path(running).read_bytes())
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    (folder / f"kproducer-{kproducer.__version__}-{py}-{py}-manylinux2014_{other}.whl").write_bytes(b"")
    context = _Probed(spark.sparkContext)
    with pytest.raises(ValueError) as info:
        ship(context, folder)
    message = str(info.value)
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"CPython {v} on {platform.machine()}" in message and decoy in message, message
    assert context.added == []
    # With a wheel that fits, that one goes.
    fits = f"kproducer-{kproducer.__version__}-{py}-{py}-manylinux2014_{platform.machine()}.whl"
    (folder / fits).write_bytes(Path(running).read_bytes())
    shipped = ship(context, folder)
    assert context.added == [shipped] and Path(shipped).name.startswith(fits[:-4] + "-")
