"""A latency histogram in microseconds with log-spaced buckets (HdrHistogram's layout,
three significant bits): the producer's request round trips (``Producer.metrics()``'s
``request_latency_*``, Java's ``request-latency-avg`` / ``-max`` and librdkafka's ``rtt``
percentiles).

Values below 16 µs have a bucket each; above, every power of two is cut into 8 buckets, so a
percentile is off by at most 1/16 of its value (the bucket's middle is reported). Recording
is a few integer operations: the NetworkClient records every response it reads."""

from __future__ import annotations

__all__ = ["LatencyHistogram", "Window"]

_EXACT = 16                 # values below have a bucket each
_SUB_BITS = 3               # buckets per power of two: 2 ** _SUB_BITS
_SUB = 1 << _SUB_BITS
_MAX_EXP = 47               # 2 ** 47 µs is 4.5 years: larger values share the last bucket
_BUCKETS = _EXACT + (_MAX_EXP - 3) * _SUB


def _index(us: int) -> int:
    if us < _EXACT:
        return us
    e = us.bit_length() - 1             # >= 4
    if e > _MAX_EXP:
        return _BUCKETS - 1
    return _EXACT + (e - 4) * _SUB + ((us >> (e - _SUB_BITS)) & (_SUB - 1))


def _middle(index: int) -> float:
    """The value a bucket stands for: its middle (its value below 16 µs)."""
    if index < _EXACT:
        return float(index)
    e, sub = divmod(index - _EXACT, _SUB)
    e += 4
    width = 1 << (e - _SUB_BITS)
    return ((_SUB + sub) * width) + (width - 1) / 2


