"""SASL client mechanisms: PLAIN (RFC 4616), SCRAM (RFC 5802, SCRAM-SHA-256/512 per RFC 7677)
and OAUTHBEARER (RFC 7628 as Kafka uses it: KIP-255, with KIP-342's extensions).

Each mechanism is a small state machine driven by the network client, one
instance per connection::

    client = credentials.new_client()
    token = client.first_message()            # -> SaslAuthenticate(auth_bytes=token)
    while not client.complete:
        token = client.respond(server_bytes)  # the next SaslAuthenticate, or None when done

SCRAM exchange (``client-first`` carries a random nonce, ``server-first`` the
combined nonce, salt and iteration count, ``client-final`` the proof, and
``server-final`` the server's signature)::

    n,,n=user,r=<cnonce>                       ->
                                               <- r=<cnonce+snonce>,s=<salt b64>,i=4096
    c=biws,r=<cnonce+snonce>,p=<proof b64>     ->
                                               <- v=<server signature b64>  |  e=<error>

The exchange only counts as authenticated once the server's signature has been
verified (constant-time compare): a server that answers ``e=...``, a wrong
signature or anything malformed raises :class:`~kproducer.errors.AuthenticationError`,
and the network client then closes the connection instead of using it.

OAUTHBEARER sends one message, the GS2 header, the bearer token and the SASL extensions,
each key=value pair ended by ``^A`` (0x01)::

    n,[a=<authzid>],^Aauth=Bearer <token>^A[key=value^A ...]^A  ->
                                                  <- ""                       (success)
                                                  <- {"status":"invalid_token"}  (failure)
    ^A                                            ->
                                                  <- SASL_AUTHENTICATION_FAILED (58)

On failure the server answers with a JSON error (RFC 7628 section 3.2.2) and waits for the
client's dummy ``^A`` before it sends the final error; :class:`OAuthBearerClient` keeps the
JSON so the :class:`~kproducer.errors.AuthenticationError` names it. Where the token comes
from (a callable, OIDC client credentials, AWS MSK IAM) and when it is refreshed is
:mod:`kproducer.oauth`'s business.

Credentials never appear in ``repr()``, log messages or exception text: the
objects here hide them, and so do the SaslAuthenticate payloads built from them
(:class:`SecretBytes`).

Normalisation: Kafka's own clients and brokers (Java's ``ScramFormatter.normalize``,
librdkafka) use the raw UTF-8 bytes of the user name and password, not RFC 5802's
SASLprep, and the credentials stored by ``kafka-configs`` are salted from those bytes.
kproducer does the same by default, so any password that works with the Java client
works here; ``ScramClient(..., saslprep=True)`` applies SASLprep (RFC 4013,
:func:`saslprep`) for servers that follow the RFC to the letter. The two agree on every
printable ASCII password. PLAIN sends the strings as given, UTF-8 encoded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import stringprep
import time
import unicodedata
from typing import Dict, Mapping, Optional

from .errors import AuthenticationError

__all__ = ["MECHANISMS", "SCRAM_HASHES", "OAuthBearerClient", "PlainClient", "SaslCredentials",
           "ScramClient", "SecretBytes", "saslprep", "scram_salted_password", "scram_keys",
           "validate_extensions", "HIDDEN"]

HIDDEN = "[hidden]"

#: SCRAM mechanism name -> hashlib name (RFC 7677 for SHA-256; SHA-512 as Kafka has it).
SCRAM_HASHES: Dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Mechanisms with a user name and password (:class:`SaslCredentials`).
MECHANISMS = ("PLAIN", *SCRAM_HASHES)
#: OAUTHBEARER: a bearer token (:class:`kproducer.oauth.OAuthBearerCredentials`).
OAUTHBEARER = "OAUTHBEARER"

# Kafka's ScramMechanism.minIterations: fewer would make a stolen verifier cheap to crack,
# so a server asking for fewer is refused. The upper bound only stops a hostile server
# from making the client spin in PBKDF2 (Kafka itself stores at most 16384).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 1_000_000


class SecretBytes(bytes):
    """Bytes whose ``repr`` hides them: SASL payloads carrying a password or a proof."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<{len(self)} secret bytes>"

    __str__ = __repr__


