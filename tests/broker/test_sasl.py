"""SASL PLAIN and SCRAM-SHA-256/512: the client mechanisms against the RFC 5802/7677 test
vectors, configuration parsing, and whole exchanges against a real broker.

Tansu's own SASL is broken (shared/TANSU.md), so the broker sits behind
``kproducer.testing.SaslGateway``, which does the server side of Kafka's SASL flow. The
gateway itself is checked with librdkafka (confluent-kafka): every read-back goes
through it with confluent's SASL client, and a wrong password is refused to it too.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Producer as CProducer

from kproducer import Producer
from kproducer.config import ProducerConfig
from kproducer.errors import AuthenticationError, ConfigError, KafkaTimeoutError
from kproducer.protocol import messages as m
from kproducer.sasl import (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, PlainClient, SaslCredentials,
                            ScramClient, parse_jaas_config, saslprep)
from kproducer.testing import BlockingClient, TansuBroker
from kproducer.testing.broker import free_port
from kproducer.testing.readback import expect_records
from kproducer.testing.sasl_gateway import SaslGateway
from kproducer.testing.tls import TestPki, TlsTerminator

USER = "user-7f3a"
PASSWORD = "pw-Secret-91"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


# ---------------------------------------------------------------------------
# SCRAM against the RFCs' worked examples

def test_scram_sha1_rfc5802_example():
    # RFC 5802 section 5: user "user", password "pencil", SCRAM-SHA-1.
    c = ScramClient("user", "pencil", "sha1", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert bytes(c.first_message()) == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = c.respond(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert bytes(final) == (b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
                            b"p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
    assert not c.complete
    assert c.respond(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=") is None
    assert c.complete


RFC7677_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc7677_client():
    c = ScramClient("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    c.first_message()
    return c, c.respond(RFC7677_SERVER_FIRST)


def test_scram_sha256_rfc7677_example():
    c = ScramClient("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.mechanism == "SCRAM-SHA-256"
    assert bytes(c.first_message()) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.respond(RFC7677_SERVER_FIRST)
    assert bytes(final) == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert c.respond(RFC7677_SERVER_FINAL) is None and c.complete


@pytest.mark.parametrize("server_final, why", [
    (b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", "signature does not match"),   # one bit
    (b"v=" + b"A" * 44, "signature does not match"),
    (b"e=invalid-proof", "invalid-proof"),
    (b"e=other-error", "other-error"),
    (b"x=1", "no server signature"),
    (b"", "malformed"),
    (b"v=not base64!", "not valid base64"),
])
def test_a_bad_server_final_is_an_authentication_error(server_final, why):
    c, _ = _rfc7677_client()
    with pytest.raises(AuthenticationError, match=why):
        c.respond(server_final)
    assert not c.complete
    with pytest.raises(AuthenticationError):   # and the exchange stays over
        c.respond(RFC7677_SERVER_FINAL)


@pytest.mark.parametrize("server_first, why", [
    (b"r=someoneElsesNonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),     # nothing added
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024", "iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=lots", "not a number"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "salt"),
    (b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "extension"),
    (b"e=unknown-user", "unknown-user"),
    (b"\xff\xfe", "UTF-8"),
])
def test_a_bad_server_first_is_an_authentication_error(server_first, why):
    c = ScramClient("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    c.first_message()
    with pytest.raises(AuthenticationError, match=why):
        c.respond(server_first)


def test_scram_uses_raw_utf8_as_kafka_does_and_saslprep_on_request():
    """Kafka salts the raw UTF-8 password (Java's ScramFormatter.normalize), so a password
    SASLprep would change must be sent unchanged by default; saslprep=True maps it."""
    first = RFC7677_SERVER_FIRST
    def proof(password, **kw):
        c = ScramClient("user", password, "sha256", nonce="rOprNGfwEbeRWgbNEkqO", **kw)
        c.first_message()
        return bytes(c.respond(first))
    assert proof("pass\u00a0word") != proof("pass word")
    assert proof("pass\u00a0word", saslprep=True) == proof("pass word")
    assert proof("pencil", saslprep=True) == proof("pencil")


def test_scram_user_names_are_escaped_and_nonces_are_fresh():
    c = ScramClient("a,b=c", "pw")
    first = bytes(c.first_message())
    assert first.startswith(b"n,,n=a=2Cb=3Dc,r=")
    nonce = first.split(b",r=")[1]
    assert len(nonce) >= 24 and b"," not in nonce
    assert bytes(ScramClient("a,b=c", "pw").first_message()) != first


@pytest.mark.parametrize("text, prepared", [
    # RFC 4013 section 3 examples
    ("I\u00adX", "IX"), ("user", "user"), ("USER", "USER"), ("\u00aa", "a"), ("\u2168", "IX"),
    ("pass\u00a0word", "pass word"), ("", ""),
])
def test_saslprep_rfc4013_examples(text, prepared):
    assert saslprep(text) == prepared


@pytest.mark.parametrize("text", ["\u0007", "\u0627\u0031", "a\x00b", "tab\there"])
def test_saslprep_refuses_prohibited_strings(text):
    with pytest.raises(ValueError):
        saslprep(text)


def test_plain_message_and_hidden_reprs():
    c = PlainClient("alice", PASSWORD)
    token = c.first_message()
    assert bytes(token) == b"\0alice\0" + PASSWORD.encode()
    assert c.respond(b"") is None and c.complete
    req = m.SaslAuthenticateRequest(auth_bytes=token)
    creds = SaslCredentials("SCRAM-SHA-512", USER, PASSWORD)
    scram = creds.new_client()
    for text in (repr(token), str(token), repr(req), repr(c), repr(creds), str(creds), repr(scram),
                 repr(scram.first_message())):
        assert PASSWORD not in text and "alice" not in text and USER not in text
    assert creds.scrub(f"no such user {USER} / {PASSWORD}") == "no such user [hidden] / [hidden]"


# ---------------------------------------------------------------------------
# Configuration

def _jaas(module, user=USER, password=PASSWORD, extra=""):
    return f'{module} required username="{user}" password="{password}"{extra};'


def test_jaas_config_forms():
    assert parse_jaas_config(_jaas(PLAIN_LOGIN_MODULE)) == (PLAIN_LOGIN_MODULE, USER, PASSWORD, {})
    assert parse_jaas_config(_jaas(SCRAM_LOGIN_MODULE, extra=" tokenauth=true"))[1:] == \
        (USER, PASSWORD, {"tokenauth": "true"})
    # Escapes and comments as Java's JaasConfig tokenizer reads them; unquoted words.
    text = (f'/* creds */ {SCRAM_LOGIN_MODULE}\n  REQUIRED // flag\n'
            f'  username=bob password="a\\"b c\\\\";')
    assert parse_jaas_config(text) == (SCRAM_LOGIN_MODULE, "bob", 'a"b c\\', {})


@pytest.mark.parametrize("jaas, why", [
    (_jaas(PLAIN_LOGIN_MODULE)[:-1], "must end with ';'"),
    (_jaas(PLAIN_LOGIN_MODULE).replace("required", "needed"), "control flag"),
    (_jaas(PLAIN_LOGIN_MODULE).replace(' password="', ' password="x'), None),   # still fine
    (f'{PLAIN_LOGIN_MODULE} required username="{USER}" password="{PASSWORD};', "unterminated"),
    (f'{PLAIN_LOGIN_MODULE} required username="{USER}" password={PASSWORD}!x;', "unexpected character"),
    (f'{PLAIN_LOGIN_MODULE} required username="{USER}" {PASSWORD};', "name=value"),
    (f'{PLAIN_LOGIN_MODULE} required username="{USER}";', "no password"),
    (f'{PLAIN_LOGIN_MODULE} required password="{PASSWORD}";', "no username"),
    (_jaas("com.example.Sneaky" + PASSWORD.replace("-", "")), "login module is not supported"),
    (_jaas("com.sun.security.auth.module.Krb5LoginModule"), "Krb5LoginModule is not supported"),
    (_jaas(PLAIN_LOGIN_MODULE) + " " + _jaas(PLAIN_LOGIN_MODULE), "2 login modules"),
    (PASSWORD, "control flag"),
    ("  ", "is empty"),
])
def test_bad_jaas_configs_are_config_errors_that_never_show_the_password(jaas, why):
    settings = dict(bootstrap_servers="localhost:9092", security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism="PLAIN", sasl_jaas_config=jaas)
    if why is None:
        ProducerConfig(**settings)
        return
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(**settings)
    assert exc.value.key == "sasl.jaas.config"
    assert why in str(exc.value)
    assert PASSWORD not in str(exc.value) and PASSWORD.replace("-", "") not in str(exc.value)
    assert USER not in str(exc.value)


@pytest.mark.parametrize("settings, key, why", [
    (dict(security_protocol="SASL_PLAINTEXT", sasl_username=USER, sasl_password=PASSWORD),
     "sasl.mechanism", "Kafka's default GSSAPI (Kerberos) is not supported"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN"), "sasl.username",
     "needs credentials"),
    (dict(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username=USER), "sasl.password",
     "needs credentials"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI", sasl_username=USER,
          sasl_password=PASSWORD), "sasl.mechanism", "does not support"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", sasl_username=USER,
          sasl_password=PASSWORD), "sasl.username", "OAUTHBEARER, which sends a token"),
    (dict(sasl_username=USER, sasl_password=PASSWORD), "sasl.username", "does not use SASL"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=USER,
          sasl_password=PASSWORD, sasl_jaas_config=_jaas(PLAIN_LOGIN_MODULE)), "sasl.jaas.config",
     "not both"),
    (dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=USER,
          sasl_password=PASSWORD + "\0"), "sasl.password", "NUL"),
])
def test_sasl_config_errors_name_the_key(settings, key, why):
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(bootstrap_servers="localhost:9092", **settings)
    assert exc.value.key == key and why in str(exc.value)
    assert PASSWORD not in str(exc.value) and USER not in str(exc.value)


def test_scram_credentials_are_taken_as_given():
    """Kafka's SCRAM uses raw UTF-8 (no SASLprep), so a password SASLprep would refuse or map
    is a valid credential for a Kafka broker and must not be refused at configuration."""
    for password in (PASSWORD + "\x07", "pass\u00a0word"):
        cfg = ProducerConfig(bootstrap_servers="localhost:9092", security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_username=USER, sasl_password=password)
        assert cfg.sasl_credentials == SaslCredentials("SCRAM-SHA-256", USER, password)


def test_sasl_config_reprs_hide_credentials():
    for settings in (dict(sasl_username=USER, sasl_password=PASSWORD),
                     dict(sasl_jaas_config=_jaas(SCRAM_LOGIN_MODULE))):
        cfg = ProducerConfig(bootstrap_servers="localhost:9092", security_protocol="sasl_plaintext",
                             sasl_mechanism="SCRAM-SHA-512", **settings)
        assert cfg.sasl_credentials == SaslCredentials("SCRAM-SHA-512", USER, PASSWORD)
        for text in (repr(cfg), str(cfg), repr(cfg.sasl_credentials), repr(cfg.as_dict()["sasl.mechanism"])):
            assert PASSWORD not in text and USER not in text
        assert "[hidden]" in repr(cfg)
    # Spaces around a password are kept (sasl.password is not stripped like other strings).
    cfg = ProducerConfig(bootstrap_servers="localhost:9092", security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_username=USER, sasl_password=f" {PASSWORD} ")
    assert cfg.sasl_credentials == SaslCredentials("PLAIN", USER, f" {PASSWORD} ")
    assert ProducerConfig(bootstrap_servers="localhost:9092").sasl_credentials is None


# ---------------------------------------------------------------------------
# Against the broker, behind the SASL gateway

@pytest.fixture
def gateway(tmp_path):
    """A SaslGateway (user USER/PASSWORD, every mechanism) in front of a fresh broker
    that advertises the gateway's port."""
    port = free_port()
    gw = SaslGateway("127.0.0.1", port, users={USER: PASSWORD}).start()
    broker = TansuBroker(port=port, advertised_port=gw.port, log_dir=tmp_path).start()
    try:
        yield gw
    finally:
        gw.stop()
        broker.stop()
    broker.check_log()


def _producer(gw, mechanism="SCRAM-SHA-256", password=PASSWORD, **kw):
    return Producer(bootstrap_servers=gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism=mechanism, sasl_username=USER, sasl_password=password, **kw)


def _librdkafka_sasl(mechanism, password=PASSWORD):
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
            "sasl.username": USER, "sasl.password": password}


