"""``error_cb`` (confluent-kafka's setting, librdkafka's semantics): errors that belong to
no one record, reported once per state.

The parts that find such an error (:mod:`kproducer.broker_health`: every broker down; the
NetworkClient: a broker refused authentication; the Sender and the transaction manager: a
fatal producer error; the metadata updater: a failed metadata request) call
:meth:`ErrorReporter.report` with a key naming the state. A key reported once is not
reported again until :meth:`ErrorReporter.clear` says the state changed (a broker
connected, a node authenticated, metadata arrived), so a broker that stays down gives one
call, not one per reconnect attempt.

The calls are queued and made by :meth:`ErrorReporter.deliver` at the Sender's step, on
the thread that runs it (as delivery callbacks are), never inside the network client's
bookkeeping. An exception raised by ``error_cb`` is logged with its traceback and
swallowed: the producer carries on.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Hashable, Optional


class ErrorReporter:
    """Calls ``error_cb(error)`` (None: only the state is kept) once per reported state;
    ``log``: where an exception of ``error_cb`` is logged."""

    def __init__(self, error_cb: Optional[Callable] = None, log=None):
        self.error_cb = error_cb
        self.log = log
        self._reported: set = set()
        # Errors to deliver at the next step (a transactional call may report from the
        # application's thread: appended and popped one at a time).
        self.pending: deque = deque()

    def report(self, key: Hashable, error) -> None:
        """The state ``key`` began with ``error`` (an exception, or a callable making one:
        it is made only when it will be delivered)."""
        if key in self._reported:
            return
        self._reported.add(key)
        if self.error_cb is not None:
            self.pending.append(error() if callable(error) and not isinstance(error, BaseException)
                                else error)

    def clear(self, key: Hashable) -> None:
        """The state ``key`` ended: its next beginning is reported again."""
        self._reported.discard(key)

    def is_reported(self, key: Hashable) -> bool:
        return key in self._reported

    def deliver(self) -> None:
        """Calls ``error_cb`` with each error reported since the last call, in order."""
        pending = self.pending
        while pending:
            error = pending.popleft()
            try:
                self.error_cb(error)
            except Exception:
                if self.log is not None:
                    self.log.exception("error_cb %r raised on %r; the producer carries on",
                                       self.error_cb, error)
                error.__traceback__ = None
