"""Benchmarks for kproducer: ``python -m bench`` (see ``bench/__main__.py``).

Modules: ``scenarios`` (the matrix and its sizes), ``data`` (the records every client
sends), ``clients`` (one producer client's timed run, in its own process),
``spark_recipes`` (the Spark scenario, in its own process), ``verify`` (read-back check,
record by record), ``runner`` (brokers, topics, the plan, progress), ``report`` (table,
JSON, chart, headline ratios), ``environment``, ``procstat``, and ``micro`` (the encode
and CRC-32C microbenchmarks, also runnable alone as ``python -m bench.micro``).
"""
