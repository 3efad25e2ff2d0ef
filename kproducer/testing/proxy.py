"""A fault-injecting TCP proxy for Kafka tests, loopback only.

::

    target = free_port()
    with FaultProxy("127.0.0.1", target) as proxy:
        with TansuBroker(port=target, advertised_port=proxy.port):
            proxy.cut_every_n_responses(3)        # RST after every 3rd response
            ... clients connect to proxy.bootstrap ...
            proxy.wait_for(lambda s: s["cuts"] >= 1, timeout=10)

The proxy listens on 127.0.0.1 and forwards every accepted connection to one
target, which must be a loopback address (anything else is a ``ValueError``:
a test helper that can be pointed at a real cluster is a footgun). Both
directions are parsed as Kafka frames (4-byte big-endian size, then that many
bytes), so faults are counted in requests (client -> broker) and responses
(broker -> client), not in bytes. A frame is forwarded only once it has been
received whole.

One background thread runs a ``selectors`` loop over non-blocking sockets;
delays and byte-by-byte pauses are timers in that loop, never sleeps, so
:meth:`FaultProxy.stop` takes effect at once: it closes every socket (with
RST) and joins the thread within a deadline. Any ``OSError`` on one
connection (reset, broken pipe, refused connect) closes that connection pair
and nothing else; the loop itself never dies of a peer's behaviour.

Fault controls may be changed at any time from any thread; each takes effect
for frames *completed* after the call returns. Counters kept per connection
(for :meth:`~FaultProxy.cut_every_n_responses` and
:meth:`~FaultProxy.drop_response_every`) restart from zero whenever that
control is set again.

Connection lifetime: when one side closes cleanly (EOF), the frames already
received from it are delivered to the other side (after any delay), then both
sides are closed. A reset or any other socket error on one side resets the
other side at once. A frame cut short by EOF is forwarded as the partial bytes
it was, uncounted.

A size prefix that is negative or larger than ``max_frame_size`` cannot be a
Kafka frame; from then on that direction of that connection is forwarded as
raw bytes, uncounted (``stats()["framing_errors"]``), so the peer sees exactly
what was sent.

Random faults (:meth:`FaultProxy.chaos`): at random intervals drawn from a
seeded RNG, the loop cuts one connection at once (RST both ways, whatever is
in flight), stalls reads (from clients, from the broker or both) for a random
while, or drops the next response from the broker. The sequence of choices is
a function of the seed; when they land depends on the traffic and the timing.
:meth:`FaultProxy.corrupt_response_every` replaces responses with garbage,
truncated, mislabelled or oversized frames (a hostile or broken broker).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import fcntl
import ipaddress
import math
import random
import selectors
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable

__all__ = ["FaultProxy"]

_LINGER_RST = struct.pack("ii", 1, 0)    # SO_LINGER on, 0 s: close() sends RST (socket(7))
_RECV_CHUNK = 256 * 1024
_HIGH_WATER = 4 * 1024 * 1024            # stop reading a side while this much waits to be sent
_CONNECT_TIMEOUT = 5.0
_CUT_DRAIN_TIMEOUT = 2.0                 # longest wait for a cut's last response to leave
_CUT_POLL = 0.001
_TIOCOUTQ = getattr(termios, "TIOCOUTQ", None)   # == SIOCOUTQ on Linux
_MAX_SELECT_TIMEOUT = 0.5

_STAT_KEYS = (
    "connections_accepted",   # connections proxied (refused ones not included)
    "connections_refused",    # accepted and closed at once because of refuse_new()
    "connections_active",     # connection pairs open now
    "connect_failures",       # the target refused or did not answer the proxy's connect
    "requests_received",      # complete request frames read from clients
    "requests_forwarded",     # request frames fully written to the target
    "responses_received",     # complete response frames read from the target (dropped too)
    "responses_forwarded",    # response frames fully written to a client
    "responses_dropped",      # response frames swallowed by drop_response_every()
    "cuts",                   # connections closed by cut_every_n_responses() or cut_all()
    "resets",                 # connections closed because a peer reset or errored
    "bytes_to_target",        # bytes written to the target (all of them, framed or not)
    "bytes_to_client",        # bytes written to clients
    "single_byte_sends",      # send() calls that carried one byte (byte_by_byte mode)
    "framing_errors",         # directions switched to raw forwarding (bad size prefix)
    "chaos_events",           # random faults chosen by chaos() (each also counted below)
    "chaos_cuts",             # connections cut by chaos() (also in "cuts")
    "chaos_stalls",           # stalls started by chaos()
    "chaos_drops",            # responses dropped by chaos() (also in "responses_dropped")
    "responses_corrupted",    # responses replaced by corrupt_response_every()
    "api_cuts",               # connections reset by cut_on_api()
    "api_answers",            # responses whose error code answer_error() replaced
    "api_throttles",          # responses whose ThrottleTimeMs throttle_answers() set
)

# corrupt_response_every() kinds: what replaces the chosen response.
_CORRUPTIONS = ("garbage", "truncated", "wrong-id", "oversize")
_CUT_AFTER = "cut"       # a queue entry's "counted" value: reset the connection once it is sent


def _resolve_loopback(host: str, port: int) -> tuple[int, tuple]:
    """``(family, sockaddr)`` for ``host:port``; ValueError unless every address is loopback."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"target port must be an int in 1..65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                                   socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise ValueError(f"cannot resolve proxy target {host!r}: {exc}") from None
    if not infos:
        raise ValueError(f"proxy target {host!r} resolves to nothing")
    for family, _type, _proto, _canon, sockaddr in infos:
        # Strip an IPv6 zone ("fe80::1%eth0") before parsing.
        addr = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if not addr.is_loopback:
            raise ValueError(f"FaultProxy only targets loopback addresses; {host!r} resolves "
                             f"to {addr}")
    family, _type, _proto, _canon, sockaddr = infos[0]
    return family, sockaddr


