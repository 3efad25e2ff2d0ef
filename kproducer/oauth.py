"""OAUTHBEARER tokens: where they come from and when they are renewed.

The SASL exchange itself is :class:`kproducer.sasl.OAuthBearerClient`; this module gives
it a token. Three sources, chosen by the configuration (:mod:`kproducer.config`):

- a Python callable, ``sasl.oauthbearer.token.provider`` (confluent-kafka's ``oauth_cb``
  is accepted under its own name, with its signature): called with the
  ``sasl.oauthbearer.config`` string, it returns ``(token, expiry_epoch_seconds[,
  principal[, extensions]])``, an :class:`OAuthBearerToken`, or a JWT string whose
  ``exp`` claim gives its lifetime;
- OIDC client credentials (KIP-768), built in: an HTTPS POST of
  ``grant_type=client_credentials`` to ``sasl.oauthbearer.token.endpoint.url`` with the
  client id and secret in HTTP Basic authentication (:class:`ClientCredentialsRetriever`,
  Java's ``HttpAccessTokenRetriever``: the same headers, body, retry policy and error
  texts); a ``file:`` URL reads a token from a file instead (Java's ``FileTokenRetriever``);
- AWS MSK IAM: :func:`msk_iam_provider`, a token provider over
  ``aws-msk-iam-sasl-signer-python`` (``pip install 'kproducer[msk]'``).

Renewal follows Java's ``ExpiringCredentialRefreshingLogin``: one background thread per
producer ("kproducer-oauth") obtains the first token as the producer starts and the next
one at about 80 % of the current one's lifetime (:func:`refresh_at_ms`, with Java's
``sasl.login.refresh.*`` rules, clamping included). A failed renewal is retried with
exponential backoff (``sasl.login.retry.backoff.ms`` up to ``.max.ms``) while the current
token still serves: nothing waits and nothing fails meanwhile. New connections and
re-authentications (KIP-368, :mod:`kproducer.network`) use whichever token is current.
Only when there is no usable token, the first one could not be obtained or the current one
expired before a renewal succeeded, does authentication fail, with a
:class:`~kproducer.errors.TokenProviderError` that names the source and the cause; the
records waiting for that broker fail with it and ``send()`` waiting for metadata raises it.

The provider never runs on the application's thread, nor on the I/O thread, nor under a
lock of the producer: the I/O thread only reads the current token. A provider that blocks
delays nothing but the next renewal (and, before the first token, the first connection,
which waits for it within ``socket.connection.setup.timeout.ms`` and then tries again).

Tokens are decoded, never verified: the payload of a JWT is read for its lifetime
(``exp``, ``iat``), principal (``sasl.oauthbearer.sub.claim.name``) and scope
(``sasl.oauthbearer.scope.claim.name``), as Java's ``LoginAccessTokenValidator`` does; the
broker verifies the signature. Token values, client secrets and the
``sasl.oauthbearer.config`` string never appear in ``repr()``, logs or exception text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import http.client
import inspect
import json
import logging
import os
import random
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Mapping, Optional

from .backoff import ExponentialBackoff
from .errors import TokenProviderError
from .sasl import HIDDEN, OAUTHBEARER, OAuthBearerClient, format_epoch_ms, validate_extensions

__all__ = ["ClientCredentialsRetriever", "FileTokenRetriever", "MskIamTokenProvider",
           "OAuthBearerCredentials", "OAuthBearerToken", "RefreshConfig", "TokenLogin", "decode_jwt_claims",
           "msk_iam_provider", "refresh_at_ms", "token_from_access_token"]

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Tokens

@dataclass(frozen=True, repr=False)
class OAuthBearerToken:
    """A bearer token and what the client needs to know of it.

    ``value``: the token as sent (a JWT, or any RFC 6750 b64token); ``expires_ms``: its
    expiry, milliseconds since the epoch; ``principal``: whom it names (for messages);
    ``start_ms``: when it was issued (a JWT's ``iat``; Java refreshes relative to it);
    ``extensions``: SASL extensions to send with it (KIP-342); ``scope``: its scopes.
    ``repr`` never shows the value.
    """

    value: str
    expires_ms: int
    principal: Optional[str] = None
    start_ms: Optional[int] = None
    extensions: Mapping[str, str] = field(default_factory=dict)
    scope: FrozenSet[str] = frozenset()

    @property
    def lifetime_ms(self) -> int:
        """Java's ``OAuthBearerToken.lifetimeMs()``: the expiry, ms since the epoch."""
        return self.expires_ms

    def expired(self, now_ms: Optional[float] = None) -> bool:
        return (time.time() * 1000 if now_ms is None else now_ms) >= self.expires_ms

    def __repr__(self) -> str:
        return (f"OAuthBearerToken(value={HIDDEN}, principal={self.principal!r}, "
                f"expires={format_epoch_ms(self.expires_ms)})")


def _b64url_decode(text: str) -> bytes:
    text = text.strip()
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_jwt_claims(value: str) -> Dict[str, Any]:
    """The claims of a JWT (its payload, base64url JSON), *not verified*: the broker checks
    the signature. ValueError when ``value`` is not a JWT in compact serialisation."""
    parts = value.split(".")
    if len(parts) != 3 or not parts[1]:
        raise ValueError("not a JWT (three base64url parts separated by '.')")
    try:
        claims = json.loads(_b64url_decode(parts[1]))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("the JWT's payload is not base64url-encoded JSON") from None
    if not isinstance(claims, dict):
        raise ValueError("the JWT's payload is not a JSON object")
    return claims


def _number(claims: Mapping[str, Any], name: str) -> Optional[float]:
    v = claims.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError(f"the JWT's {name!r} claim must be a non-negative number")
    return float(v)


def _scopes(raw: Any) -> FrozenSet[str]:
    # RFC 8693 section 4.2: a space-separated string; some issuers send a JSON array.
    if isinstance(raw, str):
        return frozenset(raw.split())
    if isinstance(raw, (list, tuple)):
        return frozenset(s for s in raw if isinstance(s, str))
    return frozenset()


def token_from_access_token(value: str, *, sub_claim_name: str = "sub",
                            scope_claim_name: str = "scope",
                            expires_in_s: Optional[float] = None,
                            default_principal: Optional[str] = None,
                            require_subject: bool = True,
                            now_ms: Optional[float] = None) -> OAuthBearerToken:
    """An :class:`OAuthBearerToken` for an access token, as Java's
    ``LoginAccessTokenValidator`` reads it: a JWT's ``exp`` (required), ``iat``, subject
    (``sub_claim_name``, required when ``require_subject``) and scope. A token that is not
    a JWT is accepted only with ``expires_in_s`` (an OAuth response's ``expires_in``),
    its principal then ``default_principal``. ValueError says what is missing."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("the access token is empty")
    value = value.strip()
    now = time.time() * 1000 if now_ms is None else now_ms
    try:
        claims = decode_jwt_claims(value)
    except ValueError:
        if expires_in_s is None:
            raise
        return OAuthBearerToken(value, int(now + expires_in_s * 1000), default_principal)
    exp = _number(claims, "exp")
    if exp is None:
        if expires_in_s is None:
            raise ValueError("the JWT has no 'exp' claim (and no expires_in came with it)")
        expires_ms = int(now + expires_in_s * 1000)
    else:
        expires_ms = int(exp * 1000)
    iat = _number(claims, "iat")
    subject = claims.get(sub_claim_name)
    if isinstance(subject, str) and subject.strip():
        principal: Optional[str] = subject.strip()
    elif require_subject:
        raise ValueError(f"the JWT has no {sub_claim_name!r} claim (sasl.oauthbearer.sub.claim.name)")
    else:
        principal = default_principal
    return OAuthBearerToken(value, expires_ms, principal,
                            None if iat is None else int(iat * 1000),
                            scope=_scopes(claims.get(scope_claim_name)))


def _describe(fn: Callable) -> str:
    """A name for a callable in messages: ``module.qualname`` when it has one."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({_describe(fn.func)})"
    name = getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", None)
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)
    if name is None:
        return repr(fn)
    return f"{module}.{name}" if module and module not in ("builtins", "__main__") else name


