"""SASL/OAUTHBEARER (RFC 7628, KIP-255/342), its token sources (a callable, OIDC client
credentials, AWS MSK IAM), their renewal (Java's ExpiringCredentialRefreshingLogin) and
KIP-368 re-authentication.

Against the broker the tokens are checked by ``kproducer.testing.SaslGateway`` (HS256 JWTs of
``kproducer.testing.oidc.TokenIssuer``: signature, issuer, audience, expiry), which gives each
session the token's remaining lifetime and closes a connection whose session ended. The OIDC
token endpoint is ``kproducer.testing.oidc.OidcServer`` on loopback, over HTTPS with the
tests' own CA. confluent-kafka's producer (librdkafka's OAUTHBEARER with ``oauth_cb``) logs
in through the same gateway, and every read-back goes through it with librdkafka too.
The mechanism, the tokens, their sources and renewal without a broker:
tests/unit/test_oauth_tokens.py."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kproducer import Producer
from kproducer.errors import AuthenticationError, KafkaTimeoutError, TokenProviderError
from kproducer.oauth import msk_iam_provider
from kproducer.testing import TansuBroker
from kproducer.testing.broker import free_port
from kproducer.testing.oidc import OidcServer, TokenIssuer
from kproducer.testing.readback import read_back
from kproducer.testing.sasl_gateway import SaslGateway
from kproducer.testing.tls import TlsTerminator

from _oauth_fixtures import OAUTH_BASE, wait_until, FlakyProvider, pki, idp, fake_msk_signer

USER, PASSWORD = "reader-3c1", "pw-Reader-58"          # PLAIN, for the read-backs


def wait_past(instant: float) -> None:
    """Until ``time.monotonic()`` has passed ``instant`` (a session's end: the condition is
    the clock itself)."""
    wait_until(lambda: time.monotonic() > instant, max(0.0, instant - time.monotonic()) + 5,
               "the clock", interval=0.01)


# ---------------------------------------------------------------------------
# Against the broker, behind the SASL gateway

@pytest.fixture
def make_gateway(tmp_path):
    """make_gateway(**SaslGateway kwargs) -> (gateway, issuer): a gateway (OAUTHBEARER tokens of
    its issuer, PLAIN for the read-backs) in front of a fresh broker advertising it."""
    made = []

    def make(**kw):
        issuer = kw.pop("issuer", None) or TokenIssuer(audience="kafka")
        port = free_port()
        gw = SaslGateway("127.0.0.1", port, users={USER: PASSWORD}, oauth=issuer, **kw).start()
        log_dir = tmp_path / f"broker-{len(made)}"
        log_dir.mkdir()
        broker = TansuBroker(port=port, advertised_port=gw.port, log_dir=log_dir).start()
        made.append((gw, broker))
        return gw, issuer

    yield make
    for gw, broker in made:
        gw.stop()
        broker.stop()
        broker.check_log()


READER = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
          "sasl.username": USER, "sasl.password": PASSWORD}


def _minting(issuer, subject="svc-producer", lifetime=60.0, calls=None):
    def provider(config):
        if calls is not None:
            calls.append(time.monotonic())
        return issuer.mint(subject, lifetime=lifetime)
    return provider


def test_produce_with_a_token_provider_and_extensions(make_gateway, caplog):
    caplog.set_level(logging.DEBUG, logger="kproducer")
    gw, issuer = make_gateway(required_extensions={"logicalCluster": "lkc-7"})
    records = [(b"k%d" % i, b"v%d" % i) for i in range(200)]

    def provider(config):
        assert config == "scope=kafka"
        return issuer.mint("svc-producer", lifetime=60), time.time() + 60, "svc-producer", {"traceId": "t-1"}
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider,
                  sasl_oauthbearer_config="scope=kafka", sasl_oauthbearer_extensions="logicalCluster=lkc-7",
                  partitioner=lambda *a: 0) as p:
        futures = [p.send("oauth-topic", v, key=k) for k, v in records]
        p.flush(30)
        assert [f.result().offset for f in futures] == list(range(200))
    stats = gw.stats()
    assert stats["authenticated"] >= 1 and stats["token_rejections"] == 0 and stats["auth_failures"] == 0
    assert {"logicalCluster": "lkc-7", "traceId": "t-1"} in gw.extensions_seen
    got = read_back(gw.bootstrap, "oauth-topic", consumer_config=READER)
    assert [(m.key, m.value) for m in got[0]] == records
    assert "authenticated with OAUTHBEARER" in caplog.text
    for rec in caplog.records:
        assert "eyJ" not in rec.getMessage()           # no JWT in any log line


@pytest.mark.parametrize("failure", ["raises", "expired", "refused"])
def test_token_failures_are_clear_errors_within_max_block_ms(make_gateway, failure):
    gw, issuer = make_gateway()
    if failure == "raises":
        def provider(config):
            raise RuntimeError("vault is sealed")
        expect = r"the token provider .*provider failed: RuntimeError: vault is sealed"
    elif failure == "expired":
        def provider(config):
            return issuer.mint("svc", lifetime=-30), time.time() - 30
        expect = "returned a token that expired at"
    else:
        # Expired by the broker's clock though the provider says otherwise (clock skew, a
        # revoked key): the broker's JSON error reaches the exception.
        def provider(config):
            return issuer.mint("svc", lifetime=-30), time.time() + 60
        expect = r'SASL_AUTHENTICATION_FAILED \(58\): \{"status":"invalid_token"\}'
    started = time.monotonic()
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider,
                  max_block_ms=5000, sasl_login_retry_backoff_ms=200) as p:
        with pytest.raises(AuthenticationError, match=expect) as exc:
            p.send("t", b"v").result(0)     # a failed future, as Java's send()
    assert time.monotonic() - started < 5
    if failure != "refused":
        assert isinstance(exc.value, TokenProviderError)
        assert gw.stats()["handshakes"] == 0            # nothing sent without a token
    else:
        assert gw.stats()["token_rejections"] >= 1 and gw.token_rejection_reasons[0] == "expired"
    assert gw.stats()["bytes_after_auth"] == 0


def test_a_connection_waits_for_a_slow_first_token(make_gateway):
    gw, issuer = make_gateway()
    release = threading.Event()

    def provider(config):
        release.wait(10)
        return issuer.mint("svc", lifetime=60)
    offsets = []
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider) as p:
        # send() waits for metadata, which waits for the token: on another thread.
        sender = threading.Thread(target=lambda: offsets.append(p.send("slow-token", b"v").result(30).offset))
        sender.start()
        gw.wait_for(lambda s: s["api_versions"] >= 1)
        assert gw.stats()["handshakes"] == 0 and not offsets
        release.set()
        sender.join(30)
    assert offsets == [0] and gw.stats()["auth_failures"] == 0


def test_oidc_over_sasl_ssl_trusts_what_the_brokers_trust(tmp_path, pki):
    """SASL_SSL: the TLS terminator before the gateway before the broker; the token endpoint's
    certificate is from the same CA as the brokers', which ssl.truststore.location names."""
    issuer = TokenIssuer(audience="kafka")
    tls_port, broker_port = free_port(), free_port()
    gw = SaslGateway("127.0.0.1", broker_port, users={USER: PASSWORD}, oauth=issuer).start()
    broker = TansuBroker(port=broker_port, advertised_port=tls_port, log_dir=tmp_path).start()
    tunnel = TlsTerminator(pki, gw.port, port=tls_port, directory=str(tmp_path / "tls"))
    idp = OidcServer(pki, issuer, clients={"kp-client": "kp-s3cret"}, lifetime=60).start()
    try:
        tunnel.start()
        common = dict(bootstrap_servers=tunnel.bootstrap, security_protocol="SASL_SSL",
                      ssl_truststore_location=pki.ca_file, sasl_mechanism="OAUTHBEARER",
                      sasl_oauthbearer_token_endpoint_url=idp.token_url,
                      sasl_oauthbearer_client_credentials_client_id="kp-client", max_block_ms=10000)
        records = [(b"k%d" % i, b"v%d" % i) for i in range(50)]
        with Producer(sasl_oauthbearer_client_credentials_client_secret="kp-s3cret",
                      sasl_oauthbearer_scope="kafka:write", partitioner=lambda *a: 1, **common) as p:
            futures = [p.send("oidc-topic", v, key=k) for k, v in records]
            assert [f.result(30).offset for f in futures] == list(range(50))
        assert idp.stats()["issued"] >= 1 and idp.last_request["form"]["scope"] == "kafka:write"
        with Producer(sasl_oauthbearer_client_credentials_client_secret="wrong", **common) as p:
            with pytest.raises(TokenProviderError, match='HTTP 401 .*invalid_client'):
                p.send("oidc-topic", b"v").result(0)     # a failed future, as Java's send()
        got = read_back(tunnel.bootstrap, "oidc-topic", consumer_config={
            **READER, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca_file})
        assert [(m.key, m.value) for m in got[1]] == records
        assert gw.stats()["token_rejections"] == 0
    finally:
        idp.stop()
        tunnel.stop()
        gw.stop()
        broker.stop()
    broker.check_log()


