"""Java's sampled statistics (org.apache.kafka.common.metrics.stats: Rate, Avg, Max over
``metrics.num.samples`` samples of ``metrics.sample.window.ms``) computed from counters that
only grow, so that recording an event costs an addition and nothing else.

Java records every event into the current sample of each sensor. Here the counters are the
producer's own (kproducer.counters, ``Sender.stats``); a :class:`Sampler` keeps, for each
live sample, the counters' values at its start, and the peaks (largest values) of the
samples that ended. A sample ends, and the next starts, at the first step or ``metrics()``
call at least ``metrics.sample.window.ms`` after it started, as Java starts a new sample at
the first event after the window; samples older than ``samples * window`` are dropped.
Then, over the live samples:

- a total is the counter now less its value at the oldest sample's start;
- a rate is that total over Java's window size (Rate.windowSize: the time since the oldest
  sample started, counted as at least ``samples - 1`` full windows);
- an average is a total over a count (NaN with no event, as Java's Avg);
- a maximum is the largest peak of the live samples (NaN with no event, as Java's Max).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

__all__ = ["Sampler"]

NAN = float("nan")


class Sampler:
    """Samples of the counters ``read()`` returns (a flat ``{key: number}``); ``take_peaks()``
    returns the peaks of the sample that ends (``{key: number}``) and starts new ones."""

    def __init__(self, window_ms: int, samples: int, read: Callable[[], dict],
                 take_peaks: Callable[[], dict], now_ms: int):
        self.window_ms = max(1, int(window_ms))
        self.samples = max(1, int(samples))
        self._read = read
        self._take_peaks = take_peaks
        self._lock = threading.Lock()
        # (start ms, counters at the start, peaks of the sample that ended there)
        self._live: deque = deque([(now_ms, read(), {})])
        self.next_roll_ms = now_ms + self.window_ms

    def roll(self, now_ms: int) -> None:
        """Ends the current sample if its window is over (the steps call this when
        ``next_roll_ms`` has come; so does every read), and drops the expired ones."""
        with self._lock:
            live = self._live
            if now_ms - live[-1][0] >= self.window_ms:
                live.append((now_ms, self._read(), self._take_peaks()))
                self.next_roll_ms = now_ms + self.window_ms
            # Java's purgeObsoleteSamples: samples that started samples * window ago or more.
            expire = self.samples * self.window_ms
            while len(live) > self.samples or (len(live) > 1 and now_ms - live[0][0] >= expire):
                live.popleft()

    def view(self, now_ms: int, current: dict, peaks: dict) -> "SampleView":
        """What the live samples say at ``now_ms``, given the counters (``current``) and the
        current sample's peaks (``peaks``) now."""
        self.roll(now_ms)
        with self._lock:
            live = list(self._live)
        return SampleView(self, now_ms, live, current, peaks)


class SampleView:
    """Totals, rates, averages and maxima over the live samples at one instant."""

    def __init__(self, sampler: Sampler, now_ms: int, live: list, current: dict, peaks: dict):
        self._start = live[0][1]
        self._current = current
        self._peaks = [p for _, _, p in live[1:]] + [peaks]
        elapsed = now_ms - live[0][0]
        full = elapsed // sampler.window_ms
        if full < sampler.samples - 1:
            elapsed += (sampler.samples - 1 - full) * sampler.window_ms
        self._seconds = max(elapsed, 1) / 1000.0

    def now(self, key) -> float:
        """The counter now (since the producer started)."""
        return self._current.get(key, 0)

    def tagged(self, group) -> set:
        """The tag values of the counters keyed ``(group, tag, name)``."""
        return {key[1] for key in self._current if isinstance(key, tuple) and key[0] == group}

    def total(self, key) -> float:
        """The counter's growth over the live samples."""
        return self._current.get(key, 0) - self._start.get(key, 0)

    def rate(self, key) -> float:
        """Java's Rate of a counter: per second."""
        return self.total(key) / self._seconds

    def avg(self, key, count_key) -> float:
        n = self.total(count_key)
        return self.total(key) / n if n else NAN

    def max(self, key, count_key) -> float:
        if not self.total(count_key):
            return NAN
        return float(max(p.get(key, 0) for p in self._peaks))
