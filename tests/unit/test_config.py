"""ProducerConfig: Kafka 4.x defaults, both spellings, parsing, ranges and Java's cross-checks."""

from __future__ import annotations

import copy
import logging
import pickle

import pytest

from kproducer.compression import LEVELS
from kproducer.config import SETTINGS, UNSUPPORTED, ProducerConfig, Setting, is_secret
from kproducer.errors import ConfigError, KafkaError

BS = "localhost:9092"

# Kafka 4.x defaults, as ProducerConfig.java / CommonClientConfigs.java define them.
JAVA_DEFAULTS = {
    "client.dns.lookup": "use_all_dns_ips",
    "client.id": "",
    "logger": None,                    # confluent-kafka's Python-only settings
    "error.cb": None,
    "acks": -1,  # "all"
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 16384,
    "batch.max.size": 262144,           # KIP-782 (proposed for Java, not shipped there)
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "max.request.size": 1048576,
    "request.timeout.ms": 30000,
    "delivery.timeout.ms": 120000,
    "retries": 2147483647,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 10000,
    "socket.connection.setup.timeout.max.ms": 30000,
    "max.in.flight.requests.per.connection": 5,
    "metadata.max.age.ms": 300000,
    "metadata.max.idle.ms": 300000,
    "metadata.recovery.strategy": "rebootstrap",          # Kafka 4.0 (KIP-1102)
    "metadata.recovery.rebootstrap.trigger.ms": 300000,
    "compression.type": "none",
    "compression.gzip.level": 6,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "partitioner.ignore.keys": False,
    "partitioner.adaptive.partitioning.enable": True,
    "partitioner.availability.timeout.ms": 0,
    "send.buffer.bytes": -1,           # Java: 131072 (a fixed buffer is not autotuned)
    "receive.buffer.bytes": 32768,
    "connections.max.idle.ms": 540000,
    "security.protocol": "PLAINTEXT",
    "ssl.truststore.location": None,
    "ssl.truststore.type": "PEM",      # Java: JKS; kproducer reads PEM only
    "ssl.keystore.location": None,
    "ssl.keystore.type": "PEM",        # Java: JKS
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.ca.location": None,           # librdkafka's names
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "sasl.mechanism": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.username": None,
    "sasl.password": None,
    # OAUTHBEARER (kproducer.oauth): Java's SaslConfigs defaults; the token sources (a
    # callable, confluent-kafka's oauth_cb, librdkafka's names and config string) unset.
    "sasl.oauthbearer.token.provider": None,
    "oauth.cb": None,
    "sasl.login.callback.handler.class": None,
    "sasl.oauthbearer.config": None,
    "sasl.oauthbearer.method": None,
    "sasl.oauthbearer.token.endpoint.url": None,
    "sasl.oauthbearer.client.credentials.client.id": None,
    "sasl.oauthbearer.client.credentials.client.secret": None,
    "sasl.oauthbearer.client.id": None,
    "sasl.oauthbearer.client.secret": None,
    "sasl.oauthbearer.scope": None,
    "sasl.oauthbearer.extensions": None,
    "sasl.oauthbearer.sub.claim.name": "sub",
    "sasl.oauthbearer.scope.claim.name": "scope",
    "sasl.oauthbearer.header.urlencode": False,
    "sasl.login.refresh.window.factor": 0.8,
    "sasl.login.refresh.window.jitter": 0.05,
    "sasl.login.refresh.min.period.seconds": 60,
    "sasl.login.refresh.buffer.seconds": 300,
    "sasl.login.connect.timeout.ms": None,     # Java: none either (the JDK's, no timeout)
    "sasl.login.read.timeout.ms": None,
    "sasl.login.retry.backoff.ms": 100,
    "sasl.login.retry.backoff.max.ms": 10000,
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
    "key.serializer": None,
    "value.serializer": None,
    "partitioner": None,
    "interceptor.classes": None,
    "statistics.interval.ms": 0,       # librdkafka's default: off
    "stats.cb": None,
    "metrics.sample.window.ms": 30000,
    "metrics.num.samples": 2,
}


def err(**kw) -> str:
    kw.setdefault("bootstrap_servers", BS)
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(**kw)
    return str(exc.value)


# -- defaults and spellings ------------------------------------------------------------


