"""The code examples of README.md and the guides (docs/*.md) that need a broker run against a
fresh test broker, and what they produced is read back with confluent-kafka's consumer; the
metrics the observability guide documents are the producer's. How examples are found and
marked: tests/_doc_examples.py; the examples without a broker:
tests/unit/test_docs_examples_without_a_broker.py."""

from __future__ import annotations

import re

import pytest

from kproducer.testing.readback import read_back

from _doc_examples import ROOT, Example, RUN, _run

WITH_BROKER = [pytest.param(e, id=e.id, marks=[pytest.mark.slow] if e.spark else [])
               for e in RUN if e.broker]


def _check_topics(example: Example, bootstrap: str) -> None:
    for topic, count in example.expect.items():
        got = read_back(bootstrap, topic, timeout=60)
        n = sum(len(msgs) for msgs in got.values())
        assert n == count, f"{example.id}: topic {topic!r} holds {n} records, the example says {count}"


@pytest.mark.parametrize("example", WITH_BROKER)
def test_example_runs_against_the_broker(example, broker):
    session = None
    if example.spark:
        from kproducer.testing.spark import local_session

        # The example's SparkSession.builder...getOrCreate() finds this one: loopback only,
        # this interpreter on the executors.
        session = local_session("kproducer-docs-example")
    try:
        _run(example, broker.bootstrap)
    finally:
        if session is not None:
            session.stop()
    _check_topics(example, broker.bootstrap)


def test_the_documented_metrics_are_the_producers(broker):
    """docs/observability.md names every key of metrics() and no other."""
    from kproducer import Producer

    text = (ROOT / "docs" / "observability.md").read_text()
    # The metrics() section (the statistics fields are documented after it, and checked by
    # tests/broker/test_statistics.py); Java's names are hyphenated.
    text = text.split("## metrics()", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for row in re.findall(r"^\| (`[^|]+`) \|", text, re.M):
        documented.update(re.findall(r"`([a-z0-9_-]+)`", row))
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        keys = set(p.metrics())
    assert keys - documented == set(), f"not documented: {sorted(keys - documented)}"
    assert documented - keys == set(), f"documented but not in metrics(): {sorted(documented - keys)}"
