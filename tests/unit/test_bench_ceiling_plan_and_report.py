"""The broker's ceiling (bench/ceiling.py) without a broker: its plan cuts batches and
requests the way the producer cuts them, the report puts the ceiling beside a ratio, and
where the ceiling runs. Against the broker: tests/broker/test_bench_ceiling.py."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)   # bench/ lives in the checkout, it is not an installed package

from bench import ceiling, clients, report, runner, scenarios
from bench.data import index_of, make_keys, make_values
from kproducer.codec import encode_batch, murmur2_partition


@pytest.mark.parametrize("keyed", [True, False])
def test_the_plan_cuts_batches_and_requests_as_the_producer_does(keyed):
    n, batch_bytes = 5000, 16384
    values, keys = make_values(n, 100), make_keys(n) if keyed else None
    plan = ceiling.plan_requests(values, keys, 4, batch_bytes)
    seen = {p: [] for p in range(4)}
    for request in plan:
        partitions = [p for p, _ in request]
        assert len(partitions) == len(set(partitions))          # a batch per partition at most
        encoded = [encode_batch(records) for _, records in request]
        assert all(len(b) <= batch_bytes for b in encoded)
        assert sum(len(b) for b in encoded) <= ceiling.MAX_REQUEST_SIZE
        for p, records in request:
            seen[p] += [index_of(v) for _, v in records]
            if keyed:
                assert all(murmur2_partition(k, 4) == p for k, _ in records)
    assert sorted(i for ids in seen.values() for i in ids) == list(range(n))   # each once
    assert all(ids == sorted(ids) for ids in seen.values())     # in order within a partition
    assert all(seen.values())                                   # unkeyed too: every partition
    # Batches close to full: as many as the bytes need, not one per record.
    assert len(plan) <= n * 130 // batch_bytes


def test_the_report_puts_the_ceiling_beside_a_ratio():
    ref = {"client": clients.REFERENCE, "records_per_s": 1_000_000.0}
    mine = {"client": clients.KPRODUCER_SEND_MANY, "records_per_s": 1_800_000.0}
    by = {("defaults", ceiling.CLIENT): {"ok": True, "records_per_s": 2_000_000.0}}
    detail = report._ceiling(by, "defaults", mine, ref, 3.0)
    assert detail == (f"; the broker's ceiling 2,000,000 records/s, 2.00× {clients.REFERENCE}'s, "
                      f"below the target: 3× is more than the broker takes; kproducer send_many "
                      f"at 90% of it")
    assert "below the target" not in report._ceiling(by, "defaults", mine, ref, 2.0)
    assert report._ceiling(by, "value-1KiB", mine, ref, 1.0) == ""      # no ceiling run there
    by[("defaults", ceiling.CLIENT)]["ok"] = False                      # FAILED: not used
    assert report._ceiling(by, "defaults", mine, ref, 3.0) == ""


def test_where_the_ceiling_runs():
    def runs(name, named=None, embedded=True):
        return runner.ceiling_runs(scenarios.by_name(name), named, embedded)
    assert [runs(n) for n in ("base", "defaults", "value-1KiB")] == [True] * 3
    assert not runs("lz4") and not runs("idempotent")           # no target there
    assert runs("idempotent", [ceiling.CLIENT])                 # unless asked for by name
    assert not runs("base", [clients.KPRODUCER_SEND])           # or left out by --clients
    assert not runs("transactional", [ceiling.CLIENT])          # it sends no transactions
    assert not runs("base", embedded=False)                     # a cluster: leaders elsewhere