def _assert_no_secrets(*texts):
    for text in texts:
        assert PASSWORD not in text and USER not in text


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_produce_and_read_back_through_sasl(gateway, mechanism, caplog):
    caplog.set_level(logging.DEBUG, logger="kproducer")
    jaas_module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    records = [(f"k{i}".encode(), f"v{i}-{mechanism}".encode()) for i in range(50)]
    with Producer(bootstrap_servers=gateway.bootstrap, security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism=mechanism, sasl_jaas_config=_jaas(jaas_module),
                  partitioner=lambda *a: 0) as p:
        futures = [p.send("sasl-topic", v, key=k) for k, v in records]
        p.flush(30)
        assert [f.result().offset for f in futures] == list(range(50))
        _assert_no_secrets(repr(p), str(p.config))
    stats = gateway.stats()
    assert stats["authenticated"] >= 1 and stats["auth_failures"] == 0
    # librdkafka's SASL client reads it back through the gateway: an independent check of both.
    expect_records(gateway.bootstrap, "sasl-topic", {0: records}, exact_partitions=False,
                   consumer_config=_librdkafka_sasl(mechanism))
    assert gateway.stats()["authenticated"] > stats["authenticated"]
    assert "authenticated with " + mechanism in caplog.text
    _assert_no_secrets(caplog.text)