def test_unreachable_token_endpoint_fails_sends_within_max_block_ms(make_gateway):
    gw, _ = make_gateway()
    started = time.monotonic()
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, max_block_ms=8000,
                  sasl_oauthbearer_token_endpoint_url=f"http://127.0.0.1:{free_port()}/token",
                  sasl_oauthbearer_client_id="kp", sasl_oauthbearer_client_secret="x",
                  sasl_login_retry_backoff_ms=50, sasl_login_retry_backoff_max_ms=1000) as p:
        with pytest.raises(TokenProviderError, match="cannot reach it") as exc:
            p.send("t", b"v").result(0)     # a failed future, as Java's send()
    assert time.monotonic() - started < 8
    assert "OIDC token endpoint http://127.0.0.1" in str(exc.value)


def test_msk_iam_recipe_through_the_gateway(make_gateway, fake_msk_signer):
    gw, _ = make_gateway(issuer=fake_msk_signer.issuer)
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE,
                  sasl_oauthbearer_token_provider=msk_iam_provider("eu-central-1")) as p:
        assert p.send("msk-topic", b"v").result(30).offset == 0
    assert fake_msk_signer.calls[0] == ("default", "eu-central-1")
    assert gw.stats()["authenticated"] >= 1 and gw.stats()["token_rejections"] == 0