def test_batch_max_size_is_between_batch_size_and_max_request_size():
    assert ProducerConfig(bootstrap_servers=BS, batch_size=1_000_000).batch_max_size == 1_000_000
    assert ProducerConfig(bootstrap_servers=BS, batch_size=0).batch_max_size == 0
    assert ProducerConfig(bootstrap_servers=BS, max_request_size=100_000).batch_max_size == 100_000
    assert ProducerConfig(bootstrap_servers=BS, batch_size=50_000,
                          batch_max_size=50_000).batch_max_size == 50_000
    assert "batch.max.size (1000) must be at least batch.size (16384)" in err(batch_max_size=1000)
    assert "must be at most max.request.size (1048576)" in err(batch_max_size=2_000_000)


def test_defaults_equal_kafka():
    cfg = ProducerConfig(bootstrap_servers=BS)
    d = cfg.as_dict()
    assert d.pop("bootstrap.servers") == ("localhost:9092",)
    assert d == JAVA_DEFAULTS
    assert set(SETTINGS) == set(JAVA_DEFAULTS) | {"bootstrap.servers"}
    assert ProducerConfig.names() == list(SETTINGS)


def test_compression_level_ranges_come_from_compression_module():
    for codec, (lo, hi, default) in LEVELS.items():
        s = SETTINGS[f"compression.{codec}.level"]
        assert (s.min, s.max, s.default) == (lo, hi, default)


def test_every_setting_has_a_one_line_doc_and_attribute():
    for s in SETTINGS.values():
        assert isinstance(s, Setting)
        assert s.doc and "\n" not in s.doc
        assert getattr(ProducerConfig, s.attr).__doc__ == s.doc
    assert "linger_ms" in ProducerConfig.__doc__


def test_dict_form_and_keyword_form_agree():
    a = ProducerConfig({"bootstrap.servers": BS, "linger.ms": 20, "compression.type": "lz4"})
    b = ProducerConfig(bootstrap_servers=BS, linger_ms=20, compression_type="lz4")
    assert a == b
    assert a.linger_ms == a["linger.ms"] == a["linger_ms"] == 20
    assert a.compression_type == "lz4"


def test_mixed_forms():
    cfg = ProducerConfig({"bootstrap.servers": BS, "batch.size": 1000}, linger_ms=0)
    assert (cfg.batch_size, cfg.linger_ms) == (1000, 0)
    assert cfg.user_config == {"bootstrap.servers": BS, "batch.size": 1000, "linger.ms": 0}


def test_same_key_twice_same_value_is_fine():
    cfg = ProducerConfig({"bootstrap.servers": BS, "linger.ms": 5}, linger_ms="5")
    assert cfg.linger_ms == 5


def test_same_key_twice_different_values_is_an_error():
    with pytest.raises(ConfigError, match=r"'linger.ms' given twice.*10.*'linger.ms'.*20.*'linger_ms'"):
        ProducerConfig({"bootstrap.servers": BS, "linger.ms": 10}, linger_ms=20)
    with pytest.raises(ConfigError, match="given twice"):
        ProducerConfig({"bootstrap.servers": BS, "linger_ms": 1, "linger.ms": 2})


def test_config_error_is_a_value_error_and_a_kafka_error():
    with pytest.raises(ValueError):
        ProducerConfig(bootstrap_servers=BS, linger_ms=-1)
    with pytest.raises(KafkaError) as exc:
        ProducerConfig(bootstrap_servers=BS, linger_ms=-1)
    assert exc.value.key == "linger.ms"


def test_mapping_interface():
    cfg = ProducerConfig(bootstrap_servers=BS)
    assert len(cfg) == len(SETTINGS)
    assert list(cfg) == list(SETTINGS)
    assert "linger.ms" in cfg and "linger_ms" in cfg and "nope" not in cfg and 3 not in cfg
    assert cfg.get("nope") is None
    with pytest.raises(KeyError, match="did you mean 'linger.ms'"):
        cfg["linger.msec"]


def test_copy_of_a_config_keeps_explicitness():
    # Passing a config rebuilds from what the user set, so defaults stay defaults.
    cfg = ProducerConfig(bootstrap_servers=BS, acks=1)
    assert ProducerConfig(cfg) == cfg
    assert ProducerConfig(cfg).enable_idempotence is False


def test_not_a_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        ProducerConfig([("bootstrap.servers", BS)])
    with pytest.raises(ConfigError, match=r"pass bootstrap_servers='host:9092'"):
        ProducerConfig("host:9092")
    with pytest.raises(ConfigError, match="must be str"):
        ProducerConfig({"bootstrap.servers": BS, 5: 1})