def _takes_an_argument(fn: Callable) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL):
            return True
    return False


# Seconds since the epoch beyond this (year 5138) are surely milliseconds: librdkafka's and
# confluent-kafka's oauth_cb returns seconds; the MSK signer returns milliseconds.
_MAX_EPOCH_SECONDS = 1e11


def _token_from_result(result: Any, name: str, *, sub_claim_name: str,
                       scope_claim_name: str) -> OAuthBearerToken:
    """What a provider returned, as confluent-kafka's ``oauth_cb`` contract has it."""
    if isinstance(result, OAuthBearerToken):
        return result
    if isinstance(result, str):
        try:
            return token_from_access_token(result, sub_claim_name=sub_claim_name,
                                           scope_claim_name=scope_claim_name, require_subject=False)
        except ValueError as exc:
            raise TypeError(f"returned a str that is not a JWT with an 'exp' claim ({exc}); "
                            f"return (token, expiry_epoch_seconds) instead") from None
    if not isinstance(result, (tuple, list)) or not 2 <= len(result) <= 4:
        raise TypeError(f"returned {type(result).__name__}; expected (token, expiry_epoch_seconds"
                        f"[, principal[, extensions]]), an OAuthBearerToken or a JWT str")
    value, expiry = result[0], result[1]
    principal = result[2] if len(result) > 2 else None
    extensions = result[3] if len(result) > 3 else None
    if not isinstance(value, str) or not value:
        raise TypeError(f"returned a token of type {type(value).__name__}; expected a non-empty str")
    if isinstance(expiry, bool) or not isinstance(expiry, (int, float)):
        raise TypeError(f"returned an expiry of type {type(expiry).__name__}; expected seconds "
                        f"since the epoch (int or float)")
    if expiry > _MAX_EPOCH_SECONDS:
        raise ValueError(f"returned the expiry {expiry!r}, which looks like milliseconds; the "
                         f"expiry is in seconds since the epoch (divide by 1000)")
    if principal is not None and not isinstance(principal, str):
        raise TypeError(f"returned a principal of type {type(principal).__name__}; expected a str")
    if extensions is not None and not isinstance(extensions, Mapping):
        raise TypeError(f"returned extensions of type {type(extensions).__name__}; expected a dict")
    if principal is None:
        try:
            principal = decode_jwt_claims(value).get(sub_claim_name)
        except ValueError:
            principal = None
        principal = principal if isinstance(principal, str) else None
    return OAuthBearerToken(value, int(expiry * 1000), principal or None,
                            extensions=validate_extensions(extensions or {}))


