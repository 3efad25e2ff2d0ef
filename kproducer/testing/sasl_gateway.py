"""A SASL-authenticating TCP gateway in front of a broker, for tests (loopback only).

The test broker's own SASL is broken (shared/TANSU.md: no credential store, and a
failed SCRAM exchange still leaves the connection usable), so the gateway does the
server side of Kafka's SASL flow itself and then forwards bytes to the broker::

    port = free_port()
    with SaslGateway("127.0.0.1", port, users={"alice": "s3cret"}) as gw:
        with TansuBroker(port=port, advertised_port=gw.port):   # Metadata points at gw
            ... clients with security.protocol=SASL_PLAINTEXT connect to gw.bootstrap ...

Per connection, as Kafka's ``SaslServerAuthenticator`` does:

- ApiVersions is forwarded to the broker and its response patched to list
  SaslHandshake (17, v0-1) and SaslAuthenticate (36, v0-2), the gateway's own ranges;
- SaslHandshake: the mechanism must be enabled, otherwise UNSUPPORTED_SASL_MECHANISM
  (33) with the enabled list, then the connection is closed. After v1 the tokens come
  in SaslAuthenticate requests; after v0 as bare size-prefixed frames (pre-KIP-152);
- SaslAuthenticate (v0-2) runs PLAIN (RFC 4616) or SCRAM-SHA-256/512 (RFC 5802/7677)
  against the credential store, or OAUTHBEARER (RFC 7628, KIP-255/342: see below); a
  failure answers SASL_AUTHENTICATION_FAILED (58) with a message and closes the connection;
- any other request before authentication closes the connection (Kafka's
  ILLEGAL_SASL_STATE handling);
- once authenticated, requests and responses are forwarded whole and untouched, frame by
  frame, both ways.

Sessions (KIP-368), as Kafka's ``connections.max.reauth.ms``: with ``session_ms`` (an int,
or a mapping mechanism -> ms) the final SaslAuthenticate answer (v1+) carries a session
lifetime, ``session_ms`` capped by the time left on an OAUTHBEARER token, and:

- a request other than SaslHandshake that arrives after the session ended closes the
  connection (Kafka's ``serverAuthenticationSessionExpired``; counted ``expired_requests``),
  and so does a session that ends with no request at all (``sessions_expired``; stricter
  than Kafka, which waits for the next request: :attr:`SaslGateway.close_expired_sessions`
  False does the same);
- a SaslHandshake on an authenticated connection re-authenticates it (v1+ only): the
  gateway first lets the broker's answers to the requests already forwarded reach the
  client (as a broker processes a connection's requests in order; a handshake that came
  before them is counted, ``reauth_while_in_flight``), then runs the exchange
  with the same mechanism; the principal must not change (Kafka's "Cannot change
  principals during re-authentication"); success starts a new session
  (``reauthenticated``), failure answers 58 and closes (``reauth_failures``).

OAUTHBEARER: the client's message is parsed as Kafka's ``OAuthBearerClientInitialResponse``
does (GS2 header, ``auth=Bearer <token>``, KIP-342 extensions), the token checked by
``oauth`` (anything with ``verify(token) -> claims`` raising ValueError, such as
:class:`kproducer.testing.oidc.TokenIssuer`: signature, issuer, audience, expiry). A token
refused is answered as Kafka's ``OAuthBearerSaslServer`` answers it: SaslAuthenticate with
error 0 and the JSON error ``{"status":"invalid_token"}`` as auth bytes; the client's
``\x01`` then gets SASL_AUTHENTICATION_FAILED with the same JSON as message
(``token_rejections``, the reasons in :attr:`SaslGateway.token_rejection_reasons`).
Extensions seen are kept in :attr:`SaslGateway.extensions_seen`; ``required_extensions``
refuses a client without them (Kafka's "extensions are invalid").

The server-side SCRAM arithmetic is written here with hashlib/hmac directly rather than
taken from :mod:`kproducer.sasl`, so the client is checked against an independent
implementation (and both against confluent-kafka's librdkafka and the RFC vectors).
Like Kafka, the server does not SASLprep passwords (``ScramFormatter.normalize``).

Faults for tests: :attr:`tamper_server_signature` sends a wrong SCRAM server signature
(and then forwards, as a server that does not know the password would let a careless
client go on); :attr:`scram_error_attribute` answers a wrong proof the RFC 5802 way,
with a server-final ``e=invalid-proof`` instead of Kafka's error code 58;
:attr:`stall_sasl` never answers SaslHandshake (the client's setup timeout must end it).

One thread per connection (two once forwarding): the exchange reads as straight-line
code, re-authentication included. :meth:`SaslGateway.stop` shuts every socket down and joins the threads within a
deadline. Nothing here logs credentials.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, Mapping, Optional

from ..errors import ProtocolError
from ..protocol import messages as m
from ..protocol import versions as v
from ..protocol.primitives import Reader, Writer
from .proxy import _close_reset, _resolve_loopback
from ._counters import Counters

__all__ = ["SaslGateway"]

_SIZE = struct.Struct(">i")
_MAX_FRAME = 100 * 1024 * 1024
_UNSUPPORTED_SASL_MECHANISM = 33
_ILLEGAL_SASL_STATE = 34
_SASL_AUTHENTICATION_FAILED = 58
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# The versions the gateway itself answers (SaslHandshakeRequest.json, SaslAuthenticateRequest.json).
_OWN_VERSIONS = {v.SASL_HANDSHAKE: (0, 1), v.SASL_AUTHENTICATE: (0, 2)}

_STAT_KEYS = (
    "connections_accepted",   # client connections accepted
    "connect_failures",       # the broker refused the gateway's connect
    "api_versions",           # ApiVersions requests answered before authentication
    "handshakes",             # SaslHandshake requests answered with an enabled mechanism
    "unsupported_mechanism",  # SaslHandshake requests for a mechanism not enabled
    "authenticated",          # exchanges that ended in success (for the server)
    "auth_failures",          # exchanges that ended in failure
    "illegal_requests",       # other requests before authentication (connection closed)
    "bytes_after_auth",       # bytes forwarded from clients to the broker after authentication
    "connections_active",     # connections open now
    "requests_forwarded",     # requests forwarded to the broker after authentication
    "reauthenticated",        # KIP-368 re-authentications that succeeded
    "reauth_failures",        # re-authentications that failed (connection closed)
    "reauth_while_in_flight", # SaslHandshakes that came before the answers to earlier requests
    "expired_requests",       # requests after the session ended (connection closed)
    "sessions_expired",       # sessions that ended with no request (connection closed)
    "token_rejections",       # OAUTHBEARER tokens refused (the JSON error sent)
)


class _AuthFailed(Exception):
    """An exchange failed; the message goes to the client (never with credentials)."""


@dataclass
class _ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass
class _User:
    password: str
    scram: Dict[str, _ScramCredential] = field(default_factory=dict)


def _scram_credential(hash_name: str, password: str, iterations: int) -> _ScramCredential:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return _ScramCredential(salt, iterations, hashlib.new(hash_name, client_key).digest(),
                            hmac.new(salted, b"Server Key", hash_name).digest())


def _attrs(message: str) -> Dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise _AuthFailed("Authentication failed: malformed SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


class _PlainServer:
    credential_expiry_ms = None

    def __init__(self, gateway: "SaslGateway"):
        self.gw = gateway
        self.principal = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise _AuthFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, username, password = (p.decode("utf-8", "replace") for p in parts)
        user = self.gw._user(username)
        # Kafka's PlainSaslServer: the authorization id, if given, must be the user itself.
        if user is None or (authzid and authzid != username) or not hmac.compare_digest(
                user.password.encode("utf-8"), password.encode("utf-8")):
            raise _AuthFailed("Authentication failed: Invalid username or password")
        self.principal = username
        return b"", True


class _ScramServer:
    credential_expiry_ms = None

    def __init__(self, gateway: "SaslGateway", mechanism: str):
        self.gw = gateway
        self.principal = None
        self.mechanism = mechanism
        self.hash_name = _HASHES[mechanism]
        self.state = "client-first"

    def step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _AuthFailed("Authentication failed: SCRAM message is not UTF-8") from None
        if self.state == "client-first":
            return self._server_first(text), False
        if self.state == "client-final":
            return self._server_final(text)
        raise _AuthFailed("Authentication failed: unexpected SCRAM message")

    def _server_first(self, client_first: str) -> bytes:
        # gs2-header "n,," (no channel binding, no authzid) then client-first-message-bare.
        if not client_first.startswith("n,"):
            raise _AuthFailed("Authentication failed: channel binding is not supported")
        _gs2, _sep, rest = client_first[2:].partition(",")
        self.client_first_bare = rest
        attrs = _attrs(rest)
        if "n" not in attrs or "r" not in attrs:
            raise _AuthFailed("Authentication failed: invalid client-first message")
        username = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        user = self.gw._user(username)
        cred = None if user is None else user.scram.get(self.mechanism)
        if cred is None:
            raise _AuthFailed("Authentication failed: Invalid user credentials")
        self.cred = cred
        self.username = username
        self.nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode("ascii")
        self.server_first = (f"r={self.nonce},s={base64.b64encode(cred.salt).decode('ascii')},"
                             f"i={cred.iterations}")
        self.state = "client-final"
        return self.server_first.encode("utf-8")

    def _server_final(self, client_final: str) -> tuple[bytes, bool]:
        self.state = "done"
        without_proof, sep, proof_b64 = client_final.rpartition(",p=")
        attrs = _attrs(without_proof) if sep else {}
        if not sep or attrs.get("r") != self.nonce or attrs.get("c") != "biws":
            raise _AuthFailed("Authentication failed: Invalid client final message")
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode("utf-8")
        client_signature = hmac.new(self.cred.stored_key, auth_message, self.hash_name).digest()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            proof = b""
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if len(proof) != len(client_signature) or not hmac.compare_digest(
                hashlib.new(self.hash_name, client_key).digest(), self.cred.stored_key):
            if self.gw.scram_error_attribute:
                return b"e=invalid-proof", False
            raise _AuthFailed("Authentication failed: Invalid client final message")
        signature = hmac.new(self.cred.server_key, auth_message, self.hash_name).digest()
        if self.gw.tamper_server_signature:
            signature = bytes([signature[0] ^ 1]) + signature[1:]
        self.principal = self.username
        return b"v=" + base64.b64encode(signature), True


# Kafka's OAuthBearerClientInitialResponse grammar: GS2 header with an optional authzid
# (saslname: no ',' or '=' but as =2C / =3D), then key=value pairs each ended by 0x01, and a
# final 0x01; the auth value is "Bearer <b64token>" (scheme case-insensitive).
_OAUTH_MESSAGE = re.compile(
    r"n,(?:a=((?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+))?,\x01"
    r"((?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01", re.DOTALL)
_OAUTH_AUTH = re.compile(r"(\w+) +([-_~+/.a-zA-Z0-9]+=*)")


class _OAuthBearerServer:
    """Kafka's OAuthBearerSaslServer over the gateway's verifier (``SaslGateway.oauth``)."""

    def __init__(self, gateway: "SaslGateway"):
        self.gw = gateway
        self.principal = None
        self.credential_expiry_ms = None
        self.error = None       # the JSON sent for a refused token: the client's 0x01 gets it

    def step(self, token: bytes) -> tuple[bytes, bool]:
        if self.error is not None:
            if token == b"\x01":
                raise _AuthFailed(self.error)
            raise _AuthFailed("Authentication failed: expected %x01 after the server's error")
        match = _OAUTH_MESSAGE.fullmatch(token.decode("utf-8", "replace"))
        if match is None:
            raise _AuthFailed("Invalid OAUTHBEARER client first message")
        authzid = (match.group(1) or "").replace("=2C", ",").replace("=3D", "=")
        pairs = {}
        for pair in match.group(2).split("\x01")[:-1]:
            key, _, value = pair.partition("=")
            pairs[key] = value
        auth = pairs.pop("auth", None)
        if auth is None:
            raise _AuthFailed("Invalid OAUTHBEARER client first message: 'auth' not specified")
        auth_match = _OAUTH_AUTH.fullmatch(auth)
        if auth_match is None:
            raise _AuthFailed("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if auth_match.group(1).lower() != "bearer":
            raise _AuthFailed("Invalid scheme in OAUTHBEARER client first message")
        with self.gw._lock:
            self.gw.extensions_seen.append(dict(pairs))
        missing = {k: v for k, v in self.gw.required_extensions.items() if pairs.get(k) != v}
        verifier = self.gw.oauth
        try:
            if verifier is None:
                raise ValueError("the gateway has no token verifier")
            claims = verifier.verify(auth_match.group(2))
        except ValueError as exc:
            self.gw._count("token_rejections")
            with self.gw._lock:
                self.gw.token_rejection_reasons.append(str(exc))
            scope = getattr(verifier, "required_scope", None) if str(exc) == "insufficient scope" else None
            self.error = ('{"status":"insufficient_scope", "scope":"%s"}' % scope if scope
                          else '{"status":"invalid_token"}')
            return self.error.encode("utf-8"), False
        principal = claims["sub"]
        if authzid and authzid != principal:
            raise _AuthFailed(f"Authentication failed: Client requested an authorization id "
                              f"({authzid}) that is different from the token's principal name "
                              f"({principal})")
        if missing:
            raise _AuthFailed(f"Authentication failed: {len(missing)} extensions are invalid! "
                              f"They are: " + "; ".join(f"{k}: missing or wrong" for k in missing))
        self.principal = principal
        self.credential_expiry_ms = float(claims["exp"]) * 1000
        return b"", True


class _Conn:
    """One client connection and its broker connection once authenticated: the session,
    and the requests forwarded whose answers have not reached the client yet."""

    def __init__(self, client: socket.socket, broker: socket.socket):
        self.client, self.broker = client, broker
        self.send_lock = threading.Lock()         # writes to the client: two threads
        self.cond = threading.Condition()
        self.outstanding = 0
        self.mechanism: Optional[str] = None
        self.principal: Optional[str] = None
        self.session_end: Optional[float] = None  # time.monotonic(); None: no expiry

    def send(self, data: bytes) -> None:
        with self.send_lock:
            self.client.sendall(data)

    def wait_answered(self, timeout: float) -> bool:
        """Until every request forwarded was answered to the client (False at the timeout)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.outstanding > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True