def test_confluent_kafka_producer_logs_in_with_oauth_cb_and_reauthenticates(make_gateway):
    """librdkafka's own OAUTHBEARER client (oauth_cb served from poll()) and KIP-368
    re-authentication against the gateway: an independent check of the server side.
    (librdkafka re-authenticates at 90 % of a session with the token it holds, renewed at
    80 % of its lifetime: sessions shorter than the tokens keep it clear of their ends.)"""
    from confluent_kafka import Producer as CProducer
    gw, issuer = make_gateway(session_ms={"OAUTHBEARER": 2500})
    tokens = []

    def oauth_cb(config):
        tokens.append(time.monotonic())
        return issuer.mint("librdkafka-producer", lifetime=6.0), time.time() + 6.0
    delivered, errors = [], []
    cp = CProducer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb, "linger.ms": 5,
                    "error_cb": errors.append})
    n = 0
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        cp.produce("librdkafka-oauth", b"v%d" % n, key=b"k%d" % n, partition=0,
                   on_delivery=lambda e, m: delivered.append((e, m.offset())))
        n += 1
        cp.poll(0.02)
    assert cp.flush(30) == 0
    assert all(e is None for e, _ in delivered) and len(delivered) == n, errors
    stats = gw.stats()
    assert stats["reauthenticated"] >= 1 and len(tokens) >= 2
    assert stats["expired_requests"] == 0 and stats["illegal_requests"] == 0 and stats["auth_failures"] == 0
    got = read_back(gw.bootstrap, "librdkafka-oauth", consumer_config=READER)
    assert [m.value for m in got[0]] == [b"v%d" % i for i in range(n)]