def _check_every(name: str, n: int | None) -> int | None:
    if n is None:
        return None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{name}: expected None or an int >= 1, got {n!r}")
    return n


def _check_seconds(name: str, s: float) -> float:
    s = float(s)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"{name}: expected a finite number of seconds >= 0, got {s!r}")
    return s


@dataclasses.dataclass(frozen=True)
class _Chaos:
    seed: int
    interval: tuple[float, float]
    weights: tuple[float, float, float]       # cut, stall, drop
    stall_seconds: tuple[float, float]


def _check_range(name: str, r) -> tuple[float, float]:
    try:
        lo, hi = (_check_seconds(name, x) for x in r)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected (min, max) seconds with 0 <= min <= max, got {r!r}") from exc
    if lo > hi:
        raise ValueError(f"{name}: expected (min, max) seconds with 0 <= min <= max, got {r!r}")
    return lo, hi


class _ChaosState:
    """The loop thread's side of chaos(): RNG, next event time, stalls and drops due."""

    __slots__ = ("spec", "gen", "rng", "next_at", "stall_client_until", "stall_target_until",
                 "drops_due")

    def __init__(self, spec: _Chaos | None = None, gen: int = 0, now: float = 0.0):
        self.spec = spec
        self.gen = gen
        self.rng = random.Random(spec.seed) if spec is not None else None
        self.next_at = now + self.rng.uniform(*spec.interval) if spec is not None else math.inf
        self.stall_client_until = 0.0
        self.stall_target_until = 0.0
        self.drops_due = 0


@dataclasses.dataclass(frozen=True)
class _Settings:
    cut_every: int | None = None
    cut_gen: int = 0
    drop_every: int | None = None
    drop_gen: int = 0
    response_delay: float = 0.0
    request_delay: float = 0.0
    bbb_responses: bool = False
    bbb_requests: bool = False
    bbb_pause: float = 0.0005
    stall_client: bool = False
    stall_target: bool = False
    refuse_new: bool = False
    chaos: _Chaos | None = None
    chaos_gen: int = 0
    corrupt_every: int | None = None
    corrupt_kinds: tuple[str, ...] = _CORRUPTIONS
    corrupt_seed: int = 0
    corrupt_gen: int = 0


class _Flow:
    """One direction of a connection pair: reads ``src``, parses frames, writes ``dst``."""

    __slots__ = ("is_response", "inbuf", "raw", "queue", "queued_bytes", "cur", "cur_off",
                 "cur_counted", "blocked", "next_write_at", "last_due", "eof")

    def __init__(self, is_response: bool):
        self.is_response = is_response
        self.inbuf = bytearray()
        self.raw = False              # framing lost: forward bytes as they come
        # (due, data, counted): counted frames show in requests/responses_forwarded;
        # counted == _CUT_AFTER marks where the connection is reset (a corrupted response)
        self.queue: collections.deque[tuple[float, bytes, bool]] = collections.deque()
        self.queued_bytes = 0
        self.cur: memoryview | None = None
        self.cur_off = 0
        self.cur_counted = False
        self.blocked = False          # last send() hit EAGAIN: wait for EVENT_WRITE
        self.next_write_at = 0.0      # byte_by_byte pause
        self.last_due = 0.0           # keeps frames in order when the delay shrinks
        self.eof = False

    def pending(self) -> bool:
        return self.cur is not None or bool(self.queue)


class _Conn:
    __slots__ = ("client", "target", "connected", "connect_deadline", "req", "resp", "cut_gen",
                 "drop_gen", "responses_seen", "responses_sent", "masks", "closed", "cut_deadline",
                 "corrupt_gen", "responses_for_corrupt", "api_of", "cut_cids", "rewrite_cids")

    def __init__(self, client: socket.socket, target: socket.socket, settings: _Settings):
        self.client = client
        self.target = target
        self.connected = False
        self.connect_deadline = time.monotonic() + _CONNECT_TIMEOUT
        self.req = _Flow(is_response=False)
        self.resp = _Flow(is_response=True)
        self.cut_gen = settings.cut_gen
        self.drop_gen = settings.drop_gen
        self.responses_seen = 0       # since drop_response_every() was last set
        self.responses_sent = 0       # since cut_every_n_responses() was last set
        self.masks: dict[socket.socket, int] = {client: 0, target: 0}
        self.closed = False
        self.cut_deadline: float | None = None   # set while a cut waits for its last response
        self.corrupt_gen = settings.corrupt_gen
        self.responses_for_corrupt = 0  # since corrupt_response_every() was last set
        self.api_of: dict[int, int] = {}   # correlation id -> api key of requests in flight
        self.cut_cids: set[int] = set()    # responses to cut instead of forwarding (cut_on_api)
        # cid -> (api, version, error code or None, throttle ms or None): answers to rewrite
        self.rewrite_cids: dict[int, tuple] = {}