# ---------------------------------------------------------------------------
# SASLprep (RFC 4013, a profile of stringprep, RFC 3454), with Python's stringprep tables.

def saslprep(text: str, *, allow_unassigned: bool = True) -> str:
    """Prepares a user name or password with SASLprep (RFC 4013).

    Maps non-ASCII spaces to U+0020 and drops characters "commonly mapped to
    nothing", normalises to NFKC, refuses prohibited characters (controls,
    private use, surrogates, ...) and bad bidirectional strings. SCRAM treats
    its inputs as queries (RFC 5802 section 2.2), so unassigned code points are
    allowed by default. Raises ``ValueError`` naming the problem by position,
    never by the character itself (the input may be a password).
    """
    if text.isascii() and all(" " <= c <= "~" for c in text):
        return text  # printable ASCII: every step below is the identity
    mapped = "".join(" " if stringprep.in_table_c12(c) else c
                     for c in text if not stringprep.in_table_b1(c))
    out = unicodedata.normalize("NFKC", mapped)
    if not out:
        return out
    prohibited = (stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3,
                  stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6,
                  stringprep.in_table_c7, stringprep.in_table_c8, stringprep.in_table_c9)
    for i, c in enumerate(out):
        if any(check(c) for check in prohibited):
            raise ValueError(f"character {i + 1} is prohibited by SASLprep (RFC 4013 section 2.3)")
        if not allow_unassigned and stringprep.in_table_a1(c):
            raise ValueError(f"character {i + 1} is an unassigned code point")
    # RFC 3454 section 6: a string with right-to-left characters must not contain
    # left-to-right ones and must start and end with a right-to-left character.
    if any(stringprep.in_table_d1(c) for c in out):
        if any(stringprep.in_table_d2(c) for c in out):
            raise ValueError("mixes right-to-left and left-to-right characters (RFC 3454 section 6)")
        if not (stringprep.in_table_d1(out[0]) and stringprep.in_table_d1(out[-1])):
            raise ValueError("a right-to-left string must start and end with a right-to-left "
                             "character (RFC 3454 section 6)")
    return out


# ---------------------------------------------------------------------------
# SCRAM arithmetic (RFC 5802 section 3), shared with the test gateway's server side.

_saslprep = saslprep  # ScramClient's keyword argument shadows the name