def test_gateway_refuses_requests_on_an_expired_session(make_gateway):
    """Without re-authentication a session ends: an idle connection is closed at its end,
    and a request after it closes the connection too (Kafka's expired-session rule)."""
    from kproducer.protocol import messages as m
    from kproducer.testing import BlockingClient
    gw, issuer = make_gateway(session_ms=300)
    for idle in (True, False):
        gw.close_expired_sessions = idle
        with BlockingClient("127.0.0.1", gw.port) as c:
            assert c.request(m.SaslHandshakeRequest(mechanism="OAUTHBEARER"), version=1).error_code == 0
            token = issuer.mint("svc", lifetime=60)
            resp = c.request(m.SaslAuthenticateRequest(
                auth_bytes=b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"), version=1)
            authenticated = time.monotonic()
            assert resp.error_code == 0 and 0 < resp.session_lifetime_ms <= 300
            assert c.metadata(["t"]).brokers[0].port == gw.port       # within the session
            if idle:
                gw.wait_for(lambda s: s["sessions_expired"] == 1)
            else:
                wait_past(authenticated + resp.session_lifetime_ms / 1000)
            with pytest.raises((ConnectionError, OSError)):
                c.metadata(["t"])
    stats = gw.wait_for(lambda s: s["sessions_expired"] == 1 and s["expired_requests"] == 1)
    assert stats["requests_forwarded"] == 2


def _pace(p, topic, n_total, rate, chunk=500, partitions=4, stop=None):
    """Sends ``n_total`` records at ``rate`` per second in chunks; keys carry the sequence."""
    results, sent = [], 0
    started = time.monotonic()
    while sent < n_total and not (stop and stop.is_set()):
        count = min(chunk, n_total - sent)
        keys = [b"%d" % (sent + i) for i in range(count)]
        values = [b"value-%08d" % (sent + i) for i in range(count)]
        results.append(p.send_many(topic, values, keys, partition=(sent // chunk) % partitions))
        sent += count
        ahead = started + sent / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)      # pacing: the load's rate, not a wait for a condition
    return results, sent


@pytest.mark.slow
def test_five_second_tokens_under_load_lose_nothing(make_gateway):
    """The issue's goal: 5-second tokens (and sessions) under 50,000 records/s for a minute
    (KPRODUCER_OAUTH_LOAD_SECONDS to shorten it), with Java's default refresh settings:
    every record stored once, in order, no request on an unauthenticated or expired
    connection, every session renewed in time."""
    import os
    seconds = float(os.environ.get("KPRODUCER_OAUTH_LOAD_SECONDS", "60"))
    rate = 50_000
    gw, issuer = make_gateway(session_ms={"OAUTHBEARER": 5000})
    calls = []
    provider = _minting(issuer, lifetime=5.0, calls=calls)
    topic = "oauth-load"
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider, linger_ms=5) as p:
        started = time.monotonic()
        results, sent = _pace(p, topic, int(seconds * rate), rate)
        p.flush(60)
        elapsed = time.monotonic() - started
        failed = [r for r in results if r.failed]
        assert not failed, failed[0].error if failed else None
        reauths = p._client.reauthentications
    stats = gw.stats()
    assert stats["expired_requests"] == 0 and stats["sessions_expired"] == 0, stats
    assert stats["illegal_requests"] == 0 and stats["auth_failures"] == 0, stats
    assert stats["token_rejections"] == 0 and stats["reauth_failures"] == 0, stats
    assert stats["reauth_while_in_flight"] == 0, stats     # answers in flight came first
    assert stats["reauthenticated"] >= seconds / 5 and reauths >= seconds / 5, (stats, reauths)
    assert len(calls) >= seconds / 5       # renewed at 80-85 % of each 5 s token
    print(f"{sent} records in {elapsed:.1f} s ({sent / elapsed:,.0f}/s), {len(calls)} tokens, "
          f"{reauths} re-authentications; gateway {stats}")
    assert elapsed < seconds * 1.5, f"the load fell behind: {elapsed:.1f} s for {seconds} s of records"
    got = read_back(gw.bootstrap, topic, consumer_config=READER, timeout=300)
    seen = set()
    for partition, msgs in got.items():
        seqs = [int(m.key) for m in msgs]
        assert seqs == sorted(seqs), f"partition {partition} out of order"
        seen.update(seqs)
        assert all(m.value == b"value-%08d" % int(m.key) for m in msgs)
    assert sum(len(msgs) for msgs in got.values()) == sent == len(seen)


def test_a_failed_refresh_is_retried_and_loses_nothing(make_gateway):
    gw, issuer = make_gateway(session_ms={"OAUTHBEARER": 2000})
    # The renewal starts at about 80 % of the lifetime and fails three times (backoff 50,
    # 100, 200 ms) before the provider answers again: the lifetime leaves the token about a
    # second beyond that, so a loaded machine's scheduling cannot let it expire first.
    provider = FlakyProvider(lifetime=6.0, issuer=issuer)
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider, linger_ms=2,
                  sasl_login_retry_backoff_ms=50, sasl_login_retry_backoff_max_ms=200) as p:
        login = p._client.sasl.login
        n, results = 0, []
        wait_until(lambda: not login.pending(), 10, "the first token")
        provider.failing = ConnectionResetError("IdP hiccup")
        calls = provider.calls
        deadline = time.monotonic() + 10
        while provider.calls < calls + 3 and time.monotonic() < deadline:
            results.append(p.send("refresh-topic", b"%d" % n, partition=0))
            n += 1
            time.sleep(0.005)     # a trickle of records while the renewal fails
        provider.failing = None
        end = time.monotonic() + 3
        while time.monotonic() < end:
            results.append(p.send("refresh-topic", b"%d" % n, partition=0))
            n += 1
            time.sleep(0.005)
        p.flush(30)
        assert [f.exception(0) for f in results if f.exception(0)] == []
        assert login.failures >= 3 and provider.calls >= calls + 4
    got = read_back(gw.bootstrap, "refresh-topic", consumer_config=READER)
    assert [m.value for m in got[0]] == [b"%d" % i for i in range(n)]
    assert gw.stats()["reauthenticated"] >= 1 and gw.stats()["expired_requests"] == 0


def test_reauthentication_with_another_principal_is_refused(make_gateway, caplog):
    """A session keeps its principal (KIP-368): a re-authentication with a token for another
    one fails, the connection closes with the broker's reason logged, and a new connection
    logs in with the new principal."""
    caplog.set_level(logging.ERROR, logger="kproducer")
    gw, issuer = make_gateway(session_ms={"OAUTHBEARER": 800})
    subjects = iter(["svc-a"] + ["svc-b"] * 100)

    def provider(config):
        return issuer.mint(next(subjects), lifetime=60), time.time() + 60
    with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider) as p:
        assert p.send("t", b"first", partition=0).result(30).offset == 0
        p._client.sasl.login.refresh_now()
        wait_until(lambda: gw.stats()["reauth_failures"] >= 1, 10, "a refused re-authentication")
        assert p.send("t", b"second", partition=0).result(30).offset == 1
    assert "Cannot change principals during re-authentication from svc-a: svc-b" in caplog.text
    assert "SASL OAUTHBEARER re-authentication with node" in caplog.text
    assert gw.stats()["expired_requests"] == 0


def _break_provider_after_first_token(make_gateway, **producer_kw):
    gw, issuer = make_gateway(session_ms={"OAUTHBEARER": 1500})
    provider = FlakyProvider(lifetime=1.5, issuer=issuer)
    p = Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=provider, linger_ms=1,
                 sasl_login_retry_backoff_ms=100, sasl_login_retry_backoff_max_ms=300, **producer_kw)
    assert p.send("t", b"ok", partition=0).result(30).offset == 0
    provider.failing = PermissionError("the service account was revoked")
    return gw, p