# -- unknown and unsupported names --------------------------------------------------------


def test_unknown_name_suggests_the_closest():
    assert err(linger_msec=5) == "unknown config 'linger_msec'; did you mean 'linger.ms'?"
    with pytest.raises(ConfigError, match=r"unknown config 'batch\.sise'; did you mean 'batch\.size'\?"):
        ProducerConfig({"bootstrap.servers": BS, "batch.sise": 1})
    assert "did you mean 'bootstrap.servers'" in err(bootstrap_server=BS)
    assert "did you mean 'linger.ms'" in err(LINGER_MS=5)


def test_unknown_name_without_a_close_match():
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(bootstrap_servers=BS, frobnicate=1)
    assert exc.value.key == "frobnicate"
    msg = str(exc.value)
    assert msg.startswith("unknown config 'frobnicate'") and "names()" in msg


def test_other_clients_names_point_to_kafkas():
    assert "did you mean 'linger.ms'" in err(queue_buffering_max_ms=5)
    assert "did you mean 'compression.type'" in err(**{"compression.codec": "gzip"})


@pytest.mark.parametrize("name", ["metric.reporters",
                                  "transaction.two.phase.commit.enable", "ssl.truststore.password",
                                  "sasl.kerberos.service.name", "metrics.context.foo", "sasl.new.thing"])
def test_known_java_settings_we_do_not_implement(name):
    msg = err(**{name: "x"})
    assert f"'{name}' is a Kafka producer setting that kproducer does not support" in msg


def test_unsupported_in_keyword_form_names_the_dotted_setting():
    msg = err(metric_reporters="com.example.R")
    assert "'metric_reporters' (metric.reporters)" in msg and "does not support" in msg


def test_partitioner_class_points_to_partitioner():
    assert "'partitioner'" in err(**{"partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"})


def test_unsupported_set_to_none_is_ignored():
    cfg = ProducerConfig(bootstrap_servers=BS, sasl_jaas_config=None, transactional_id=None)
    assert "sasl.jaas.config" not in cfg.user_config and cfg.transactional_id is None


def test_unsupported_list_does_not_overlap_settings():
    assert not set(UNSUPPORTED) & set(SETTINGS)


def test_security_protocol():
    assert ProducerConfig(bootstrap_servers=BS, security_protocol="plaintext").security_protocol == "PLAINTEXT"
    assert ProducerConfig(bootstrap_servers=BS, security_protocol="ssl").security_protocol == "SSL"
    for proto in ("SASL_PLAINTEXT", "sasl_ssl"):
        cfg = ProducerConfig(bootstrap_servers=BS, security_protocol=proto, sasl_mechanism="PLAIN",
                             sasl_username="u", sasl_password="p")
        assert cfg.security_protocol == proto.upper()
    assert "not a valid value" in err(security_protocol="TLS")


def test_transactional_id_and_timeout():
    cfg = ProducerConfig(bootstrap_servers=BS, transactional_id="tx-1", transaction_timeout_ms=5000)
    assert cfg.transactional_id == "tx-1" and cfg.transaction_timeout_ms == 5000
    assert cfg.enable_idempotence


def test_transactional_id_needs_idempotence():
    msg = err(transactional_id="tx-1", enable_idempotence=False)
    assert msg.startswith("transactional.id needs idempotence") and "enable.idempotence is set to false" in msg
    # Idempotence turned off implicitly (acks=1 with idempotence at its default) is refused too.
    msg = err(transactional_id="tx-1", acks=1)
    assert msg.startswith("transactional.id needs idempotence") and "acks" in msg


def test_transactional_id_bad_values():
    assert "must not be empty" in err(transactional_id="")
    assert "transaction.timeout.ms" in err(transaction_timeout_ms=0)


# -- types ----------------------------------------------------------------------------------


def test_numeric_and_boolean_strings_are_accepted_like_java():
    cfg = ProducerConfig({"bootstrap.servers": BS, "linger.ms": " 7 ", "batch.size": "+100",
                          "enable.idempotence": "TRUE", "partitioner.ignore.keys": " false",
                          "send.buffer.bytes": "-1"})
    assert (cfg.linger_ms, cfg.batch_size, cfg.send_buffer_bytes) == (7, 100, -1)
    assert cfg.enable_idempotence is True and cfg.partitioner_ignore_keys is False