def provider_source(provider: Callable, config_string: Optional[str] = None, *,
                    sub_claim_name: str = "sub", scope_claim_name: str = "scope"
                    ) -> Callable[[], OAuthBearerToken]:
    """A token source over an application's callable: ``provider(config_string)`` (or
    ``provider()`` when it takes no argument); the result as confluent-kafka's ``oauth_cb``
    returns it. The source's ``description`` names the callable."""
    with_arg = _takes_an_argument(provider)
    name = f"the token provider {_describe(provider)}"

    def fetch() -> OAuthBearerToken:
        result = provider(config_string) if with_arg else provider()
        try:
            return _token_from_result(result, name, sub_claim_name=sub_claim_name,
                                      scope_claim_name=scope_claim_name)
        except (TypeError, ValueError) as exc:
            raise TokenProviderError(f"{name} {exc}") from None

    fetch.description = name            # type: ignore[attr-defined]
    return fetch


# ---------------------------------------------------------------------------
# When to renew (Java's ExpiringCredentialRefreshingLogin.refreshMs)

@dataclass(frozen=True)
class RefreshConfig:
    """``sasl.login.refresh.*``: Java's defaults and ranges (SaslConfigs)."""

    window_factor: float = 0.8      # 0.5 .. 1.0
    window_jitter: float = 0.05     # 0 .. 0.25
    min_period_s: int = 60          # 0 .. 900
    buffer_s: int = 300             # 0 .. 3600


def refresh_at_ms(token: OAuthBearerToken, now_ms: int, cfg: RefreshConfig = RefreshConfig(),
                  rng: Any = random) -> int:
    """When to obtain the next token, ms since the epoch, by Java's rules: at
    ``window_factor`` (+ up to ``window_jitter``) of the token's lifetime from its start
    (``iat``, else now), but no later than ``buffer_s`` before its expiry and no sooner than
    ``min_period_s`` from now; both bounds are ignored when the remaining lifetime is
    shorter than their sum, and the refresh comes at the factor of what remains (so a
    5-second token is renewed after about 4 seconds whatever the bounds)."""
    expire = token.expires_ms
    start = token.start_ms if token.start_ms is not None else now_ms
    pct = cfg.window_factor + cfg.window_jitter * rng.random()
    if now_ms + 1000 * (cfg.min_period_s + cfg.buffer_s) > expire:
        return now_ms + int((expire - now_ms) * pct)
    proposed = start + int((expire - start) * pct)
    end_buffer = expire - 1000 * cfg.buffer_s
    if proposed > end_buffer:
        return end_buffer
    min_refresh = now_ms + 1000 * cfg.min_period_s
    if proposed < min_refresh:
        return min_refresh
    return proposed


# ---------------------------------------------------------------------------
# The login: the current token, renewed in the background