def scram_salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword := Hi(password, salt, i), Hi being PBKDF2 with HMAC; the password's
    raw UTF-8 bytes, as Kafka's brokers salt them (see the module docstring)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def scram_keys(hash_name: str, salted_password: bytes) -> tuple[bytes, bytes, bytes]:
    """``(ClientKey, StoredKey, ServerKey)`` from a salted password."""
    client_key = hmac.new(salted_password, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", hash_name).digest()
    return client_key, stored_key, server_key


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise AuthenticationError(f"SCRAM: the server's {what} is not valid base64") from None


def _escape_name(name: str) -> str:
    # RFC 5802 section 5.1: ',' and '=' in a saslname are written =2C and =3D.
    return name.replace("=", "=3D").replace(",", "=2C")


def _parse_attributes(message: str, what: str) -> Dict[str, str]:
    """``a=1,b=2`` -> {"a": "1", "b": "2"}; AuthenticationError on anything else."""
    out: Dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise AuthenticationError(f"SCRAM: malformed {what} message from the server")
        out.setdefault(part[0], part[2:])
    return out


# ---------------------------------------------------------------------------
# Mechanisms

class PlainClient:
    """SASL PLAIN (RFC 4616): one message, ``authzid NUL authcid NUL passwd``."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str, authzid: str = ""):
        for value in (username, password, authzid):
            if "\0" in value:
                raise AuthenticationError("PLAIN: the user name and password may not contain NUL")
        self._message = SecretBytes(f"{authzid}\0{username}\0{password}".encode("utf-8"))
        self._sent = False
        self.complete = False

    def first_message(self) -> bytes:
        self._sent = True
        return self._message

    def respond(self, challenge: bytes) -> Optional[bytes]:
        # The server's answer carries nothing (Kafka sends empty bytes); success or
        # failure is its error code, which the network client checks first.
        if not self._sent:
            raise AuthenticationError("PLAIN: server data before the client's message")
        self.complete = True
        return None

    def __repr__(self) -> str:
        return f"PlainClient(username={HIDDEN}, complete={self.complete})"


class ScramClient:
    """The client side of SCRAM (RFC 5802) over any ``hashlib`` hash.

    ``hash_name`` is ``"sha256"`` or ``"sha512"`` for Kafka's SCRAM-SHA-256/512;
    ``"sha1"`` gives RFC 5802's own example. ``nonce`` is for test vectors only
    (default: 24 random bytes, base64). ``extensions`` are extra client-first
    attributes (Kafka's ``tokenauth=true`` for delegation tokens, KIP-48).
    """

    _CLIENT_FIRST, _SERVER_FIRST, _SERVER_FINAL, _DONE = range(4)

    def __init__(self, username: str, password: str, hash_name: str = "sha256", *,
                 nonce: Optional[str] = None, extensions: Optional[Dict[str, str]] = None,
                 min_iterations: int = MIN_ITERATIONS, saslprep: bool = False):
        user, self._password = username, password
        if saslprep:
            try:
                user = _saslprep(username)
                self._password = _saslprep(password)
            except ValueError as exc:
                raise AuthenticationError(f"SCRAM: the user name or password is not valid: {exc}") from None
        self.hash_name = hash_name
        self.mechanism = f"SCRAM-{hash_name.upper().replace('SHA', 'SHA-')}"
        self._nonce = nonce if nonce is not None else _b64(os.urandom(24))
        if not self._nonce or "," in self._nonce or not all("!" <= c <= "~" for c in self._nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self._min_iterations = min_iterations
        ext = "".join(f",{k}={v}" for k, v in (extensions or {}).items())
        self._client_first_bare = f"n={_escape_name(user)},r={self._nonce}{ext}"
        self._state = self._CLIENT_FIRST
        self._server_signature = b""
        self.complete = False

    def first_message(self) -> bytes:
        """client-first-message: GS2 header ``n,,`` (no channel binding) + the bare part."""
        if self._state != self._CLIENT_FIRST:
            raise AuthenticationError("SCRAM: first_message() called twice")
        self._state = self._SERVER_FIRST
        return SecretBytes(f"n,,{self._client_first_bare}".encode("utf-8"))

    def respond(self, challenge: bytes) -> Optional[bytes]:
        """Handles the server's next message; returns the client's answer, or None when done."""
        try:
            text = bytes(challenge).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError("SCRAM: the server's message is not UTF-8") from None
        if self._state == self._SERVER_FIRST:
            return self._client_final(text)
        if self._state == self._SERVER_FINAL:
            self._verify_server_final(text)
            return None
        raise AuthenticationError("SCRAM: unexpected server message after the exchange ended")

    def _client_final(self, server_first: str) -> bytes:
        attrs = _parse_attributes(server_first, "server-first")
        if "m" in attrs:  # RFC 5802: an unknown mandatory extension must fail the exchange
            raise AuthenticationError("SCRAM: the server requires an extension kproducer does not know")
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM authentication failed: the server says "
                                      f"{_printable(attrs['e'])!r}")
        nonce, salt_b64, iterations = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations is None:
            raise AuthenticationError("SCRAM: the server-first message lacks its nonce, salt "
                                      "or iteration count")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationError("SCRAM: the server's nonce does not extend the client's")
        if not iterations.isascii() or not iterations.isdigit():
            raise AuthenticationError("SCRAM: the server's iteration count is not a number")
        i = int(iterations)
        if not self._min_iterations <= i <= MAX_ITERATIONS:
            raise AuthenticationError(
                f"SCRAM: the server asks for {i} iterations; kproducer accepts "
                f"{self._min_iterations} to {MAX_ITERATIONS}")
        salt = _b64decode(salt_b64, "salt")
        salted = hashlib.pbkdf2_hmac(self.hash_name, self._password.encode("utf-8"), salt, i)
        client_key, stored_key, server_key = scram_keys(self.hash_name, salted)
        # c=biws is base64("n,,"): the GS2 header again, no channel binding.
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode("utf-8")
        client_signature = hmac.new(stored_key, auth_message, self.hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature))
        self._server_signature = hmac.new(server_key, auth_message, self.hash_name).digest()
        self._state = self._SERVER_FINAL
        return SecretBytes(f"{without_proof},p={_b64(proof)}".encode("utf-8"))

    def _verify_server_final(self, server_final: str) -> None:
        self._state = self._DONE
        attrs = _parse_attributes(server_final, "server-final")
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM authentication failed: the server says "
                                      f"{_printable(attrs['e'])!r}")
        if "v" not in attrs:
            raise AuthenticationError("SCRAM: the server-final message has no server signature")
        signature = _b64decode(attrs["v"], "signature")
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationError(
                "SCRAM: the server's signature does not match: the server does not know the "
                "password (or the exchange was tampered with); not using this connection")
        self.complete = True

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, username={HIDDEN}, complete={self.complete})"


def _printable(text: str, limit: int = 100) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


# ---------------------------------------------------------------------------
# OAUTHBEARER (RFC 7628 section 3.1; Kafka's OAuthBearerClientInitialResponse)

_KVSEP = "\x01"
# KIP-342: extension names are letters, values printable ASCII plus space and CR/LF/TAB;
# "auth" is the token's own key.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
# RFC 6750's b64token, as Kafka's broker parses it (OAuthBearerClientInitialResponse.AUTH_PATTERN).
_BEARER_TOKEN = re.compile(r"[-_~+/.a-zA-Z0-9]+=*")


def validate_extensions(extensions: Mapping[str, str]) -> Dict[str, str]:
    """SASL extensions (KIP-342) checked as Kafka's broker checks them: names of letters
    only, not ``auth``; values printable ASCII (space, tab, CR and LF allowed). Returns a
    plain dict; ValueError naming the offending extension otherwise."""
    out: Dict[str, str] = {}
    for key, value in dict(extensions or {}).items():
        if not isinstance(key, str) or not _EXTENSION_KEY.fullmatch(key):
            raise ValueError(f"SASL extension name {key!r} is invalid: letters only (KIP-342)")
        if key == "auth":
            raise ValueError("SASL extension name 'auth' is reserved for the token (RFC 7628)")
        if not isinstance(value, str) or not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError(f"SASL extension {key!r} has an invalid value: printable ASCII, "
                             f"at least one character (KIP-342)")
        out[key] = value
    return out


class OAuthBearerClient:
    """The client side of OAUTHBEARER (RFC 7628) as Kafka speaks it (KIP-255, KIP-342).

    One message: the GS2 header (``n,,``, or ``n,a=<authzid>,``), ``auth=Bearer <token>``,
    the extensions, each pair ended by 0x01, and a final 0x01. An empty answer is success;
    a non-empty one is the server's JSON error (RFC 7628 section 3.2.2), to which the client
    answers 0x01 and the server then fails the exchange with its error code (which the
    network client turns into the AuthenticationError, see :meth:`explain_failure`).

    ``expires_ms`` (wall-clock ms), ``source`` (where the token came from) and ``renewal``
    (a callable giving why no newer token could be obtained, or None) only serve the error
    message: a token the broker refused after its expiry says so, and why.
    """

    mechanism = OAUTHBEARER
    _FIRST, _SENT, _ERROR_SENT, _DONE = range(4)

    def __init__(self, token: str, extensions: Optional[Mapping[str, str]] = None,
                 authzid: str = "", *, expires_ms: Optional[int] = None, source: str = "",
                 principal: Optional[str] = None, renewal=None):
        if not isinstance(token, str) or not _BEARER_TOKEN.fullmatch(token):
            raise AuthenticationError(
                "OAUTHBEARER: the token is not a bearer token a Kafka broker accepts (RFC 6750 "
                "b64token: letters, digits and -._~+/ with '=' padding; no 'Bearer ' prefix, no "
                "spaces)" + (f"; it came from {source}" if source else ""))
        try:
            self._extensions = validate_extensions(extensions or {})
        except ValueError as exc:
            raise AuthenticationError(f"OAUTHBEARER: {exc}") from None
        if "\x01" in authzid or "\0" in authzid:
            raise AuthenticationError("OAUTHBEARER: the authorization id may not contain control characters")
        self._token = token
        # RFC 5801 saslname: ',' and '=' escaped as in SCRAM.
        self._authzid = _escape_name(authzid)
        self.expires_ms = expires_ms
        self.source = source
        self.principal = principal
        self._renewal = renewal
        self.server_error: Optional[str] = None   # the JSON of a refused token
        self._state = self._FIRST
        self.complete = False

    def first_message(self) -> bytes:
        if self._state != self._FIRST:
            raise AuthenticationError("OAUTHBEARER: first_message() called twice")
        self._state = self._SENT
        gs2 = f"n,a={self._authzid}," if self._authzid else "n,,"
        pairs = [f"auth=Bearer {self._token}"] + [f"{k}={v}" for k, v in self._extensions.items()]
        return SecretBytes((gs2 + _KVSEP + _KVSEP.join(pairs) + _KVSEP + _KVSEP).encode("utf-8"))

    def respond(self, challenge: bytes) -> Optional[bytes]:
        challenge = bytes(challenge)
        if self._state == self._SENT:
            if not challenge:
                self._state = self._DONE
                self.complete = True
                return None
            # RFC 7628 section 3.2.2: the server's error; the client must answer with a
            # single 0x01 and the server ends the exchange with its failure.
            self.server_error = _printable(challenge.decode("utf-8", "replace"), 500)
            self._state = self._ERROR_SENT
            return b"\x01"
        if self._state == self._ERROR_SENT:
            # A server that answers the 0x01 with success after an error: still a failure.
            self._state = self._DONE
            raise AuthenticationError(self.explain_failure("OAUTHBEARER authentication failed"))
        raise AuthenticationError("OAUTHBEARER: unexpected server message after the exchange ended")

    def explain_failure(self, message: str) -> str:
        """``message`` (the broker's error, or kproducer's) with what this client knows: the
        server's JSON error from the first round when the message lacks it, and whether the
        token had expired by this machine's clock."""
        parts = [message]
        if self.server_error and self.server_error not in message:
            parts.append(f"the server's OAUTHBEARER error: {self.server_error}")
        if self.expires_ms is not None and time.time() * 1000 >= self.expires_ms:
            parts.append(f"the token{self._whose()} from {self.source or 'the token source'} "
                         f"expired at {format_epoch_ms(self.expires_ms)} by this machine's clock")
            why = self._renewal() if self._renewal is not None else None
            if why:
                parts.append(f"no new one could be obtained: {why}")
        elif self.source:
            parts.append(f"token{self._whose()} from {self.source}")
        return "; ".join(parts)

    def _whose(self) -> str:
        return f" of principal {self.principal!r}" if self.principal else ""

    def __repr__(self) -> str:
        return f"OAuthBearerClient(token={HIDDEN}, complete={self.complete})"


def format_epoch_ms(ms: float) -> str:
    """An epoch-ms instant as ISO 8601 UTC with milliseconds (for messages)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms) % 1000:03d}Z"


class SaslCredentials:
    """A mechanism name plus the user name and password, which ``repr`` never shows.

    :meth:`new_client` makes the per-connection state machine.
    """

    __slots__ = ("mechanism", "_username", "_password", "_extensions")

    def __init__(self, mechanism: str, username: str, password: str,
                 extensions: Optional[Dict[str, str]] = None):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}; kproducer implements "
                             f"{', '.join(MECHANISMS)}")
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._extensions = dict(extensions or {})

    def new_client(self):
        if self.mechanism == "PLAIN":
            return PlainClient(self._username, self._password)
        return ScramClient(self._username, self._password, SCRAM_HASHES[self.mechanism],
                           extensions=self._extensions)

    def scrub(self, text: str) -> str:
        """``text`` with the user name and password replaced by ``[hidden]`` (for server
        error messages, which might echo them)."""
        for secret in (self._password, self._username):
            if secret:
                text = text.replace(secret, HIDDEN)
        return text

    def __eq__(self, other) -> bool:
        return (isinstance(other, SaslCredentials) and self.mechanism == other.mechanism
                and hmac.compare_digest(self._username.encode(), other._username.encode())
                and hmac.compare_digest(self._password.encode(), other._password.encode())
                and self._extensions == other._extensions)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SaslCredentials(mechanism={self.mechanism!r}, username={HIDDEN}, password={HIDDEN})"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("SaslCredentials are not picklable (pickle the producer configuration)")



# ---------------------------------------------------------------------------
# sasl.jaas.config (Java's JaasConfig grammar, client side: exactly one login module)

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Modules worth naming in an error: their names are constants, never a user's secret.
_KNOWN_MODULES = (
    "com.sun.security.auth.module.Krb5LoginModule",
    OAUTHBEARER_LOGIN_MODULE,
)
_FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.-")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _jaas_tokens(text: str):
    """Yields ``(kind, value, position)``: kind is "word", "quoted", "=" or ";"; positions
    are 1-based character numbers (errors name positions, never the text)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError(f"unterminated /* comment starting at character {i + 1}")
            i = end + 2
        elif c in "=;":
            yield c, c, i + 1
            i += 1
        elif c == '"':
            start, i, out = i, i + 1, []
            while True:
                if i >= n:
                    raise ValueError(f"unterminated quoted value starting at character {start + 1}")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n:
                    out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
                    i += 2
                    continue
                out.append(c)
                i += 1
            yield "quoted", "".join(out), start + 1
        elif c in _WORD_CHARS:
            start = i
            while i < n and text[i] in _WORD_CHARS:
                i += 1
            yield "word", text[start:i], start + 1
        else:
            raise ValueError(f"unexpected character at position {i + 1} (values with spaces or "
                             f"symbols must be in double quotes)")


def parse_jaas(text: str) -> tuple[str, Dict[str, str]]:
    """Parses ``sasl.jaas.config`` into ``(login_module, options)``: exactly one entry
    ``<LoginModule> <flag> name=value ...;``. Raises ``ValueError`` with a message that
    never quotes the configuration (it may hold a password): problems are named by position.
    """
    tokens = list(_jaas_tokens(text))
    if not tokens:
        raise ValueError("is empty; expected '<LoginModule> required username=\"...\" "
                         "password=\"...\";'")
    modules = []
    pos = 0
    while pos < len(tokens):
        kind, module, at = tokens[pos]
        if kind != "word":
            raise ValueError(f"expected a login module class name at character {at}")
        if pos + 1 >= len(tokens) or tokens[pos + 1][0] != "word" or \
                tokens[pos + 1][1].lower() not in _FLAGS:
            where = tokens[pos + 1][2] if pos + 1 < len(tokens) else len(text)
            raise ValueError(f"expected a control flag ({', '.join(_FLAGS)}) after the login "
                             f"module, at character {where}")
        pos += 2
        options: Dict[str, str] = {}
        while True:
            if pos >= len(tokens):
                raise ValueError("the login module entry must end with ';'")
            kind, name, at = tokens[pos]
            if kind == ";":
                pos += 1
                break
            if kind != "word" or pos + 2 >= len(tokens) or tokens[pos + 1][0] != "=" or \
                    tokens[pos + 2][0] not in ("word", "quoted"):
                raise ValueError(f"expected name=value or ';' at character {at}")
            options[name] = tokens[pos + 2][1]
            pos += 3
        modules.append((module, options))
    if len(modules) != 1:
        raise ValueError(f"holds {len(modules)} login modules; a client uses exactly one")
    return modules[0]


def parse_jaas_config(text: str) -> tuple[str, str, str, Dict[str, str]]:
    """Parses ``sasl.jaas.config``: ``<LoginModule> <flag> username="..." password="...";``.

    Returns ``(login_module, username, password, extensions)``; the module is
    Kafka's PlainLoginModule or ScramLoginModule, and ``extensions`` holds
    ``{"tokenauth": "true"}`` for a ScramLoginModule with ``tokenauth=true``
    (delegation tokens). Raises ``ValueError`` with a message that never quotes
    the configuration (it holds a password): problems are named by position.
    """
    module, options = parse_jaas(text)
    if module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        shown = f" {module}" if module in _KNOWN_MODULES else ""
        if module == OAUTHBEARER_LOGIN_MODULE:
            raise ValueError(f"login module{shown} needs sasl.mechanism=OAUTHBEARER")
        raise ValueError(f"login module{shown} is not supported; kproducer supports "
                         f"{PLAIN_LOGIN_MODULE} and {SCRAM_LOGIN_MODULE} (and "
                         f"{OAUTHBEARER_LOGIN_MODULE} with sasl.mechanism=OAUTHBEARER)")
    for required in ("username", "password"):
        if required not in options:
            raise ValueError(f"the login module has no {required}=\"...\" option")
    if not options["username"]:
        raise ValueError("the username is empty")
    extensions = {}
    if module == SCRAM_LOGIN_MODULE and options.get("tokenauth", "").lower() == "true":
        extensions["tokenauth"] = "true"
    return module, options["username"], options["password"], extensions


# Java's OAuthBearerLoginModule options (OAuthBearerLoginCallbackHandler, KIP-768): the
# OIDC client credentials before Kafka 4.1 moved them to sasl.oauthbearer.* settings
# (KIP-1139), and the SASL extensions as extension_<name>="value".
_OAUTH_JAAS_OPTIONS = {"clientId": "client_id", "clientSecret": "client_secret", "scope": "scope"}
_OAUTH_EXTENSION_PREFIX = "extension_"


def parse_oauthbearer_jaas(text: str) -> Dict[str, object]:
    """Parses an ``OAuthBearerLoginModule`` ``sasl.jaas.config``: returns ``{"client_id":,
    "client_secret":, "scope":, "extensions": {name: value}}`` (keys present only when
    given). The unsecured-JWT options of Java's development login are refused: kproducer
    does not build unsigned tokens. ValueError never quotes the configuration."""
    module, options = parse_jaas(text)
    if module != OAUTHBEARER_LOGIN_MODULE:
        named = module in _KNOWN_MODULES + (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE)
        raise ValueError(f"sasl.mechanism=OAUTHBEARER needs {OAUTHBEARER_LOGIN_MODULE}, not "
                         f"{module if named else 'this login module'}")
    out: Dict[str, object] = {}
    extensions: Dict[str, str] = {}
    for name, value in options.items():
        if name in _OAUTH_JAAS_OPTIONS:
            out[_OAUTH_JAAS_OPTIONS[name]] = value
        elif name.startswith(_OAUTH_EXTENSION_PREFIX):
            extensions[name[len(_OAUTH_EXTENSION_PREFIX):]] = value
        elif name.startswith("unsecuredLogin"):
            raise ValueError(f"option {name} belongs to Java's unsecured (unsigned JWT) login, "
                             f"which kproducer does not implement: give a token provider or "
                             f"OIDC client credentials")
        # Other options (e.g. Java's ssl.* for the token endpoint) are ignored, as Java
        # ignores options it does not know.
    if extensions:
        try:
            out["extensions"] = validate_extensions(extensions)
        except ValueError as exc:
            raise ValueError(str(exc).replace("SASL extension", "extension_")) from None
    return out
