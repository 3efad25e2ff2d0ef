"""SASL/OAUTHBEARER without a broker: the client's messages (RFC 7628, KIP-255/342), tokens
and their claims, the token sources (a callable, OIDC client credentials against
``kproducer.testing.oidc.OidcServer`` on loopback over HTTPS, AWS MSK IAM with a fake
signer), their renewal (Java's ExpiringCredentialRefreshingLogin) and the settings. Against
the broker, behind the SASL gateway: tests/broker/test_oauth.py."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from kproducer.config import ProducerConfig
from kproducer.errors import AuthenticationError, ConfigError, TokenProviderError
from kproducer.oauth import (ClientCredentialsRetriever, OAuthBearerCredentials, OAuthBearerToken,
                             RefreshConfig, TokenLogin, decode_jwt_claims, https_context,
                             msk_iam_provider, provider_source, refresh_at_ms,
                             token_from_access_token)
from kproducer.sasl import OAuthBearerClient, parse_oauthbearer_jaas
from kproducer.testing.broker import free_port
from kproducer.testing.oidc import TokenIssuer

from _oauth_fixtures import OAUTH_BASE, wait_until, FlakyProvider, pki, idp, fake_msk_signer

BS = "localhost:9092"
OIDC_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


# ---------------------------------------------------------------------------
# The mechanism (Kafka's OAuthBearerClientInitialResponse)

def test_client_message_is_kafkas_initial_response():
    # Kafka's OAuthBearerClientInitialResponseTest: "n,,\u0001auth=Bearer 123.345.567\u0001
    # nineteen=42\u0001\u0001" for token 123.345.567 and the extension nineteen=42.
    c = OAuthBearerClient("123.345.567", {"nineteen": "42"})
    assert bytes(c.first_message()) == b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01"
    assert c.respond(b"") is None and c.complete
    c = OAuthBearerClient("abc", authzid="al,i=ce")
    assert bytes(c.first_message()) == b"n,a=al=2Ci=3Dce,\x01auth=Bearer abc\x01\x01"
    assert "abc" not in repr(c) and "abc" not in repr(c.first_message)


def test_server_error_json_is_answered_with_0x01_and_kept_for_the_error():
    c = OAuthBearerClient("a.b.c", expires_ms=int(time.time() * 1000) - 5000, source="the test",
                          principal="svc")
    c.first_message()
    assert c.respond(b'{"status":"invalid_token"}') == b"\x01"
    assert not c.complete
    msg = c.explain_failure("SASL OAUTHBEARER authentication with node 1 failed: "
                            "SASL_AUTHENTICATION_FAILED (58)")
    assert '{"status":"invalid_token"}' in msg and "expired at" in msg and "'svc'" in msg
    # A server that answers success after its own error: still a failure, with the JSON.
    with pytest.raises(AuthenticationError, match="invalid_token"):
        c.respond(b"")


@pytest.mark.parametrize("token, extensions, why", [
    ("Bearer a.b.c", {}, "no 'Bearer ' prefix"),
    ("a b", {}, "b64token"),
    ("", {}, "b64token"),
    ("a.b.c", {"auth": "x"}, "reserved"),
    ("a.b.c", {"k1": "v"}, "letters only"),
    ("a.b.c", {"k": "v\x01"}, "invalid value"),
    ("a.b.c", {"k": ""}, "invalid value"),
])
def test_unusable_tokens_and_extensions_are_refused(token, extensions, why):
    with pytest.raises(AuthenticationError, match=why):
        OAuthBearerClient(token, extensions)


# ---------------------------------------------------------------------------
# Tokens, JWT claims, provider results

def test_jwt_claims_give_lifetime_principal_and_scope():
    issuer = TokenIssuer()
    jwt = issuer.mint("svc-1", lifetime=30, scope="kafka:write kafka:read", issued_at=1_700_000_000)
    t = token_from_access_token(jwt)
    assert t.principal == "svc-1" and t.start_ms == 1_700_000_000_000
    assert t.expires_ms == 1_700_000_030_000 and t.scope == {"kafka:write", "kafka:read"}
    assert jwt not in repr(t)
    assert decode_jwt_claims(jwt)["aud"] == "kafka"
    other = issuer.mint("ignored", client="svc-2")
    assert token_from_access_token(other, sub_claim_name="client").principal == "svc-2"
    with pytest.raises(ValueError, match="sasl.oauthbearer.sub.claim.name"):
        token_from_access_token(issuer.mint("x", sub=None), sub_claim_name="sub")
    with pytest.raises(ValueError, match="exp"):
        token_from_access_token(issuer.mint("x", exp=None))
    # An opaque (non-JWT) token serves only with the response's expires_in.
    with pytest.raises(ValueError, match="not a JWT"):
        token_from_access_token("opaque-token")
    t = token_from_access_token("opaque-token", expires_in_s=60, default_principal="client-7", now_ms=1000)
    assert (t.expires_ms, t.principal) == (61000, "client-7")


def _fetch(provider, config=None):
    return provider_source(provider, config)()


def test_provider_results_take_confluents_oauth_cb_forms():
    exp = time.time() + 60
    seen = []

    def oauth_cb(config):
        seen.append(config)
        return "tok.en.1", exp
    t = _fetch(oauth_cb, "principal=x")
    assert seen == ["principal=x"] and t.value == "tok.en.1" and t.expires_ms == int(exp * 1000)
    t = _fetch(lambda c: ("tok", exp, "alice", {"logicalCluster": "lkc-1"}))
    assert t.principal == "alice" and dict(t.extensions) == {"logicalCluster": "lkc-1"}
    t = _fetch(lambda: ("tok", exp))                      # no argument: called with none
    assert t.value == "tok"
    jwt = TokenIssuer().mint("bob", lifetime=30)
    t = _fetch(lambda c: jwt)                             # a bare JWT: exp is its expiry
    assert t.principal == "bob" and abs(t.expires_ms / 1000 - (time.time() + 30)) < 5
    assert _fetch(lambda c: (jwt, exp)).principal == "bob"   # principal from the JWT
    token = OAuthBearerToken("x", int(exp * 1000), "carol")
    assert _fetch(lambda c: token) is token


@pytest.mark.parametrize("result, why", [
    (("tok", (time.time() + 60) * 1000), "looks like milliseconds"),
    (("tok",), "expected \\(token, expiry_epoch_seconds"),
    ((b"tok", 1e9), "expected a non-empty str"),
    (("tok", "soon"), "seconds since the epoch"),
    (("tok", 1e9, 7), "principal of type int"),
    (("tok", 1e9, "p", {"bad key": "v"}), "letters only"),
    ("not-a-jwt", "not a JWT"),
    (None, "returned NoneType"),
])
def test_bad_provider_results_name_the_provider(result, why):
    def my_token_provider(config):
        return result
    with pytest.raises(TokenProviderError, match=why) as exc:
        _fetch(my_token_provider)
    assert "my_token_provider" in str(exc.value)


# ---------------------------------------------------------------------------
# When to renew: Java's ExpiringCredentialRefreshingLogin.refreshMs

class _Rng:
    def __init__(self, value):
        self.value = value

    def random(self):
        return self.value


@pytest.mark.parametrize("start_s, expire_s, now_s, rng, expected_s", [
    # One hour from its start: 80 % (+ 0..5 % jitter) of the lifetime from the start.
    (0, 3600, 0, 0.0, 2880), (0, 3600, 0, 1.0, 3060),
    # The 15 minutes of an MSK IAM token: 80 % would leave less than the 300 s buffer.
    (0, 900, 0, 0.0, 600),
    # A token issued long ago (its 80 % is past): the 60 s minimum period from now.
    (-100_000, 1000, 0, 0.0, 60),
    # Shorter than min.period + buffer (360 s): both ignored, 80-85 % of what remains.
    (0, 5, 0, 0.0, 4), (0, 5, 0, 1.0, 4.25), (0, 300, 100, 0.0, 260),
])
def test_refresh_time_follows_javas_rules(start_s, expire_s, now_s, rng, expected_s):
    token = OAuthBearerToken("t", expire_s * 1000, start_ms=start_s * 1000)
    assert refresh_at_ms(token, now_s * 1000, RefreshConfig(), _Rng(rng)) == int(expected_s * 1000)


def test_refresh_time_without_a_start_counts_from_now():
    token = OAuthBearerToken("t", 10_000_000)          # no iat: start = now
    cfg = RefreshConfig(window_factor=0.5, window_jitter=0.0, min_period_s=0, buffer_s=0)
    assert refresh_at_ms(token, 2_000_000, cfg, _Rng(0.5)) == 6_000_000


# ---------------------------------------------------------------------------
# The login: the current token, renewed in the background

def _login(provider, **kw):
    fetch = provider_source(provider)
    return TokenLogin(fetch, fetch.description, **kw)


def test_login_renews_short_tokens_at_80_percent_and_retries_failures():
    p = FlakyProvider(lifetime=1.0)
    login = _login(p, retry_backoff_ms=20, retry_backoff_max_ms=50)
    woken = threading.Event()
    login.start(woken.set)
    try:
        wait_until(lambda: not login.pending(), 10, "the first token")
        assert woken.is_set()
        first = login.token()
        wait_until(lambda: login.token().value != first.value, 10, "a renewal")
        # 80-85 % of a 1 s token: at most ~0.85 s, never after its expiry.
        assert first.expired() is False or login.token().value != first.value
        p.failing = RuntimeError("the IdP is down")
        calls = p.calls
        wait_until(lambda: p.calls >= calls + 3, 10, "retries of the failing provider")
        # Until the token expires, the current one still serves...
        wait_until(lambda: login._token.expired(), 10, "the last token's expiry")
        # ...then the failure surfaces, naming the provider and the cause.
        with pytest.raises(TokenProviderError) as exc:
            login.token()
        msg = str(exc.value)
        assert "FlakyProvider" in msg and "RuntimeError: the IdP is down" in msg and "expired at" in msg
        assert isinstance(exc.value.__cause__, RuntimeError)
        fetches = login.fetches
        p.failing = None
        wait_until(lambda: login.fetches > fetches, 10, "recovery")
        assert not login.token().expired() and login.failures >= 3
    finally:
        login.close()
    assert not login._thread.is_alive()


def test_first_token_pending_then_failure_surfaces_at_once():
    gate = threading.Event()

    def slow_then_broken(config):
        gate.wait(10)
        raise ValueError("no credentials configured")
    login = _login(slow_then_broken, retry_backoff_ms=1000, retry_backoff_max_ms=1000)
    login.start()
    try:
        assert login.pending()
        with pytest.raises(TokenProviderError, match="no token from"):
            login.token()
        gate.set()
        wait_until(lambda: not login.pending(), 10, "the failure")
        with pytest.raises(TokenProviderError, match="slow_then_broken failed: ValueError: "
                                                     "no credentials configured"):
            login.token()
    finally:
        login.close()


def test_an_already_expired_token_is_a_provider_failure():
    login = _login(lambda c: ("tok", time.time() - 10), retry_backoff_ms=1000, retry_backoff_max_ms=1000)
    login.start()
    try:
        wait_until(lambda: not login.pending(), 10, "the failure")
        with pytest.raises(TokenProviderError, match="returned a token that expired at"):
            login.token()
    finally:
        login.close()


# ---------------------------------------------------------------------------
# Configuration

def cfg(**kw):
    return ProducerConfig(bootstrap_servers=BS, **{**OAUTH_BASE, **kw})


def err(**kw) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        cfg(**kw)
    return exc.value


def test_config_token_sources():
    def provider(config):
        return "t", time.time() + 60
    assert isinstance(cfg(sasl_oauthbearer_token_provider=provider).sasl_credentials, OAuthBearerCredentials)
    # confluent-kafka's name, in either spelling, and Java's handler setting with a callable.
    assert "provider" in repr(cfg(oauth_cb=provider).sasl_credentials)
    assert "provider" in repr(ProducerConfig({"bootstrap.servers": BS, "security.protocol": "SASL_SSL",
                                              "sasl.mechanism": "OAUTHBEARER",
                                              "oauth_cb": provider}).sasl_credentials)
    assert "provider" in repr(cfg(sasl_login_callback_handler_class=provider).sasl_credentials)
    oidc = dict(sasl_oauthbearer_token_endpoint_url="https://idp.example/token")
    c = cfg(**oidc, sasl_oauthbearer_client_credentials_client_id="kp",
            sasl_oauthbearer_client_credentials_client_secret="s3cr3t-value")
    assert "OIDC token endpoint https://idp.example/token (client id 'kp')" in repr(c.sasl_credentials)
    assert "s3cr3t-value" not in repr(c) and "s3cr3t-value" not in repr(c.sasl_credentials)
    c = cfg(**oidc, sasl_oauthbearer_client_id="kp", sasl_oauthbearer_client_secret="x",
            sasl_oauthbearer_method="oidc")     # librdkafka's names
    assert "client id 'kp'" in repr(c.sasl_credentials)
    # Java before 4.1: the handler class and the client credentials in the JAAS options.
    c = cfg(**oidc, sasl_login_callback_handler_class=OIDC_LOGIN.replace("LoginModule", "LoginCallbackHandler"),
            sasl_jaas_config=f'{OIDC_LOGIN} required clientId="kp" clientSecret="x" scope="kafka" '
                             f'extension_logicalCluster="lkc-1";')
    assert "client id 'kp'" in repr(c.sasl_credentials)
    assert cfg(sasl_oauthbearer_token_endpoint_url="file:/var/run/token").sasl_credentials.description \
        == "the token file /var/run/token"


def test_parse_oauthbearer_jaas():
    opts = parse_oauthbearer_jaas(f'{OIDC_LOGIN} required clientId="a" clientSecret="b" scope="s t" '
                                  f'extension_traceId="x-1" ssl.protocol="TLSv1.3";')
    assert opts == {"client_id": "a", "client_secret": "b", "scope": "s t", "extensions": {"traceId": "x-1"}}
    with pytest.raises(ValueError, match="unsecured"):
        parse_oauthbearer_jaas(f'{OIDC_LOGIN} required unsecuredLoginStringClaim_sub="alice";')


@pytest.mark.parametrize("settings, key, why", [
    ({}, "sasl.oauthbearer.token.provider", "needs a token source"),
    (dict(oauth_cb=print, sasl_oauthbearer_token_provider=len), "oauth.cb", "not both"),
    (dict(oauth_cb=print, sasl_oauthbearer_token_endpoint_url="https://i/t"),
     "sasl.oauthbearer.token.endpoint.url", "not both"),
    (dict(oauth_cb=print, sasl_oauthbearer_method="oidc"), "sasl.oauthbearer.method", "asks for the built-in"),
    (dict(oauth_cb=print, sasl_oauthbearer_client_id="kp"), "sasl.oauthbearer.client.id",
     "OIDC client credentials setting"),
    (dict(sasl_oauthbearer_method="oidc"), "sasl.oauthbearer.token.endpoint.url", "need"),
    (dict(sasl_oauthbearer_token_endpoint_url="https://i/t", sasl_oauthbearer_method="default"),
     "sasl.oauthbearer.method", "is default"),
    (dict(sasl_oauthbearer_token_endpoint_url="https://i/t", sasl_oauthbearer_client_id="kp"),
     "sasl.oauthbearer.client.credentials.client.secret", "is missing"),
    (dict(sasl_oauthbearer_token_endpoint_url="https://i/t", sasl_oauthbearer_client_id="kp",
          sasl_oauthbearer_client_credentials_client_id="kp", sasl_oauthbearer_client_secret="x"),
     "sasl.oauthbearer.client.id", "not both"),
    (dict(sasl_oauthbearer_token_endpoint_url="ftp://i/t"), "sasl.oauthbearer.token.endpoint.url",
     "https://"),
    (dict(oauth_cb=print, sasl_oauthbearer_extensions="a=1,b"), "sasl.oauthbearer.extensions",
     "not key=value"),
    (dict(oauth_cb=print, sasl_oauthbearer_extensions="auth=x"), "sasl.oauthbearer.extensions", "reserved"),
    (dict(oauth_cb=print, sasl_login_refresh_window_factor=0.4), "sasl.login.refresh.window.factor",
     "out of range"),
    (dict(oauth_cb=print, sasl_login_refresh_window_jitter="0.3"), "sasl.login.refresh.window.jitter",
     "out of range"),
    (dict(oauth_cb=print, sasl_login_refresh_window_factor=True), "sasl.login.refresh.window.factor",
     "bools are not numbers"),
    (dict(oauth_cb=print, sasl_login_refresh_min_period_seconds=901),
     "sasl.login.refresh.min.period.seconds", "out of range"),
    (dict(oauth_cb=print, sasl_login_refresh_buffer_seconds=-1), "sasl.login.refresh.buffer.seconds",
     "out of range"),
    (dict(oauth_cb=print, sasl_login_retry_backoff_ms=500, sasl_login_retry_backoff_max_ms=100),
     "sasl.login.retry.backoff.max.ms", "less than"),
    (dict(sasl_login_callback_handler_class="com.example.MyHandler"), "sasl.login.callback.handler.class",
     "other Java classes"),
    (dict(oauth_cb="my_module.cb"), "oauth.cb", "Java class names"),
    (dict(sasl_username="u", sasl_password="p", oauth_cb=print), "sasl.username", "not a password"),
    (dict(sasl_jaas_config='org.apache.kafka.common.security.plain.PlainLoginModule required '
                           'username="u" password="p";', oauth_cb=print),
     "sasl.jaas.config", "needs org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"),
])
def test_config_errors_name_the_key(settings, key, why):
    e = err(**settings)
    assert e.key == key and why in str(e), str(e)


def test_oauth_settings_need_oauthbearer_and_sasl():
    e = err(sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p", oauth_cb=print)
    assert e.key == "oauth.cb" and "sasl.mechanism=OAUTHBEARER" in str(e)
    with pytest.raises(ConfigError, match="does not use SASL") as exc:
        ProducerConfig(bootstrap_servers=BS, sasl_login_refresh_buffer_seconds=10)
    assert exc.value.key == "sasl.login.refresh.buffer.seconds"


def test_secrets_stay_hidden():
    secret, config_string = "cl1ent-s3cret", "clientSecret=abc123 principal=x"
    c = cfg(sasl_oauthbearer_token_endpoint_url="https://i/t", sasl_oauthbearer_client_id="kp",
            sasl_oauthbearer_client_secret=secret)
    assert secret not in repr(c) and secret not in str(c.sasl_credentials)
    c = cfg(oauth_cb=print, sasl_oauthbearer_config=config_string)
    assert config_string not in repr(c)
    e = err(sasl_oauthbearer_token_endpoint_url="https://i/t", sasl_oauthbearer_client_id="kp",
            sasl_oauthbearer_client_secret=secret, sasl_oauthbearer_client_credentials_client_secret=secret + "2")
    assert secret not in str(e)


# ---------------------------------------------------------------------------
# OIDC client credentials against the loopback token endpoint

def _retriever(idp, pki, client_id="kp-client", secret="kp-s3cret", **kw):
    kw.setdefault("retry_backoff_ms", 10)
    kw.setdefault("retry_backoff_max_ms", 300)
    return ClientCredentialsRetriever(idp.token_url, client_id, secret, kw.pop("scope", None),
                                      ssl_context_factory=lambda: https_context(pki.ca_file), **kw)


def test_oidc_client_credentials_grant(idp, pki):
    t = _retriever(idp, pki, scope=" kafka:write ")()
    assert t.principal == "kp-client" and t.scope == {"kafka:write"}
    assert abs(t.expires_ms / 1000 - (time.time() + 30)) < 5
    assert idp.issuer.verify(t.value)["sub"] == "kp-client"
    req = idp.last_request
    assert req["form"] == {"grant_type": "client_credentials", "scope": "kafka:write"}
    assert req["headers"]["Authorization"].startswith("Basic ") and req["headers"]["Accept"] == "application/json"
    # KIP-1025: id and secret URL-encoded before base64 when asked; the server decodes them.
    assert _retriever(idp, pki, "we+ird", "p@ss:w/rd", urlencode_header=True)().principal == "we+ird"


def test_oidc_refusal_is_not_retried_and_names_the_cause(idp, pki):
    r = _retriever(idp, pki, secret="wrong", retry_backoff_max_ms=5000)
    started = time.monotonic()
    with pytest.raises(TokenProviderError) as exc:
        r()
    assert time.monotonic() - started < 2 and r.requests == 1
    msg = str(exc.value)
    assert 'HTTP 401 {"invalid_client" - "Bad client credentials"}; not retried' in msg
    assert idp.token_url in msg and "wrong" not in msg


def test_oidc_transient_errors_are_retried(idp, pki):
    idp.fail_next(2, 503)
    r = _retriever(idp, pki, retry_backoff_max_ms=5000)
    assert r().principal == "kp-client" and r.requests == 3


def test_oidc_unreachable_endpoint_gives_up_after_the_retry_budget(pki):
    port = free_port()
    r = ClientCredentialsRetriever(f"https://127.0.0.1:{port}/token", "kp", "x",
                                   ssl_context_factory=lambda: https_context(pki.ca_file),
                                   retry_backoff_ms=20, retry_backoff_max_ms=400)
    started = time.monotonic()
    with pytest.raises(TokenProviderError, match="cannot reach it.*Connection refused.*attempt") as exc:
        r()
    assert time.monotonic() - started < 3 and r.requests >= 3
    assert "retry.backoff.max.ms=400" in str(exc.value)


def test_oidc_endpoint_with_an_unknown_ca_fails_at_once(idp, pki):
    other = pki.other_ca()
    r = ClientCredentialsRetriever(idp.token_url, "kp-client", "kp-s3cret",
                                   ssl_context_factory=lambda: https_context(other.ca_file),
                                   retry_backoff_max_ms=5000)
    with pytest.raises(TokenProviderError, match="certificate does not verify"):
        r()
    assert r.requests == 1


# ---------------------------------------------------------------------------
# AWS MSK IAM, with a fake signer module (the real one needs AWS credentials)

def test_msk_iam_provider_uses_the_signer_and_its_milliseconds(fake_msk_signer):
    t = provider_source(msk_iam_provider("eu-west-1"))()
    assert fake_msk_signer.calls == [("default", "eu-west-1")]
    assert abs(t.expires_ms / 1000 - (time.time() + 900)) < 5 and t.principal == "aws-msk-iam:eu-west-1"
    t = provider_source(msk_iam_provider("us-east-1", role_arn="arn:aws:iam::1:role/r", sts_session_name="s"))()
    assert fake_msk_signer.calls[-1] == ("role", "us-east-1", "arn:aws:iam::1:role/r", "s")
    assert t.value == "b64urlsignedurl"
    with pytest.raises(ValueError, match="at most one"):
        msk_iam_provider("us-east-1", aws_profile="p", role_arn="r")
    # Picklable, as a configuration shipped to Spark executors must be.
    import pickle
    copy = pickle.loads(pickle.dumps(msk_iam_provider("ap-south-1")))
    assert repr(copy) == "msk_iam_provider('ap-south-1')"
    assert provider_source(copy).description == "the token provider kproducer.oauth.msk_iam_provider('ap-south-1')"


def test_msk_iam_provider_names_the_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)
    with pytest.raises(ImportError, match=r"aws-msk-iam-sasl-signer-python.*kproducer\[msk\]"):
        msk_iam_provider("us-east-1")