class SaslGateway(Counters):
    """See the module docstring. ``users`` maps user names to passwords (SCRAM verifiers
    are derived with ``iterations``); ``mechanisms`` are the enabled ones; ``oauth`` checks
    OAUTHBEARER tokens (``verify(token) -> claims``, ValueError for a bad one);
    ``session_ms``: the session lifetime, in ms, for every mechanism or by mechanism
    (None or 0: sessions never end, as with Kafka's default connections.max.reauth.ms)."""

    host = "127.0.0.1"

    def __init__(self, target_host: str, target_port: int, *, users: Mapping[str, str] = (),
                 mechanisms: Iterable[str] = MECHANISMS, iterations: int = 4096,
                 listen_port: int = 0, handshake_timeout: float = 10.0, oauth=None,
                 session_ms=None, required_extensions: Optional[Mapping[str, str]] = None):
        self._family, self._target_addr = _resolve_loopback(target_host, target_port)
        self.target_port = target_port
        self.iterations = iterations
        self.handshake_timeout = handshake_timeout
        self._listen_port = listen_port
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._users: Dict[str, _User] = {}
        self.mechanisms = tuple(mechanisms)
        for name in self.mechanisms:
            if name not in MECHANISMS:
                raise ValueError(f"SaslGateway implements {', '.join(MECHANISMS)}, not {name!r}")
        for name, password in dict(users).items():
            self.add_user(name, password)
        self.tamper_server_signature = False
        self.scram_error_attribute = False
        self.stall_sasl = False
        self.oauth = oauth
        self.session_ms = session_ms
        self.close_expired_sessions = True
        self.required_extensions: Dict[str, str] = dict(required_extensions or {})
        #: OAUTHBEARER: the extensions of each client message; why tokens were refused.
        self.extensions_seen: list = []
        self.token_rejection_reasons: list = []
        self._stats = dict.fromkeys(_STAT_KEYS, 0)
        self._sockets: set = set()
        self._threads: list = []
        self._listener: Optional[socket.socket] = None
        self._stopping = False
        self.port: Optional[int] = None
        #: The first unexpected exception of a gateway thread (a bug); stop() re-raises it.
        self.error: Optional[BaseException] = None

    # -- users and settings --------------------------------------------------------------
    def add_user(self, username: str, password: str) -> None:
        """Adds or replaces a user (PLAIN password and SCRAM-SHA-256/512 verifiers)."""
        user = _User(password, {mech: _scram_credential(h, password, self.iterations)
                                for mech, h in _HASHES.items()})
        with self._lock:
            self._users[username] = user

    def remove_user(self, username: str) -> None:
        with self._lock:
            self._users.pop(username, None)

    def _user(self, username: str) -> Optional[_User]:
        with self._lock:
            return self._users.get(username)

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("SaslGateway not started")
        return f"{self.host}:{self.port}"

    def __enter__(self) -> "SaslGateway":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "SaslGateway":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self._listen_port))
        listener.listen(128)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._spawn(self._accept_loop, f"SaslGateway:{self.port}")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Closes the listener and every connection (RST), then joins the threads."""
        self._stopping = True
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        deadline = time.monotonic() + timeout
        while True:
            self.cut_all()
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(min(0.1, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                raise RuntimeError(f"SaslGateway thread {alive[0].name} did not stop within {timeout}s")
        if self.error is not None:
            raise RuntimeError("SaslGateway thread failed") from self.error

    def cut_all(self) -> int:
        """Resets every open connection; returns how many sockets were closed."""
        with self._lock:
            socks = list(self._sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(socks)

    def _spawn(self, target, name, *args) -> None:
        t = threading.Thread(target=self._guard, args=(target, *args), name=name, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _guard(self, target, *args) -> None:
        try:
            target(*args)
        except BaseException as exc:  # a bug in the gateway: keep it for stop()
            if self.error is None and not self._stopping:
                self.error = exc

    # -- connections ----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                client, _addr = self._listener.accept()
            except OSError:
                return  # closed by stop()
            self._count("connections_accepted")
            self._spawn(self._serve, f"SaslGateway:{self.port}:conn", client)

    def _track(self, *socks) -> None:
        with self._cond:
            self._sockets.update(socks)
            self._stats["connections_active"] = len(self._sockets) // 2
            self._cond.notify_all()

    def _untrack(self, *socks) -> None:
        with self._cond:
            self._sockets.difference_update(socks)
            self._stats["connections_active"] = len(self._sockets) // 2
            self._cond.notify_all()

    def _serve(self, client: socket.socket) -> None:
        try:
            broker = socket.create_connection(self._target_addr[:2], timeout=5.0)
        except OSError:
            self._count("connect_failures")
            _close_reset(client)
            return
        for s in (client, broker):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(self.handshake_timeout)
        self._track(client, broker)
        conn = _Conn(client, broker)
        authenticated = False
        try:
            authenticated = self._authenticate(conn)
        except (OSError, ProtocolError):
            pass  # the client left, timed out or sent garbage: close
        finally:
            if not authenticated:
                self._untrack(client, broker)
                # A plain close (FIN) lets the client read a final error response first.
                client.close()
                _close_reset(broker)
        if authenticated:
            client.settimeout(None)
            broker.settimeout(None)
            self._spawn(self._forward_responses, f"SaslGateway:{self.port}:resp", conn)
            self._forward_requests(conn)

    def _session_lifetime_ms(self, mechanism: str, mech) -> Optional[int]:
        """Kafka's SaslServerAuthenticator: connections.max.reauth.ms for the mechanism,
        capped by the credential's remaining lifetime (an OAUTHBEARER token's expiry); None
        when sessions do not end. (A token with nothing left gives 0: the session is over at
        once, though the client, told 0, takes it for "no re-authentication", as in Kafka.)"""
        limit = self.session_ms.get(mechanism) if isinstance(self.session_ms, Mapping) else self.session_ms
        if not limit:
            return None
        if mech.credential_expiry_ms is None:
            return int(limit)
        return max(0, min(int(limit), int(mech.credential_expiry_ms - time.time() * 1000)))

    def _forward_requests(self, conn: _Conn) -> None:
        """Client -> broker, a frame at a time, with the session's rules (module docstring)."""
        client, broker = conn.client, conn.broker
        try:
            while True:
                if conn.session_end is not None:
                    # The next request's first bytes; with close_expired_sessions, only until
                    # the session ends.
                    left = (max(0.0, conn.session_end - time.monotonic())
                            if self.close_expired_sessions else None)
                    if not select.select([client], [], [], left)[0]:
                        self._count("sessions_expired")
                        break            # the session ended with no re-authentication
                arrived = time.monotonic()   # (at the latest) when the request's first bytes came
                frame = _read_frame(client)
                if frame is None:
                    break
                if len(frame) < 4:
                    raise ConnectionError("request too short")
                api_key, _version = struct.unpack_from(">hh", frame)
                if conn.session_end is not None and arrived >= conn.session_end:
                    self._count("expired_requests")
                    break
                if api_key == v.SASL_HANDSHAKE:
                    # A broker answers a connection's requests in order: the answers to what
                    # was forwarded come first. (Java's client may send its handshake behind
                    # requests in flight; kproducer and librdkafka wait for their answers.)
                    with conn.cond:
                        early = conn.outstanding > 0
                    if early:
                        self._count("reauth_while_in_flight")
                    conn.wait_answered(self.handshake_timeout)
                    if not self._authenticate(conn, frame):
                        break
                    continue
                if api_key == v.SASL_AUTHENTICATE:
                    self._count("illegal_requests")
                    break
                with conn.cond:
                    conn.outstanding += 1
                broker.sendall(_framed(frame))
                self._count("requests_forwarded")
                self._count("bytes_after_auth", len(frame) + 4)
        except (OSError, ProtocolError):
            pass
        self._close_pair(conn)

    def _forward_responses(self, conn: _Conn) -> None:
        """Broker -> client, a frame at a time (so that the gateway's own answers to a
        re-authentication never land inside one)."""
        try:
            while True:
                frame = _read_frame(conn.broker)
                if frame is None:
                    break
                with conn.send_lock:
                    # Answered before the client can see it (so a handshake that follows it
                    # is never counted early); the gateway's own answers wait for the lock.
                    with conn.cond:
                        conn.outstanding -= 1
                        conn.cond.notify_all()
                    conn.client.sendall(_framed(frame))
        except OSError:
            pass
        for s in (conn.client, conn.broker):   # the other direction ends too
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with conn.cond:
            conn.outstanding = 0
            conn.cond.notify_all()

    def _close_pair(self, conn: _Conn) -> None:
        for s in (conn.client, conn.broker):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._untrack(conn.client, conn.broker)
        conn.client.close()
        conn.broker.close()

    # -- the SASL exchange -----------------------------------------------------------------
    def _authenticate(self, conn: _Conn, first: Optional[bytes] = None) -> bool:
        """Runs the SASL protocol; True when the connection may be forwarded. ``first``: the
        SaslHandshake that starts a re-authentication of an authenticated connection."""
        client, broker = conn.client, conn.broker
        reauth = first is not None
        mech = None
        mechanism = None
        legacy = False          # tokens as bare frames after SaslHandshake v0
        while True:
            if first is not None:
                frame, first = first, None
            else:
                frame = _read_frame(client)
            if frame is None:
                return False
            if legacy:
                try:
                    out, done = mech.step(frame)
                except _AuthFailed:
                    self._count("auth_failures")
                    return False  # v0 has no way to say why: Kafka just closes
                conn.send(_SIZE.pack(len(out)) + out)
                if done:
                    return self._session_starts(conn, mechanism, mech, reauth,
                                                self._session_lifetime_ms(mechanism, mech))
                continue
            r = Reader(frame)
            api_key = r.int16("RequestHeader.RequestApiKey")
            version = r.int16("RequestHeader.RequestApiVersion")
            correlation_id = r.int32("RequestHeader.CorrelationId")
            r.nullable_string("RequestHeader.ClientId")
            if api_key == v.API_VERSIONS and mech is None and not reauth:
                self._count("api_versions")
                broker.sendall(_SIZE.pack(len(frame)) + frame)
                response = _read_frame(broker)
                if response is None:
                    return False
                conn.send(_framed(_patch_api_versions(response, version)))
                continue
            if api_key not in (v.SASL_HANDSHAKE, v.SASL_AUTHENTICATE) or \
                    not _OWN_VERSIONS[api_key][0] <= version <= _OWN_VERSIONS[api_key][1] or \
                    (api_key == v.SASL_HANDSHAKE) != (mech is None) or \
                    (reauth and api_key == v.SASL_HANDSHAKE and version == 0):
                self._count("illegal_requests")   # (re-authentication needs SaslHandshake v1+)
                return False
            req_cls = m.REQUESTS[api_key]
            if req_cls.SCHEMA.is_flexible(version):
                r.skip_tagged_fields("RequestHeader._tagged_fields")
            req = req_cls.SCHEMA.decode_body(r, version)
            if self.stall_sasl and not reauth:
                while _read_frame(client) is not None:   # until the client gives up
                    pass
                return False
            if api_key == v.SASL_HANDSHAKE:
                enabled = list(self.mechanisms)
                if req.mechanism not in enabled:
                    self._count("reauth_failures" if reauth else "unsupported_mechanism")
                    conn.send(_response(api_key, version, correlation_id, m.SaslHandshakeResponse(
                        error_code=_UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)))
                    return False
                if reauth and req.mechanism != conn.mechanism:
                    # Kafka's REAUTH_BAD_MECHANISM: a session keeps its mechanism.
                    self._count("reauth_failures")
                    conn.send(_response(api_key, version, correlation_id, m.SaslHandshakeResponse(
                        error_code=_ILLEGAL_SASL_STATE, mechanisms=enabled)))
                    return False
                self._count("handshakes")
                conn.send(_response(api_key, version, correlation_id, m.SaslHandshakeResponse(
                    error_code=0, mechanisms=enabled)))
                mechanism = req.mechanism
                mech = (_PlainServer(self) if mechanism == "PLAIN" else
                        _OAuthBearerServer(self) if mechanism == "OAUTHBEARER" else
                        _ScramServer(self, mechanism))
                legacy = version == 0
                continue
            try:
                out, done = mech.step(bytes(req.auth_bytes))
                if done and reauth and mech.principal != conn.principal:
                    raise _AuthFailed(f"Cannot change principals during re-authentication from "
                                      f"{conn.principal}: {mech.principal}")
            except _AuthFailed as exc:
                self._count("reauth_failures" if reauth else "auth_failures")
                conn.send(_response(api_key, version, correlation_id, m.SaslAuthenticateResponse(
                    error_code=_SASL_AUTHENTICATION_FAILED, error_message=str(exc), auth_bytes=b"")))
                return False
            lifetime = self._session_lifetime_ms(mechanism, mech) if done else None
            conn.send(_response(api_key, version, correlation_id, m.SaslAuthenticateResponse(
                error_code=0, error_message=None, auth_bytes=out, session_lifetime_ms=lifetime or 0)))
            if out.startswith(b"e="):
                self._count("auth_failures")
                return False
            if done:
                return self._session_starts(conn, mechanism, mech, reauth, lifetime)

    def _session_starts(self, conn: _Conn, mechanism: str, mech, reauth: bool,
                        lifetime: Optional[int]) -> bool:
        """An exchange succeeded: a new session, ``lifetime`` ms long (None: endless).
        Kafka enforces its end whatever version of SaslAuthenticate told the client
        (KAFKA-9241)."""
        conn.mechanism, conn.principal = mechanism, mech.principal
        conn.session_end = None if lifetime is None else time.monotonic() + lifetime / 1000
        self._count("reauthenticated" if reauth else "authenticated")
        return True