def test_wrong_types():
    assert err(linger_ms=True) == (
        "linger.ms: expected an int (64-bit); bools are not ints, got bool True")
    assert err(batch_size=1.5) == "batch.size: expected an int (32-bit), got float 1.5"
    assert err(batch_size=16384.0).startswith("batch.size: expected an int (32-bit), got float")
    assert "got str '5ms'" in err(linger_ms="5ms")
    assert "got str '1e3'" in err(linger_ms="1e3")
    assert err(enable_idempotence=1) == (
        "enable.idempotence: expected a bool or 'true'/'false', got int 1")
    assert "got str 'yes'" in err(partitioner_ignore_keys="yes")
    assert err(client_id=5) == "client.id: expected a str, got int 5"
    assert "expected one of none, gzip, snappy, lz4, zstd" in err(compression_type="brotli")
    assert err(compression_type=3) == "compression.type: expected a str, got int 3"


def test_strings_are_stripped():
    assert ProducerConfig(bootstrap_servers=BS, client_id="  app ").client_id == "app"
    assert ProducerConfig(bootstrap_servers=BS, compression_type=" zstd").compression_type == "zstd"


def test_none_means_default():
    cfg = ProducerConfig(bootstrap_servers=BS, linger_ms=None, client_id=None, acks=None)
    assert (cfg.linger_ms, cfg.client_id, cfg.acks) == (5, "", -1)
    assert cfg.user_config == {"bootstrap.servers": BS}


def test_index_objects_are_ints():
    class Five:
        def __index__(self):
            return 5
    assert ProducerConfig(bootstrap_servers=BS, linger_ms=Five()).linger_ms == 5


@pytest.mark.parametrize("given, expected", [
    ("all", -1), ("-1", -1), ("0", 0), ("1", 1), (-1, -1), (0, 0), (1, 1), (" all ", -1)])
def test_acks_normalised_to_int(given, expected):
    cfg = ProducerConfig(bootstrap_servers=BS, acks=given, enable_idempotence=expected == -1)
    assert cfg.acks == expected and type(cfg.acks) is int


@pytest.mark.parametrize("bad", ["ALL", "2", 2, -2, "one"])
def test_acks_invalid_value(bad):
    assert "acks:" in err(acks=bad) and "expected 'all', -1, 0 or 1" in err(acks=bad)


@pytest.mark.parametrize("bad", [True, 1.0, [1]])
def test_acks_invalid_type(bad):
    assert "acks: expected 'all', -1, 0 or 1, got" in err(acks=bad)


def test_callables():
    ser = str.encode

    def part(*args):
        return 0

    cfg = ProducerConfig(bootstrap_servers=BS, key_serializer=ser, value_serializer=ser,
                         partitioner=part)
    assert cfg.key_serializer is ser and cfg.partitioner is part
    msg = err(key_serializer="org.apache.kafka.common.serialization.StringSerializer")
    assert "expected a Python callable" in msg and "Java class names" in msg
    assert err(partitioner=5) == "partitioner: expected a callable or None, got int 5"


# -- ranges ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, message", [
    ({"linger_ms": -1}, "linger.ms: -1 is out of range; expected at least 0"),
    ({"max_in_flight_requests_per_connection": 0},
     "max.in.flight.requests.per.connection: 0 is out of range; expected between 1 and 2147483647"),
    ({"metadata_max_idle_ms": 4999}, "metadata.max.idle.ms: 4999 is out of range; expected at least 5000"),
    ({"send_buffer_bytes": -2}, "send.buffer.bytes: -2 is out of range; expected between -1 and 2147483647"),
    ({"receive_buffer_bytes": -2}, "receive.buffer.bytes: -2 is out of range; expected between -1 and 2147483647"),
    ({"batch_size": 2**31}, "batch.size: 2147483648 is out of range; expected between 0 and 2147483647"),
    ({"retries": -1}, "retries: -1 is out of range; expected between 0 and 2147483647"),
    ({"buffer_memory": 2**63}, "buffer.memory: 9223372036854775808 is out of range; expected at least 0"),
    ({"compression_gzip_level": 10}, "compression.gzip.level: 10 is out of range; expected between 1 and 9"),
    ({"compression_lz4_level": 0}, "compression.lz4.level: 0 is out of range; expected between 1 and 17"),
    ({"compression_zstd_level": 23}, "compression.zstd.level: 23 is out of range; expected between -131072 and 22"),
])
def test_out_of_range(kw, message):
    assert err(**kw) == message


