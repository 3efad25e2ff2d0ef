"""Counters a test helper keeps (requests, refusals, ...) and a wait on them with a deadline."""

from __future__ import annotations

import time


class Counters:
    """Mixin: the class sets ``_lock``, ``_cond`` (a Condition on that lock) and ``_stats``
    (a dict of counts); its threads count with :meth:`_count` and tests read with
    :meth:`stats` or wait with :meth:`wait_for`."""

    def stats(self) -> dict:
        with self._lock:
            return dict(self._stats)

    def wait_for(self, predicate, timeout: float = 10.0) -> dict:
        """Waits until ``predicate(stats)`` is true; returns the stats, or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(dict(self._stats)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{type(self).__name__}: condition not met within {timeout}s: "
                                       f"{self._stats}")
                self._cond.wait(left)
            return dict(self._stats)

    def _count(self, key: str, n: int = 1) -> None:
        with self._cond:
            self._stats[key] += n
            self._cond.notify_all()
