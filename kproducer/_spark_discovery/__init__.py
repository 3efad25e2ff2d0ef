"""Installed as the top-level package ``pyspark_kproducer``.

PySpark registers the ``DefaultSource`` of every top-level module whose name starts with
``pyspark_`` (pyspark/sql/worker/lookup_data_sources.py), so ``format("kproducer")`` works
without ``kproducer.spark.register(spark)`` wherever kproducer is installed.
"""

from kproducer.spark_sink import KafkaSink as DefaultSource

__all__ = ["DefaultSource"]
