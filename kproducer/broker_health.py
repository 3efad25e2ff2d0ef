"""Whether each broker can be reached, as the NetworkClient sees it: what its connection
failures log, and when every broker is down.

Logging with suppression, as librdkafka suppresses identical broker errors: the first
failure to connect to a broker (at the start, or after it was last connected) is logged at
WARNING; the next ones, one per reconnect attempt (reconnect.backoff.ms, doubling up to
reconnect.backoff.max.ms), at DEBUG only; once the broker is connected again an INFO says
so, with how many attempts failed and for how long. A broker that refuses connections thus
logs one WARNING, not one line per attempt. Authentication failures are logged by the
NetworkClient (ERROR, then DEBUG while the same failure repeats) and only counted here.

All brokers down (librdkafka's ``_ALL_BROKERS_DOWN``): when every broker the client knows
has failed since any of them was last connected, ``error_cb`` gets an
:class:`~kproducer.errors.AllBrokersDownError` naming each with its last error; once, until
a broker connects again (which starts the count afresh, as librdkafka does).
"""

from __future__ import annotations

from kproducer.errors import AllBrokersDownError

_ALL_DOWN = ("all brokers down",)


class BrokerHealth:
    """Per-node reachability of one NetworkClient. ``nodes`` is the client's dict of
    NodeStates (its ``failures``, ``failing_since_ms``, ``down`` and ``last_error`` fields
    are this class's); ``log`` the client's :class:`~kproducer.log_context.ProducerLog`;
    ``errors`` the producer's :class:`~kproducer.error_reporter.ErrorReporter`."""

    def __init__(self, nodes: dict, log, errors):
        self.nodes = nodes
        self.log = log
        self.errors = errors

    def connect_failed(self, ns, exc: Exception, now: int, *, logged: bool = False) -> None:
        """A connection attempt to ``ns`` failed (refused, unreachable, not resolved, a
        setup timeout, closed before it was ready). ``logged``: the caller logged it
        already (an authentication failure)."""
        ns.failures += 1
        if ns.failures == 1:
            ns.failing_since_ms = now
            if not logged:
                self.log.warning("%s; retrying with backoff (further failures to connect to node %s "
                                 "are logged at DEBUG until it connects)", exc, ns.node_id)
        elif not logged:
            self.log.debug("%s (%d failed attempts in %d ms)", exc, ns.failures,
                           now - ns.failing_since_ms)
        self._down(ns, exc)

    def connection_lost(self, ns, exc: Exception) -> None:
        """An established connection to ``ns`` failed (lost, a request timeout): logged at
        INFO by the caller, once per connection; the broker counts as down until a
        connection to it, or to another broker, is ready again."""
        self._down(ns, exc)

    def connected(self, ns, now: int) -> None:
        """``ns`` is ready: the INFO that it is back after failures, and every broker's
        down state starts afresh (as librdkafka resets its count when one comes up)."""
        if ns.failures:
            self.log.info("node %s (%s:%s) is connected again after %d failed attempt(s) in %d ms",
                          ns.node_id, ns.host, ns.port, ns.failures, now - ns.failing_since_ms)
            ns.failures = 0
        if ns.down:
            for other in self.nodes.values():
                other.down = False
            self.errors.clear(_ALL_DOWN)

    def _down(self, ns, exc: Exception) -> None:
        ns.down = True
        ns.last_error = exc
        if all(n.down for n in self.nodes.values()):
            self.errors.report(_ALL_DOWN, self._all_down_error)

    def _all_down_error(self) -> AllBrokersDownError:
        """librdkafka's "N/N brokers are down", with each broker's last error."""
        why = []
        for n in self.nodes.values():
            text = str(n.last_error)
            address = f"({n.host}:{n.port})"
            why.append(text if address in text else f"node {n.node_id} {address}: {text}")
        count = len(self.nodes)
        return AllBrokersDownError(f"{count}/{count} brokers are down: {'; '.join(why)}")
