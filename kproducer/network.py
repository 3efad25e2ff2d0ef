"""NetworkClient: connections to brokers over the C selector (Java's NetworkClient).

Per node: a connection state (DISCONNECTED, CONNECTING, CHECKING_API_VERSIONS,
AUTHENTICATING, READY) with exponential reconnect backoff and jitter; in-flight
requests kept in a queue, matched to responses in order and checked by correlation
id (a broker answers one connection's requests in order); request timeouts that
fail the node's in-flight requests and disconnect it; ApiVersions on every new
connection, then with SASL a SaslHandshake and SaslAuthenticate rounds
(:mod:`kproducer.sasl`). A failed authentication closes the connection and is kept
as the node's ``auth_error`` for the Sender, which fails what waits for that node.
KIP-368: a session lifetime in the SaslAuthenticate answer makes the connection
re-authenticate before it ends (REAUTHENTICATING, see ``_sasl_timers``); an OAUTHBEARER
connection whose first token is still being obtained waits for it (``sasl.pending()``).

Host names are resolved off the I/O thread (:class:`_Lookup`): a slow or dead DNS
server must not stall the other brokers' traffic or ``close()``; the node stays
CONNECTING meanwhile, so socket.connection.setup.timeout.ms bounds the lookup too.

Only the Sender thread uses a NetworkClient; ``wakeup()`` is the one method other
threads call.

For tests (tests/unit/test_network.py) the clock (``time=``, :mod:`kproducer.clock`) and the
selector (``selector=``: anything with :class:`~kproducer._net.Selector`'s connect, send,
close, close_all, poll, wakeup, fileno and needs_poll) are injectable.
"""

from __future__ import annotations

import collections
import ipaddress
import random
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Optional

from kproducer import codec
from kproducer._disconnect import DisconnectKind
from kproducer._net import DEFAULT_MAX_FRAME_SIZE, Selector
from kproducer.backoff import ExponentialBackoff  # noqa: F401 (also re-exported: its old home)
from kproducer.broker_health import BrokerHealth
from kproducer.clock import SYSTEM_TIME
from kproducer.error_reporter import ErrorReporter
from kproducer.errors import (AuthenticationError, KafkaError, KafkaTimeoutError, NetworkError,
                              ProtocolError, SslAuthenticationError, UnsupportedVersionError)
from kproducer.counters import NodeCounters, RemovedNodes
from kproducer.histogram import LatencyHistogram
from kproducer.log_context import LogContext
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.protocol.errors_table import ErrorCode, error_name


CLIENT_SOFTWARE_NAME = "kproducer"
CLIENT_SOFTWARE_VERSION = "0.1.0"
# Correlation ids the courier gets per node (reserve_requests): the most requests it may write
# to it between two steps (each response it reads makes room for one more). Those it did not
# use are given back as it is taken (release_courier_ids).
COURIER_IDS = 256
# KIP-219: from this Produce version the broker answers at once and the client waits out the
# throttle (Java's ProduceResponse.shouldClientThrottle); before it the broker delayed the answer.
_PRODUCE_CLIENT_THROTTLES = 6
_NO_ANSWER = object()           # InFlightRequest.answer of a request whose response is to come

DISCONNECTED, CONNECTING, CHECKING_API_VERSIONS, READY = range(4)
_STATE_NAMES = ["DISCONNECTED", "CONNECTING", "CHECKING_API_VERSIONS", "READY"]
# SASL: SaslHandshake then SaslAuthenticate rounds, between ApiVersions and READY.
AUTHENTICATING = len(_STATE_NAMES)
_STATE_NAMES.append("AUTHENTICATING")
# States of a connection being set up: bounded by socket.connection.setup.timeout.ms.
_SETTING_UP = (CONNECTING, CHECKING_API_VERSIONS, AUTHENTICATING)
# KIP-368 re-authentication of a READY connection: no new request is written to it until
# its requests in flight are answered and SaslHandshake + SaslAuthenticate have succeeded.
REAUTHENTICATING = len(_STATE_NAMES)
_STATE_NAMES.append("REAUTHENTICATING")
# Java's SaslClientAuthenticator.ReauthInfo: re-authenticate at a random 85-95 % of the
# session lifetime the broker gave.
_REAUTH_WINDOW = (0.85, 0.95)

# A connection lost before it was READY, by the kind of failure (Selector.poll's
# Disconnect.kind): the error class, when it is not a plain NetworkError. A failed TLS
# handshake (certificate, host name, an alert such as "certificate required", which TLS 1.3
# delivers after the client's side of the handshake is done) is not retried into success:
# Java's SslAuthenticationException, kept for the Sender as the node's auth_error, and the
# broker's other addresses are not tried.
_SETUP_ERRORS = {
    DisconnectKind.TLS_HANDSHAKE: SslAuthenticationError,
    DisconnectKind.TLS: SslAuthenticationError,
}


