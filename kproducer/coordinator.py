"""Requests to a coordinator: FindCoordinator first, again when the coordinator moves.

Java's TransactionManager sends its requests (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn) from the Sender thread, one at a time, in
priority order, each to the coordinator of its transactional id or consumer group.
:class:`CoordinatorRequests` is that queue; :mod:`kproducer.transactions` fills it,
and ``Producer.complete_transaction`` uses it for an EndTxn on behalf of any
transactional id. Everything here runs on the Sender thread except :meth:`enqueue`
and :class:`TxnResult`'s waits.
"""

from __future__ import annotations

import logging
import threading

from kproducer.clock import SYSTEM_TIME
from kproducer.errors import KafkaError, TransactionTimeoutError
from kproducer.backoff import ExponentialBackoff
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.protocol.errors_table import ErrorCode, broker_error

KEY_GROUP = 0
KEY_TRANSACTION = 1

# Java's TransactionManager.Priority: lookups first, then init, then partitions and
# offsets, then the end of the transaction.
PRIORITY_FIND = 0
PRIORITY_INIT = 1
PRIORITY_ADD = 2
PRIORITY_END = 3

# Answers after which the same request is sent again (after a backoff), and those that
# also mean "find the coordinator again".
_REFIND = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
_RETRY = _REFIND | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT}


class TxnResult:
    """The outcome of one transactional operation, waited for by the user's thread
    (Java's TransactionalRequestResult)."""

    def __init__(self, operation: str):
        self.operation = operation
        self.value = None
        self.error: BaseException | None = None
        # Whether a wait() has delivered the outcome to a caller: an operation whose call
        # timed out and that finished in the background is handed to the retried call
        # (Java's TransactionalRequestResult.isAcked).
        self.acked = False
        self._event = threading.Event()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def succeed(self, value=None) -> None:
        self.value = value
        self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():     # the first outcome stands
            self.error = error
            self._event.set()

    def wait(self, timeout_s: float | None):
        """The value, or raises the operation's error; TransactionTimeoutError if it is
        still running after ``timeout_s`` seconds (it goes on in the background)."""
        if not self._event.wait(timeout_s):
            raise TransactionTimeoutError(
                f"{self.operation} did not finish within {timeout_s:g} s; it goes on in the "
                f"background: call it again to wait for it")
        self.acked = True
        if self.error is not None:
            raise self.error
        return self.value


class Handler:
    """One request to a coordinator. Subclasses build the request and read the answer."""

    api_key: int = -1
    priority: int = PRIORITY_ADD
    key_type: int = KEY_TRANSACTION
    node: int | None = None        # a fixed node (a partition leader) instead of a coordinator

    def __init__(self, key: str, result: TxnResult, *, deadline_ms: int | None = None):
        self.key = key
        self.result = result
        self.deadline_ms = deadline_ms     # give up (fail the result) after this, if set
        self.attempts = 0
        self.retry_at = 0
        self.last_error: BaseException | None = None

    def ready(self) -> bool:
        """False while the request must wait (EndTxn waits for the transaction's batches)."""
        return True

    def build(self):
        raise NotImplementedError

    def on_response(self, resp) -> int | None:
        """Handles the answer; returns an error code to retry on (see _RETRY), or None
        when done (the handler has settled its result or queued a follow-up)."""
        raise NotImplementedError

    def on_give_up(self, why: BaseException) -> None:
        self.result.fail(why)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r}>"


