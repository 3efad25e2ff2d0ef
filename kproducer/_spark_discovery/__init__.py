"""Installed as the top-level package ``pyspark_kproducer``.

PySpark registers the ``DefaultSource`` of every top-level module whose name starts with
``pyspark_`` (pyspark/sql/worker/lookup_data_sources.py), so ``format("kproducer")`` works
without ``kproducer.spark.register(spark)`` wherever kproducer is installed.
"""

try:
    from kproducer.spark_sink import KafkaSink as DefaultSource
except ImportError:
    # PySpark older than 4.1 lacks the Arrow writers: no DefaultSource, so its lookup of
    # installed data sources passes this module by instead of failing for every source.
    pass
