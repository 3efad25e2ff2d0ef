"""A local SparkSession for the tests and the benchmark: this interpreter on the driver and
the executors, loopback only, no UI or progress bars, Arrow on."""

from __future__ import annotations

import os
import sys

from ._optional import require


def local_session(app_name: str, master: str = "local[2]", **conf: str):
    """Starts (or returns the running) SparkSession; ``conf`` adds Spark settings."""
    SparkSession = require("pyspark.sql", "pyspark", "spark", "kproducer.testing.spark").SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