def _assert_names_the_provider_and_cause(exc):
    # A TokenProviderError, or (when the token expired between the client's check and the
    # broker's) the broker's refusal with the same explanation.
    msg = str(exc)
    assert isinstance(exc, AuthenticationError), msg
    assert "FlakyProvider" in msg and "PermissionError: the service account was revoked" in msg
    assert "expired at" in msg


def test_sends_fail_with_the_provider_error_once_the_token_expires(make_gateway):
    """The provider breaks for good: the current token serves until it expires; then a send
    that waits for metadata raises the provider's error within max.block.ms, naming the
    provider and the cause, instead of timing out."""
    gw, p = _break_provider_after_first_token(make_gateway, max_block_ms=10000)
    try:
        # The token expires; the sessions it opened end; connections cannot authenticate.
        wait_until(lambda: isinstance(p._client.last_connect_error, TokenProviderError), 15,
                   "a connection refused for want of a token")
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as exc:
            p.send("another-topic", b"v").result(0)     # a failed future, as Java's send()
        assert time.monotonic() - started < 10
        _assert_names_the_provider_and_cause(exc.value)
    finally:
        p.close(10)
    assert not p._sender.alive
    # (Requests after a session's end are to be expected here: the sessions shrink to the
    # token's last milliseconds, which no client can renew in time.)


def test_queued_records_fail_with_the_provider_error_once_the_token_expires(make_gateway):
    gw, p = _break_provider_after_first_token(make_gateway)
    try:
        futures, failed = [], []
        deadline = time.monotonic() + 8
        while not failed and time.monotonic() < deadline:
            futures.append(p.send("t", b"v", partition=0))
            failed = [f.exception(0) for f in futures if f.done() and f.exception(0) is not None]
            time.sleep(0.02)       # a record every 20 ms, until one fails
        assert failed, "no record failed within 8 s"
        _assert_names_the_provider_and_cause(failed[0])
    finally:
        p.close(0)


def test_a_provider_that_never_returns_is_named_when_max_block_ms_runs_out(make_gateway):
    gw, _ = make_gateway()
    hang = threading.Event()

    def stuck_provider(config):
        hang.wait(30)
        raise RuntimeError("released")
    try:
        started = time.monotonic()
        with Producer(bootstrap_servers=gw.bootstrap, **OAUTH_BASE, oauth_cb=stuck_provider,
                      socket_connection_setup_timeout_ms=300, max_block_ms=2000) as p:
            with pytest.raises(KafkaTimeoutError, match="no OAUTHBEARER token yet from the token "
                                                        "provider .*stuck_provider for node"):
                p.send("t", b"v").result(0)
        assert time.monotonic() - started < 10      # close() does not wait for the provider
    finally:
        hang.set()
    assert gw.stats()["handshakes"] == 0