class TokenLogin:
    """The current token of one producer, renewed by a daemon thread (see the module
    docstring). ``fetch()`` returns an :class:`OAuthBearerToken` or raises; ``description``
    names the source in messages. ``wakeup`` (given to :meth:`start`) is called after every
    attempt, so that connections waiting for the first token go on at once."""

    def __init__(self, fetch: Callable[[], OAuthBearerToken], description: str, *,
                 refresh: RefreshConfig = RefreshConfig(), retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 10000, scrub: Callable[[str], str] = str,
                 rng: Any = None):
        self._fetch = fetch
        self.description = description
        self.refresh = refresh
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._scrub = scrub
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._token: Optional[OAuthBearerToken] = None
        self._error: Optional[TokenProviderError] = None   # since the last success
        self._wakeup: Optional[Callable[[], None]] = None
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._fetching = False              # a provider call is under way
        self._refresh_requested = False
        self.stop_event = threading.Event()                 # set by close(): sleeps end
        #: Tokens obtained, failed attempts, and the instant (epoch ms) of the next attempt.
        self.fetches = 0
        self.failures = 0
        self.next_refresh_ms: Optional[int] = None
        # Where the login logs: this module's logger, or the producer's (start's ``log``).
        self.log = log

    # -- lifecycle -------------------------------------------------------------------
    def start(self, wakeup: Optional[Callable[[], None]] = None, log=None) -> None:
        with self._lock:
            if wakeup is not None:
                self._wakeup = wakeup
            if log is not None:
                self.log = log
            if self._thread is not None or self._stopping:
                return
            self._thread = threading.Thread(target=self._run, name="kproducer-oauth", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stops the thread. A provider call under way is not waited for (nor interrupted:
        the thread, a daemon, ends when it returns), so that a hung identity provider
        cannot hold up the producer's close()."""
        with self._lock:
            self._stopping = True
            self._wakeup = None
            self._wake.notify_all()
            thread, fetching = self._thread, self._fetching
        self.stop_event.set()
        if thread is not None and thread is not threading.current_thread() and not fetching:
            thread.join(timeout)

    def last_error(self) -> Optional[str]:
        """Why the last attempt failed, when it did (None since a success)."""
        error = self._error
        return None if error is None else str(error).removeprefix("OAUTHBEARER: ")

    def refresh_now(self) -> None:
        """Renews the token at once (tests; and an application that knows its token was
        revoked)."""
        with self._lock:
            self._refresh_requested = True
            self._wake.notify_all()

    # -- what the I/O thread reads -----------------------------------------------------
    def pending(self) -> bool:
        """True while no usable token exists and no attempt has failed since the last
        success: the first token (or an overdue renewal) is on its way."""
        self.start()
        with self._lock:
            if self._token is not None and not self._token.expired():
                return False
            return self._error is None and not self._stopping

    def token(self) -> OAuthBearerToken:
        """The current token; :class:`TokenProviderError` naming the source and the cause
        when there is no usable one."""
        self.start()
        with self._lock:
            token, error = self._token, self._error
        now = time.time() * 1000
        if token is not None and not token.expired(now):
            return token
        if token is not None:
            why = (": " + str(error).removeprefix("OAUTHBEARER: ") if error is not None
                   else " (a new one is still being obtained)")
            exc = TokenProviderError(
                f"OAUTHBEARER: the token{_of(token.principal)} from {self.description} expired at "
                f"{format_epoch_ms(token.expires_ms)} and no new one could be obtained{why}")
        elif error is not None:
            exc = TokenProviderError(str(error))
        else:
            exc = TokenProviderError(f"OAUTHBEARER: no token from {self.description} yet")
        if error is not None:
            exc.__cause__ = error.__cause__
        raise exc

    # -- the thread --------------------------------------------------------------------
    def _notify(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None:
            try:
                wakeup()
            except Exception:       # the network client closed meanwhile
                pass

    def _sleep_until(self, when_ms: float) -> bool:
        """Waits until ``when_ms`` (epoch ms), close() or refresh_now(); False on close."""
        with self._lock:
            self.next_refresh_ms = int(when_ms)
            while not self._stopping and not self._refresh_requested:
                left = when_ms / 1000 - time.time()
                if left <= 0:
                    break
                self._wake.wait(min(left, 60.0))
            self._refresh_requested = False
            return not self._stopping

    def _run(self) -> None:
        failures = 0
        while not self._stopping:
            started = time.monotonic()
            with self._lock:
                self._fetching = True
            try:
                token = self._fetch()
                if not isinstance(token, OAuthBearerToken):
                    raise TokenProviderError(f"{self.description} returned {type(token).__name__}, "
                                             f"not an OAuthBearerToken")
                now = time.time() * 1000
                if token.expired(now):
                    raise TokenProviderError(
                        f"{self.description} returned a token that expired at "
                        f"{format_epoch_ms(token.expires_ms)} (now {format_epoch_ms(now)}: is "
                        f"this machine's clock right?)")
            except BaseException as exc:    # the application's code: anything may come out
                with self._lock:
                    self._fetching = False
                if self._stopping:
                    return
                failures += 1
                error = self._wrap(exc)
                delay = self._backoff.backoff(failures - 1)
                with self._lock:
                    self._error = error
                    self.failures += 1
                    usable = self._token is not None and not self._token.expired()
                self.log.log(logging.WARNING if usable else logging.ERROR,
                             "%s; %s, trying again in %d ms", error,
                             "the current token still serves" if usable else "no usable token",
                             delay)
                self._notify()
                if not isinstance(exc, Exception):      # KeyboardInterrupt, SystemExit
                    return
                if not self._sleep_until(time.time() * 1000 + delay):
                    return
                continue
            with self._lock:
                self._fetching = False
            if self._stopping:
                return
            failures = 0
            elapsed = time.monotonic() - started
            if elapsed > 10:
                self.log.warning("OAUTHBEARER: %s took %.1f s to return a token", self.description,
                                 elapsed)
            with self._lock:
                self._token = token
                self._error = None
                self.fetches += 1
            now = int(time.time() * 1000)
            when = refresh_at_ms(token, now, self.refresh, self._rng)
            self.log.info("OAUTHBEARER: token%s from %s, valid until %s; renewing at %s",
                          _of(token.principal), self.description, format_epoch_ms(token.expires_ms),
                          format_epoch_ms(when))
            self._notify()
            if not self._sleep_until(when):
                return

    def _wrap(self, exc: BaseException) -> TokenProviderError:
        if isinstance(exc, TokenProviderError):
            message = str(exc)
        else:
            message = (f"OAUTHBEARER: {self.description} failed: {type(exc).__name__}"
                       + (f": {exc}" if str(exc) else ""))
        if not message.startswith("OAUTHBEARER"):
            message = "OAUTHBEARER: " + message
        error = TokenProviderError(self._scrub(message))
        error.__cause__ = exc
        return error


def _of(principal: Optional[str]) -> str:
    return f" of principal {principal!r}" if principal else ""


# ---------------------------------------------------------------------------
# OIDC client credentials (KIP-768; Java's HttpAccessTokenRetriever)

# Java's HttpAccessTokenRetriever.UNRETRYABLE_HTTP_CODES: an answer that another try would
# not change (bad credentials above all).
UNRETRYABLE_HTTP_CODES = frozenset({400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412,
                                    413, 414, 415, 501, 505})
_MAX_BODY = 1000
_DEFAULT_TIMEOUT_MS = 10_000
# Where Linux distributions keep the system's CA bundle, for a Python whose OpenSSL looks
# elsewhere (the same places kproducer's own TLS looks, docs/security.md).
_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
               "/etc/ssl/ca-bundle.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
               "/etc/ssl/cert.pem")


class _Unretryable(Exception):
    pass


def https_context(cafile: Optional[str] = None, check_hostname: bool = True) -> ssl.SSLContext:
    """The trust of the broker connections for the token endpoint: ``cafile`` (the
    producer's ``ssl.truststore.location`` / ``ssl.ca.location``) or the system's store."""
    ctx = ssl.create_default_context(cafile=cafile)
    if cafile is None and not ctx.get_ca_certs():
        paths = ssl.get_default_verify_paths()
        if not (paths.cafile and os.path.isfile(paths.cafile)) and not (
                paths.capath and os.path.isdir(paths.capath) and os.listdir(paths.capath)):
            for bundle in _CA_BUNDLES:
                if os.path.isfile(bundle):
                    ctx.load_verify_locations(cafile=bundle)
                    break
    if not check_hostname:
        ctx.check_hostname = False
    return ctx


class _ReadTimeout:
    """Java's two timeouts on an http.client connection: ``sasl.login.connect.timeout.ms``
    for the TCP (and TLS) handshake, ``sasl.login.read.timeout.ms`` for each read after it."""

    def __init__(self, *args, connect_timeout: float, read_timeout: float, **kw):
        kw["timeout"] = connect_timeout
        super().__init__(*args, **kw)
        self._read_timeout = read_timeout

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self._read_timeout)


