"""security.protocol=SSL end to end: the Producer through a real TLS terminator
(kproducer.testing.tls.TlsTerminator: Python's ssl module, OpenSSL, in a child process) in
front of Tansu, which advertises its port, so every connection the producer makes is TLS. What was produced is read back through TLS by confluent-kafka
(librdkafka with its own OpenSSL settings: an independent TLS client).

Also the ssl.* configuration: which settings exist, how they combine, and that the key
password never shows. Selector-level TLS (handshake in poll, 4 MiB frames) is in
test_selector_tls.py.
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from kproducer import Producer
from kproducer.config import ProducerConfig
from kproducer.errors import ConfigError, SslAuthenticationError
from kproducer.testing import TansuBroker
from kproducer.testing.broker import free_port
from kproducer.testing import busy
from kproducer.testing.readback import expect_records, read_back
from kproducer.testing.tls import TestPki, TlsTerminator

BS = "127.0.0.1:9092"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return TestPki(tmp_path_factory.mktemp("pki"))


@contextlib.contextmanager
def tls_broker(pki, tmp_path, **tls_args):
    """(broker, terminator): Tansu advertising the TLS port, the terminator forwarding to it."""
    tls_port = free_port()
    broker = TansuBroker(port=free_port(), advertised_port=tls_port, log_dir=str(tmp_path))
    broker.start()
    tunnel = TlsTerminator(pki, broker.port, port=tls_port, directory=str(tmp_path / "tls"), **tls_args)
    try:
        tunnel.start()
        yield broker, tunnel
    finally:
        tunnel.stop()
        broker.stop()
    broker.check_log()


def reader_tls(pki, *, client_cert=False, check_hostname=True):
    """librdkafka settings to read back through the same TLS terminator."""
    cfg = {"security.protocol": "SSL", "ssl.ca.location": pki.ca_file,
           "ssl.endpoint.identification.algorithm": "https" if check_hostname else "none"}
    if client_cert:
        cfg.update({"ssl.certificate.location": pki.client_cert, "ssl.key.location": pki.client_key})
    return cfg


def produce(producer, topic, records):
    """Sends ``[(partition, key, value)]``, waits for every future, returns the expected
    read-back ``{partition: [(key, value)]}``."""
    futures = [producer.send(topic, v, key=k, partition=p) for p, k, v in records]
    producer.flush(60)
    for f in futures:
        f.result(0)
    expected: dict[int, list] = {}
    for p, k, v in records:
        expected.setdefault(p, []).append((k, v))
    return expected


def test_produce_through_tls_and_read_back(pki, tmp_path):
    rng = os.urandom
    records = [(i % 3, b"k%d" % i, rng(100 + i % 300)) for i in range(3000)]
    # A few large records: requests of several 16 KiB TLS records, written across polls.
    records += [(p, b"big", rng(700_000)) for p in range(3)]
    with tls_broker(pki, tmp_path) as (broker, tunnel):
        broker.create_topic("tls", 3)
        with Producer(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL",
                      ssl_truststore_location=pki.ca_file, linger_ms=5, compression_type="lz4") as p:
            expected = produce(p, "tls", records)
        expect_records(tunnel.bootstrap, "tls", expected, consumer_config=reader_tls(pki))
        assert "accepted connection" in tunnel.log_text()


@pytest.mark.timeout(90)
def test_the_courier_writes_through_tls(pki, tmp_path):
    """While the application computes (no other Python thread runs), the courier writes the
    lingering batches through TLS: one of small records, and one of 120 KB (eight TLS
    records). The records that follow go after them, and all read back in order."""
    with tls_broker(pki, tmp_path) as (broker, tunnel):
        broker.create_topic("tls-courier", 2)
        with busy.gil_held(), \
                Producer(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL",
                         ssl_truststore_location=pki.ca_file, linger_ms=30,
                         batch_size=262144) as p:
            p.send("tls-courier", b"warm", partition=0).result(10)
            futures = []
            sends = {0: [b"s%d" % i for i in range(50)], 1: [os.urandom(20_000) for _ in range(6)]}
            for partition, values in sends.items():
                busy.wait_courier_armed(p)
                sent = p._acc.courier_sent
                futures += [p.send("tls-courier", v, partition=partition) for v in values]
                assert busy.compute_until(lambda: p._acc.courier_sent > sent, timeout=2.0)
                futures.append(p.send("tls-courier", b"after", partition=partition))
            p.flush(30)
            for f in futures:
                f.result(0)
            assert p.metrics()["requests_by_courier"] >= 2
        got = read_back(tunnel.bootstrap, "tls-courier", consumer_config=reader_tls(pki))
        assert [m.value for m in got[0]] == [b"warm"] + sends[0] + [b"after"]
        assert [m.value for m in got[1]] == sends[1] + [b"after"]


def test_mutual_tls(pki, tmp_path):
    """The terminator requires a client certificate signed by the CA: Kafka's keystore form and
    librdkafka's certificate + encrypted key form both get through; without a certificate
    send() fails with the server's reason rather than waiting out max.block.ms."""
    enc_key = pki.encrypted_key(pki.client_key, "pa55-word")
    with tls_broker(pki, tmp_path, require_client_cert=True) as (broker, tunnel):
        broker.create_topic("mtls", 1)
        common = dict(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL")
        with Producer(ssl_truststore_location=pki.ca_file, ssl_keystore_location=pki.client_keystore,
                      **common) as p:
            first = produce(p, "mtls", [(0, b"a", b"keystore")])
        with Producer({"ssl.ca.location": pki.ca_file, "ssl.certificate.location": pki.client_cert,
                       "ssl.key.location": enc_key, "ssl.key.password": "pa55-word"}, **common) as p:
            second = produce(p, "mtls", [(0, b"b", b"certificate + encrypted key")])
        expect_records(tunnel.bootstrap, "mtls", {0: first[0] + second[0]},
                       consumer_config=reader_tls(pki, client_cert=True))

        p = Producer(ssl_truststore_location=pki.ca_file, max_block_ms=60000, **common)
        try:
            with pytest.raises(SslAuthenticationError) as exc:
                p.send("mtls", b"never").result(0)     # a failed future (Java's send)
            assert "certificate required" in str(exc.value), exc.value
            assert f"127.0.0.1:{tunnel.port}" in str(exc.value)
        finally:
            p.close(10)


def test_hostname_verification(pki, tmp_path):
    """A certificate for another name fails the handshake with the verify error (well
    within max.block.ms, and the producer closes at once); with
    ssl.endpoint.identification.algorithm="" the same server is accepted."""
    cert, key = pki.issue("elsewhere", dns=["other.example"])
    with tls_broker(pki, tmp_path, cert=cert, key=key) as (broker, tunnel):
        broker.create_topic("names", 1)
        common = dict(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL",
                      ssl_truststore_location=pki.ca_file)
        p = Producer(max_block_ms=60000, **common)
        try:
            with pytest.raises(SslAuthenticationError) as exc:
                p.send("names", b"never").result(0)
            msg = str(exc.value)
            assert "certificate verify failed: IP address mismatch" in msg, msg
            assert "does not name 127.0.0.1" in msg
        finally:
            p.close(10)
        assert not p._sender.alive

        with Producer(ssl_endpoint_identification_algorithm="", **common) as p:
            expected = produce(p, "names", [(0, None, b"no name check")])
        expect_records(tunnel.bootstrap, "names", expected,
                       consumer_config=reader_tls(pki, check_hostname=False))


def test_unknown_ca_is_a_verify_error(pki, tmp_path):
    other = pki.other_ca()
    with tls_broker(pki, tmp_path) as (broker, tunnel):
        p = Producer(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL",
                     ssl_truststore_location=other.ca_file, max_block_ms=60000)
        try:
            with pytest.raises(SslAuthenticationError) as exc:
                p.send("ca", b"never").result(0)
            assert "certificate verify failed: unable to get local issuer certificate" in str(exc.value)
        finally:
            p.close(10)


def test_tls_server_dying_mid_stream_loses_and_duplicates_nothing(pki, tmp_path):
    """The TLS terminator is killed (connections reset, TLS state lost) while requests are in flight,
    then comes back on the same port: the producer reconnects with a new handshake and
    every record is stored exactly once, in order (idempotence)."""
    n = 30_000
    records = [(i % 2, b"%d" % i, b"v%06d" % i + b"x" * 200) for i in range(n)]
    with tls_broker(pki, tmp_path) as (broker, tunnel):
        broker.create_topic("dies", 2)
        with Producer(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL",
                      ssl_truststore_location=pki.ca_file, linger_ms=1, batch_size=4096,
                      reconnect_backoff_max_ms=200) as p:
            futures = [p.send("dies", v, key=k, partition=part) for part, k, v in records[: n // 2]]
            deadline = time.monotonic() + 30
            while sum(f.done() for f in futures) < n // 10:
                assert time.monotonic() < deadline, "nothing acknowledged through TLS"
                time.sleep(0.005)
            futures += [p.send("dies", v, key=k, partition=part) for part, k, v in records[n // 2:]]
            accepted_before = tunnel.log_text().count("accepted connection")
            tunnel.stop(kill=True)
            pending_at_kill = sum(not f.done() for f in futures)
            tunnel.restart()
            p.flush(120)
            for f in futures:
                f.result(0)
            accepted_after = tunnel.log_text().count("accepted connection")  # the log is appended to
        assert pending_at_kill > 0  # the kill did interrupt the stream
        assert accepted_after > accepted_before  # and the producer came back with a new handshake
        expected = {0: [(k, v) for part, k, v in records if part == 0],
                    1: [(k, v) for part, k, v in records if part == 1]}
        expect_records(tunnel.bootstrap, "dies", expected, consumer_config=reader_tls(pki))


# ---- configuration -------------------------------------------------------------------


def test_tls_settings_need_a_tls_protocol():
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(bootstrap_servers=BS, ssl_truststore_location="/ca.pem")
    assert exc.value.key == "ssl.truststore.location" and "security.protocol" in str(exc.value)
    cfg = ProducerConfig(bootstrap_servers=BS, security_protocol="ssl", ssl_truststore_location="/ca.pem")
    assert cfg.security_protocol == "SSL" and cfg.ssl_truststore_location == "/ca.pem"
    assert cfg.ssl_endpoint_identification_algorithm == "https"
    cfg = ProducerConfig(bootstrap_servers=BS, security_protocol="SSL",
                         ssl_endpoint_identification_algorithm="none")
    assert cfg.ssl_endpoint_identification_algorithm == ""


@pytest.mark.parametrize("settings, key, text", [
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type", "supported: PEM"),
    ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type", "supported: PEM"),
    ({"ssl.endpoint.identification.algorithm": "ldaps"}, "ssl.endpoint.identification.algorithm",
     "expected 'https'"),
    ({"ssl.truststore.location": "/a.pem", "ssl.ca.location": "/b.pem"}, "ssl.ca.location", "not both"),
    ({"ssl.key.location": "/k.pem"}, "ssl.key.location", "without ssl.certificate.location"),
    ({"ssl.key.password": "hunter2-secret"}, "ssl.key.password", "without a private key"),
    ({"ssl.truststore.location": ""}, "ssl.truststore.location", "is empty"),
    ({"ssl.truststore.password": "x"}, "ssl.truststore.password", "PEM files"),
])
def test_tls_setting_errors_name_the_key(settings, key, text):
    with pytest.raises(ConfigError) as exc:
        ProducerConfig({"bootstrap.servers": BS, "security.protocol": "SSL", **settings})
    assert exc.value.key == key and text in str(exc.value), str(exc.value)
    assert "hunter2-secret" not in str(exc.value)


def test_files_are_checked_when_the_producer_starts(pki, tmp_path):
    common = {"bootstrap.servers": BS, "security.protocol": "SSL"}
    missing = str(tmp_path / "missing.pem")
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        with pytest.raises(ConfigError) as exc:
            Producer({**common, key: missing})
        assert exc.value.key == key and "does not exist" in str(exc.value)
    not_pem = tmp_path / "garbage.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ConfigError) as exc:
        Producer({**common, "ssl.truststore.location": str(not_pem)})
    assert exc.value.key == "ssl.truststore.location" and "CA file" in str(exc.value)

    enc_key = pki.encrypted_key(pki.client_key, "the-right-one")
    for password in ("the-wrong-one", None):
        settings = {**common, "ssl.certificate.location": pki.client_cert, "ssl.key.location": enc_key}
        if password:
            settings["ssl.key.password"] = password
        with pytest.raises(ConfigError) as exc:
            Producer(settings)
        assert exc.value.key == "ssl.key.location" and "ssl.key.password" in str(exc.value)
        assert "the-wrong-one" not in str(exc.value) and "the-right-one" not in str(exc.value)

    cfg = ProducerConfig({**common, "ssl.keystore.location": pki.client_keystore,
                          "ssl.key.password": "the-right-one"})
    assert "the-right-one" not in repr(cfg) and "[hidden]" in repr(cfg)
