"""Waiting on a condition with a deadline, for the broker tests."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    """Polls ``predicate`` until it is true; AssertionError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