def _is_address(host: str) -> bool:
    """A numeric IPv4/IPv6 address (with an optional IPv6 zone) needs no lookup."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        return False


class _Lookup:
    """One getaddrinfo call on a daemon thread (Python has no asynchronous resolver in
    the standard library). The I/O thread polls ``done``; ``on_done`` wakes its poll. A
    lookup nobody waits for any more (the node timed out or closed) just finishes and is
    dropped; being a daemon thread, a hung one never holds up interpreter exit."""

    __slots__ = ("host", "port", "done", "addresses", "error")

    def __init__(self, host: str, port: int, on_done: Callable[[], None]):
        self.host, self.port = host, port
        self.done = False
        self.addresses: list = []
        self.error: Optional[Exception] = None
        threading.Thread(target=self._run, args=(on_done,), name="kproducer-dns", daemon=True).start()

    def _run(self, on_done) -> None:
        try:
            self.addresses = [info[4][0] for info in
                              socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)]
        except (OSError, UnicodeError) as exc:   # socket.gaierror is an OSError
            self.error = exc
        self.done = True
        try:
            on_done()
        except Exception:   # the client closed meanwhile
            pass


@dataclass
class InFlightRequest:
    correlation_id: int
    api_key: int
    version: int
    request: object
    callback: Callable           # callback(response_or_None, error_or_None)
    send_ms: int
    expect_response: bool = True
    sent: bool = False           # fully written to the socket
    decoder: Optional[Callable] = None   # decoder(version, payload); None: the generic one
    answer: object = _NO_ANSWER  # the response, when the courier read it (adopt)
    send_us: int = -1            # mono_us() when its last byte was written (-1: not yet)


@dataclass
class NodeState:
    node_id: int
    host: str
    port: int
    slot: int
    state: int = DISCONNECTED
    attempts: int = 0
    last_attempt_ms: int = -(10 ** 12)
    reconnect_wait_ms: int = 0
    connect_started_ms: int = 0
    versions: dict = field(default_factory=dict)
    in_flight: collections.deque = field(default_factory=collections.deque)
    # Correlation ids of written acks=0 requests: Kafka answers none, some brokers
    # (Tansu) answer anyway, and those responses are read and dropped.
    discard: set = field(default_factory=set)
    pending: collections.deque = field(default_factory=collections.deque)   # encoded, not yet staged
    last_activity_ms: int = 0
    # The last SASL failure, until a later connection authenticates (Java's
    # ClusterConnectionStates.authenticationException).
    auth_error: Optional[Exception] = None
    lookup: Optional[_Lookup] = None   # the host name being resolved (state CONNECTING)
    # Addresses of the last lookup, tried in turn (client.dns.lookup=use_all_dns_ips).
    addresses: list = field(default_factory=list)
    address_index: int = 0
    # API keys whose responses on this connection carried bytes after the fields we know
    # (logged once per connection and API: see _decode).
    trailing_seen: set = field(default_factory=set)
    # KIP-219: the broker asked for no request on this connection before this instant
    # (mono ms): a quota's throttle, answered at once and honoured by the client.
    throttle_until_ms: int = 0
    # SASL: waiting for the first OAUTHBEARER token (state AUTHENTICATING, nothing sent yet);
    # KIP-368: when to re-authenticate (mono ms, 0: never) and when the session ends.
    sasl_waiting: bool = False
    reauth_at_ms: int = 0
    session_end_ms: int = 0
    # kproducer.broker_health's: connection attempts failed in a row (0: connected, or not
    # tried yet), since when (mono ms); down since any node was last ready, and why.
    failures: int = 0
    failing_since_ms: int = 0
    down: bool = False
    last_error: Optional[Exception] = None
    # Counters of this node's connections (kproducer.statistics, kproducer.java_metrics),
    # counted per request or connection event, never per record or byte.
    counters: NodeCounters = field(default_factory=NodeCounters)
    # The smoothed round trip of its requests (µs, 0: none measured yet): TCP's estimator
    # (RFC 6298's SRTT, gain 1/8), for the pacing of its Produce requests (paced_until_us).
    srtt_us: float = 0.0


class NetworkClient:
    """Connections, request dispatch and response matching; see the module docstring."""

    def __init__(self, *, client_id: str = "kproducer", request_timeout_ms: int = 30000,
                 max_in_flight: int = 5, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, connection_setup_timeout_ms: int = 10000,
                 connections_max_idle_ms: int = 540000, send_buffer_bytes: int = -1,
                 receive_buffer_bytes: int = 32768, max_response_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_connections: int = 1024, sasl=None, tls=None, time=None, selector=None,
                 log_context: Optional[LogContext] = None, errors: Optional[ErrorReporter] = None):
        self.client_id = client_id
        # The producer's logger for this module ([Producer clientId=...] messages), and its
        # error_cb reporter (kproducer.error_reporter).
        self.log_context = log_context if log_context is not None else LogContext(client_id)
        self.log = self.log_context.logger(__name__)
        self.errors = errors if errors is not None else ErrorReporter()
        # The clock (kproducer.clock: mono_ms() is all this class reads; the round trips'
        # instants come from the selector and the courier).
        self.time = time if time is not None else SYSTEM_TIME
        # kproducer._net.TlsContext for security.protocol SSL / SASL_SSL, or None. The
        # selector runs the handshake: a connection is "connected" once TLS is up.
        self.tls = tls
        # kproducer.sasl.SaslCredentials (kproducer.oauth.OAuthBearerCredentials for
        # OAUTHBEARER, whose token login starts now and wakes the poll after each attempt),
        # or None without SASL.
        self.sasl = sasl
        # KIP-368 re-authentications that succeeded, and the authentications (first and
        # re-) that succeeded and failed (Java's successful-/failed-(re)authentication-total).
        self.reauthentications = 0
        self.authentications = 0
        self.authentication_failures = 0
        self.reauthentication_failures = 0
        # Whether the nodes keep statistics windows (statistics.interval.ms > 0): the
        # per-request round trips by node, librdkafka's ``rtt``.
        self.windows = False
        # What the nodes removed since (remove_node) had counted: the totals add it.
        self.removed = RemovedNodes()
        # (node_id, AuthenticationError) not yet taken by the Sender (take_auth_failures).
        self.auth_failures: list = []
        # Why the last connection attempt failed (None once a connection is ready): the
        # producer names it when metadata does not arrive within max.block.ms.
        self.last_connect_error: Optional[Exception] = None
        # Called with a node's id when its connection fails or is lost to an error (not an
        # idle close): Java's MetadataUpdater.handleServerDisconnect. The Sender refreshes
        # metadata (a leader may have moved) and forgets the coordinators on that node.
        self.node_lost_listeners: list = []
        # KIP-219 throttles honoured (metrics(): produce_throttle_*).
        self.throttled_responses = 0
        self.throttle_time_ms_total = 0
        self.throttle_time_ms_max = 0
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self.connections_max_idle_ms = connections_max_idle_ms
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.reconnect = ExponentialBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self.selector = selector if selector is not None else Selector(
            max_connections=max_connections, max_frame_size=max_response_size)
        self.nodes: dict[int, NodeState] = {}
        # Connection failures logged with suppression; every broker down (error_cb).
        self.health = BrokerHealth(self.nodes, self.log, self.errors)
        self._free_slots = list(range(max_connections - 1, -1, -1))
        self._next_cid = 1
        # [first, end) of the correlation ids reserved for the courier while it is armed
        # (reserve_courier_requests), None otherwise.
        self._courier_ids: Optional[tuple] = None
        # Round trips of the requests answered: from the write to the read of the response
        # (the selector's stamp, or the courier's), whoever read it; Producer.metrics().
        self.request_latency = LatencyHistogram()
        start = getattr(sasl, "start", None)     # OAUTHBEARER: the first token, now
        if start is not None:
            start(self.wakeup, self.log_context.logger("kproducer.oauth"))

    # -- nodes ---------------------------------------------------------------------

    def set_node(self, node_id: int, host: str, port: int) -> None:
        """Adds or updates a broker address (from bootstrap or metadata)."""
        ns = self.nodes.get(node_id)
        if ns is not None:
            if (ns.host, ns.port) != (host, port):
                self._disconnect(ns, NetworkError(f"node {node_id} moved to {host}:{port}"), self.time.mono_ms(),
                                 lost=False)
                ns.host, ns.port = host, port
                # A new address owes nothing to the old one's failures: connect at once.
                ns.attempts = 0
                ns.reconnect_wait_ms = 0
                ns.failures = 0
            return
        if not self._free_slots:
            raise NetworkError("too many broker connections")
        ns = self.nodes[node_id] = NodeState(node_id, host, port, self._free_slots.pop())
        ns.counters.start(self.selector, ns.slot, self.windows)

    def remove_node(self, node_id: int) -> None:
        ns = self.nodes.pop(node_id, None)
        if ns is not None:
            self.removed.absorb(ns.counters)    # the totals keep what it counted
            self._disconnect(ns, NetworkError(f"node {node_id} left the cluster"), self.time.mono_ms(),
                             lost=False)
            self._free_slots.append(ns.slot)

    def state(self, node_id: int) -> str:
        ns = self.nodes.get(node_id)
        return _STATE_NAMES[ns.state] if ns else "UNKNOWN"

    def is_ready(self, node_id: int) -> bool:
        ns = self.nodes.get(node_id)
        return (ns is not None and ns.state == READY
                and len(ns.in_flight) + len(ns.pending) < self.max_in_flight)

    def can_connect(self, ns: NodeState, now: int) -> bool:
        return ns.state == DISCONNECTED and now - ns.last_attempt_ms >= ns.reconnect_wait_ms

    def ready(self, node_id: int, now: int) -> bool:
        """True if a request can be sent to the node now; starts connecting otherwise."""
        ns = self.nodes.get(node_id)
        if ns is None:
            return False
        if ns.state == READY:
            return (len(ns.in_flight) + len(ns.pending) < self.max_in_flight
                    and now >= ns.throttle_until_ms)
        if self.can_connect(ns, now):
            self._connect(ns, now)
        return False

    def connection_delay(self, node_id: int, now: int) -> int:
        """Milliseconds until a connection attempt to the node may start."""
        ns = self.nodes.get(node_id)
        if ns is not None and ns.state == READY and now < ns.throttle_until_ms:
            return ns.throttle_until_ms - now          # Java's connectionDelay: the throttle
        if ns is None or ns.state != DISCONNECTED:
            return 0 if ns is None else 1 << 40
        return max(0, ns.reconnect_wait_ms - (now - ns.last_attempt_ms))

    def windows_full(self, leaders: Optional[Collection[int]] = None, *,
                     paced_at_us: Optional[int] = None) -> bool:
        """True when every READY node among ``leaders`` (the nodes that lead a partition;
        None: every node), and there is one, has max.in.flight requests out: no batch can go
        before an answer. A node that leads none takes no batch whatever its room (the
        bootstrap connection, idle once the metadata named the brokers, kept this False for
        a single broker's producer); a node still connecting takes none either, and its
        connection brings a poll event of its own. With ``paced_at_us`` (now, mono µs), a
        node whose next request waits for its pace (:meth:`paced_until_us`) counts as full
        too: no batch that is not full can go to it before then."""
        full = False
        for ns in self.nodes.values():
            if ns.state != READY or (leaders is not None and ns.node_id not in leaders):
                continue
            if len(ns.in_flight) + len(ns.pending) < self.max_in_flight and (
                    paced_at_us is None or not self.paced_until_us(ns.node_id, paced_at_us)):
                return False
            full = True
        return full

    def in_flight_count(self, node_id: Optional[int] = None) -> int:
        if node_id is None:
            return sum(len(ns.in_flight) + len(ns.pending) for ns in self.nodes.values())
        ns = self.nodes.get(node_id)
        return 0 if ns is None else len(ns.in_flight) + len(ns.pending)

    def least_loaded_node(self, now: int) -> Optional[int]:
        """A READY node with the fewest in-flight requests, else one that can connect,
        else None (Java's leastLoadedNode, random start to spread load)."""
        best, best_load, connecting, can_connect = None, None, None, None
        ids = list(self.nodes)
        random.shuffle(ids)
        for nid in ids:
            ns = self.nodes[nid]
            load = len(ns.in_flight) + len(ns.pending)
            if ns.state == READY and load < self.max_in_flight:
                if best is None or load < best_load:
                    best, best_load = nid, load
            elif ns.state in _SETTING_UP or ns.state == REAUTHENTICATING:
                connecting = nid
            elif self.can_connect(ns, now) and can_connect is None:
                can_connect = nid
        if best is not None:
            return best
        if connecting is not None:
            return connecting
        return can_connect

    # -- connecting --------------------------------------------------------------------

    def _connect(self, ns: NodeState, now: int) -> None:
        ns.counters.connects += 1
        ns.last_attempt_ms = now
        ns.connect_started_ms = now
        if _is_address(ns.host):
            ns.addresses, ns.address_index = [ns.host], 0
            self._connect_to(ns, ns.host, now)
            return
        ns.state = CONNECTING
        ns.lookup = _Lookup(ns.host, ns.port, self.wakeup)
        self.log.debug("resolving %s for node %s", ns.host, ns.node_id)

    def _finish_lookups(self, now: int) -> None:
        for ns in self.nodes.values():
            lookup = ns.lookup
            if lookup is None or not lookup.done:
                continue
            ns.lookup = None
            if lookup.error is not None or not lookup.addresses:
                ns.state = DISCONNECTED
                self._connect_failed(ns, NetworkError(
                    f"cannot resolve {ns.host}:{ns.port}: {lookup.error or 'no address'}"), now)
            else:
                ns.addresses, ns.address_index = list(dict.fromkeys(lookup.addresses)), 0
                self._connect_to(ns, ns.addresses[0], now)

    def _try_next_address(self, ns: NodeState, why, now: int) -> bool:
        """After a failed connect (refused, unreachable, setup timeout): the broker's next
        resolved address, at once, as Java's use_all_dns_ips does; False once all were
        tried (the caller then fails the attempt and backs off)."""
        if ns.state != CONNECTING or ns.lookup is not None or ns.address_index + 1 >= len(ns.addresses):
            return False
        try:
            self.selector.close(ns.slot)
        except KafkaError:
            pass   # the selector already freed it with the disconnect event
        self.log.debug("connect to %s (%s) failed: %s; trying its next address", ns.host,
                  ns.addresses[ns.address_index], why)
        ns.address_index += 1
        ns.connect_started_ms = now
        self._connect_to(ns, ns.addresses[ns.address_index], now)
        return True

    def _connect_to(self, ns: NodeState, host: str, now: int) -> None:
        try:
            # TLS checks the certificate against the broker's name (bootstrap or metadata),
            # not against the address it resolved to.
            self.selector.connect(ns.slot, host, ns.port, self.send_buffer_bytes, self.receive_buffer_bytes,
                                  tls=self.tls, server_hostname=ns.host if self.tls is not None else None)
        except (KafkaError, OSError) as exc:
            if ns.address_index + 1 < len(ns.addresses):   # e.g. IPv6 disabled: the next one
                ns.address_index += 1
                self._connect_to(ns, ns.addresses[ns.address_index], now)
                return
            self._connect_failed(ns, NetworkError(f"connect to node {ns.node_id} ({ns.host}:{ns.port}) failed: {exc}"), now)
            return
        ns.state = CONNECTING
        self.log.debug("connecting to node %s at %s:%s", ns.node_id, ns.host, ns.port)

    def _connect_failed(self, ns: NodeState, exc: Exception, now: int) -> None:
        self.health.connect_failed(ns, exc, now)
        self.last_connect_error = exc
        self._node_lost(ns)
        ns.state = DISCONNECTED
        ns.attempts += 1
        ns.last_attempt_ms = now
        ns.reconnect_wait_ms = self.reconnect.backoff(ns.attempts - 1)

    def _on_connected(self, ns: NodeState, now: int) -> None:
        ns.state = CHECKING_API_VERSIONS
        ns.trailing_seen.clear()
        ns.last_activity_ms = now
        req = m.ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                   client_software_version=CLIENT_SOFTWARE_VERSION)
        version = v.SUPPORTED_VERSIONS[v.API_VERSIONS][1]
        self._enqueue(ns, v.API_VERSIONS, version, req,
                      lambda resp, err, ns=ns, req=req, version=version: self._on_api_versions(ns, req, version, resp, err),
                      now, internal=True)

    def _on_api_versions(self, ns, req, version, resp, err) -> None:
        now = self.time.mono_ms()
        if err is not None or ns.state != CHECKING_API_VERSIONS:
            return  # the disconnect already happened (maybe in the poll that read this response)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
            theirs = {k.api_key: k.max_version for k in resp.api_keys}.get(v.API_VERSIONS, 0)
            retry = min(theirs, version - 1)
            self._enqueue(ns, v.API_VERSIONS, retry, req,
                          lambda r, e: self._on_api_versions(ns, req, retry, r, e), now, internal=True)
            return
        if resp.error_code != 0:
            self._disconnect(ns, NetworkError(f"ApiVersions to node {ns.node_id} failed with error {resp.error_code}"), now)
            return
        try:
            ns.versions = v.pick_versions(resp.version_ranges(), required=(v.PRODUCE, v.METADATA))
        except UnsupportedVersionError as exc:
            self._disconnect(ns, exc, now)
            return
        if self.sasl is not None:
            self._start_authentication(ns, now)
            return
        self._on_ready(ns)

    def _on_ready(self, ns) -> None:
        ns.state = READY
        ns.attempts = 0
        ns.reconnect_wait_ms = 0
        if ns.auth_error is not None:
            ns.auth_error = None
            self.errors.clear(("authentication", ns.node_id))
        self.last_connect_error = None
        self.log.debug("node %s ready, versions %s", ns.node_id, ns.versions)
        self.health.connected(ns, self.time.mono_ms())

    # -- SASL (Java's SaslClientAuthenticator: handshake v1, then SaslAuthenticate rounds) --

    def _start_authentication(self, ns, now: int, state: int = AUTHENTICATING) -> None:
        ns.state = state
        mechanism = self.sasl.mechanism
        if v.SASL_HANDSHAKE not in ns.versions or v.SASL_AUTHENTICATE not in ns.versions:
            self._auth_failed(ns, AuthenticationError(
                f"node {ns.node_id} ({ns.host}:{ns.port}) does not support SaslHandshake v1 and "
                f"SaslAuthenticate (Kafka 1.0+); cannot authenticate with {mechanism}"), now)
            return
        # OAUTHBEARER whose token is on its way (kproducer.oauth): a new connection waits for
        # it, within socket.connection.setup.timeout.ms (the login wakes the poll, and
        # _sasl_timers starts again); a session to renew is dropped instead, with nothing in
        # flight, and the next connection waits.
        pending = getattr(self.sasl, "pending", None)
        ns.sasl_waiting = pending is not None and pending()
        if ns.sasl_waiting:
            if state == REAUTHENTICATING:
                self._disconnect(ns, NetworkError(
                    f"node {ns.node_id}: no {mechanism} token to re-authenticate with yet; "
                    f"reconnecting"), now)
            return
        try:
            # Before the handshake: credentials that cannot be used (an OAUTHBEARER token
            # that could not be obtained) fail here, with nothing sent.
            mech = self.sasl.new_client()
        except AuthenticationError as exc:
            self._auth_failed(ns, exc, now)
            return
        self._enqueue(ns, v.SASL_HANDSHAKE, ns.versions[v.SASL_HANDSHAKE],
                      m.SaslHandshakeRequest(mechanism=mechanism),
                      lambda resp, err: self._on_sasl_handshake(ns, mech, resp, err), now, internal=True)

    def _on_sasl_handshake(self, ns, mech, resp, err) -> None:
        now = self.time.mono_ms()
        if err is not None or ns.state not in (AUTHENTICATING, REAUTHENTICATING):
            return
        mechanism = self.sasl.mechanism
        if resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            self._auth_failed(ns, AuthenticationError(
                f"node {ns.node_id} does not enable SASL mechanism {mechanism}; it enables "
                f"{', '.join(resp.mechanisms) or 'none'}"), now)
            return
        if resp.error_code != 0:
            self._auth_failed(ns, AuthenticationError(
                f"SaslHandshake to node {ns.node_id} failed: {error_name(resp.error_code)} "
                f"({resp.error_code})"), now)
            return
        try:
            self._send_sasl_token(ns, mech, mech.first_message(), now)
        except AuthenticationError as exc:
            self._auth_failed(ns, exc, now)

    def _send_sasl_token(self, ns, mech, token: bytes, now: int) -> None:
        self._enqueue(ns, v.SASL_AUTHENTICATE, ns.versions[v.SASL_AUTHENTICATE],
                      m.SaslAuthenticateRequest(auth_bytes=token),
                      lambda resp, err: self._on_sasl_authenticate(ns, mech, resp, err), now, internal=True)

    def _on_sasl_authenticate(self, ns, mech, resp, err) -> None:
        now = self.time.mono_ms()
        if err is not None:
            return  # the connection failed (or timed out): retried like any connection
        if resp.error_code != 0:
            # The broker closes the connection after this; its message says why.
            why = self.sasl.scrub(resp.error_message or "")
            what = "re-authentication" if ns.state == REAUTHENTICATING else "authentication"
            message = (f"SASL {self.sasl.mechanism} {what} with node {ns.node_id} failed: "
                       f"{error_name(resp.error_code)} ({resp.error_code})" + (f": {why}" if why else ""))
            explain = getattr(mech, "explain_failure", None)   # OAUTHBEARER: the JSON, the token
            self._auth_failed(ns, AuthenticationError(explain(message) if explain else message), now)
            return
        if ns.state not in (AUTHENTICATING, REAUTHENTICATING):
            return
        try:
            token = mech.respond(resp.auth_bytes)
        except AuthenticationError as exc:
            self._auth_failed(ns, exc, now)
            return
        if token is not None:
            self._send_sasl_token(ns, mech, token, now)
        elif mech.complete:
            self._session_started(ns, resp, now)
        else:
            self._auth_failed(ns, AuthenticationError(
                f"SASL {self.sasl.mechanism} exchange with node {ns.node_id} ended incomplete"), now)

    def _session_started(self, ns, resp, now: int) -> None:
        """Authenticated: READY again; KIP-368's session lifetime (SaslAuthenticate v1+, 0
        for none) sets when to re-authenticate (Java: a random 85-95 % of it)."""
        lifetime = getattr(resp, "session_lifetime_ms", 0) or 0
        if lifetime > 0:
            ns.session_end_ms = now + lifetime
            ns.reauth_at_ms = now + max(1, int(lifetime * random.uniform(*_REAUTH_WINDOW)))
        else:
            ns.session_end_ms = ns.reauth_at_ms = 0
        if ns.state == REAUTHENTICATING:
            self.reauthentications += 1
        else:
            self.authentications += 1
        if ns.state == REAUTHENTICATING:
            self.log.debug("node %s re-authenticated with %s, session lifetime %d ms", ns.node_id,
                      self.sasl.mechanism, lifetime)
        else:
            self.log.debug("node %s authenticated with %s, session lifetime %d ms", ns.node_id,
                      self.sasl.mechanism, lifetime)
        self._on_ready(ns)

    def _sasl_timers(self, now: int) -> None:
        """SASL's timers, at every poll: a connection waiting for the first OAUTHBEARER token
        goes on once the login has it (or fails with the login's error); a READY connection
        whose re-authentication time came takes no new request (REAUTHENTICATING: not
        ready, the courier is not armed for it) and, once its requests in flight are
        answered, runs SaslHandshake + SaslAuthenticate again on the same connection
        (KIP-368); the answer makes it READY with a new session."""
        for ns in list(self.nodes.values()):
            if ns.state == AUTHENTICATING and ns.sasl_waiting:
                self._start_authentication(ns, now)
            elif ns.state == READY and ns.reauth_at_ms and now >= ns.reauth_at_ms:
                ns.state = REAUTHENTICATING
                self.log.debug("node %s: re-authenticating (session ends in %d ms) after %d request(s) "
                          "in flight", ns.node_id, ns.session_end_ms - now,
                          len(ns.in_flight) + len(ns.pending))
            if ns.state == REAUTHENTICATING and ns.reauth_at_ms and not ns.in_flight and not ns.pending:
                ns.reauth_at_ms = 0                     # the exchange starts
                self._start_authentication(ns, now, REAUTHENTICATING)

    def _auth_failed(self, ns, exc: AuthenticationError, now: int) -> None:
        """Closes the connection (never used after a failed exchange) and keeps the error
        for the Sender, which fails what waits for this node instead of retrying."""
        self._log_auth_failure(ns, exc)
        self.last_connect_error = exc
        self.auth_failures.append((ns.node_id, exc))
        if ns.state == REAUTHENTICATING:
            self.reauthentication_failures += 1
        else:
            self.authentication_failures += 1
        if ns.state != DISCONNECTED:
            self._disconnect(ns, exc, now)

    def _log_auth_failure(self, ns, exc: AuthenticationError) -> None:
        """An authentication failure (SASL, or the TLS handshake) of ``ns``: at ERROR, and
        to error_cb, unless the node's last failure said the same (the reconnect attempts
        of a broker that keeps refusing); those are logged at DEBUG until a connection to it
        is ready again."""
        again = ns.auth_error is not None and str(ns.auth_error) == str(exc)
        ns.auth_error = exc
        if again:
            self.log.debug("%s (again)", exc)
        else:
            self.log.error("%s", exc)
        self.errors.report(("authentication", ns.node_id), exc)

    def authentication_error(self, node_id: int) -> Optional[Exception]:
        """The node's last SASL failure, until a connection to it authenticates again."""
        ns = self.nodes.get(node_id)
        return None if ns is None else ns.auth_error

    def take_auth_failures(self) -> list:
        """``[(node_id, AuthenticationError)]`` since the last call (for the Sender)."""
        out, self.auth_failures = self.auth_failures, []
        return out

    def api_version(self, node_id: int, api_key: int) -> int:
        ns = self.nodes[node_id]
        try:
            return ns.versions[api_key]
        except KeyError:
            raise UnsupportedVersionError(f"node {node_id} supports no usable {v.api_name(api_key)} version") from None

    # -- requests ------------------------------------------------------------------

    def send(self, node_id: int, api_key: int, request, callback: Callable, now: int, *,
             expect_response: bool = True, encoder: Optional[Callable] = None,
             decoder: Optional[Callable] = None) -> None:
        """Queues a request to a READY node; ``callback(response, error)`` runs from
        ``poll()`` on completion (response None and error set on failure). With
        ``expect_response`` False (acks=0) the callback runs once the bytes are written.

        ``encoder(version, correlation_id, client_id) -> framed bytes`` and
        ``decoder(version, payload) -> response`` replace the generic schema codec for
        hot requests (Produce); ``request`` is then whatever the caller wants kept."""
        ns = self.nodes[node_id]
        if ns.state != READY:
            raise NetworkError(f"node {node_id} is not ready ({_STATE_NAMES[ns.state]})")
        self._enqueue(ns, api_key, self.api_version(node_id, api_key), request, callback, now,
                      expect_response=expect_response, encoder=encoder, decoder=decoder)

    # -- requests written by the courier (csrc/kp_courier.h) ------------------------------

    def reserve_correlation_id(self) -> int:
        """A correlation id no other request will carry."""
        return self.reserve_correlation_ids(1)

    def reserve_correlation_ids(self, count: int) -> int:
        """The first of ``count`` consecutive correlation ids no other request will carry
        (they do not wrap in between)."""
        if self._next_cid + count - 1 > 0x7FFFFFFF:
            self._next_cid = 1
        cid = self._next_cid
        self._next_cid = (cid + count) & 0x7FFFFFFF or 1
        return cid

    def reserve_courier_requests(self, api_key: int, *, reads: bool = True) -> dict:
        """{node_id: :meth:`reserve_requests`'s plan} of every node that can take requests
        from the courier now. The correlation ids reserved are the courier's until
        :meth:`release_courier_ids`."""
        first = self._next_cid
        plans = {}
        for node_id in self.nodes:
            plan = self.reserve_requests(node_id, api_key, reads=reads)
            if plan is not None:
                plans[node_id] = plan
        self._courier_ids = (first, self._next_cid)
        return plans

    def release_courier_ids(self, used: Iterable[int]) -> None:
        """The courier was taken, having written requests with the correlation ids ``used``:
        the ids reserved for it after the last it used are given back, unless others were
        reserved since (the next id would not follow them)."""
        if self._courier_ids is None:
            return
        first, end = self._courier_ids
        self._courier_ids = None
        last = max((cid for cid in used if first <= cid < end), default=None)
        if self._next_cid == end:
            self._next_cid = first if last is None else last + 1

    def reserve_requests(self, node_id: int, api_key: int, *, reads: bool = True) -> Optional[tuple]:
        """(connection id, version, first correlation id, ids reserved, max in flight, [(
        correlation id, api key, version) of each request in flight, in order]) for the
        requests that the courier may write to the node before the next poll (it reads the
        responses to those in flight and its own, and each one makes room for another), or
        None when the node cannot take one: it must be READY, and nothing may wait to be
        staged or written before them (one staged send per connection). ``reads`` False
        (acks=0: the courier reads nothing): answers to be dropped (``discard``) may come."""
        ns = self.nodes.get(node_id)
        if ns is None or ns.state != READY or ns.pending or (reads and ns.discard):
            return None
        if ns.throttle_until_ms and self.time.mono_ms() < ns.throttle_until_ms:
            return None
        version = ns.versions.get(api_key)
        if version is None:
            return None
        prior = []
        for e in ns.in_flight:      # (a loop: the courier is armed at every step)
            if not (e.sent and e.expect_response):
                return None
            prior.append((e.correlation_id, e.api_key, e.version))
        return (ns.slot, version, self.reserve_correlation_ids(COURIER_IDS), COURIER_IDS,
                self.max_in_flight, prior)

    def adopt(self, node_id: int, api_key: int, version: int, correlation_id: int, request,
              callback: Callable, send_ms: int, *, decoder: Optional[Callable] = None,
              sent: bool = False, answer=_NO_ANSWER, expect_response: bool = True,
              send_us: int = -1, answer_us: Optional[int] = None) -> None:
        """A request the courier wrote to the node's connection between two polls: tracked
        from now on as if :meth:`send` had staged it, written (or failed) as the next poll
        reports, or ``sent`` already (the courier saw it written whole: no poll reports it).
        ``answer``: its response, which the courier read and decoded: the request completes
        with it once the responses ahead of it have (:meth:`settle_answered`, and each
        poll). Without ``expect_response`` (acks=0) it completes, with no response, once
        written: here when ``sent``. (The courier writes nothing behind a request of the
        step's that is not written whole yet, so this keeps the order.) ``send_us``: when
        the courier wrote it, ``answer_us``: when it read ``answer`` (``mono_us()``'s clock):
        its round trip."""
        ns = self.nodes.get(node_id)
        if ns is None or ns.state != READY:
            # Not reachable while the Sender takes the courier's requests first in its step.
            callback(None, NetworkError(f"node {node_id} is not ready for its request"))
            return
        ns.last_activity_ms = send_ms
        ns.counters.written(api_key)
        if not expect_response and sent:
            self._written_without_response(ns, correlation_id)
            callback(None, None)
            return
        if answer is not _NO_ANSWER and answer_us is not None and send_us >= 0:
            us = answer_us - send_us
            self._round_trip(ns, us)
            ns.counters.answered(api_key, us)
            if api_key == v.PRODUCE:
                # The courier keeps only answers with no throttle (it leaves a throttled one
                # to the step's produce_answered).
                ns.counters.throttled(0)
        ns.in_flight.append(InFlightRequest(correlation_id, api_key, version, request, callback,
                                            send_ms, expect_response, sent, decoder=decoder,
                                            answer=answer, send_us=send_us))

    def _round_trip(self, ns: NodeState, us: int) -> None:
        """A request's round trip, from its write to the read of its response."""
        self.request_latency.record(us)
        ns.srtt_us = float(us) if ns.srtt_us <= 0 else ns.srtt_us + (us - ns.srtt_us) / 8

    def pace_us(self, node_id: int) -> int:
        """The least time between two Produce requests to the node while it has some in
        flight, unless they are full: its smoothed round trip over max.in.flight, so that the
        requests of a full window spread over the round trip (0: no round trip measured)."""
        ns = self.nodes.get(node_id)
        return 0 if ns is None or ns.srtt_us <= 0 else int(ns.srtt_us / self.max_in_flight)

    def last_produce_us(self, node_id: int, now_us: int) -> int:
        """When the node's last Produce request in flight went out (mono µs; ``now_us`` for
        one not written yet), -1 when it has none in flight."""
        ns = self.nodes.get(node_id)
        last = -1
        if ns is not None:
            for e in ns.in_flight:
                if e.api_key == v.PRODUCE and e.expect_response:
                    last = max(last, e.send_us if e.sent and e.send_us >= 0 else now_us)
            if any(e.api_key == v.PRODUCE for e, _ in ns.pending):
                last = now_us
        return last

    def paced_until_us(self, node_id: int, now_us: int) -> int:
        """Pacing: until when (mono µs) a Produce request to the node that is not full waits,
        0 when it need not wait. While the node has Produce requests in flight, one goes
        when its batches are full or :meth:`pace_us` after the last; with none in flight, at
        once (no wait at low rates). Java and librdkafka send each request as soon as the
        window has room, so over a long round trip a full window's answers come back
        together and the requests they make room for leave together, each with the few
        records that arrived since the one before."""
        pace = self.pace_us(node_id)
        if pace <= 0:
            return 0
        last = self.last_produce_us(node_id, now_us)
        if last < 0 or last + pace <= now_us:
            return 0
        return last + pace

    @staticmethod
    def _written_without_response(ns: NodeState, correlation_id: int) -> None:
        """An acks=0 request written whole: an answer with its id is dropped."""
        ns.discard.add(correlation_id)
        if len(ns.discard) > 100_000:  # a broker that never answers acks=0
            ns.discard.clear()

    def settle_answered(self) -> None:
        """Completes the requests at the head of each node's queue whose responses the
        courier read (adopt's ``answer``), in order; their callbacks run here."""
        completions = []
        for ns in self.nodes.values():
            self._pop_answered(ns, completions)
        for callback, resp, err in completions:
            callback(resp, err)

    def _pop_answered(self, ns, completions: list) -> None:
        in_flight = ns.in_flight
        while in_flight and in_flight[0].answer is not _NO_ANSWER:
            entry = in_flight.popleft()
            completions.append((entry.callback, entry.answer, None))

    def _enqueue(self, ns, api_key, version, request, callback, now, *, expect_response=True, internal=False,
                 encoder=None, decoder=None):
        cid = self.reserve_correlation_id()
        if encoder is not None:
            payload = encoder(version, cid, self.client_id)
        else:
            payload = codec.frame(m.encode_request(request, version, cid, self.client_id))
        entry = InFlightRequest(cid, api_key, version, request, callback, now, expect_response,
                                decoder=decoder)
        ns.pending.append((entry, payload))
        self._stage(ns)

    def _stage(self, ns: NodeState) -> None:
        # One staged send per connection: the next waits for the previous to complete.
        if ns.pending and not any(not e.sent for e in ns.in_flight):
            entry, payload = ns.pending.popleft()
            try:
                self.selector.send(ns.slot, payload)
            except KafkaError as exc:
                ns.pending.appendleft((entry, payload))
                self._disconnect(ns, NetworkError(f"send to node {ns.node_id} failed: {exc}"), self.time.mono_ms())
                return
            ns.in_flight.append(entry)

    def wakeup(self) -> None:
        """Interrupts a poll waiting in another thread."""
        self.selector.wakeup()

    # -- polling -----------------------------------------------------------------------

    def poll_timeout(self, now: int) -> int:
        """Milliseconds until a request or connection-setup timeout is due."""
        return self._next_timeout(now)

    def poll(self, timeout_ms: int, now: int) -> int:
        """Does all I/O: connects, writes, reads, completes requests and runs their
        callbacks, enforces request and connection-setup timeouts. Returns how many
        events it handled (connects, sends, receives, disconnects, completions, a wakeup)."""
        timeout_ms = max(0, min(timeout_ms, self._next_timeout(now)))
        result = self.selector.poll(timeout_ms)
        now = self.time.mono_ms()
        self._finish_lookups(now)
        by_slot = {ns.slot: ns for ns in self.nodes.values()}
        completions = []
        for slot in result.connected:
            ns = by_slot.get(slot)
            if ns is not None:
                self._on_connected(ns, now)
        for slot, written_us in zip(result.sent, result.sent_us):
            ns = by_slot.get(slot)
            if ns is None:
                continue
            for entry in ns.in_flight:
                if not entry.sent:
                    entry.sent = True
                    entry.send_us = written_us      # its round trip starts here
                    ns.last_activity_ms = now
                    ns.counters.written(entry.api_key)
                    if not entry.expect_response:
                        ns.in_flight.remove(entry)
                        self._written_without_response(ns, entry.correlation_id)
                        completions.append((entry.callback, None, None))
                    break
            self._stage(ns)
        for (slot, payload), read_us in zip(result.received, result.received_us):
            ns = by_slot.get(slot)
            if ns is None:
                continue
            ns.last_activity_ms = now
            self._on_response(ns, payload, now, completions, read_us)
        for slot, kind, reason in result.disconnected:
            ns = by_slot.get(slot)
            if ns is None:
                continue
            setup_error = _SETUP_ERRORS.get(kind) if ns.state not in (READY, REAUTHENTICATING) else None
            if setup_error is None and self._try_next_address(ns, reason, now):
                continue
            if setup_error is not None:
                exc = setup_error(f"TLS connection to node {ns.node_id} ({ns.host}:{ns.port}) failed: {reason}")
                self._log_auth_failure(ns, exc)
                self.auth_failures.append((ns.node_id, exc))
            else:
                exc = NetworkError(f"connection to node {ns.node_id} ({ns.host}:{ns.port}) lost: {reason}")
            completions.extend(self._disconnect(ns, exc, now, closed_by_peer=True, run=False))
        if self.sasl is not None:
            self._sasl_timers(now)
        completions.extend(self._handle_timeouts(now))
        for callback, resp, err in completions:
            callback(resp, err)
        # A wakeup counts: whoever woke the selector changed something the caller must look
        # at again (a flush, a new request, a closing producer).
        return (len(result.connected) + len(result.sent) + len(result.received)
                + len(result.disconnected) + len(completions) + bool(result.woken))

    def _on_response(self, ns: NodeState, payload, now: int, completions: list, read_us: int) -> None:
        try:
            cid = m.peek_correlation_id(payload)
        except ProtocolError as exc:
            ns.counters.rxerrs += 1
            completions.extend(self._disconnect(ns, exc, now, run=False))
            return
        if cid in ns.discard:
            ns.discard.discard(cid)
            return
        if not ns.in_flight or ns.in_flight[0].correlation_id != cid:
            expected = ns.in_flight[0].correlation_id if ns.in_flight else None
            err = ProtocolError(f"node {ns.node_id} answered correlation id {cid}, expected {expected}")
            ns.counters.rxcorriderrs += 1
            completions.extend(self._disconnect(ns, err, now, run=False))
            return
        entry = ns.in_flight.popleft()
        us = None
        if entry.send_us >= 0:
            us = read_us - entry.send_us
            self._round_trip(ns, us)
        ns.counters.answered(entry.api_key, us)
        try:
            if entry.decoder is not None:
                resp = entry.decoder(entry.version, payload)
            else:
                resp = self._decode(ns, entry, payload)
        except ProtocolError as exc:
            ns.counters.rxerrs += 1
            completions.append((entry.callback, None, exc))
            completions.extend(self._disconnect(ns, exc, now, run=False))
            return
        completions.append((entry.callback, resp, None))
        self._pop_answered(ns, completions)     # the courier's, answered behind it
        self._stage(ns)

    def produce_answered(self, node_id: int, throttle_ms: int, trailing: int) -> None:
        """What a Produce answer of ``node_id`` says of the connection (the Sender decodes it
        in C): its ThrottleTimeMs, and how many bytes followed its last field.

        KIP-219: from Produce v6 a broker over a quota answers at once with the time the
        client must wait, and expects no request on that connection before then; Java mutes
        the channel (ClusterConnectionStates.throttle). Requests in flight are answered as
        usual; what the courier or a step would write waits. Before v6 the broker delayed
        its answer instead, and the client has nothing to wait."""
        ns = self.nodes.get(node_id)
        if ns is None:
            return
        ns.counters.throttled(throttle_ms)
        if trailing and v.PRODUCE not in ns.trailing_seen:
            ns.trailing_seen.add(v.PRODUCE)
            self.log.debug("node %s: %d byte(s) after the last field of ProduceResponse ignored",
                      node_id, trailing)
        if throttle_ms <= 0 or ns.versions.get(v.PRODUCE, 0) < _PRODUCE_CLIENT_THROTTLES:
            return
        now = self.time.mono_ms()
        ns.throttle_until_ms = max(ns.throttle_until_ms, now + throttle_ms)
        self.throttled_responses += 1
        self.throttle_time_ms_total += throttle_ms
        self.throttle_time_ms_max = max(self.throttle_time_ms_max, throttle_ms)
        self.log.debug("node %s: throttled for %d ms (a quota)", node_id, throttle_ms)

    def _decode(self, ns: NodeState, entry, payload):
        """A response's fields; bytes after the last field its version defines are ignored,
        as Java and librdkafka ignore them (librdkafka's mock broker adds one to Metadata v9+),
        and logged at debug level once per connection and API."""
        resp, trailing = m.decode_response_lenient(entry.api_key, entry.version, payload)
        if trailing and entry.api_key not in ns.trailing_seen:
            ns.trailing_seen.add(entry.api_key)
            self.log.debug("node %s: %d byte(s) after the last field of %s v%d ignored",
                      ns.node_id, trailing, type(resp).__name__, entry.version)
        return resp

    def _next_timeout(self, now: int) -> int:
        t = 1 << 30
        for ns in self.nodes.values():
            if ns.throttle_until_ms > now:          # the step that sends when it ends
                t = min(t, ns.throttle_until_ms - now)
            if ns.in_flight:
                t = min(t, ns.in_flight[0].send_ms + self.request_timeout_ms - now)
            if ns.state in _SETTING_UP:
                t = min(t, ns.connect_started_ms + self.connection_setup_timeout_ms - now)
            elif ns.reauth_at_ms and ns.state == READY:     # KIP-368 (_sasl_timers)
                t = min(t, ns.reauth_at_ms - now)
        return max(t, 0)

    def _handle_timeouts(self, now: int) -> list:
        out = []
        for ns in list(self.nodes.values()):
            if ns.state in _SETTING_UP and \
                    now - ns.connect_started_ms >= self.connection_setup_timeout_ms:
                if self._try_next_address(ns, "no connection within socket.connection.setup.timeout.ms", now):
                    continue
                what = (f"the host name {ns.host} not resolved" if ns.lookup is not None else
                        f"no {self.sasl.mechanism} token yet from "
                        f"{getattr(self.sasl, 'description', 'its source')} for node "
                        f"{ns.node_id}" if ns.state == AUTHENTICATING and ns.sasl_waiting else
                        f"connection to node {ns.node_id} ({ns.host}:{ns.port}) not established")
                out.extend(self._disconnect(ns, KafkaTimeoutError(
                    f"{what} within socket.connection.setup.timeout.ms={self.connection_setup_timeout_ms}"),
                    now, run=False))
            elif ns.in_flight and now - ns.in_flight[0].send_ms >= self.request_timeout_ms:
                ns.counters.req_timeouts += 1
                out.extend(self._disconnect(ns, KafkaTimeoutError(
                    f"request to node {ns.node_id} timed out after request.timeout.ms={self.request_timeout_ms}"),
                    now, run=False))
            elif ns.state == READY and not ns.in_flight and not ns.pending and \
                    now - ns.last_activity_ms >= self.connections_max_idle_ms:
                self._disconnect(ns, None, now)
        return out

    def _disconnect(self, ns: NodeState, exc, now: int, *, closed_by_peer: bool = False, run: bool = True,
                    lost: bool = True) -> list:
        """Closes the node's connection and fails its requests with ``exc``; ``lost`` False:
        the client closes it on purpose (the node moved or left the metadata), which tells
        the node_lost_listeners nothing."""
        if ns.state != DISCONNECTED or not closed_by_peer:
            try:
                self.selector.close(ns.slot)
            except KafkaError:
                pass
        was = ns.state
        ns.state = DISCONNECTED
        ns.lookup = None
        ns.last_attempt_ms = now
        if was in _SETTING_UP and exc is not None:
            self.last_connect_error = exc
        if was in _SETTING_UP or exc is not None:
            ns.attempts += 1
            ns.reconnect_wait_ms = self.reconnect.backoff(ns.attempts - 1)
        failed = [(e.callback, None, exc or NetworkError(f"connection to node {ns.node_id} closed"))
                  for e in ns.in_flight if not (e.sent and not e.expect_response)]
        failed += [(e.callback, None, exc or NetworkError(f"connection to node {ns.node_id} closed"))
                   for e, _ in ns.pending]
        if was != DISCONNECTED:
            ns.counters.disconnects += 1
        if exc is not None:
            ns.counters.txerrs += len(failed)
        ns.in_flight.clear()
        ns.pending.clear()
        ns.discard.clear()
        if exc is not None:
            if not lost:        # closed on purpose: the node moved or left the cluster
                self.log.debug("disconnected from node %s: %s", ns.node_id, exc)
            elif was in _SETTING_UP:
                # Logged with suppression (kproducer.broker_health); an authentication
                # failure was logged by _log_auth_failure.
                self.health.connect_failed(ns, exc, now, logged=exc is ns.auth_error)
            else:
                self.log.info("disconnected from node %s: %s", ns.node_id, exc)
                self.health.connection_lost(ns, exc)
            if lost:
                self._node_lost(ns)
        if run:
            for callback, resp, err in failed:
                callback(resp, err)
            return []
        return failed

    def _node_lost(self, ns: NodeState) -> None:
        for listener in self.node_lost_listeners:
            listener(ns.node_id)

    def disconnect(self, node_id: int, exc=None) -> None:
        ns = self.nodes.get(node_id)
        if ns is not None:
            self._disconnect(ns, exc, self.time.mono_ms())

    def close(self) -> None:
        for ns in list(self.nodes.values()):
            self._disconnect(ns, None, self.time.mono_ms())
        self.selector.close_all()
        close = getattr(self.sasl, "close", None)      # OAUTHBEARER: the token login's thread
        if close is not None:
            close()