def test_range_edges_accepted():
    cfg = ProducerConfig(bootstrap_servers=BS, send_buffer_bytes=-1, receive_buffer_bytes=-1,
                         metadata_max_idle_ms=5000, batch_size=0, linger_ms=0,
                         compression_zstd_level=-131072, connections_max_idle_ms=-1,
                         buffer_memory=2**63 - 1)
    assert cfg.send_buffer_bytes == -1 and cfg.compression_zstd_level == -131072


def test_compression_level_follows_codec():
    assert ProducerConfig(bootstrap_servers=BS).compression_level is None
    assert ProducerConfig(bootstrap_servers=BS, compression_type="snappy").compression_level is None
    assert ProducerConfig(bootstrap_servers=BS, compression_type="gzip").compression_level == 6
    cfg = ProducerConfig(bootstrap_servers=BS, compression_type="zstd", compression_zstd_level=-5,
                         compression_gzip_level=1)
    assert cfg.compression_level == -5


# -- idempotence (ProducerConfig.postProcessAndValidateIdempotenceConfigs) ------------------


def test_explicit_idempotence_with_acks_not_all_is_an_error():
    msg = err(enable_idempotence=True, acks=1)
    assert msg.startswith("Must set acks to all in order to use the idempotent producer")
    assert "Must set acks to all" in err(enable_idempotence="true", acks="0")


def test_explicit_idempotence_with_zero_retries_is_an_error():
    assert err(enable_idempotence=True, retries=0).startswith(
        "Must set retries to non-zero when using the idempotent producer")


def test_in_flight_above_5_with_idempotence_is_an_error():
    msg = err(enable_idempotence=True, max_in_flight_requests_per_connection=6)
    assert ("To use the idempotent producer, max.in.flight.requests.per.connection must be set "
            "to at most 5. Current value is 6.") in msg
    # Kafka 4.0 (KAFKA-17927): an error even when idempotence is only on by default...
    assert "enable.idempotence=false" in err(max_in_flight_requests_per_connection=6)
    # ...and Java checks it before disabling idempotence for acks, so this fails too.
    assert "at most 5" in err(acks=1, max_in_flight_requests_per_connection=10)


def test_in_flight_above_5_without_idempotence_is_fine():
    cfg = ProducerConfig(bootstrap_servers=BS, enable_idempotence=False,
                         max_in_flight_requests_per_connection=10, acks=1)
    assert cfg.max_in_flight_requests_per_connection == 10


def test_implicit_idempotence_disabled_by_acks(caplog):
    with caplog.at_level(logging.INFO, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, acks=0)
    assert cfg.enable_idempotence is False
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("kproducer.config", logging.INFO,
         "Idempotence will be disabled because acks is set to 0, not set to 'all'.")]


def test_implicit_idempotence_disabled_by_retries(caplog):
    with caplog.at_level(logging.INFO, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, retries="0")
    assert cfg.enable_idempotence is False
    assert "Idempotence will be disabled because retries is set to 0." in caplog.messages


def test_implicit_idempotence_both_conflicts_logged(caplog):
    with caplog.at_level(logging.INFO, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, retries=0, acks=1)
    assert cfg.enable_idempotence is False
    assert len(caplog.records) == 2


def test_idempotence_kept_without_conflict(caplog):
    with caplog.at_level(logging.INFO, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, acks="all", retries=3)
    assert cfg.enable_idempotence is True and not caplog.records


def test_idempotence_explicitly_off_allows_anything(caplog):
    with caplog.at_level(logging.INFO, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, enable_idempotence=False, acks=0, retries=0)
    assert cfg.enable_idempotence is False and not caplog.records


# -- other cross-setting rules ----------------------------------------------------------


def test_delivery_timeout_explicit_too_small_is_an_error():
    msg = err(delivery_timeout_ms=30000)
    assert msg.startswith("delivery.timeout.ms should be equal to or larger than linger.ms + "
                          "request.timeout.ms")
    assert "30000 < 5 + 30000" in msg
    ProducerConfig(bootstrap_servers=BS, delivery_timeout_ms=30005)  # equal is fine