class CoordinatorRequests:
    """A priority queue of :class:`Handler`, one request in flight at a time, each sent to
    the coordinator of its key (found with FindCoordinator and cached until it fails)."""

    def __init__(self, client, *, retry_backoff_ms: int, retry_backoff_max_ms: int, time=None,
                 log=None):
        self.client = client
        # The producer's logger (kproducer.log_context), or this module's.
        self.log = log if log is not None else logging.getLogger(__name__)
        self.time = time if time is not None else SYSTEM_TIME   # kproducer.clock: mono_ms()
        self.backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self.coordinators: dict = {}          # (key_type, key) -> node id
        self._queue: list = []
        self._lock = threading.Lock()
        self._in_flight: Handler | None = None
        self._finding: tuple | None = None
        self._find_attempts = 0
        self._find_retry_at = 0

    def enqueue(self, handler: Handler, wake: bool = True) -> None:
        """Queues ``handler``; ``wake``: wake the Sender (False from its own step, which
        runs the queue next)."""
        with self._lock:
            self._queue.append(handler)
            self._queue.sort(key=lambda h: h.priority)
        if wake:
            self.client.wakeup()

    def pending(self) -> bool:
        return bool(self._queue) or self._in_flight is not None

    def remove_if(self, pred) -> list:
        with self._lock:
            gone = [h for h in self._queue if pred(h)]
            self._queue = [h for h in self._queue if not pred(h)]
        return gone

    def _next(self, now: int) -> Handler | None:
        with self._lock:
            for h in self._queue:
                if h.retry_at <= now and h.ready():
                    return h
        return None

    def _drop(self, h: Handler) -> None:
        with self._lock:
            if h in self._queue:
                self._queue.remove(h)

    def run(self, now: int) -> int:
        """Sends the next request if it can; returns the longest poll the queue allows."""
        if self._in_flight is not None or self._finding is not None:
            return 1 << 30
        for h in list(self._queue):
            if h.deadline_ms is not None and now >= h.deadline_ms:
                self._drop(h)
                why = h.last_error
                h.on_give_up(TransactionTimeoutError(
                    f"{h.result.operation} for {h.key!r} did not finish in time"
                    + (f" (last error: {why})" if why is not None else "")))
        h = self._next(now)
        if h is None:
            return self._wait_hint(now)
        coord = h.node if h.node is not None else self.coordinators.get((h.key_type, h.key))
        if coord is None:
            return self._find(h.key_type, h.key, now)
        if not self.client.ready(coord, now):
            return max(5, min(50, self.client.connection_delay(coord, now)))
        try:
            request = h.build()
        except KafkaError as exc:
            self._drop(h)
            h.result.fail(exc)
            return 0
        if request is None:          # settled without a request (nothing to send)
            self._drop(h)
            return 0
        h.attempts += 1
        self._in_flight = h
        self.client.send(coord, h.api_key, request,
                         lambda resp, err, h=h, coord=coord: self._on_response(h, coord, resp, err), now)
        return 1 << 30

    def _wait_hint(self, now: int) -> int:
        with self._lock:
            waits = [h.retry_at - now for h in self._queue if h.retry_at > now]
            waiting_ready = any(h.retry_at <= now for h in self._queue)
        hint = min(waits, default=1 << 30)
        if waiting_ready:            # a handler waits for its ready(): look again soon
            hint = min(hint, 5)
        return max(0, hint)

    # -- FindCoordinator ---------------------------------------------------------------

    def _find(self, key_type: int, key: str, now: int) -> int:
        if now < self._find_retry_at:
            return self._find_retry_at - now
        node = self.client.least_loaded_node(now)
        if node is None:
            return 50
        if not self.client.ready(node, now):
            return 5
        version = self.client.api_version(node, v.FIND_COORDINATOR)
        if version >= 4:
            req = m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        elif version >= 1:
            req = m.FindCoordinatorRequest(key=key, key_type=key_type)
        elif key_type == KEY_GROUP:
            req = m.FindCoordinatorRequest(key=key)
        else:
            raise KafkaError("the broker's FindCoordinator v0 cannot look up a transaction coordinator")
        self._finding = (key_type, key)
        self.client.send(node, v.FIND_COORDINATOR, req,
                         lambda resp, err: self._on_find(key_type, key, resp, err), now)
        return 1 << 30

    def _on_find(self, key_type: int, key: str, resp, err) -> None:
        self._finding = None
        now = self.time.mono_ms()
        if err is None:
            if resp.coordinators:
                c = resp.coordinators[0]
                code, node_id, host, port = c.error_code, c.node_id, c.host, c.port
            else:
                code, node_id, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            if code == 0:
                self.client.set_node(node_id, host, port)
                self.coordinators[(key_type, key)] = node_id
                self._find_attempts = 0
                self.log.debug("coordinator for %s %r: node %d (%s:%d)",
                          "transaction" if key_type else "group", key, node_id, host, port)
                return
            err = broker_error(code, f"FindCoordinator for {key!r}")
            if code not in _RETRY:
                # Authorization failures and the like: the operations waiting for this
                # coordinator fail with the broker's answer.
                for h in self.remove_if(lambda h: (h.key_type, h.key) == (key_type, key)):
                    h.on_give_up(err)
                return
        self.log.debug("FindCoordinator for %r failed (%s); retrying", key, err)
        with self._lock:
            for h in self._queue:
                if (h.key_type, h.key) == (key_type, key):
                    h.last_error = err
        self._find_retry_at = now + self.backoff.backoff(self._find_attempts)
        self._find_attempts += 1

    # -- answers -----------------------------------------------------------------------

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self.coordinators.pop((key_type, key), None)

    def node_lost(self, node_id: int) -> None:
        """The connection to ``node_id`` failed or was lost: the coordinators found there are
        looked up again before the next request (Java's Sender, when the coordinator is not
        ready, finds it again: it may have moved, or its broker may be gone for good)."""
        for key, node in list(self.coordinators.items()):
            if node == node_id:
                del self.coordinators[key]

    def _on_response(self, h: Handler, coord: int, resp, err) -> None:
        self._in_flight = None
        now = self.time.mono_ms()
        if err is not None:
            # Connection lost or request timed out: whether the broker acted on it is
            # unknown; every coordinator request here is safe to send again.
            h.last_error = err
            self.forget_coordinator(h.key_type, h.key)
            h.retry_at = now + self.backoff.backoff(h.attempts - 1)
            self.log.debug("%r: %s; retrying", h, err)
            return
        try:
            retry_code = h.on_response(resp)
        except Exception as exc:     # a handler bug must not kill the I/O thread
            self.log.exception("transaction handler %r failed", h)
            self._drop(h)
            h.result.fail(exc if isinstance(exc, KafkaError) else KafkaError(f"{h!r}: {exc!r}"))
            return
        if retry_code is None:
            self._drop(h)
            return
        h.last_error = broker_error(retry_code, f"{v.api_name(h.api_key)} for {h.key!r}")
        if retry_code in _REFIND:
            self.forget_coordinator(h.key_type, h.key)
        h.retry_at = now + self.backoff.backoff(h.attempts - 1)
        self.log.debug("%r: %s; retrying", h, h.last_error)
