"""The Spark scenario, in a process of its own: ``python -m bench.spark_recipes SPEC_JSON``.

One local SparkSession (``local[2]``) writes the same DataFrame to Kafka three ways, each on
its own fresh topic:

- ``kproducer write_kafka``: :func:`kproducer.spark.write_kafka` (Arrow batches to
  ``send_many`` through ``mapInArrow``);
- ``confluent foreachPartition``: the usual recipe, a confluent-kafka producer per Spark
  partition, ``produce`` per row (``poll(0)`` after each, ``BufferError`` served by polling),
  ``flush`` at the end;
- ``confluent mapInPandas``: the same loop over the rows of each pandas batch, flush at the
  end, one count row yielded per partition;
- ``kproducer data source (defaults)`` and ``kproducer data source, exactlyOnce``:
  ``df.write.format("kproducer")`` given only the broker and the topic (its own defaults),
  without and with ``exactlyOnce``.

The DataFrame is ``spark.range(rows)`` with ``key = 'key-<id>'`` and a 100-byte ``value``
holding the id big-endian in its last bytes (so the read-back finds losses and duplicates
by index, as :mod:`bench.verify` expects), cached and counted before any timed write, so
that the recipes are timed writing rows, not making them. Before the timed runs every
recipe writes the whole DataFrame once, untimed, to a warm-up topic of its own (the JVM
compiles the scan, the Arrow conversion and the Python runner's paths as it goes: a first
pass ran up to 25 % slower than later ones), then one warm-up row (value ``b"warm-up"``) to
the topic of its first timed run, so the Python workers and the producers' connections are
up; with repeats the recipes take turns. CPU is user + system time of the whole process tree (this driver, the JVM and
its Python workers, including exited ones) over each timed write.
"""

from __future__ import annotations

import json
import os
import sys
import time

from bench.procstat import cpu_seconds, tree_cpu_seconds

WRITE_KAFKA = "kproducer write_kafka"
DATA_SOURCE = "kproducer data source (defaults)"
DATA_SOURCE_EO = "kproducer data source, exactlyOnce"
FOREACH_PARTITION = "confluent foreachPartition"
MAP_IN_PANDAS = "confluent mapInPandas"
RECIPES = (WRITE_KAFKA, DATA_SOURCE, DATA_SOURCE_EO, FOREACH_PARTITION, MAP_IN_PANDAS)
KPRODUCER_RECIPES = (WRITE_KAFKA, DATA_SOURCE, DATA_SOURCE_EO)
PEER_RECIPES = (FOREACH_PARTITION, MAP_IN_PANDAS)
VALUE_SIZE = 100
SPARK_PARTITIONS = 4


def confluent_conf(spec: dict) -> dict:
    return {"bootstrap.servers": spec["bootstrap"],
            "acks": -1 if spec["acks"] == "all" else int(spec["acks"]),
            "enable.idempotence": spec["idempotence"], "linger.ms": spec["linger_ms"],
            "batch.size": spec["batch_size"]}


def kproducer_conf(spec: dict) -> dict:
    return {"acks": spec["acks"], "enable_idempotence": spec["idempotence"],
            "linger_ms": spec["linger_ms"], "batch_size": spec["batch_size"]}


def foreach_partition(df, topic: str, conf: dict) -> None:
    def send_partition(rows):
        from confluent_kafka import Producer

        p = Producer(conf)
        for row in rows:
            while True:
                try:
                    p.produce(topic, row.value, row.key)
                    break
                except BufferError:
                    p.poll(0.005)
            p.poll(0)
        left = p.flush(600)
        if left:
            raise RuntimeError(f"{left} messages not delivered after flush")

    df.foreachPartition(send_partition)


