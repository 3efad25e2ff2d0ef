"""OAuth test helpers: signed JWTs and an OIDC token endpoint on loopback (HTTPS).

The JWTs are HS256 (HMAC-SHA256 with a key the issuer and the verifier share, RFC 7518
section 3.2), made and checked here with the standard library only (``hmac``, ``json``,
``base64``): independent of :mod:`kproducer.oauth`, which only ever decodes tokens::

    issuer = TokenIssuer(issuer="https://idp.test", audience="kafka")
    token = issuer.mint("producer-1", lifetime=5.0, scope="kafka:write")
    claims = issuer.verify(token)          # ValueError naming what is wrong

    pki = TestPki(tmp_path)                # kproducer.testing.tls
    with OidcServer(pki, issuer, clients={"kp-client": "kp-secret"}, lifetime=5.0) as idp:
        ... sasl.oauthbearer.token.endpoint.url = idp.token_url ...

:class:`OidcServer` answers the client credentials grant (RFC 6749 section 4.4) at
``/oauth2/token``: the client id and secret in HTTP Basic authentication (RFC 6749 section
2.3.1, URL-encoded before base64) or in the form body; a wrong one is HTTP 401
``{"error": "invalid_client"}``, another grant type 400 ``unsupported_grant_type``. It
issues a JWT for the client (``sub`` = client id) with ``expires_in``. Faults for tests:
:meth:`OidcServer.fail_next` (an HTTP status for the next requests), :attr:`delay`
(seconds before each answer). The :class:`~kproducer.testing.sasl_gateway.SaslGateway`
takes the same issuer as the verifier of its OAUTHBEARER tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping, Optional

from ._counters import Counters

__all__ = ["OidcServer", "TokenIssuer", "b64url", "sign_hs256"]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_hs256(claims: Mapping[str, Any], key: bytes, header: Optional[Mapping[str, Any]] = None) -> str:
    """A compact JWS (RFC 7515) over ``claims`` with HMAC-SHA256."""
    head = dict(header or {"alg": "HS256", "typ": "JWT"})
    signing_input = (b64url(json.dumps(head, separators=(",", ":")).encode()) + "." +
                     b64url(json.dumps(dict(claims), separators=(",", ":")).encode()))
    signature = hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()
    return signing_input + "." + b64url(signature)


class TokenIssuer:
    """Mints HS256 JWTs and verifies them as a broker's validator would: signature, ``alg``
    (HS256 only: ``none`` and the rest are refused), ``iss``, ``aud`` (a string or a list
    containing it), ``exp`` (with ``clock_skew`` seconds of grace), ``nbf``, ``sub``, and
    the ``required_scope`` when one is set. ``key``: 32 random bytes by default."""

    def __init__(self, *, issuer: str = "https://idp.kproducer.test", audience: str = "kafka",
                 key: Optional[bytes] = None, clock_skew: float = 0.0,
                 required_scope: Optional[str] = None):
        self.issuer = issuer
        self.audience = audience
        self.key = key if key is not None else os.urandom(32)
        self.clock_skew = clock_skew
        self.required_scope = required_scope
        self._lock = threading.Lock()
        self.minted = 0

    def mint(self, subject: str, *, lifetime: float = 60.0, scope: Optional[str] = None,
             issued_at: Optional[float] = None, key: Optional[bytes] = None,
             **claims: Any) -> str:
        """A signed JWT for ``subject`` valid ``lifetime`` seconds from ``issued_at`` (now);
        ``claims`` add or override claims (``iss``, ``aud``, ``exp``...); ``key`` signs with
        another key (a forged token)."""
        now = time.time() if issued_at is None else issued_at
        body = {"iss": self.issuer, "aud": self.audience, "sub": subject, "iat": int(now),
                "exp": now + lifetime, "jti": b64url(os.urandom(9))}
        if scope is not None:
            body["scope"] = scope
        body.update(claims)
        with self._lock:
            self.minted += 1
        return sign_hs256(body, self.key if key is None else key)

    def verify(self, token: str, now: Optional[float] = None) -> dict:
        """The claims of a valid token; ValueError saying why it is not."""
        now = time.time() if now is None else now
        parts = token.split(".")
        if len(parts) != 3:
            raise ValueError("malformed JWT")
        try:
            header = json.loads(_unb64url(parts[0]))
            claims = json.loads(_unb64url(parts[1]))
            signature = _unb64url(parts[2])
        except ValueError:
            raise ValueError("malformed JWT") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise ValueError("malformed JWT")
        if header.get("alg") != "HS256":
            raise ValueError(f"algorithm {header.get('alg')!r} not accepted")
        expected = hmac.new(self.key, f"{parts[0]}.{parts[1]}".encode("ascii"), hashlib.sha256).digest()
        if not hmac.compare_digest(signature, expected):
            raise ValueError("bad signature")
        if claims.get("iss") != self.issuer:
            raise ValueError("wrong issuer")
        aud = claims.get("aud")
        if not (aud == self.audience or (isinstance(aud, list) and self.audience in aud)):
            raise ValueError("wrong audience")
        exp = claims.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, (int, float)):
            raise ValueError("no expiry")
        if now >= exp + self.clock_skew:
            raise ValueError("expired")
        nbf = claims.get("nbf")
        if isinstance(nbf, (int, float)) and now + self.clock_skew < nbf:
            raise ValueError("not yet valid")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.strip():
            raise ValueError("no subject")
        if self.required_scope is not None:
            scope = claims.get("scope", "")
            scopes = scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else []
            if self.required_scope not in scopes:
                raise ValueError("insufficient scope")
        return claims


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args) -> None:   # quiet: tests read the stats
        pass

    def _answer(self, status: int, doc: Mapping[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.server.owner._post(self)

    def do_GET(self) -> None:
        self._answer(405, {"error": "invalid_request", "error_description": "POST only"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "OidcServer"


class OidcServer(Counters):
    """An OAuth 2 token endpoint over HTTPS on 127.0.0.1 (see the module docstring).

    ``pki``: a :class:`~kproducer.testing.tls.TestPki` (its server certificate names
    ``localhost`` and ``127.0.0.1``); ``clients``: client id -> secret; ``lifetime``: of the
    tokens issued, in seconds; ``subjects``: client id -> the ``sub`` of its tokens (default:
    the client id). ``tls=False`` serves plain HTTP."""

    host = "127.0.0.1"
    path = "/oauth2/token"

    def __init__(self, pki, issuer: TokenIssuer, *, clients: Mapping[str, str],
                 lifetime: float = 60.0, subjects: Optional[Mapping[str, str]] = None,
                 tls: bool = True):
        self.pki = pki
        self.issuer = issuer
        self.clients = dict(clients)
        self.lifetime = lifetime
        self.subjects = dict(subjects or {})
        self.tls = tls
        self.delay = 0.0
        self._faults: list = []             # [status, body] for the next requests
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stats = {"requests": 0, "issued": 0, "refused": 0, "failed_on_purpose": 0}
        self.last_request: dict = {}
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self.port: Optional[int] = None

    @property
    def token_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}{self.path}"

    def start(self) -> "OidcServer":
        server = _Server((self.host, 0), _Handler)
        server.owner = self
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.pki.server_cert, self.pki.server_key)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"OidcServer:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "OidcServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- faults and stats ----------------------------------------------------------------
    def fail_next(self, count: int, status: int = 503, body: Optional[Mapping[str, Any]] = None) -> None:
        """The next ``count`` requests are answered with ``status`` (and ``body``)."""
        with self._lock:
            self._faults.extend([[status, dict(body or {"error": "temporarily_unavailable",
                                                        "error_description": "try again"})]] * count)

    # -- the grant -------------------------------------------------------------------------
    def _post(self, h: _Handler) -> None:
        self._count("requests")
        length = int(h.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(h.rfile.read(length).decode("utf-8", "replace"))
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            fault = self._faults.pop(0) if self._faults else None
            self.last_request = {"path": h.path, "headers": dict(h.headers.items()),
                                 "form": {k: v[0] for k, v in form.items()}}
        if fault is not None:
            self._count("failed_on_purpose")
            h._answer(fault[0], fault[1])
            return
        if h.path != self.path:
            h._answer(404, {"error": "invalid_request", "error_description": "no such endpoint"})
            return
        client_id = client_secret = None
        auth = h.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                cid, _, secret = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
            except ValueError:
                cid, secret = "", ""
            client_id, client_secret = urllib.parse.unquote_plus(cid), urllib.parse.unquote_plus(secret)
        elif "client_id" in form:
            client_id, client_secret = form["client_id"][0], form.get("client_secret", [""])[0]
        if form.get("grant_type", [""])[0] != "client_credentials":
            self._count("refused")
            h._answer(400, {"error": "unsupported_grant_type",
                            "error_description": "only client_credentials"})
            return
        known = self.clients.get(client_id or "")
        if known is None or not hmac.compare_digest(known.encode(), (client_secret or "").encode()):
            self._count("refused")
            h._answer(401, {"error": "invalid_client", "error_description": "Bad client credentials"})
            return
        scope = form.get("scope", [None])[0]
        token = self.issuer.mint(self.subjects.get(client_id, client_id), lifetime=self.lifetime,
                                 scope=scope, azp=client_id)
        self._count("issued")
        doc = {"access_token": token, "token_type": "Bearer", "expires_in": int(self.lifetime)}
        if scope:
            doc["scope"] = scope
        h._answer(200, doc)