def test_wrong_password_fails_the_send_and_close_does_not_hang(gateway, caplog):
    caplog.set_level(logging.DEBUG, logger="kproducer")
    p = _producer(gateway, password="not-" + PASSWORD, max_block_ms=60000)
    try:
        # Not a KafkaTimeoutError after max.block.ms: the failure ends the metadata wait.
        with pytest.raises(AuthenticationError) as exc:
            p.send("t", b"v").result(0)     # a failed future, as Java's send()
        assert "SASL_AUTHENTICATION_FAILED" in str(exc.value)
        _assert_no_secrets(str(exc.value), repr(exc.value), repr(p), caplog.text)
        assert "not-" not in caplog.text
    finally:
        p.close(10)
    assert not p._sender.alive
    stats = gateway.wait_for(lambda s: s["connections_active"] == 0)
    assert stats["auth_failures"] >= 1 and stats["authenticated"] == 0 and stats["bytes_after_auth"] == 0


def test_records_waiting_for_a_broker_fail_when_its_authentication_fails(gateway, caplog):
    caplog.set_level(logging.DEBUG, logger="kproducer")
    with _producer(gateway, "PLAIN", linger_ms=0) as p:
        assert p.send("t", b"first").result(30).offset == 0     # metadata and connection in place
        gateway.remove_user(USER)           # the credentials are revoked...
        gateway.cut_all()                   # ...and the connection has to be made again
        futures = [p.send("t", b"v%d" % i) for i in range(5)]
        for f in futures:
            assert isinstance(f.exception(timeout=30), AuthenticationError)
        _assert_no_secrets(*(str(f.exception()) for f in futures))
    _assert_no_secrets(caplog.text)