class LatencyHistogram:
    """Counts of latencies in µs since it was made (or :meth:`clear`-ed)."""

    __slots__ = ("_counts", "count", "total_us", "max_us", "min_us")

    def __init__(self) -> None:
        self._counts = [0] * _BUCKETS
        self.count = 0
        self.total_us = 0
        self.max_us = 0
        self.min_us = 0

    def record(self, us: int) -> None:
        """One latency of ``us`` microseconds (a negative one counts as 0: clocks read by two
        threads a microsecond apart)."""
        if us < 0:
            us = 0
        self._counts[_index(us)] += 1
        if us < self.min_us or not self.count:
            self.min_us = us
        self.count += 1
        self.total_us += us
        if us > self.max_us:
            self.max_us = us

    def clear(self) -> None:
        self.__init__()

    def quantile_us(self, q: float) -> float | None:
        """The latency that ``q`` (0 < q <= 1) of those recorded do not exceed (nearest rank),
        to the bucket's middle (within 1/16 of it; the largest exactly); None before the
        first."""
        if not 0 < q <= 1:
            raise ValueError(f"quantile_us: q must be in (0, 1], got {q!r}")
        if not self.count:
            return None
        rank = max(1, -(-int(q * self.count * 1_000_000) // 1_000_000))   # ceil, float-safe
        if rank >= self.count:
            return float(self.max_us)   # the largest is known exactly
        seen = 0
        for index, n in enumerate(self._counts):
            seen += n
            if seen >= rank:
                return min(_middle(index), float(self.max_us))
        return float(self.max_us)      # not reached: the counts add up to count

    def summary_ms(self, prefix: str) -> dict:
        """``{prefix_avg_ms, prefix_max_ms, prefix_p50_ms, prefix_p99_ms, prefix_count}``
        (the figures None before the first latency)."""
        n = self.count
        q = self.quantile_us
        return {
            f"{prefix}_avg_ms": self.total_us / n / 1000 if n else None,
            f"{prefix}_max_ms": self.max_us / 1000 if n else None,
            f"{prefix}_p50_ms": q(0.5) / 1000 if n else None,
            f"{prefix}_p99_ms": q(0.99) / 1000 if n else None,
            f"{prefix}_count": n,
        }

    def window(self) -> dict:
        """librdkafka's *window stats* of what was recorded (its ``rtt``, ``int_latency``,
        ``throttle``, ``batchsize`` and ``batchcnt`` objects), in the unit recorded: ``min``,
        ``max``, ``avg``, ``sum``, ``cnt``, ``stddev`` (from the buckets' middles),
        ``hdrsize`` (the buckets' memory, as librdkafka's HdrHistogram reports its own),
        ``p50``, ``p75``, ``p90``, ``p95``, ``p99``, ``p99_99`` and ``outofrange`` (values
        beyond the last bucket, counted in it); all 0 when nothing was recorded. The
        percentiles are within 1/16 of the exact value (nearest rank)."""
        n = self.count
        out = {"min": self.min_us, "max": self.max_us, "avg": self.total_us // n if n else 0,
               "sum": self.total_us, "cnt": n, "stddev": 0, "hdrsize": _BUCKETS * 8}
        if n:
            mean = self.total_us / n
            var = sum(c * (_middle(i) - mean) ** 2 for i, c in enumerate(self._counts) if c) / n
            out["stddev"] = int(var ** 0.5)
        for name, q in (("p50", 0.5), ("p75", 0.75), ("p90", 0.9), ("p95", 0.95),
                        ("p99", 0.99), ("p99_99", 0.9999)):
            out[name] = int(self.quantile_us(q)) if n else 0
        out["outofrange"] = 0 if self.max_us < (1 << (_MAX_EXP + 1)) else self._counts[-1]
        return out

    def __repr__(self) -> str:
        return f"<LatencyHistogram count={self.count} max_us={self.max_us}>"


# A Window keeps at most this many values as they are; past it they are folded into its
# histogram (Window.compact), which bounds its memory whatever the interval.
WINDOW_VALUES = 65536
_QUANTILES = (("p50", 0.5), ("p75", 0.75), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99),
              ("p99_99", 0.9999))


class Window:
    """One of librdkafka's rolling windows (the statistics' ``rtt``, ``int_latency``,
    ``throttle``, ``batchsize``, ``batchcnt``): the values recorded since the last
    :meth:`take`. Recording is ``window.add(value)``, a list append (the statistics must
    cost nothing measurable, and these are recorded per request and per batch); the figures
    are computed as the window is taken: exactly while it holds at most WINDOW_VALUES
    values, else from a LatencyHistogram they were folded into (:meth:`compact`, called
    by the reporter between documents)."""

    __slots__ = ("_values", "add", "_hist")

    def __init__(self) -> None:
        self._values: list = []
        self.add = self._values.append
        self._hist = None

    def __len__(self) -> int:
        return len(self._values) + (self._hist.count if self._hist is not None else 0)

    def compact(self) -> None:
        """Folds the values kept into the histogram once there are more than WINDOW_VALUES."""
        values = self._values
        if len(values) <= WINDOW_VALUES:
            return
        if self._hist is None:
            self._hist = LatencyHistogram()
        record = self._hist.record
        taken = values[:]
        del values[:len(taken)]
        for v in taken:
            record(v)

    def take(self) -> dict:
        """The window's figures (LatencyHistogram.window's fields), and a new window
        begins: the values recorded from now on are the next one's."""
        values = self._values
        taken = values[:]
        del values[:len(taken)]
        hist, self._hist = self._hist, None
        if hist is not None:
            for v in taken:
                hist.record(v)
            return hist.window()
        return exact_window(taken)


def exact_window(values: list) -> dict:
    """LatencyHistogram.window's fields, computed exactly from ``values`` (ints >= 0;
    percentiles by nearest rank)."""
    n = len(values)
    out = {"min": 0, "max": 0, "avg": 0, "sum": 0, "cnt": n, "stddev": 0,
           "hdrsize": _BUCKETS * 8}
    if n:
        values = sorted(max(0, int(v)) for v in values)
        total = sum(values)
        mean = total / n
        out.update(min=values[0], max=values[-1], avg=total // n, sum=total,
                   stddev=int(max(0.0, sum(v * v for v in values) / n - mean * mean) ** 0.5))
    for name, q in _QUANTILES:
        out[name] = values[max(1, -(-int(q * n * 1_000_000) // 1_000_000)) - 1] if n else 0
    out["outofrange"] = 0
    return out