def map_in_pandas(df, topic: str, conf: dict) -> int:
    def produce_batches(frames):
        import pandas as pd
        from confluent_kafka import Producer

        p = Producer(conf)
        n = 0
        for pdf in frames:
            for key, value in zip(pdf["key"], pdf["value"]):
                while True:
                    try:
                        p.produce(topic, value, key)
                        break
                    except BufferError:
                        p.poll(0.005)
                p.poll(0)
            n += len(pdf)
        left = p.flush(600)
        if left:
            raise RuntimeError(f"{left} messages not delivered after flush")
        yield pd.DataFrame({"rows": [n]})

    return sum(r["rows"] for r in df.mapInPandas(produce_batches, "rows long").collect())


def data_source(df, topic: str, bootstrap: str, exactly_once: bool) -> None:
    """``df.write.format("kproducer")`` with nothing but the broker and the topic: the data
    source's own defaults (acks=all, idempotence, batch.size 1,000,000)."""
    w = (df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic))
    if exactly_once:
        w = w.option("exactlyOnce", "true")
    w.save()


def session():
    from kproducer.testing.spark import local_session

    return local_session("kproducer-bench")


def run(spec: dict) -> list[dict]:
    from kproducer.spark import register, write_kafka

    spark = session()
    register(spark)      # an editable install has no pyspark_kproducer for PySpark to find
    try:
        df = spark.range(spec["rows"], numPartitions=SPARK_PARTITIONS).selectExpr(
            "concat('key-', cast(id as string)) AS key",
            f"unhex(lpad(hex(id), {2 * VALUE_SIZE}, '0')) AS value").cache()
        # Materialized once, untimed: the recipes are timed writing the rows, not making them.
        if df.count() != spec["rows"]:
            raise RuntimeError("the cached DataFrame does not hold the requested rows")
        warm = spark.createDataFrame([("warm", bytearray(b"warm-up"))], "key string, value binary")
        conf, kconf = confluent_conf(spec), kproducer_conf(spec)
        writers = {
            WRITE_KAFKA: lambda frame, topic: write_kafka(
                frame, bootstrap_servers=spec["bootstrap"], topic=topic, **kconf)["rows"],
            FOREACH_PARTITION: lambda frame, topic: foreach_partition(frame, topic, conf),
            MAP_IN_PANDAS: lambda frame, topic: map_in_pandas(frame, topic, conf),
            DATA_SOURCE: lambda frame, topic: data_source(frame, topic, spec["bootstrap"], False),
            DATA_SOURCE_EO: lambda frame, topic: data_source(frame, topic, spec["bootstrap"], True),
        }
        # A full, untimed pass per recipe (see the module's docstring), then, in
        # spec["runs"]: [{"recipe", "topic", "warm_up"}] order, a run with warm_up writes its
        # one warm-up row (every recipe warms up before any timed run).
        for recipe, topic in spec.get("warm_topics", {}).items():
            written = writers[recipe](df, topic)
            if written is not None and written != spec["rows"]:
                raise RuntimeError(f"{recipe} warm-up pass wrote {written} of {spec['rows']} rows")
        for run in spec["runs"]:
            if run["warm_up"]:
                writers[run["recipe"]](warm, run["topic"])
        broker = spec.get("broker_pid")
        out = []
        for run in spec["runs"]:
            recipe = run["recipe"]
            b0 = cpu_seconds(broker, children=False) if broker else None
            c0, t0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
            rows = writers[recipe](df, run["topic"])
            t1, c1 = time.perf_counter(), tree_cpu_seconds(os.getpid())
            b1 = cpu_seconds(broker, children=False) if broker else None
            out.append({"seconds": t1 - t0, "cpu_seconds": c1 - c0, "rows_reported": rows,
                        "broker_cpu_seconds": None if broker is None else b1 - b0,
                        "settings": kconf if recipe == WRITE_KAFKA else
                        {"exactlyOnce": recipe == DATA_SOURCE_EO} if recipe in KPRODUCER_RECIPES else
                        {k: v for k, v in conf.items() if k != "bootstrap.servers"}})
        return out
    finally:
        spark.stop()


if __name__ == "__main__":
    print("BENCH-RESULT " + json.dumps(run(json.loads(sys.argv[1]))))