def _read_frame(sock: socket.socket) -> Optional[bytes]:
    """One size-prefixed frame's payload; None on a clean EOF before its first byte."""
    head = _recv_exact(sock, 4, eof_ok=True)
    if head is None:
        return None
    (size,) = _SIZE.unpack(head)
    if not 0 <= size <= _MAX_FRAME:
        raise ConnectionError(f"bad frame size {size}")
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, n: int, eof_ok: bool = False) -> Optional[bytes]:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            if eof_ok and not buf:
                return None
            raise ConnectionError("peer closed the connection mid-frame")
        buf += chunk
    return bytes(buf)


def _framed(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def _response(api_key: int, version: int, correlation_id: int, body) -> bytes:
    w = Writer()
    w.int32(correlation_id)
    if m.response_header_version(api_key, version) >= 1:
        w.uvarint(0)  # no tagged fields
    schema = m.RESPONSES[api_key].SCHEMA
    return _framed(w.getvalue() + schema.encode_body(body, version))


def _patch_api_versions(payload: bytes, version: int) -> bytes:
    """The broker's ApiVersions response with the gateway's SASL versions in its list
    (the gateway answers those requests, whatever the broker behind it supports)."""
    resp = m.decode_response(v.API_VERSIONS, version, payload)
    if resp.error_code != 0:
        return payload  # e.g. UNSUPPORTED_VERSION in a v0 body: the client retries lower
    keys = [k for k in resp.api_keys if k.api_key not in _OWN_VERSIONS]
    ApiVersion = m.STRUCTS["ApiVersion"]
    keys += [ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in _OWN_VERSIONS.items()]
    resp.api_keys = sorted(keys, key=lambda k: k.api_key)
    w = Writer()
    w.int32(resp.correlation_id)   # ApiVersions responses always use header v0
    return w.getvalue() + m.ApiVersionsResponse.SCHEMA.encode_body(resp, version)