def test_a_wrong_server_signature_leaves_no_usable_connection(gateway):
    gateway.tamper_server_signature = True
    with _producer(gateway, "SCRAM-SHA-512", max_block_ms=60000) as p:
        with pytest.raises(AuthenticationError, match="signature does not match"):
            p.send("t", b"v").result(0)     # a failed future, as Java's send()
    # The gateway took the proof as good and was ready to forward; the client closed the
    # connection without sending a single request over it.
    stats = gateway.wait_for(lambda s: s["connections_active"] == 0)
    assert stats["authenticated"] >= 1 and stats["bytes_after_auth"] == 0


def test_rfc_style_error_in_server_final(gateway):
    gateway.scram_error_attribute = True
    with _producer(gateway, "SCRAM-SHA-256", password="bad", max_block_ms=60000) as p:
        with pytest.raises(AuthenticationError, match="invalid-proof"):
            p.send("t", b"v").result(0)     # a failed future, as Java's send()
    assert gateway.stats()["bytes_after_auth"] == 0


def test_mechanism_not_enabled_at_the_server(gateway):
    gateway.mechanisms = ("SCRAM-SHA-512",)
    with _producer(gateway, "PLAIN", max_block_ms=60000) as p:
        with pytest.raises(AuthenticationError,
                           match="does not enable SASL mechanism PLAIN; it enables SCRAM-SHA-512"):
            p.send("t", b"v").result(0)     # a failed future, as Java's send()
    assert gateway.stats()["unsupported_mechanism"] >= 1


