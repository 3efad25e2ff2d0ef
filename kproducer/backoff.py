"""Java's ``ExponentialBackoff``, the one retry wait of the producer: reconnects
(``reconnect.backoff.ms`` up to ``reconnect.backoff.max.ms``, NetworkClient), metadata
refreshes after a failure and produce retries (``retry.backoff.ms`` up to
``retry.backoff.max.ms``, Metadata, Sender and RecordAccumulator).
"""

from __future__ import annotations

import math
import random
from typing import Optional

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """``initial * 2**attempts`` milliseconds, capped at ``max``, times a random factor in
    ``[1 - jitter, 1 + jitter]`` (0.2 in Kafka's clients; 0 for none), never above ``max``.
    A ``max`` below ``initial`` counts as ``initial`` (no growth). ``rng`` (anything with
    ``uniform``) makes the jitter reproducible in tests."""

    __slots__ = ("initial", "max", "jitter", "_exp_max", "_rng")

    def __init__(self, initial_ms: int, max_ms: int, jitter: float = 0.2,
                 rng: Optional[random.Random] = None):
        self.initial = max(0, int(initial_ms))
        self.max = max(self.initial, int(max_ms))
        self.jitter = jitter
        self._rng = rng if rng is not None else random
        # The exponent that reaches the cap: past it the cap itself is used (100 * 2**log2(10)
        # is 999.99..., which would truncate to 999).
        self._exp_max = math.log2(self.max / max(self.initial, 1)) if self.max > self.initial else 0

    def backoff(self, attempts: int) -> int:
        """The wait in ms after ``attempts`` failed attempts (0: after the first failure)."""
        if self._exp_max == 0:
            return self.initial
        term = self.initial * 2.0 ** attempts if attempts < self._exp_max else float(self.max)
        if self.jitter > 0:
            term *= self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(int(term), self.max)

    def __repr__(self) -> str:
        return f"ExponentialBackoff({self.initial}, {self.max}, jitter={self.jitter})"