class FaultProxy:
    """A loopback TCP proxy in front of one Kafka broker that injects faults.

    ``target_host``/``target_port`` is the broker (a loopback address; a name
    such as ``"localhost"`` must resolve only to loopback addresses, otherwise
    ``ValueError``). The proxy listens on ``127.0.0.1:listen_port`` (0: any
    free port, see :attr:`port` after :meth:`start`). ``max_frame_size``
    bounds what is accepted as a Kafka size prefix (see the module docstring).

    Use as a context manager or call :meth:`start` and :meth:`stop`. A proxy
    runs once: it cannot be started again after :meth:`stop`.
    """

    host = "127.0.0.1"

    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0,
                 max_frame_size: int = 256 * 1024 * 1024):
        if not isinstance(listen_port, int) or not 0 <= listen_port < 65536:
            raise ValueError(f"listen_port must be an int in 0..65535, got {listen_port!r}")
        self._family, self._target_addr = _resolve_loopback(target_host, target_port)
        self.target_host = target_host
        self.target_port = target_port
        self._listen_port = listen_port
        self.max_frame_size = int(max_frame_size)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._settings = _Settings()
        self._chaos = _ChaosState()                        # loop thread only
        self._corrupt_rng: tuple[int, random.Random] | None = None   # (gen, rng), loop thread
        self._log: list | None = None                       # record_requests(); under _lock
        self._keep_frames: frozenset = frozenset()
        self._api_cut: list | None = None                   # [api_key, on, times]; under _lock
        self._api_answer: list | None = None                # [api_key, error, times]; under _lock
        self._api_throttle: list | None = None              # [api_key, ms, times]; under _lock
        self._stats: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
        self._pending_stats: dict[str, int] = {}          # loop thread only
        self._commands: list[tuple[str, threading.Event, list]] = []
        self._conns: list[_Conn] = []                      # loop thread only
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._started = False
        self.port: int | None = None
        #: The exception that killed the loop thread, if any (a bug in the proxy,
        #: never a peer's doing); :meth:`stop` re-raises it.
        self.error: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for clients (after :meth:`start`)."""
        if self.port is None:
            raise RuntimeError("FaultProxy not started")
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> FaultProxy:
        """Bind the listening socket and start the loop thread; returns ``self``."""
        if self._started:
            raise RuntimeError("FaultProxy can only be started once")
        self._started = True
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self._listen_port))
            listener.listen(128)
            listener.setblocking(False)
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            self._sel = selectors.DefaultSelector()
            self._sel.register(listener, selectors.EVENT_READ, ("listen", None))
            self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        except BaseException:
            listener.close()
            self._close_loop_resources()
            raise
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._run, name=f"FaultProxy:{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection (RST) and the listener, and join the thread.

        Raises ``RuntimeError`` if the thread does not finish within
        ``timeout`` seconds or if it died of an internal error (:attr:`error`).
        Idempotent.
        """
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._wake()
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"FaultProxy thread did not stop within {timeout}s")
        self._thread = None
        if self.error is not None:
            raise RuntimeError(f"FaultProxy loop failed: {self.error!r}") from self.error

    # -- fault controls -----------------------------------------------------------
    def _set(self, **changes) -> None:
        with self._lock:
            self._settings = dataclasses.replace(self._settings, **changes)
        self._wake()

    def cut_every_n_responses(self, n: int | None) -> None:
        """Cut a connection right after its ``n``-th response has been forwarded.

        Counted per connection, from the connection's start or from this call,
        whichever is later. Nothing more is read or forwarded on that
        connection; once the response has left the proxy's socket buffer
        (``SIOCOUTQ`` is 0, see tcp(7); at most 2 s for a client that does not
        read), both sides are closed with RST. So the client reads that response
        whole and its next request fails with a reset or EOF. ``None`` disables.
        """
        n = _check_every("cut_every_n_responses", n)
        with self._lock:
            s = self._settings
            self._settings = dataclasses.replace(s, cut_every=n, cut_gen=s.cut_gen + 1)
        self._wake()

    def drop_response_every(self, n: int | None) -> None:
        """Swallow every ``n``-th response from the broker (per connection).

        The connection stays open, so the client waits until its own request
        timeout. Counted per connection like :meth:`cut_every_n_responses`
        (all responses received from the broker count). ``None`` disables.
        """
        n = _check_every("drop_response_every", n)
        with self._lock:
            s = self._settings
            self._settings = dataclasses.replace(s, drop_every=n, drop_gen=s.drop_gen + 1)
        self._wake()

    def record_requests(self, enabled: bool = True, *, keep_frames=()) -> None:
        """Log every request and response frame that passes from now on, in order:
        ``(direction, connection, api_key, correlation_id, frame)`` with direction
        ``"request"`` or ``"response"`` (a response carries its request's api key) and the
        whole frame kept only for the api keys in ``keep_frames``. :meth:`requests_log`
        returns it (``times=True``: each entry ends with the ``time.monotonic()`` at which
        the proxy had the whole frame). Lets a test check what went over the wire, and in
        which order (and when), without trusting the client's own account."""
        with self._lock:
            self._log = [] if enabled else None
            self._keep_frames = frozenset(keep_frames)

    def requests_log(self, *, times: bool = False) -> list:
        with self._lock:
            log = list(self._log or ())
        return log if times else [entry[:5] for entry in log]

    def cut_on_api(self, api_key: int | None, *, on: str = "response", times: int = 1) -> None:
        """Reset the connection of the next ``times`` requests with ``api_key``: at its
        response (``on="response"``: the broker acted on it, the client never hears) or
        before the request is forwarded (``on="request"``: the broker never sees it).
        ``stats()["api_cuts"]`` counts them. ``None`` disables."""
        if on not in ("response", "request"):
            raise ValueError(f"on must be 'response' or 'request', got {on!r}")
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times!r}")
        with self._lock:
            self._api_cut = None if api_key is None else [int(api_key), on, int(times)]

    def retarget(self, target_host: str, target_port: int) -> None:
        """New connections go to ``target_host:target_port`` (a loopback address, as for the
        constructor); open ones stay where they are (:meth:`cut_all` ends them): a broker
        replaced behind a stable address, as a load balancer or DNS name does."""
        family, addr = _resolve_loopback(target_host, target_port)
        with self._lock:
            self._family, self._target_addr = family, addr
            self.target_host, self.target_port = target_host, target_port

    def answer_error(self, api_key: int | None, error_code: int = 0, *, times: int = 1) -> None:
        """The next ``times`` responses to requests with ``api_key`` reach the client with
        their ErrorCode replaced by ``error_code`` (the broker did act on the request). For
        responses whose body starts with ThrottleTimeMs then ErrorCode (EndTxn,
        AddOffsetsToTxn, InitProducerId): a broker's answer the test broker never gives, such
        as PRODUCER_FENCED to an EndTxn. FindCoordinator's answer is decoded and encoded
        again: its top-level ErrorCode (v0-3) or every entry of its ``Coordinators`` array
        (v4+, KIP-699) gets the error, with node -1, host "" and port -1 as Kafka answers
        COORDINATOR_NOT_AVAILABLE. ``None`` disables."""
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times!r}")
        with self._lock:
            self._api_answer = None if api_key is None else [int(api_key), int(error_code), int(times)]

    def throttle_answers(self, api_key: int | None, throttle_ms: int, *, times: int = 1) -> None:
        """The next ``times`` answers to ``api_key`` requests (Produce) reach the client with
        ThrottleTimeMs set to ``throttle_ms``, as a broker over a client quota answers
        (KIP-219: at once, the client waiting out the throttle before its next request on
        that connection). ``None`` disables."""
        if times < 1 or throttle_ms < 0:
            raise ValueError(f"times must be at least 1 and throttle_ms not negative, got "
                             f"{times!r}, {throttle_ms!r}")
        with self._lock:
            self._api_throttle = None if api_key is None else [int(api_key), int(throttle_ms), int(times)]

    def _take_api(self, setting: str, api_key: int) -> int | None:
        """One use of ``answer_error``'s or ``throttle_answers``' setting (its attribute
        ``setting``, [api key, value, times left]) for a request of ``api_key``: the value,
        or None when it does not apply."""
        with self._lock:
            a = getattr(self, setting)
            if a is None or a[0] != api_key or a[2] <= 0:
                return None
            a[2] -= 1
            return a[1]

    def _take_api_cut(self, api_key: int, on: str) -> bool:
        with self._lock:
            cut = self._api_cut
            if cut is None or cut[0] != api_key or cut[1] != on or cut[2] <= 0:
                return False
            cut[2] -= 1
            return True

    def _log_frame(self, conn: _Conn, direction: str, api_key: int, cid: int, frame: bytes) -> None:
        with self._lock:
            if self._log is not None:
                self._log.append((direction, id(conn), api_key, cid,
                                  frame if api_key in self._keep_frames else None, time.monotonic()))

    def delay(self, seconds: float, *, requests: float = 0.0) -> None:
        """Hold each response ``seconds`` (and each request ``requests`` seconds).

        The delay runs from the moment the whole frame has been received; frames
        stay in order (a frame never overtakes an earlier one when the delay is
        lowered). ``delay(0)`` turns both off; frames already held keep their time.
        """
        self._set(response_delay=_check_seconds("delay", seconds),
                  request_delay=_check_seconds("delay(requests=)", requests))

    def byte_by_byte(self, enabled: bool = True, *, requests: bool = False,
                     pause: float = 0.0005) -> None:
        """Deliver responses (and, with ``requests=True``, requests) one byte per ``send()``.

        The sockets have ``TCP_NODELAY`` and the proxy waits ``pause`` seconds
        between bytes, so the bytes arrive in separate segments and the reader
        sees them one at a time. Counted in ``stats()["single_byte_sends"]``.
        """
        self._set(bbb_responses=bool(enabled), bbb_requests=bool(enabled and requests),
                  bbb_pause=_check_seconds("byte_by_byte(pause=)", pause))

    def stall(self, enabled: bool = True, *, client: bool = True, broker: bool = True) -> None:
        """Stop reading from clients and/or the broker (a stuck, half-open peer).

        With ``enabled`` the proxy stops reading from the chosen sides of every
        connection (new ones included); kernel buffers fill up and the writer
        eventually blocks. Frames already received are still delivered.
        ``stall(False)`` resumes reading on both sides.
        """
        enabled = bool(enabled)
        self._set(stall_client=enabled and client, stall_target=enabled and broker)

    def refuse_new(self, enabled: bool = True) -> None:
        """Accept new connections and close them at once (the client sees EOF or a reset).

        Connections already open are not affected.
        """
        self._set(refuse_new=bool(enabled))

    def chaos(self, seed: int | None, *, interval: tuple[float, float] = (0.05, 0.5),
              cut: float = 1.0, stall: float = 1.0, drop: float = 1.0,
              stall_seconds: tuple[float, float] = (0.05, 1.0)) -> None:
        """Inject random faults at random intervals; ``chaos(None)`` stops.

        Every ``uniform(*interval)`` seconds the loop picks one fault, weighted by
        ``cut``, ``stall`` and ``drop``, with ``random.Random(seed)``:

        - cut: one open connection, chosen at random, is closed at once with RST
          on both sides, whatever is in flight (``chaos_cuts``, also ``cuts``);
        - stall: reading from the clients, from the broker or from both (chosen
          at random) stops for ``uniform(*stall_seconds)`` seconds on every
          connection, new ones included (``chaos_stalls``);
        - drop: the next response from the broker, on whichever connection it
          comes, is swallowed (``chaos_drops``, also ``responses_dropped``); drops
          chosen before that response arrives count as one.

        ``chaos_events`` counts the faults chosen. Calling again restarts the
        schedule from the new seed (stalls and drops still due are forgotten).
        """
        if seed is None:
            self._set(chaos=None)
            return
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"chaos: seed must be an int or None, got {seed!r}")
        weights = tuple(float(w) for w in (cut, stall, drop))
        if not all(math.isfinite(w) and w >= 0 for w in weights) or not sum(weights) > 0:
            raise ValueError(f"chaos: cut/stall/drop weights must be finite, >= 0 and not all 0, "
                             f"got {weights!r}")
        iv = _check_range("chaos(interval=)", interval)
        if iv[1] <= 0:
            raise ValueError(f"chaos(interval=): the longest interval must be > 0, got {interval!r}")
        spec = _Chaos(seed, iv, weights, _check_range("chaos(stall_seconds=)", stall_seconds))
        with self._lock:
            s = self._settings
            self._settings = dataclasses.replace(s, chaos=spec, chaos_gen=s.chaos_gen + 1)
        self._wake()

    def corrupt_response_every(self, n: int | None, *, kinds=_CORRUPTIONS, seed: int = 0) -> None:
        """Replace every ``n``-th response from the broker (per connection) with a bad one.

        The kind is drawn from ``kinds`` with ``random.Random(seed)``:

        - ``"garbage"``: the response's correlation id, then 0..64 random bytes, in a
          correctly sized frame (the client's decoder meets nonsense);
        - ``"truncated"``: the first half of the frame, then the connection is reset;
        - ``"wrong-id"``: the response with a different correlation id;
        - ``"oversize"``: a size prefix of 0x7ffffff0 and a few bytes, then a reset.

        Counted per connection like :meth:`drop_response_every`
        (``responses_corrupted``). ``None`` disables.
        """
        n = _check_every("corrupt_response_every", n)
        kinds = tuple(kinds)
        bad = [k for k in kinds if k not in _CORRUPTIONS]
        if not kinds or bad:
            raise ValueError(f"corrupt_response_every: kinds must be a non-empty subset of "
                             f"{_CORRUPTIONS}, got {kinds!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"corrupt_response_every: seed must be an int, got {seed!r}")
        with self._lock:
            s = self._settings
            self._settings = dataclasses.replace(s, corrupt_every=n, corrupt_kinds=kinds,
                                                 corrupt_seed=seed, corrupt_gen=s.corrupt_gen + 1)
        self._wake()

    def cut_all(self, timeout: float = 5.0) -> int:
        """Close every current connection now, both sides with RST; return how many.

        Returns after the loop thread has closed them (or 0 if the proxy is not
        running).
        """
        if not self.running:
            return 0
        done, result = threading.Event(), []
        with self._lock:
            self._commands.append(("cut_all", done, result))
        self._wake()
        if not done.wait(timeout):
            raise RuntimeError(f"FaultProxy did not process cut_all within {timeout}s")
        return result[0] if result else 0

    def reset_faults(self) -> None:
        """Turn every fault off (as after construction)."""
        with self._lock:
            s = self._settings
            self._settings = _Settings(cut_gen=s.cut_gen + 1, drop_gen=s.drop_gen + 1,
                                       chaos_gen=s.chaos_gen + 1, corrupt_gen=s.corrupt_gen + 1)
        self._wake()

    # -- observation ----------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """A snapshot of the counters (see ``_STAT_KEYS`` in the source for each meaning):

        ``connections_accepted``, ``connections_refused``, ``connections_active``,
        ``connect_failures``, ``requests_received``, ``requests_forwarded``,
        ``responses_received``, ``responses_forwarded``,
        ``responses_dropped``, ``cuts``, ``resets``, ``bytes_to_target``,
        ``bytes_to_client``, ``single_byte_sends``, ``framing_errors``.

        The loop thread publishes counts once per iteration, just after the
        events they count: a client may hold a response before
        ``responses_forwarded`` includes it. Wait with :meth:`wait_for`.
        """
        with self._lock:
            return dict(self._stats)

    def wait_for(self, predicate: Callable[[dict[str, int]], bool], timeout: float = 10.0
                 ) -> dict[str, int]:
        """Block until ``predicate(stats())`` is true; return those stats.

        Raises ``TimeoutError`` (with the last stats) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                snap = dict(self._stats)
                if predicate(snap):
                    return snap
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"FaultProxy.wait_for: condition not met within "
                                       f"{timeout}s; stats: {snap}")
                self._cond.wait(remaining)

    # -- loop thread ------------------------------------------------------------------
    def _wake(self) -> None:
        w = self._wake_w
        if w is not None:
            try:
                w.send(b"\0")
            except OSError:
                pass  # buffer full (a wakeup is pending anyway) or already closed

    def _count(self, key: str, n: int = 1) -> None:
        self._pending_stats[key] = self._pending_stats.get(key, 0) + n

    def _flush_stats(self) -> None:
        with self._cond:
            for k, n in self._pending_stats.items():
                self._stats[k] += n
            self._stats["connections_active"] = len(self._conns)
            self._cond.notify_all()
        self._pending_stats.clear()

    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = self._prepare()
                events = self._sel.select(timeout)
                with self._lock:
                    # Read after select(): a setting changed before the data we are
                    # about to handle arrived is already visible.
                    cfg = self._settings
                    commands, self._commands = self._commands, []
                now = time.monotonic()
                for key, mask in events:
                    kind, conn = key.data
                    if kind == "listen":
                        self._accept(cfg)
                    elif kind == "wake":
                        self._drain_wake()
                    elif not conn.closed:
                        self._on_event(conn, kind, mask, cfg, now)
                self._run_chaos(cfg, now)
                for conn in list(self._conns):
                    if not conn.closed:
                        self._service(conn, cfg)
                for name, done, result in commands:
                    if name == "cut_all":
                        n = 0
                        for conn in list(self._conns):
                            if not conn.closed:
                                if conn.cut_deadline is None:  # not counted twice
                                    self._count("cuts")
                                self._close(conn, reset=True)
                                n += 1
                        result.append(n)
                self._conns = [c for c in self._conns if not c.closed]
                self._flush_stats()
                for _name, done, _result in commands:
                    done.set()
        except BaseException as exc:  # a bug: keep it for stop(), never kill the process
            self.error = exc
        finally:
            for conn in self._conns:
                if not conn.closed:
                    self._close(conn, reset=True)
            self._conns = []
            self._close_loop_resources()
            try:
                self._flush_stats()
            except Exception:
                pass
            with self._lock:
                commands, self._commands = self._commands, []
            for _name, done, _result in commands:
                done.set()

    def _stalled(self, cfg: _Settings, now: float) -> tuple[bool, bool]:
        """Whether reading from (clients, the broker) is stopped now, by stall() or chaos()."""
        ch = self._chaos
        on = cfg.chaos is not None
        return (cfg.stall_client or (on and now < ch.stall_client_until),
                cfg.stall_target or (on and now < ch.stall_target_until))

    def _run_chaos(self, cfg: _Settings, now: float) -> None:
        """Apply the random faults that are due (loop thread)."""
        ch = self._chaos
        if cfg.chaos is None:
            if ch.spec is not None:
                self._chaos = _ChaosState()
            return
        if ch.spec is None or ch.gen != cfg.chaos_gen:
            ch = self._chaos = _ChaosState(cfg.chaos, cfg.chaos_gen, now)
        spec, rng = ch.spec, ch.rng
        while now >= ch.next_at:
            # The next event is drawn from when this one happens, so a long select()
            # (a busy machine) never releases a burst of overdue faults at once.
            ch.next_at = now + rng.uniform(*spec.interval)
            kind = rng.choices(("cut", "stall", "drop"), weights=spec.weights)[0]
            self._count("chaos_events")
            if kind == "cut":
                live = [c for c in self._conns
                        if c.connected and not c.closed and c.cut_deadline is None]
                pick = rng.random()          # drawn either way: the sequence stays seeded
                if live:
                    self._count("cuts")
                    self._count("chaos_cuts")
                    self._close(live[int(pick * len(live))], reset=True)
            elif kind == "stall":
                until = now + rng.uniform(*spec.stall_seconds)
                side = rng.choice(("client", "broker", "both"))
                if side != "broker":
                    ch.stall_client_until = max(ch.stall_client_until, until)
                if side != "client":
                    ch.stall_target_until = max(ch.stall_target_until, until)
                self._count("chaos_stalls")
            else:
                # Not cumulative: drops chosen while no response passes (everything stalled or
                # cut) would otherwise swallow every response that follows.
                ch.drops_due = 1

    def _close_loop_resources(self) -> None:
        for s in (self._listener, self._wake_r, self._wake_w):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self._listener = self._wake_r = self._wake_w = None
        if self._sel is not None:
            self._sel.close()
            self._sel = None

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _accept(self, cfg: _Settings) -> None:
        for _ in range(64):
            try:
                client, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ECONNABORTED, EMFILE...: skip this one
                return
            if cfg.refuse_new:
                client.close()
                self._count("connections_refused")
                continue
            target = None
            try:
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                target = socket.socket(self._family, socket.SOCK_STREAM)
                target.setblocking(False)
                target.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                err = target.connect_ex(self._target_addr)
            except OSError:
                err = -1
            if err not in (0, errno.EINPROGRESS):
                _close_reset(client)
                if target is not None:
                    target.close()
                self._count("connect_failures")
                continue
            conn = _Conn(client, target, cfg)
            self._conns.append(conn)
            self._count("connections_accepted")
            # Connection completion shows as writability (connect(2), EINPROGRESS).
            self._set_mask(conn, target, selectors.EVENT_WRITE)

    def _set_mask(self, conn: _Conn, sock: socket.socket, mask: int) -> None:
        old = conn.masks[sock]
        if mask == old:
            return
        if old == 0:
            self._sel.register(sock, mask, ("client" if sock is conn.client else "target", conn))
        elif mask == 0:
            self._sel.unregister(sock)
        else:
            self._sel.modify(sock, mask, ("client" if sock is conn.client else "target", conn))
        conn.masks[sock] = mask

    def _prepare(self) -> float:
        """Set every socket's interest from the current settings; return the select timeout."""
        cfg = self._settings
        now = time.monotonic()
        timeout = _MAX_SELECT_TIMEOUT
        stall_client, stall_target = self._stalled(cfg, now)
        ch = self._chaos
        if cfg.chaos is not None:
            for t in (ch.next_at, ch.stall_client_until, ch.stall_target_until):
                if t > now:
                    timeout = min(timeout, t - now)
        for conn in self._conns:
            if conn.closed:
                continue
            if not conn.connected:
                self._set_mask(conn, conn.client, 0)
                self._set_mask(conn, conn.target, selectors.EVENT_WRITE)
                timeout = min(timeout, conn.connect_deadline - now)
                continue
            if conn.cut_deadline is not None:
                self._set_mask(conn, conn.client, 0)
                self._set_mask(conn, conn.target, 0)
                timeout = min(timeout, _CUT_POLL)
                continue
            want_client = 0
            if not stall_client and not conn.req.eof and conn.req.queued_bytes < _HIGH_WATER:
                want_client |= selectors.EVENT_READ
            if conn.resp.blocked:
                want_client |= selectors.EVENT_WRITE
            want_target = 0
            if not stall_target and not conn.resp.eof and conn.resp.queued_bytes < _HIGH_WATER:
                want_target |= selectors.EVENT_READ
            if conn.req.blocked:
                want_target |= selectors.EVENT_WRITE
            self._set_mask(conn, conn.client, want_client)
            self._set_mask(conn, conn.target, want_target)
            for flow in (conn.req, conn.resp):
                if flow.blocked or not flow.pending():
                    continue
                if flow.cur is None:
                    due = flow.queue[0][0]
                else:
                    due = flow.next_write_at
                timeout = min(timeout, max(due, flow.next_write_at) - now)
        return max(timeout, 0.0)

    def _on_event(self, conn: _Conn, kind: str, mask: int, cfg: _Settings, now: float) -> None:
        if conn.cut_deadline is not None:
            return
        if kind == "target" and not conn.connected:
            err = conn.target.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._count("connect_failures")
                self._close(conn, reset=True)
            else:
                conn.connected = True
            return
        flow_in = conn.req if kind == "client" else conn.resp      # what this socket feeds
        flow_out = conn.resp if kind == "client" else conn.req     # what this socket receives
        if mask & selectors.EVENT_WRITE:
            flow_out.blocked = False
        stalled = self._stalled(cfg, now)[0 if kind == "client" else 1]
        # The interest set was chosen before select(); a stall set since then must hold.
        if mask & selectors.EVENT_READ and not stalled:
            sock = conn.client if kind == "client" else conn.target
            try:
                data = sock.recv(_RECV_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._count("resets")
                self._close(conn, reset=True)
                return
            if not data:
                flow_in.eof = True
                if flow_in.inbuf:  # a frame cut short: forward what there is
                    self._enqueue(flow_in, bytes(flow_in.inbuf), False, cfg, now)
                    flow_in.inbuf.clear()
                return
            self._feed(conn, flow_in, data, cfg, now)

    def _feed(self, conn: _Conn, flow: _Flow, data: bytes, cfg: _Settings, now: float) -> None:
        if flow.raw:
            self._enqueue(flow, data, False, cfg, now)
            return
        buf = flow.inbuf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if size < 0 or size > self.max_frame_size:
                flow.raw = True
                self._count("framing_errors")
                self._enqueue(flow, bytes(buf[pos:]), False, cfg, now)
                pos = end
                break
            if end - pos < 4 + size:
                break
            frame = bytes(buf[pos:pos + 4 + size])
            pos += 4 + size
            self._count("responses_received" if flow.is_response else "requests_received")
            if size >= 8:
                frame = self._frame_rules(conn, flow, frame, cfg, now)
                if frame is None:
                    flow.inbuf.clear()    # nothing after a reset
                    return
            if flow.is_response:
                if conn.drop_gen != cfg.drop_gen:
                    conn.drop_gen, conn.responses_seen = cfg.drop_gen, 0
                conn.responses_seen += 1
                if cfg.drop_every and conn.responses_seen % cfg.drop_every == 0:
                    self._count("responses_dropped")
                    continue
                if self._chaos.drops_due and cfg.chaos is not None:
                    self._chaos.drops_due -= 1
                    self._count("responses_dropped")
                    self._count("chaos_drops")
                    continue
                if cfg.corrupt_every:
                    if conn.corrupt_gen != cfg.corrupt_gen:
                        conn.corrupt_gen, conn.responses_for_corrupt = cfg.corrupt_gen, 0
                    conn.responses_for_corrupt += 1
                    if conn.responses_for_corrupt % cfg.corrupt_every == 0:
                        self._corrupt(flow, frame, cfg, now)
                        if flow.queue and flow.queue[-1][2] == _CUT_AFTER:
                            flow.inbuf.clear()    # nothing after a reset
                            return
                        continue
            self._enqueue(flow, frame, True, cfg, now)
        if pos:
            del buf[:pos]

    def _frame_rules(self, conn: _Conn, flow: _Flow, frame: bytes, cfg: _Settings, now: float):
        """record_requests, cut_on_api and answer_error: the frame to pass on, or None when
        the connection is to be reset here."""
        if flow.is_response:
            cid = int.from_bytes(frame[4:8], "big", signed=True)
            api_key = conn.api_of.pop(cid, -1)
            self._log_frame(conn, "response", api_key, cid, frame)
            if cid in conn.cut_cids:
                conn.cut_cids.discard(cid)
                self._count("api_cuts")
                self._enqueue(flow, b"", _CUT_AFTER, cfg, now)
                return None
            rewrite = conn.rewrite_cids.pop(cid, None)
            if rewrite is not None:
                api, version, code, throttle_ms = rewrite
                if code is not None:
                    frame = _with_error_code(frame, api, version, code)
                    self._count("api_answers")
                if throttle_ms is not None:
                    frame = _with_throttle(frame, api, version, throttle_ms)
                    self._count("api_throttles")
            return frame
        if len(frame) < 12:
            return frame
        api_key = int.from_bytes(frame[4:6], "big", signed=True)
        cid = int.from_bytes(frame[8:12], "big", signed=True)
        conn.api_of[cid] = api_key
        self._log_frame(conn, "request", api_key, cid, frame)
        if self._take_api_cut(api_key, "request"):
            self._count("api_cuts")
            self._enqueue(flow, b"", _CUT_AFTER, cfg, now)
            return None
        if self._take_api_cut(api_key, "response"):
            conn.cut_cids.add(cid)
        code = self._take_api("_api_answer", api_key)
        throttle_ms = self._take_api("_api_throttle", api_key)
        if code is not None or throttle_ms is not None:
            version = int.from_bytes(frame[6:8], "big", signed=True)
            conn.rewrite_cids[cid] = (api_key, version, code, throttle_ms)
        return frame

    def _corrupt(self, flow: _Flow, frame: bytes, cfg: _Settings, now: float) -> None:
        """Queue a bad replacement for the response ``frame`` (corrupt_response_every)."""
        if self._corrupt_rng is None or self._corrupt_rng[0] != cfg.corrupt_gen:
            self._corrupt_rng = (cfg.corrupt_gen, random.Random(cfg.corrupt_seed))
        rng = self._corrupt_rng[1]
        kind = rng.choice(cfg.corrupt_kinds)
        self._count("responses_corrupted")
        if kind == "garbage":
            body = frame[4:8] + rng.randbytes(rng.randrange(0, 65))
            self._enqueue(flow, struct.pack(">i", len(body)) + body, False, cfg, now)
        elif kind == "wrong-id":
            cid = (int.from_bytes(frame[4:8], "big") + rng.randrange(1, 1 << 16)) & 0x7FFFFFFF
            self._enqueue(flow, frame[:4] + cid.to_bytes(4, "big") + frame[8:], False, cfg, now)
        elif kind == "truncated":
            self._enqueue(flow, frame[:len(frame) // 2], False, cfg, now)
            self._enqueue(flow, b"", _CUT_AFTER, cfg, now)
        else:  # oversize
            self._enqueue(flow, struct.pack(">i", 0x7FFFFFF0) + rng.randbytes(16), False, cfg, now)
            self._enqueue(flow, b"", _CUT_AFTER, cfg, now)

    @staticmethod
    def _enqueue(flow: _Flow, data: bytes, counted, cfg: _Settings, now: float) -> None:
        delay = cfg.response_delay if flow.is_response else cfg.request_delay
        due = max(now + delay, flow.last_due)
        flow.last_due = due
        flow.queue.append((due, data, counted))
        flow.queued_bytes += len(data)

    def _service(self, conn: _Conn, cfg: _Settings) -> None:
        """Write whatever is due in both directions; close the pair when a side is done."""
        if not conn.connected:
            if time.monotonic() >= conn.connect_deadline:
                self._count("connect_failures")
                self._close(conn, reset=True)
            return
        if conn.cut_deadline is not None:
            if time.monotonic() >= conn.cut_deadline or _unsent_bytes(conn.client) == 0:
                self._close(conn, reset=True)
            return
        for flow in (conn.req, conn.resp):
            if not self._write(conn, flow, cfg) or conn.closed or conn.cut_deadline is not None:
                return
        # A side that sent EOF is finished once everything it sent has been delivered.
        for flow in (conn.req, conn.resp):
            if flow.eof and not flow.pending():
                self._close(conn, reset=False)
                return

    def _write(self, conn: _Conn, flow: _Flow, cfg: _Settings) -> bool:
        """Send due data of one flow; False if the connection was closed or is being cut."""
        dst = conn.client if flow.is_response else conn.target
        bbb = cfg.bbb_responses if flow.is_response else cfg.bbb_requests
        while not flow.blocked:
            now = time.monotonic()
            if flow.cur is None:
                if not flow.queue or flow.queue[0][0] > now:
                    return True
                _due, data, counted = flow.queue.popleft()
                flow.queued_bytes -= len(data)
                if counted == _CUT_AFTER:
                    # Everything before it has been written: reset once the client has it.
                    conn.cut_deadline = now + _CUT_DRAIN_TIMEOUT
                    return False
                flow.cur, flow.cur_off, flow.cur_counted = memoryview(data), 0, counted
            if flow.next_write_at > now:
                return True
            chunk = flow.cur[flow.cur_off:flow.cur_off + 1] if bbb else flow.cur[flow.cur_off:]
            try:
                n = dst.send(chunk)
            except (BlockingIOError, InterruptedError):
                flow.blocked = True
                return True
            except OSError:
                self._count("resets")
                self._close(conn, reset=True)
                return False
            flow.cur_off += n
            self._count("bytes_to_client" if flow.is_response else "bytes_to_target", n)
            if bbb:
                self._count("single_byte_sends")
                if cfg.bbb_pause > 0:
                    flow.next_write_at = now + cfg.bbb_pause
            if flow.cur_off < len(flow.cur):
                continue
            counted = flow.cur_counted
            flow.cur.release()
            flow.cur = None
            if not counted:
                continue
            if not flow.is_response:
                self._count("requests_forwarded")
                continue
            self._count("responses_forwarded")
            if conn.cut_gen != cfg.cut_gen:
                conn.cut_gen, conn.responses_sent = cfg.cut_gen, 0
            conn.responses_sent += 1
            if cfg.cut_every and conn.responses_sent % cfg.cut_every == 0:
                self._count("cuts")
                conn.cut_deadline = now + _CUT_DRAIN_TIMEOUT
                return False
        return True

    def _close(self, conn: _Conn, *, reset: bool) -> None:
        conn.closed = True
        for sock in (conn.client, conn.target):
            if conn.masks.get(sock):
                try:
                    self._sel.unregister(sock)
                except (KeyError, ValueError):
                    pass
                conn.masks[sock] = 0
            if reset:
                _close_reset(sock)
            else:
                try:
                    sock.close()
                except OSError:
                    pass
        for flow in (conn.req, conn.resp):
            if flow.cur is not None:
                flow.cur.release()
                flow.cur = None
            flow.queue.clear()
            flow.queued_bytes = 0
            flow.inbuf = bytearray()


_FIND_COORDINATOR = 10


def _with_error_code(frame: bytes, api_key: int, version: int, code: int) -> bytes:
    """The response ``frame`` (size prefix included) with its error code replaced (see
    :meth:`FaultProxy.answer_error`)."""
    from kproducer.protocol.messages import RESPONSES, response_header_version
    from kproducer.protocol.primitives import Reader

    schema = RESPONSES[api_key].SCHEMA
    r = Reader(frame, 4)
    r.int32("correlation_id")
    if response_header_version(api_key, version) >= 1:
        r.skip_tagged_fields("response header")
    if api_key == _FIND_COORDINATOR:
        header = bytes(frame[4:r.pos])
        body = schema.decode_body(r, version)
        entries = body.coordinators if version >= 4 else [body]
        for entry in entries:
            entry.error_code = code
            if code:
                entry.node_id, entry.host, entry.port = -1, "", -1
        payload = header + schema.encode_body(body, version)
        return struct.pack(">i", len(payload)) + payload
    # The body starts with ThrottleTimeMs, then ErrorCode.
    at = r.pos + 4
    return frame[:at] + code.to_bytes(2, "big", signed=True) + frame[at + 2:]


def _with_throttle(frame: bytes, api_key: int, version: int, throttle_ms: int) -> bytes:
    """The response ``frame`` (size prefix included) with its ThrottleTimeMs set (see
    :meth:`FaultProxy.throttle_answers`): decoded and encoded again."""
    from kproducer.protocol.messages import RESPONSES, response_header_version
    from kproducer.protocol.primitives import Reader

    schema = RESPONSES[api_key].SCHEMA
    r = Reader(frame, 4)
    r.int32("correlation_id")
    if response_header_version(api_key, version) >= 1:
        r.skip_tagged_fields("response header")
    header = bytes(frame[4:r.pos])
    body = schema.decode_body(r, version)
    body.throttle_time_ms = throttle_ms
    payload = header + schema.encode_body(body, version)
    return struct.pack(">i", len(payload)) + payload


def _unsent_bytes(sock: socket.socket) -> int:
    """Bytes in ``sock``'s send queue not yet acknowledged (SIOCOUTQ, tcp(7)); 0 if unknown."""
    if _TIOCOUTQ is None:
        return 0
    try:
        buf = fcntl.ioctl(sock.fileno(), _TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return struct.unpack("i", buf)[0]


def _close_reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0, so the peer gets RST instead of FIN (socket(7), SO_LINGER)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