class _TimedHTTPSConnection(_ReadTimeout, http.client.HTTPSConnection):
    pass


class _TimedHTTPConnection(_ReadTimeout, http.client.HTTPConnection):
    def __init__(self, *args, **kw):
        kw.pop("context", None)
        super().__init__(*args, **kw)


class _TimedHandler(urllib.request.HTTPSHandler, urllib.request.HTTPHandler):
    def __init__(self, context: Optional[ssl.SSLContext], connect_timeout: float, read_timeout: float):
        urllib.request.HTTPSHandler.__init__(self, context=context)
        self._timeouts = {"connect_timeout": connect_timeout, "read_timeout": read_timeout}

    def https_open(self, req):
        return self.do_open(functools.partial(_TimedHTTPSConnection, **self._timeouts), req,
                            context=self._context)

    def http_open(self, req):
        return self.do_open(functools.partial(_TimedHTTPConnection, **self._timeouts), req)


def _format_error_body(body: str) -> str:
    """Java's HttpAccessTokenRetriever.formatErrorMessage: RFC 6749 section 5.2's
    ``{error - error_description}`` (Okta's errorCode/errorSummary too)."""
    if not body or not body.strip():
        return "{}"
    try:
        doc = json.loads(body)
    except ValueError:
        return "{" + body[:_MAX_BODY] + "}"
    if isinstance(doc, dict):
        if "error" in doc:
            return f"{{{json.dumps(doc.get('error'))} - {json.dumps(doc.get('error_description'))}}}"
        if "errorCode" in doc:
            return f"{{{json.dumps(doc.get('errorCode'))} - {json.dumps(doc.get('errorSummary'))}}}"
    return body[:_MAX_BODY]