def test_gateway_refuses_wrong_passwords_to_librdkafka_and_requests_before_authentication(gateway):
    # librdkafka with a wrong password gets an authentication error from the gateway.
    errors, got = [], threading.Event()

    def on_error(err):
        errors.append(err)
        if err.code() == CKafkaError._AUTHENTICATION:
            got.set()

    cp = CProducer({"bootstrap.servers": gateway.bootstrap, "error_cb": on_error,
                    **_librdkafka_sasl("SCRAM-SHA-256", password="wrong")})
    try:
        cp.produce("t", b"v")
        for _ in range(300):
            cp.poll(0.1)
            if got.is_set():
                break
        assert got.is_set(), errors
    finally:
        cp.purge()
        cp.flush(5)
    # A client that skips SASL gets ApiVersions (listing the SASL APIs) and nothing else.
    with BlockingClient("127.0.0.1", gateway.port) as c:
        assert c.broker_versions[17] == (0, 1) and c.broker_versions[36] == (0, 2)
        with pytest.raises((ConnectionError, OSError)):
            c.metadata(["t"])
    assert gateway.wait_for(lambda s: s["illegal_requests"] == 1)
    # SaslHandshake v0 (before KIP-152): the PLAIN token then travels as a bare frame, and the
    # connection is forwarded to the broker afterwards.
    with BlockingClient("127.0.0.1", gateway.port) as c:
        resp = c.request(m.SaslHandshakeRequest(mechanism="PLAIN"), version=0)
        assert resp.error_code == 0 and "PLAIN" in resp.mechanisms
        token = b"\0" + USER.encode() + b"\0" + PASSWORD.encode()
        c.sock.sendall(len(token).to_bytes(4, "big") + token)
        assert c._recv_exact(4) == b"\0\0\0\0"      # an empty server token: success
        assert c.metadata(["t"]).brokers[0].port == gateway.port


def test_a_silent_server_is_bounded_by_the_connection_setup_timeout(gateway, caplog):
    caplog.set_level(logging.INFO, logger="kproducer")
    gateway.stall_sasl = True      # answers ApiVersions, then never SaslHandshake
    with _producer(gateway, socket_connection_setup_timeout_ms=300, max_block_ms=2000) as p:
        with pytest.raises(KafkaTimeoutError):
            p.send("t", b"v").result(0)
    # Each attempt was cut by the setup timeout and tried again on a new connection.
    assert "not established within socket.connection.setup.timeout.ms=300" in caplog.text
    assert gateway.stats()["connections_accepted"] >= 2


def test_sasl_ssl_through_a_tls_terminator(tmp_path):
    """SASL_SSL: TLS (the TLS terminator) in front of the SASL gateway in front of the broker, which
    advertises the terminator's port."""
    pki = TestPki(tmp_path / "pki")
    tls_port, broker_port = free_port(), free_port()
    gw = SaslGateway("127.0.0.1", broker_port, users={USER: PASSWORD}).start()
    broker = TansuBroker(port=broker_port, advertised_port=tls_port, log_dir=tmp_path).start()
    tunnel = TlsTerminator(pki, gw.port, port=tls_port, directory=str(tmp_path / "tls"))
    try:
        tunnel.start()
        tls = dict(bootstrap_servers=tunnel.bootstrap, security_protocol="SASL_SSL",
                   ssl_truststore_location=pki.ca_file, sasl_mechanism="SCRAM-SHA-512",
                   sasl_username=USER)
        records = [(b"k%d" % i, b"v%d" % i) for i in range(20)]
        with Producer(sasl_password=PASSWORD, partitioner=lambda *a: 1, **tls) as p:
            futures = [p.send("tls-topic", v, key=k) for k, v in records]
            assert [f.result(30).offset for f in futures] == list(range(20))
        with Producer(sasl_password="wrong", max_block_ms=60000, **tls) as p:
            with pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
                p.send("tls-topic", b"v").result(0)     # a failed future, as Java's send()
        expect_records(tunnel.bootstrap, "tls-topic", {1: records}, exact_partitions=False,
                       consumer_config={**_librdkafka_sasl("SCRAM-SHA-512"), "security.protocol": "SASL_SSL",
                                        "ssl.ca.location": pki.ca_file})
        stats = gw.stats()
        assert stats["authenticated"] >= 2 and stats["auth_failures"] >= 1
    finally:
        tunnel.stop()
        gw.stop()
        broker.stop()
    broker.check_log()


