"""The clocks of the I/O path, injectable (Java's ``Time`` / ``SystemTime``; tests pass a
``MockTime``, below).

:class:`~kproducer.sender.Sender`, :class:`~kproducer.network.NetworkClient` and
:class:`~kproducer.coordinator.CoordinatorRequests` take ``time=`` (default
:data:`SYSTEM_TIME`) and read both clocks only through it:

- ``mono_ms()``: CLOCK_MONOTONIC in milliseconds, ``time.monotonic()``'s clock and the
  one the Sender's watcher thread keeps its deadlines on (``SenderTurn.now_ms``);
  timeouts, backoffs and connection state.
- ``mono_us()``: the same clock in microseconds, the clock of the selector's and the
  courier's I/O instants (csrc/kp_clock.h): request round trips.
- ``wall_ms()``: CLOCK_REALTIME in milliseconds since the epoch, the clock of record
  timestamps and of the accumulator's batches (``created_ms``, linger, retry backoff,
  ``delivery.timeout.ms``).
"""

from __future__ import annotations

from kproducer._core import SenderTurn, wall_clock_ms

__all__ = ["MockTime", "SystemTime", "SYSTEM_TIME"]


class SystemTime:
    """The real clocks (compiled: no Python frame per reading, the Sender reads them every
    step). ``mono_ms() == time.monotonic_ns() // 1_000_000``, ``mono_us()`` the same in
    microseconds, ``wall_ms() == time.time_ns() // 1_000_000``."""

    __slots__ = ()

    mono_ms = staticmethod(SenderTurn.now_ms)
    mono_us = staticmethod(SenderTurn.now_us)
    wall_ms = staticmethod(wall_clock_ms)

    def __repr__(self) -> str:
        return "SystemTime()"


SYSTEM_TIME = SystemTime()


class MockTime:
    """Clocks that move only when told (Java's MockTime), for tests that drive the Sender
    and the NetworkClient step by step. Both clocks advance together; they start at the
    real readings unless given, so batches the accumulator stamps with the real wall clock
    (``created_ms``) line up with ``wall_ms()``."""

    def __init__(self, mono_ms: int | None = None, wall_ms: int | None = None):
        self.mono = SYSTEM_TIME.mono_ms() if mono_ms is None else int(mono_ms)
        self.wall = SYSTEM_TIME.wall_ms() if wall_ms is None else int(wall_ms)

    def mono_ms(self) -> int:
        return self.mono

    def mono_us(self) -> int:
        return self.mono * 1000

    def wall_ms(self) -> int:
        return self.wall

    def sleep(self, ms: int) -> None:
        """Advances both clocks by ``ms`` milliseconds."""
        self.mono += int(ms)
        self.wall += int(ms)

    def __repr__(self) -> str:
        return f"MockTime(mono_ms={self.mono}, wall_ms={self.wall})"
