"""kproducer.histogram.LatencyHistogram: the request round trips of Producer.metrics()."""

from __future__ import annotations

import math
import random

import pytest

from kproducer.histogram import LatencyHistogram

pytestmark = pytest.mark.unit


def nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_empty_has_no_figures():
    h = LatencyHistogram()
    assert h.quantile_us(0.5) is None
    assert h.summary_ms("rtt") == {"rtt_avg_ms": None, "rtt_max_ms": None, "rtt_p50_ms": None,
                                   "rtt_p99_ms": None, "rtt_count": 0}


def test_small_values_are_exact():
    h = LatencyHistogram()
    for us in (0, 3, 3, 7, 15):
        h.record(us)
    assert [h.quantile_us(q) for q in (0.2, 0.4, 0.6, 0.8, 1.0)] == [0, 3, 3, 7, 15]
    assert (h.count, h.total_us, h.max_us) == (5, 28, 15)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_quantiles_are_within_a_sixteenth_of_the_exact_ones(seed):
    rng = random.Random(seed)
    values = [int(math.exp(rng.uniform(0, math.log(5e7)))) for _ in range(5000)]
    h = LatencyHistogram()
    for us in values:
        h.record(us)
    for q in (0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0):
        exact = nearest_rank(values, q)
        assert abs(h.quantile_us(q) - exact) <= exact / 16, (q, exact, h.quantile_us(q))
    assert h.quantile_us(1.0) == max(values)            # never above the largest
    assert h.total_us == sum(values) and h.max_us == max(values)
    s = h.summary_ms("request_latency")
    assert s["request_latency_avg_ms"] == pytest.approx(sum(values) / len(values) / 1000)
    assert s["request_latency_p50_ms"] == pytest.approx(nearest_rank(values, 0.5) / 1000, rel=1 / 16)


def test_negative_counts_as_zero_and_huge_values_share_the_last_bucket():
    h = LatencyHistogram()
    h.record(-4)            # two threads' clock readings a microsecond apart
    h.record(10 ** 18)
    assert h.quantile_us(0.5) == 0 and h.max_us == 10 ** 18
    assert h.quantile_us(1.0) <= 10 ** 18


@pytest.mark.parametrize("q", [0, -0.5, 1.5])
def test_a_quantile_outside_0_1_is_refused_naming_it(q):
    with pytest.raises(ValueError, match=r"quantile_us: q must be in \(0, 1\]"):
        LatencyHistogram().quantile_us(q)


def test_clear_starts_over():
    h = LatencyHistogram()
    h.record(500)
    h.clear()
    assert (h.count, h.total_us, h.max_us, h.quantile_us(0.5)) == (0, 0, 0, None)