class ClientCredentialsRetriever:
    """OAuth 2 client credentials (RFC 6749 section 4.4) against an OIDC token endpoint,
    as Java's ``HttpAccessTokenRetriever`` does it: ``POST grant_type=client_credentials
    [&scope=...]`` with ``Authorization: Basic base64(id:secret)`` (each URL-encoded first
    when ``urlencode_header``, KIP-1025), ``Accept: application/json``; the answer's
    ``access_token`` read as :func:`token_from_access_token` reads it (its ``expires_in``
    serves only a token that is not a JWT).

    Each call retries a failed request (I/O errors and unexpected HTTP codes) with
    ``retry_backoff_ms`` doubling, for at most ``retry_backoff_max_ms`` in all (Java's
    ``Retry``); an answer in :data:`UNRETRYABLE_HTTP_CODES` (bad credentials: 400, 401,
    403, ...) and a certificate that does not verify fail at once. ``ssl_context`` is built
    lazily by ``ssl_context_factory`` (the CA files are read when the producer starts, not
    when its configuration is built). ``stop`` (a threading.Event) ends the waits early."""

    def __init__(self, url: str, client_id: str, client_secret: str, scope: Optional[str] = None, *,
                 ssl_context_factory: Callable[[], Optional[ssl.SSLContext]] = lambda: None,
                 connect_timeout_ms: Optional[int] = None, read_timeout_ms: Optional[int] = None,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 10000,
                 urlencode_header: bool = False, sub_claim_name: str = "sub",
                 scope_claim_name: str = "scope", stop: Optional[threading.Event] = None):
        self.url = url
        self.client_id = client_id
        self._secret = client_secret
        self.scope = scope.strip() if scope and scope.strip() else None
        self._ssl_context_factory = ssl_context_factory
        self._opener = None
        self.connect_timeout_ms = connect_timeout_ms if connect_timeout_ms is not None else _DEFAULT_TIMEOUT_MS
        self.read_timeout_ms = read_timeout_ms if read_timeout_ms is not None else _DEFAULT_TIMEOUT_MS
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.urlencode_header = urlencode_header
        self.sub_claim_name = sub_claim_name
        self.scope_claim_name = scope_claim_name
        self.stop = stop if stop is not None else threading.Event()
        self.description = f"the OIDC token endpoint {_safe_url(url)} (client id {client_id!r})"
        #: HTTP requests made (attempts, retries included).
        self.requests = 0

    def __repr__(self) -> str:
        return f"ClientCredentialsRetriever({_safe_url(self.url)!r}, client_id={self.client_id!r}, secret={HIDDEN})"

    def _authorization(self) -> str:
        cid, secret = self.client_id.strip(), self._secret.strip()
        if self.urlencode_header:
            cid, secret = urllib.parse.quote_plus(cid), urllib.parse.quote_plus(secret)
        # RFC 7617: the standard (not URL-safe) base64 alphabet (KAFKA-14496).
        return "Basic " + base64.b64encode(f"{cid}:{secret}".encode("utf-8")).decode("ascii")

    def _body(self) -> bytes:
        params = [("grant_type", "client_credentials")]
        if self.scope:
            params.append(("scope", self.scope))
        return urllib.parse.urlencode(params).encode("ascii")

    def _open(self):
        if self._opener is None:
            if self.url.lower().startswith("http:"):
                log.warning("OAUTHBEARER: %s is plain HTTP: the client secret and the tokens "
                            "cross the network unencrypted", _safe_url(self.url))
            # 0 is "no timeout", as for Java's HttpURLConnection (a socket's 0 is non-blocking).
            handler = _TimedHandler(self._ssl_context_factory(), self.connect_timeout_ms / 1000 or None,
                                    self.read_timeout_ms / 1000 or None)
            self._opener = urllib.request.build_opener(handler)
        return self._opener

    def _post_once(self) -> str:
        self.requests += 1
        req = urllib.request.Request(self.url, data=self._body(), method="POST", headers={
            "Authorization": self._authorization(), "Accept": "application/json",
            "Cache-Control": "no-cache", "Content-Type": "application/x-www-form-urlencoded"})
        try:
            with self._open().open(req) as resp:
                status, body = resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            status = exc.code
            try:
                body = exc.read().decode("utf-8", "replace")
            except Exception:
                body = ""
            exc.close()
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise _Unretryable(f"its certificate does not verify: {reason.verify_message or reason} "
                                   f"(the trust is the producer's: ssl.truststore.location / "
                                   f"ssl.ca.location, else the system's CAs)") from exc
            raise OSError(f"cannot reach it: {reason}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise OSError(f"the request failed: {type(exc).__name__}: {exc}") from exc
        if status in (200, 201):
            if not body.strip():
                raise OSError(f"HTTP {status} with an empty body")
            return body
        if status in UNRETRYABLE_HTTP_CODES:
            raise _Unretryable(f"HTTP {status} {_format_error_body(body)}; not retried")
        raise OSError(f"unexpected HTTP {status} {_format_error_body(body)}")

    def _post(self) -> str:
        """Java's Retry.execute: attempts with doubling waits, for retry_backoff_max_ms."""
        end = time.monotonic() + self.retry_backoff_max_ms / 1000
        attempt, last = 0, None
        while True:
            attempt += 1
            try:
                return self._post_once()
            except _Unretryable as exc:
                raise TokenProviderError(f"OAUTHBEARER: {self.description}: {exc}") from exc.__cause__
            except OSError as exc:
                last = exc
            wait = min(self.retry_backoff_ms * 2 ** (attempt - 1) / 1000, end - time.monotonic())
            if wait <= 0 or self.stop.wait(wait):
                break
        raise TokenProviderError(
            f"OAUTHBEARER: {self.description}: {last} (after {attempt} attempt(s) within "
            f"sasl.login.retry.backoff.max.ms={self.retry_backoff_max_ms})") from last.__cause__ or last

    def __call__(self) -> OAuthBearerToken:
        body = self._post()
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        token = doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token.strip():
            snippet = body if len(body) <= _MAX_BODY else body[:_MAX_BODY] + f" (first {_MAX_BODY} of {len(body)} characters)"
            raise TokenProviderError(f"OAUTHBEARER: the answer of {self.description} has no "
                                     f"access_token: ({_hide_tokens(snippet)})")
        expires_in = doc.get("expires_in")
        if isinstance(expires_in, str) and expires_in.strip().isdigit():
            expires_in = int(expires_in)
        if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)):
            expires_in = None
        try:
            return token_from_access_token(token, sub_claim_name=self.sub_claim_name,
                                           scope_claim_name=self.scope_claim_name,
                                           expires_in_s=expires_in, default_principal=self.client_id)
        except ValueError as exc:
            raise TokenProviderError(f"OAUTHBEARER: the access token from {self.description} "
                                     f"cannot be used: {exc}") from None