def test_delivery_timeout_default_raised_with_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, linger_ms=100000, request_timeout_ms=50000)
    assert cfg.delivery_timeout_ms == 150000
    assert ("delivery.timeout.ms should be equal to or larger than linger.ms + "
            "request.timeout.ms. Setting it to 150000.") in caplog.messages


def test_delivery_timeout_sum_is_capped_like_java():
    cfg = ProducerConfig(bootstrap_servers=BS, linger_ms=2**40, delivery_timeout_ms=2**31 - 1)
    assert cfg.delivery_timeout_ms == 2**31 - 1


def test_reconnect_backoff_without_max_disables_exponential_backoff(caplog):
    with caplog.at_level(logging.WARNING, logger="kproducer"):
        cfg = ProducerConfig(bootstrap_servers=BS, reconnect_backoff_ms=200)
    assert cfg.reconnect_backoff_max_ms == 200
    assert any("Disabling exponential reconnect backoff" in m for m in caplog.messages)
    cfg = ProducerConfig(bootstrap_servers=BS, reconnect_backoff_ms=200, reconnect_backoff_max_ms=5000)
    assert cfg.reconnect_backoff_max_ms == 5000


def test_backoff_above_max_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="kproducer"):
        ProducerConfig(bootstrap_servers=BS, retry_backoff_ms=2000)
    assert any("'retry.backoff.ms' with value '2000' is greater than" in m for m in caplog.messages)


# -- bootstrap.servers ------------------------------------------------------------------


@pytest.mark.parametrize("given, servers, addresses", [
    ("localhost:9092", ("localhost:9092",), [("localhost", 9092)]),
    (" a:1 , b.example.com:2 ", ("a:1", "b.example.com:2"), [("a", 1), ("b.example.com", 2)]),
    (["10.0.0.1:9092", "[::1]:9093"], ("10.0.0.1:9092", "[::1]:9093"),
     [("10.0.0.1", 9092), ("::1", 9093)]),
    (("[fe80::1%eth0]:65535",), ("[fe80::1%eth0]:65535",), [("fe80::1%eth0", 65535)]),
    ("[2001:db8::1]:1,my_host:2", ("[2001:db8::1]:1", "my_host:2"),
     [("2001:db8::1", 1), ("my_host", 2)]),
    ("PLAINTEXT://broker:9092", ("broker:9092",), [("broker", 9092)]),
])
def test_bootstrap_parsing(given, servers, addresses):
    cfg = ProducerConfig(bootstrap_servers=given)
    assert cfg.bootstrap_servers == servers
    assert cfg.bootstrap_addresses == addresses


@pytest.mark.parametrize("given, fragment", [
    ("", "must name at least one broker"),
    ([], "must name at least one broker"),
    ("localhost", "has no port"),
    (":9092", "empty host"),
    ("host:", "port '' is not a number"),
    ("host:abc", "port 'abc' is not a number"),
    ("host:0", "port 0 is out of range; expected between 1 and 65535"),
    ("host:65536", "port 65536 is out of range"),
    ("::1:9092", "an IPv6 address must be in brackets, as in '[::1]:9092'"),
    ("[::1:9092", "no closing ']'"),
    ("[::1]", "has no port"),
    ("[127.0.0.1]:9092", "brackets must hold an IPv6 address"),
    ("a:1,,b:2", "empty entry"),
    ("a:1,a:1", "'a:1' is listed twice"),
    ("bad host:1", "is not a valid host name"),
    ([b"a:1"], "expected str entries"),
    (9092, "expected a list of 'host:port' strings or a comma-separated str, got int 9092"),
    (None, "expected a list"),
])
def test_bootstrap_errors(given, fragment):
    with pytest.raises(ConfigError) as exc:
        ProducerConfig(bootstrap_servers=given)
    assert fragment in str(exc.value) and exc.value.key == "bootstrap.servers"


def test_bootstrap_required():
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        ProducerConfig()
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        ProducerConfig({"linger.ms": 5})


def test_bootstrap_addresses_is_a_fresh_list():
    cfg = ProducerConfig(bootstrap_servers=BS)
    cfg.bootstrap_addresses.append(("x", 1))
    assert cfg.bootstrap_addresses == [("localhost", 9092)]


# -- repr, secrets ------------------------------------------------------------------------