# ---------------------------------------------------------------------------
# KIP-368: sessions that end, and connections re-authenticated before they do

@pytest.fixture
def short_sessions(tmp_path):
    """A gateway whose sessions last 1 s for PLAIN and SCRAM (Kafka's
    connections.max.reauth.ms) in front of a fresh broker."""
    port = free_port()
    gw = SaslGateway("127.0.0.1", port, users={USER: PASSWORD}, session_ms=1000).start()
    broker = TansuBroker(port=port, advertised_port=gw.port, log_dir=tmp_path).start()
    try:
        yield gw
    finally:
        gw.stop()
        broker.stop()
    broker.check_log()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_connections_reauthenticate_before_their_sessions_end(short_sessions, mechanism, caplog):
    """Records keep flowing on the same connections across re-authentications: each one waits
    for the answers in flight, runs SaslHandshake + SaslAuthenticate, and goes on; nothing is
    lost, reordered or sent on an expired session."""
    caplog.set_level(logging.DEBUG, logger="kproducer")
    gw = short_sessions
    futures = []
    with _producer(gw, mechanism, linger_ms=1, partitioner=lambda *a: 0) as p:
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            futures.append(p.send("reauth-topic", b"v%d" % len(futures)))
            time.sleep(0.002)      # a steady trickle of requests across the sessions
        p.flush(30)
        assert [f.result().offset for f in futures] == list(range(len(futures)))
        reauths = p._client.reauthentications
    stats = gw.stats()
    assert reauths >= 2 and stats["reauthenticated"] >= 2, (reauths, stats)
    assert stats["expired_requests"] == 0 and stats["sessions_expired"] == 0, stats
    assert stats["illegal_requests"] == 0 and stats["reauth_failures"] == 0, stats
    assert stats["reauth_while_in_flight"] == 0, stats    # the answers in flight came first
    # One connection per broker for the whole run: re-authenticated, never reconnected.
    assert stats["authenticated"] <= 3, stats
    assert "re-authenticated with " + mechanism in caplog.text
    expect_records(gw.bootstrap, "reauth-topic", {0: [(None, b"v%d" % i) for i in range(len(futures))]},
                   exact_partitions=False, consumer_config=_librdkafka_sasl("SCRAM-SHA-512"))
    _assert_no_secrets(caplog.text)


def test_gateway_reauthentication_rules(short_sessions):
    """A re-authentication keeps its mechanism and principal, and needs a handshake first."""
    gw = short_sessions
    gw.add_user("other", "other-pw")

    def login(c, user=USER, password=PASSWORD):
        assert c.request(m.SaslHandshakeRequest(mechanism="PLAIN"), version=1).error_code == 0
        return c.request(m.SaslAuthenticateRequest(auth_bytes=b"\0%s\0%s" % (user.encode(), password.encode())),
                         version=1)

    with BlockingClient("127.0.0.1", gw.port) as c:
        resp = login(c)
        assert resp.error_code == 0 and resp.session_lifetime_ms == 1000
        assert login(c).error_code == 0                        # re-authenticated, same principal
        assert c.metadata(["t"]).brokers[0].port == gw.port
        resp = login(c, "other", "other-pw")                    # another principal: refused
        assert resp.error_code == 58 and "Cannot change principals" in resp.error_message
    with BlockingClient("127.0.0.1", gw.port) as c:
        assert login(c).error_code == 0
        resp = c.request(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), version=1)
        assert resp.error_code == 34                            # ILLEGAL_SASL_STATE: another mechanism
    with BlockingClient("127.0.0.1", gw.port) as c:
        assert login(c).error_code == 0
        with pytest.raises((ConnectionError, OSError)):         # SaslAuthenticate without a handshake
            c.request(m.SaslAuthenticateRequest(auth_bytes=b"\0x\0y"), version=1)
    stats = gw.wait_for(lambda s: s["reauth_failures"] == 2 and s["illegal_requests"] == 1)
    assert stats["reauthenticated"] == 1