class FileTokenRetriever:
    """A token read from a file at every renewal (a ``file:`` token endpoint URL, Java's
    ``FileTokenRetriever``): a JWT, as a workload identity's projected token file holds it."""

    def __init__(self, path: str, *, sub_claim_name: str = "sub", scope_claim_name: str = "scope"):
        self.path = path
        self.sub_claim_name = sub_claim_name
        self.scope_claim_name = scope_claim_name
        self.description = f"the token file {path}"

    def __call__(self) -> OAuthBearerToken:
        try:
            with open(self.path, encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as exc:
            raise TokenProviderError(f"OAUTHBEARER: cannot read {self.description}: {exc.strerror or exc}") from exc
        try:
            return token_from_access_token(value, sub_claim_name=self.sub_claim_name,
                                           scope_claim_name=self.scope_claim_name)
        except ValueError as exc:
            raise TokenProviderError(f"OAUTHBEARER: {self.description} holds no usable token: {exc}") from None


def _safe_url(url: str) -> str:
    """The URL without user info or query (either might carry a secret)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _hide_tokens(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if isinstance(doc, dict):
        for k in ("access_token", "refresh_token", "id_token"):
            if k in doc:
                doc[k] = HIDDEN
        return json.dumps(doc)
    return text


# ---------------------------------------------------------------------------
# The SASL credentials of an OAUTHBEARER producer

class OAuthBearerCredentials:
    """What :class:`~kproducer.network.NetworkClient` takes as ``sasl=`` for OAUTHBEARER:
    a :class:`TokenLogin` over a token source, and the per-connection
    :class:`~kproducer.sasl.OAuthBearerClient`.

    ``start(wakeup)`` starts the login (the network client, as it is made); ``pending()``
    tells a connection to wait for the first token; ``new_client()`` raises
    :class:`~kproducer.errors.TokenProviderError` when no usable token exists; ``close()``
    stops the login. ``extensions`` (``sasl.oauthbearer.extensions``) are sent with every
    token, a provider's own extensions added over them."""

    mechanism = OAUTHBEARER

    def __init__(self, fetch: Callable[[], OAuthBearerToken], description: str, *,
                 extensions: Optional[Mapping[str, str]] = None,
                 refresh: RefreshConfig = RefreshConfig(), retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 10000, secrets: Iterable[str] = (),
                 stop: Optional[threading.Event] = None):
        self.description = description
        self._extensions = validate_extensions(extensions or {})
        self._secrets = tuple(s for s in secrets if s)
        self.login = TokenLogin(fetch, description, refresh=refresh,
                                retry_backoff_ms=retry_backoff_ms,
                                retry_backoff_max_ms=retry_backoff_max_ms, scrub=self.scrub)
        if stop is not None:                 # the retriever's waits end with the login
            self.login.stop_event = stop

    def start(self, wakeup: Optional[Callable[[], None]] = None, log=None) -> None:
        """Starts the login; ``log``: the producer's logger for its messages."""
        self.login.start(wakeup, log)

    def pending(self) -> bool:
        return self.login.pending()

    def close(self) -> None:
        self.login.close()

    def new_client(self) -> OAuthBearerClient:
        token = self.login.token()
        return OAuthBearerClient(token.value, {**self._extensions, **dict(token.extensions)},
                                 expires_ms=token.expires_ms, source=self.description,
                                 principal=token.principal, renewal=self.login.last_error)

    def scrub(self, text: str) -> str:
        """``text`` without the client secret or the current token."""
        token = self.login._token
        for secret in (*self._secrets, token.value if token is not None else ""):
            if secret:
                text = text.replace(secret, HIDDEN)
        return text

    def __repr__(self) -> str:
        return f"OAuthBearerCredentials({self.description})"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("OAuthBearerCredentials are not picklable (pickle the producer configuration)")


# ---------------------------------------------------------------------------
# AWS MSK IAM

def _msk_signer():
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    except ImportError as exc:
        raise ImportError("msk_iam_provider needs the 'aws-msk-iam-sasl-signer-python' package, "
                          "which is not installed: pip install 'kproducer[msk]'") from exc
    return MSKAuthTokenProvider


class MskIamTokenProvider:
    """The token provider :func:`msk_iam_provider` makes: picklable (a producer
    configuration holding it can be shipped, to Spark executors for instance), the signer
    imported again where it runs."""

    def __init__(self, region: str, *, aws_profile: Optional[str] = None,
                 role_arn: Optional[str] = None, sts_session_name: Optional[str] = None,
                 credentials_provider: Any = None):
        if not isinstance(region, str) or not region:
            raise ValueError("msk_iam_provider needs the cluster's AWS region, e.g. 'us-east-1'")
        if sum(x is not None for x in (aws_profile, role_arn, credentials_provider)) > 1:
            raise ValueError("give at most one of aws_profile, role_arn and credentials_provider")
        _msk_signer()                         # a missing package fails now, not in the login
        self.region, self.aws_profile, self.role_arn = region, aws_profile, role_arn
        self.sts_session_name, self.credentials_provider = sts_session_name, credentials_provider
        # How kproducer's messages name this provider.
        self.__qualname__ = f"msk_iam_provider({region!r})"
        self.__module__ = __name__

    def __call__(self, _config: Optional[str] = None) -> OAuthBearerToken:
        signer = _msk_signer()
        if self.role_arn is not None:
            args = (self.region, self.role_arn) + ((self.sts_session_name,) if self.sts_session_name else ())
            value, expiry_ms = signer.generate_auth_token_from_role_arn(*args)
        elif self.aws_profile is not None:
            value, expiry_ms = signer.generate_auth_token_from_profile(self.region, self.aws_profile)
        elif self.credentials_provider is not None:
            value, expiry_ms = signer.generate_auth_token_from_credentials_provider(
                self.region, self.credentials_provider)
        else:
            value, expiry_ms = signer.generate_auth_token(self.region)
        # The signer's expiry is in milliseconds since the epoch (oauth_cb's is in seconds).
        return OAuthBearerToken(value, int(expiry_ms), principal=f"aws-msk-iam:{self.region}")

    def __repr__(self) -> str:
        return self.__qualname__


def msk_iam_provider(region: str, *, aws_profile: Optional[str] = None,
                     role_arn: Optional[str] = None, sts_session_name: Optional[str] = None,
                     credentials_provider: Any = None) -> MskIamTokenProvider:
    """A token provider for Amazon MSK with IAM access control, over AWS's
    ``aws-msk-iam-sasl-signer-python`` (``pip install 'kproducer[msk]'``)::

        Producer(bootstrap_servers="b-1.mycluster...amazonaws.com:9098",
                 security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
                 sasl_oauthbearer_token_provider=msk_iam_provider("us-east-1"))

    The token is a SigV4-signed ``kafka-cluster:Connect`` URL (valid 15 minutes) made from
    the default AWS credentials chain, or ``aws_profile``, or the role ``role_arn`` assumed
    (``sts_session_name``), or a botocore ``credentials_provider``. ImportError naming the
    package when it is missing; ValueError for conflicting arguments.
    """
    return MskIamTokenProvider(region, aws_profile=aws_profile, role_arn=role_arn,
                               sts_session_name=sts_session_name,
                               credentials_provider=credentials_provider)
