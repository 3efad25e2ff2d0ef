"""The code examples of README.md and the guides marked ``no-broker`` run, and every page
with examples is collected with enough of them run. How examples are found and marked:
tests/_doc_examples.py; those against the broker: tests/broker/test_docs_examples.py."""

from __future__ import annotations

import pytest

from _doc_examples import PLACEHOLDER, EXAMPLES, RUN, _run

# At least this many examples run (with and without a broker).
MIN_RUN = 20
MAX_SPARK = 1
WITHOUT_BROKER = [pytest.param(e, id=e.id) for e in RUN if not e.broker]


@pytest.mark.parametrize("example", WITHOUT_BROKER)
def test_example_runs(example):
    _run(example, None)


def test_every_page_with_examples_is_collected_and_enough_run():
    assert len(RUN) >= MIN_RUN, f"only {len(RUN)} examples run: {[e.id for e in RUN]}"
    assert sum(e.spark for e in RUN) <= MAX_SPARK, "Spark examples are slow: at most one runs"
    pages = {e.page for e in EXAMPLES}
    for page in ("README.md", "docs/producer.md", "docs/bulk.md", "docs/asyncio.md",
                 "docs/transactions.md", "docs/observability.md", "docs/spark.md"):
        assert page in pages, f"{page} has no example"
    for e in EXAMPLES:
        if not e.run:
            assert e.why_not, e.id
        elif e.broker and not e.spark:
            assert PLACEHOLDER in e.source, f"{e.id} does not use the {PLACEHOLDER} placeholder"