def test_repr_shows_non_defaults():
    cfg = ProducerConfig(bootstrap_servers=BS, linger_ms=50, acks=1)
    r = repr(cfg)
    assert r.startswith("ProducerConfig({'bootstrap.servers': ('localhost:9092',)")
    assert "'linger.ms': 50" in r and "'acks': 1" in r and "'enable.idempotence': False" in r
    assert "batch.size" not in r


@pytest.mark.parametrize("name", ["sasl.jaas.config", "ssl.key.password", "sasl.password",
                                  "ssl.keystore.password", "ssl.truststore.password",
                                  "ssl.keystore.key", "sasl.oauthbearer.client.credentials.client.secret",
                                  "sasl.oauthbearer.assertion.private.key.passphrase"])
def test_secrets_never_shown(name):
    assert is_secret(name)
    secret = "hunter2-s3cret"
    with pytest.raises(ConfigError) as exc:
        ProducerConfig({"bootstrap.servers": BS, name: secret})
    assert secret not in str(exc.value)


@pytest.mark.parametrize("name", ["linger.ms", "key.serializer", "partitioner.ignore.keys",
                                  "client.id", "bootstrap.servers"])
def test_ordinary_settings_are_not_secret(name):
    assert not is_secret(name)


def test_repr_hides_secret_settings():
    sasl = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u")
    cfg = ProducerConfig(bootstrap_servers=BS, sasl_password="hunter2", **sasl)
    assert cfg["sasl.password"] == "hunter2"
    assert "hunter2" not in repr(cfg)
    assert "'sasl.password': [hidden]" in repr(cfg)
    with pytest.raises(ConfigError) as exc:
        ProducerConfig({"bootstrap.servers": BS, "sasl.password": "hunter2"}, sasl_password="other", **sasl)
    assert "hunter2" not in str(exc.value) and "other" not in str(exc.value)


# -- immutability and round trips ------------------------------------------------------


def test_immutable():
    cfg = ProducerConfig(bootstrap_servers=BS)
    with pytest.raises(AttributeError):
        cfg.linger_ms = 10
    with pytest.raises(AttributeError):
        cfg.new_attr = 1
    with pytest.raises(AttributeError):
        del cfg.linger_ms
    with pytest.raises(TypeError):
        cfg["linger.ms"] = 10
    cfg.as_dict()["linger.ms"] = 99
    cfg.user_config["linger.ms"] = 99
    assert cfg.linger_ms == 5 and "linger.ms" not in cfg.user_config
    assert copy.copy(cfg) is cfg and copy.deepcopy(cfg) is cfg


def test_user_config_only_what_was_set_values_as_given():
    cfg = ProducerConfig({"bootstrap.servers": "a:1, b:2", "linger.ms": "10"}, acks="all")
    assert cfg.user_config == {"bootstrap.servers": "a:1, b:2", "linger.ms": "10", "acks": "all"}


def test_user_config_is_a_copy():
    servers = ["a:1"]
    cfg = ProducerConfig(bootstrap_servers=servers)
    servers.append("b:2")
    cfg.user_config["bootstrap.servers"].append("c:3")
    assert cfg.user_config == {"bootstrap.servers": ["a:1"]}
    assert cfg.bootstrap_servers == ("a:1",)


def test_user_config_round_trip():
    cfg = ProducerConfig({"bootstrap.servers": ["a:1", "[::1]:2"], "acks": 1},
                         compression_type="gzip", compression_gzip_level="3",
                         reconnect_backoff_ms=10)
    again = ProducerConfig(cfg.user_config)
    assert again == cfg and again.as_dict() == cfg.as_dict()
    assert again.user_config == cfg.user_config
    assert again.enable_idempotence is False and again.reconnect_backoff_max_ms == 10


def test_pickle_round_trip():
    cfg = ProducerConfig(bootstrap_servers=BS, linger_ms=7, value_serializer=str.encode)
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and back.user_config == cfg.user_config
    assert back.value_serializer is str.encode


def test_the_configuration_reference_is_generated_from_the_settings():
    # docs/configuration.md is scripts/config_reference.py's rendering of SETTINGS, the
    # aliases and UNSUPPORTED: a setting added, removed or redocumented without it fails here.
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("config_reference", root / "scripts" / "config_reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    text = (root / "docs" / "configuration.md").read_text()
    assert text == ref.render(), "docs/configuration.md is stale: run python scripts/config_reference.py"
    for s in SETTINGS.values():
        assert f"| `{s.name}` | `{s.attr}` |" in text
