"""Producer configuration: Kafka's Java producer settings, with Kafka 4.x defaults.

:class:`ProducerConfig` takes the settings Apache Kafka's Java ``KafkaProducer``
takes, under the same dotted names, with the same types, defaults and valid
ranges (``ProducerConfig.java`` / ``CommonClientConfigs.java``), and applies the
same cross-setting rules:

- idempotence conflicts (``ProducerConfig.postProcessAndValidateIdempotenceConfigs``):
  with ``enable.idempotence`` set explicitly to true, ``acks`` other than all or
  ``retries=0`` is an error; left at its default, either silently turns
  idempotence off (logged at INFO on the ``kproducer.config`` logger, as Java does).
  ``max.in.flight.requests.per.connection`` above 5 is an error whenever
  idempotence is on, explicit or not: Kafka 4.0 made it one (KAFKA-17927);
  set ``enable.idempotence=False`` to go above 5;
- ``delivery.timeout.ms`` must be at least ``linger.ms + request.timeout.ms``
  when set explicitly; left at its default, it is raised to that sum with a
  warning (``KafkaProducer.configureDeliveryTimeout``);
- ``reconnect.backoff.ms`` set without ``reconnect.backoff.max.ms`` makes the
  maximum equal to it, which disables exponential backoff
  (``CommonClientConfigs.postProcessReconnectBackoffConfigs``).

Two spellings, mixable: ``ProducerConfig({"linger.ms": 5})`` and
``ProducerConfig(linger_ms=5)``; a key is the dotted name or the same name with
dots replaced by underscores, in the mapping or as a keyword. The same setting
given twice with different values is an error.

Value parsing follows Java's ``ConfigDef.parseType`` where it is unambiguous:

- integers: ``int`` (or any object with ``__index__``) or a decimal string
  (``"5"``, ``" -1 "``); never ``bool``, never ``float``. Java INT settings are
  limited to 32 bits and LONG ones to 64 bits;
- booleans: ``bool`` or the strings ``"true"``/``"false"`` (any case); never
  ``0``/``1``;
- strings are stripped of surrounding whitespace, as Java does;
- ``None`` for any setting but ``bootstrap.servers`` means "not set": the
  default applies and the setting does not count as explicitly given.

Kafka settings that kproducer does not implement (Kerberos SASL,
transactions, metrics reporters, ...) raise
:class:`~kproducer.errors.ConfigError` saying so, rather than being ignored; so do
unknown names, with the closest valid name suggested. Error messages and ``repr``
never show the value of a credential-like setting (passwords, secrets, JAAS
configuration, keys, the SASL user name).

SASL (``security.protocol`` SASL_PLAINTEXT or SASL_SSL): ``sasl.mechanism`` PLAIN,
SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default GSSAPI is refused), with the
credentials in Java's ``sasl.jaas.config`` (PlainLoginModule or ScramLoginModule)
or librdkafka's ``sasl.username``/``sasl.password``; or OAUTHBEARER with a token source:
a callable (``sasl.oauthbearer.token.provider``, confluent-kafka's ``oauth_cb``) or OIDC
client credentials (``sasl.oauthbearer.token.endpoint.url`` with Java's 4.x names or
librdkafka's, or Java's ``OAuthBearerLoginModule`` options), renewed as the
``sasl.login.*`` settings say (kproducer.oauth). sasl.* settings under a protocol
without SASL, and OAUTHBEARER settings under another mechanism, are an error rather than
silently unused.

Python-only settings: ``key.serializer`` and ``value.serializer`` are callables
(or None; one taking two arguments gets a SerializationContext, see
kproducer.serialization), and ``partitioner`` is a callable custom partitioner (or
None); Java class names are refused. ``interceptor.classes`` takes Python objects,
classes or ``module.Class`` names (kproducer.interceptors).
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .compression import CODEC_IDS, LEVELS
from .errors import ConfigError
from .sasl import SaslCredentials, parse_jaas_config, parse_oauthbearer_jaas, validate_extensions

__all__ = ["SETTINGS", "UNSUPPORTED", "ProducerConfig", "Setting"]

_log = logging.getLogger(__name__)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Broker-side ProducerStateEntry.NUM_BATCHES_TO_RETAIN: an idempotent producer may
# not have more requests in flight per connection than the broker remembers.
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

_REQUIRED = object()


@dataclass(frozen=True)
class Setting:
    """One producer setting: its Kafka name, kind, default, valid values and meaning.

    ``kind`` is ``"int"`` (Java INT, 32 bits), ``"long"`` (Java LONG), ``"bool"``,
    ``"str"``, ``"choice"`` (one of ``choices``; values outside ``supported`` are
    valid Kafka values kproducer does not implement yet), ``"acks"``,
    ``"servers"``, ``"callable"``, ``"double"`` (Java DOUBLE: an int or float), ``"handler"``
    (``sasl.login.callback.handler.class``: a callable or Java's OIDC handler class name),
    ``"list"`` (``interceptor.classes``: objects, classes or dotted names), ``"logger"`` (a
    :class:`logging.Logger` or :class:`logging.LoggerAdapter`) or ``"unset"`` (only None is
    accepted).
    """

    name: str
    kind: str
    default: Any
    doc: str
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] = ()
    supported: tuple[str, ...] = ()
    case_insensitive: bool = False

    @property
    def attr(self) -> str:
        """The keyword / attribute form of the name (dots replaced by underscores)."""
        return self.name.replace(".", "_")

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


def _level(codec: str) -> dict:
    lo, hi, default = LEVELS[codec]
    return {"default": default, "min": lo, "max": hi}


_DEFS = [
    Setting("bootstrap.servers", "servers", _REQUIRED,
            "Brokers to contact first (host:port, comma-separated or a list); the rest of "
            "the cluster is discovered from them."),
    Setting("client.dns.lookup", "choice", "use_all_dns_ips",
            "use_all_dns_ips: a broker name that resolves to several addresses (such as "
            "localhost: ::1 and 127.0.0.1) is tried at each in turn before backing off.",
            choices=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
            supported=("use_all_dns_ips",)),
    Setting("client.id", "str", "",
            "A name sent with every request so brokers can attribute requests in their logs "
            "and quotas (empty: Java's producer then calls itself producer-N)."),
    Setting("logger", "logger", None,
            "confluent-kafka's setting, Python-only: a logging.Logger (or LoggerAdapter) that "
            "receives every log record of this producer instead of the kproducer.<module> "
            "loggers, with the same levels and messages (each starting with [Producer "
            "clientId=...]). None: the module loggers. See docs/observability.md."),
    Setting("error.cb", "callable", None,
            "confluent-kafka's error_cb, Python-only: error_cb(error) is called with a "
            "KafkaError for errors that belong to no one record: every broker down "
            "(AllBrokersDownError), a broker refusing authentication, a fatal producer error, "
            "a failed metadata request; once per state, not again until it changes (a broker "
            "connects, metadata arrives). It runs on the thread that runs the producer's step, "
            "as delivery callbacks do (the I/O thread, or the application's inside send(), "
            "poll() and flush()); its exceptions are logged and swallowed. See "
            "docs/observability.md."),
    Setting("acks", "acks", -1,
            "Acknowledgements the leader must collect before a write counts as done: 0 (none), "
            "1 (leader only) or all (-1: every in-sync replica)."),
    Setting("enable.idempotence", "bool", True,
            "Write each record exactly once per partition despite retries, using producer ids "
            "and sequence numbers; needs acks=all, retries > 0 and at most 5 requests in flight."),
    Setting("linger.ms", "long", 5,
            "How long a partition's batch waits for more records before it is sent, from "
            "its first record; each partition on its own clock (0: send at once).", min=0),
    Setting("batch.size", "int", 16384,
            "Bytes at which a partition's record batch is sendable at once (0 disables "
            "batching).", min=0),
    Setting("batch.max.size", "int", 262144,
            "Upper bound in bytes of one partition's record batch (KIP-782): a batch that "
            "reached batch.size goes out as soon as its leader can take a request, and keeps "
            "taking records up to this size while it cannot (requests in flight, backing off, "
            "connecting). While every leader has max.in.flight.requests.per.connection "
            "requests out, or waits to pace its next one (see that setting), a batch at this "
            "size keeps growing, up to max.request.size less 1 KiB for the request's own "
            "fields, so that a long round trip's window carries full requests. Growing takes memory from buffer.memory, and send() waits for it "
            "as for a new batch (a batch that could never grow within buffer.memory is full "
            "as it is). At least "
            "batch.size (the default follows a larger batch.size), at most max.request.size; "
            "equal to batch.size gives Java's batches (no growth at all).", min=0),
    Setting("buffer.memory", "long", 33554432,
            "Bytes of memory for records waiting to be sent; send() blocks for up to "
            "max.block.ms when it is full.", min=0),
    Setting("max.block.ms", "long", 60000,
            "Longest time send() may block waiting for metadata or buffer space.", min=0),
    Setting("max.request.size", "int", 1048576,
            "Largest request in bytes, which also caps the uncompressed size of a record batch.",
            min=0),
    Setting("request.timeout.ms", "int", 30000,
            "How long to wait for a broker's response before retrying or failing the request.",
            min=0),
    Setting("delivery.timeout.ms", "int", 120000,
            "Upper bound on the time from send() returning to the record's success or failure, "
            "retries included; must be at least linger.ms + request.timeout.ms.", min=0),
    Setting("retries", "int", INT32_MAX,
            "How many times to resend a record after a transient error; delivery.timeout.ms "
            "is the usual bound.", min=0, max=INT32_MAX),
    Setting("retry.backoff.ms", "long", 100,
            "Initial wait before retrying a failed request; grows exponentially up to "
            "retry.backoff.max.ms.", min=0),
    Setting("retry.backoff.max.ms", "long", 1000,
            "Largest wait between retries of a request that keeps failing (with 20% jitter).",
            min=0),
    Setting("reconnect.backoff.ms", "long", 50,
            "Initial wait before reconnecting to a broker; grows exponentially up to "
            "reconnect.backoff.max.ms.", min=0),
    Setting("reconnect.backoff.max.ms", "long", 1000,
            "Largest wait between reconnection attempts to a broker that keeps failing.", min=0),
    # Java puts no lower bound on the two connection-setup timeouts; a negative
    # timeout means nothing, so kproducer refuses one.
    Setting("socket.connection.setup.timeout.ms", "long", 10000,
            "How long to wait for a TCP connection to be established; grows exponentially on "
            "repeated failures up to socket.connection.setup.timeout.max.ms.", min=0),
    Setting("socket.connection.setup.timeout.max.ms", "long", 30000,
            "Largest connection-setup timeout after repeated failures (with 20% jitter).", min=0),
    Setting("max.in.flight.requests.per.connection", "int", 5,
            "Most unacknowledged requests on one connection; at most 5 with idempotence. While "
            "a connection has Produce requests out, the next one goes once its batches are "
            "full, or after the connection's smoothed round trip divided by this number, so "
            "that a long round trip's requests spread over it instead of leaving in bursts; "
            "with none out, at once.", min=1),
    Setting("metadata.max.age.ms", "long", 300000,
            "Refresh cluster metadata at least this often, even without leadership changes.",
            min=0),
    Setting("metadata.max.idle.ms", "long", 300000,
            "Forget a topic's metadata when nothing was produced to it for this long.", min=5000),
    # KIP-899 / KIP-1102 (Java 4.0's names and defaults).
    Setting("metadata.recovery.strategy", "choice", "rebootstrap",
            "rebootstrap: when no broker of the last known metadata can be reached, or none "
            "has answered a metadata request for metadata.recovery.rebootstrap.trigger.ms, "
            "start again from bootstrap.servers (the cluster may have been replaced); none: "
            "keep trying the known brokers.",
            choices=("none", "rebootstrap"), supported=("none", "rebootstrap")),
    Setting("metadata.recovery.rebootstrap.trigger.ms", "long", 300000,
            "With metadata.recovery.strategy=rebootstrap: how long metadata requests may fail "
            "before the client starts again from bootstrap.servers.", min=0),
    Setting("compression.type", "choice", "none",
            "Codec for record batches: none, gzip, snappy, lz4 or zstd.",
            choices=tuple(CODEC_IDS), supported=tuple(CODEC_IDS)),
    Setting("compression.gzip.level", "int", doc="Compression level when compression.type is gzip.",
            **_level("gzip")),
    Setting("compression.lz4.level", "int", doc="Compression level when compression.type is lz4.",
            **_level("lz4")),
    Setting("compression.zstd.level", "int", doc="Compression level when compression.type is zstd.",
            **_level("zstd")),
    Setting("partitioner.ignore.keys", "bool", False,
            "Choose partitions without looking at record keys (no effect with a custom "
            "partitioner)."),
    Setting("partitioner.adaptive.partitioning.enable", "bool", True,
            "Send more records to partitions on faster brokers instead of spreading them evenly "
            "(no effect with a custom partitioner)."),
    Setting("partitioner.availability.timeout.ms", "long", 0,
            "Treat a partition as unavailable when its broker has not taken produce requests for "
            "this long (0 disables; needs adaptive partitioning).", min=0),
    # Java's default is 131072. A fixed SO_SNDBUF turns off Linux's send-buffer autotuning,
    # and a 1 MB request then leaves in 128 KiB pieces, each waiting for the Sender's next
    # step: 1 KiB records ran 20-30 % slower (bench value-1KiB). librdkafka keeps the OS's too.
    Setting("send.buffer.bytes", "int", -1,
            "TCP send buffer size (SO_SNDBUF); -1 (the default) keeps the OS default, which "
            "Linux autotunes.", min=-1),
    Setting("receive.buffer.bytes", "int", 32768,
            "TCP receive buffer size (SO_RCVBUF); -1 keeps the OS default.", min=-1),
    # Java has no bound here either; its Selector treats a negative value as "never".
    Setting("connections.max.idle.ms", "long", 540000,
            "Close connections idle for this long (negative: never)."),
    Setting("security.protocol", "choice", "PLAINTEXT",
            "Protocol to talk to brokers: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL "
            "(SASL over TLS).",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
            supported=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), case_insensitive=True),
    # TLS (used only with security.protocol SSL or SASL_SSL): PEM files, read when the
    # producer starts (kproducer.tls). librdkafka's ssl.ca.location,
    # ssl.certificate.location and ssl.key.location are accepted as well.
    Setting("ssl.truststore.location", "str", None,
            "PEM file of the CA certificates that may sign the brokers' certificates "
            "(None: the system's CA store)."),
    Setting("ssl.truststore.type", "choice", "PEM",
            "Format of ssl.truststore.location: PEM only (convert a JKS or PKCS12 store with "
            "keytool/openssl).",
            choices=("JKS", "PKCS12", "PEM"), supported=("PEM",), case_insensitive=True),
    Setting("ssl.keystore.location", "str", None,
            "PEM file holding the client certificate chain and its private key, for brokers "
            "that require client authentication (mutual TLS)."),
    Setting("ssl.keystore.type", "choice", "PEM",
            "Format of ssl.keystore.location: PEM only.",
            choices=("JKS", "PKCS12", "PEM"), supported=("PEM",), case_insensitive=True),
    Setting("ssl.key.password", "password", None,
            "Password of an encrypted private key (never shown)."),
    Setting("ssl.endpoint.identification.algorithm", "str", "https",
            "https: the broker's certificate must name the host connected to (as configured "
            "in bootstrap.servers or advertised in metadata); empty (or none) turns the check off."),
    Setting("ssl.ca.location", "str", None,
            "librdkafka's name for ssl.truststore.location (set one of them)."),
    Setting("ssl.certificate.location", "str", None,
            "librdkafka's form of the client certificate: a PEM certificate chain, with its key "
            "in ssl.key.location (instead of ssl.keystore.location)."),
    Setting("ssl.key.location", "str", None,
            "PEM private key of ssl.certificate.location."),
    # SASL (used only with security.protocol SASL_PLAINTEXT or SASL_SSL): the credentials
    # come from Java's sasl.jaas.config or librdkafka's sasl.username/sasl.password.
    Setting("sasl.mechanism", "choice", "GSSAPI",
            "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (Kafka's "
            "default, GSSAPI, is Kerberos, which kproducer does not implement: set one of the "
            "others).",
            choices=("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
            supported=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")),
    Setting("sasl.jaas.config", "password", None,
            "Java's JAAS form of the SASL credentials: 'org.apache.kafka.common.security."
            "plain.PlainLoginModule required username=\"...\" password=\"...\";' (or "
            "ScramLoginModule; with OAUTHBEARER, OAuthBearerLoginModule with the OIDC options "
            "clientId, clientSecret, scope and extension_<name>)."),
    Setting("sasl.username", "str", None,
            "SASL user name (librdkafka's simple form; alternative to sasl.jaas.config)."),
    Setting("sasl.password", "password", None,
            "SASL password (librdkafka's simple form; alternative to sasl.jaas.config)."),
    # OAUTHBEARER (kproducer.oauth): a token source, renewed in the background.
    Setting("sasl.oauthbearer.token.provider", "callable", None,
            "OAUTHBEARER token source, Python-only: a callable, called on a background thread "
            "with sasl.oauthbearer.config (or with nothing, if it takes no argument), that "
            "returns (token, expiry_epoch_seconds[, principal[, extensions]]) as confluent-kafka's "
            "oauth_cb does, a kproducer.oauth.OAuthBearerToken, or a JWT str (its exp claim is "
            "the expiry). kproducer.oauth.msk_iam_provider(region) makes one for AWS MSK IAM."),
    Setting("oauth.cb", "callable", None,
            "confluent-kafka's name (oauth_cb) for sasl.oauthbearer.token.provider, same "
            "signature: oauth_cb(oauthbearer_config) -> (token, expiry_epoch_seconds[, "
            "principal[, extensions]]); set one of them."),
    Setting("sasl.login.callback.handler.class", "handler", None,
            "Java's login callback handler: a Python callable (the same as "
            "sasl.oauthbearer.token.provider), or Java's "
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler, "
            "which means the built-in OIDC client credentials (needs "
            "sasl.oauthbearer.token.endpoint.url)."),
    Setting("sasl.oauthbearer.config", "password", None,
            "librdkafka's OAUTHBEARER configuration string, passed as is to the token provider "
            "(oauth_cb's argument); never shown."),
    Setting("sasl.oauthbearer.method", "choice", None,
            "librdkafka's choice of token source: default (the token provider) or oidc (the "
            "built-in client credentials); None: oidc when sasl.oauthbearer.token.endpoint.url "
            "is set.", choices=("default", "oidc"), supported=("default", "oidc")),
    Setting("sasl.oauthbearer.token.endpoint.url", "str", None,
            "OIDC token endpoint (KIP-768): the client credentials grant is POSTed there over "
            "HTTPS, trusting what the broker connections trust (ssl.truststore.location / "
            "ssl.ca.location with SASL_SSL, else the system's CAs); a file: URL names a file "
            "holding a JWT, read again at every renewal."),
    Setting("sasl.oauthbearer.client.credentials.client.id", "str", None,
            "OIDC client id (Java 4.1's name, KIP-1139; before it the JAAS option clientId)."),
    Setting("sasl.oauthbearer.client.credentials.client.secret", "password", None,
            "OIDC client secret (Java 4.1's name, KIP-1139; JAAS option clientSecret); never "
            "shown."),
    Setting("sasl.oauthbearer.client.id", "str", None,
            "librdkafka's name for sasl.oauthbearer.client.credentials.client.id (set one of "
            "them)."),
    Setting("sasl.oauthbearer.client.secret", "password", None,
            "librdkafka's name for sasl.oauthbearer.client.credentials.client.secret (set one of "
            "them)."),
    Setting("sasl.oauthbearer.scope", "str", None,
            "The scope requested from the OIDC token endpoint (space-separated; None: none)."),
    Setting("sasl.oauthbearer.extensions", "str", None,
            "SASL extensions sent with the token (KIP-342), librdkafka's form "
            "'key=value,key2=value2' (e.g. Confluent Cloud's logicalCluster and identityPoolId); "
            "a provider's own extensions are added over them."),
    Setting("sasl.oauthbearer.sub.claim.name", "str", "sub",
            "The JWT claim that names the principal."),
    Setting("sasl.oauthbearer.scope.claim.name", "str", "scope",
            "The JWT claim that holds the scopes."),
    Setting("sasl.oauthbearer.header.urlencode", "bool", False,
            "URL-encode the client id and secret in the token request's Basic authorization "
            "(RFC 6749 section 2.3.1; KIP-1025)."),
    Setting("sasl.login.refresh.window.factor", "double", 0.8,
            "A new token is obtained at this fraction of the current one's lifetime (plus the "
            "jitter), within the bounds of the two settings below.", min=0.5, max=1.0),
    Setting("sasl.login.refresh.window.jitter", "double", 0.05,
            "Largest random fraction of the token's lifetime added to the refresh time.",
            min=0.0, max=0.25),
    Setting("sasl.login.refresh.min.period.seconds", "int", 60,
            "Least time between two token refreshes; ignored, as the buffer below, when the "
            "token's remaining lifetime is shorter than their sum.", min=0, max=900),
    Setting("sasl.login.refresh.buffer.seconds", "int", 300,
            "Time before the token's expiry by which it is refreshed (when its lifetime allows).",
            min=0, max=3600),
    Setting("sasl.login.connect.timeout.ms", "int", None,
            "Connect (TCP and TLS) timeout of a token endpoint request (None: 10000; 0: none).",
            min=0),
    Setting("sasl.login.read.timeout.ms", "int", None,
            "Read timeout of a token endpoint request (None: 10000; 0: none).", min=0),
    Setting("sasl.login.retry.backoff.ms", "long", 100,
            "First wait before retrying a failed token request or provider call; doubles up to "
            "sasl.login.retry.backoff.max.ms.", min=0),
    Setting("sasl.login.retry.backoff.max.ms", "long", 10000,
            "Largest wait between token attempts; also how long one token endpoint login keeps "
            "retrying before its failure is reported (Java's Retry).", min=0),
    Setting("transactional.id", "str", None,
            "Makes the producer transactional (init_transactions, begin/commit/abort_transaction): "
            "the id names the producer across restarts, so a new instance fences the old one. "
            "Needs idempotence."),
    Setting("transaction.timeout.ms", "int", 60000,
            "How long the transaction coordinator lets a transaction stay open before it aborts "
            "it (sent with InitProducerId).", min=1),
    Setting("key.serializer", "callable", None,
            "Python-only: callable turning a record key into bytes (None: no serializer)."),
    Setting("value.serializer", "callable", None,
            "Python-only: callable turning a record value into bytes (None: no serializer)."),
    Setting("partitioner", "callable", None,
            "Python-only: custom partitioner callable (None: Kafka's default partitioning)."),
    Setting("interceptor.classes", "list", None,
            "Interceptors (Java's ProducerInterceptor), run in this order: objects with "
            "on_send(record) -> record and/or on_acknowledgement(metadata, error) (and "
            "optionally on_send_many / on_acknowledgement_many, called once per send_many "
            "call), classes to instantiate with no arguments, or 'module.Class' names to "
            "import (a list, or a comma-separated str). Their exceptions are logged and "
            "swallowed. With none (None), send() keeps its compiled path. See "
            "docs/serializers-and-interceptors.md."),
    # Statistics (librdkafka's names) and the Java-named metrics' samples (Java's names):
    # kproducer.statistics, kproducer.java_metrics.
    Setting("statistics.interval.ms", "int", 0,
            "librdkafka's statistics: every this many ms, stats_cb is called with a JSON "
            "document in librdkafka's statistics layout (0: off). See "
            "docs/observability.md.", min=0, max=86400000),
    Setting("stats.cb", "callable", None,
            "confluent-kafka's stats_cb, Python-only: called with the statistics document (a "
            "JSON str) every statistics.interval.ms, on the thread that runs the producer's "
            "step then (as delivery callbacks); its exceptions are logged and swallowed."),
    Setting("metrics.sample.window.ms", "long", 30000,
            "The window of one sample of the Java-named metrics' rates, averages and maxima "
            "(metrics()).", min=1),
    Setting("metrics.num.samples", "int", 2,
            "How many samples of metrics.sample.window.ms the Java-named metrics' rates, "
            "averages and maxima cover.", min=1),
]
SETTINGS: Mapping[str, Setting] = {s.name: s for s in _DEFS}
"""Every setting kproducer implements, by dotted name, in definition order."""

_SECURITY = ("kproducer's security settings are security.protocol, the PEM-file ssl.* settings "
             "and sasl.mechanism with sasl.jaas.config or sasl.username/sasl.password, or the "
             "sasl.oauthbearer.* and sasl.login.* settings of OAUTHBEARER")
_SASL_REASON = ("kproducer's SASL implements PLAIN and SCRAM-SHA-256/512, configured with "
                "sasl.mechanism and sasl.jaas.config or sasl.username/sasl.password, and "
                "OAUTHBEARER with a token provider or OIDC client credentials "
                "(sasl.oauthbearer.*, sasl.login.*); broker-side token validation settings "
                "have no use in a producer")
_TLS_REASON = ("kproducer's TLS is configured with PEM files: ssl.truststore.location, "
               "ssl.keystore.location, ssl.key.password and "
               "ssl.endpoint.identification.algorithm (TLS 1.2+, OpenSSL's default ciphers)")
_TRANSACTIONS = ("Java's KIP-939 setting is not needed: prepare_transaction() and "
                 "complete_transaction() work with any transactional.id")
_METRICS = "kproducer has no pluggable metrics yet"

UNSUPPORTED: Mapping[str, str] = {
    # Java producer settings kproducer does not implement, with the reason given.
    "partitioner.class": "pass a Python callable as 'partitioner' instead",
    "metric.reporters": _METRICS,
    "metrics.recording.level": _METRICS,
    "enable.metrics.push": _METRICS,
    "transaction.two.phase.commit.enable": _TRANSACTIONS,
    "security.providers": _SECURITY,
    "config.providers": "configuration providers are Java classes",
    **{name: _SECURITY for name in (
        "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols",
        "ssl.keystore.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
        "ssl.truststore.password", "ssl.truststore.certificates", "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation", "ssl.engine.factory.class",
        "sasl.client.callback.handler.class", "sasl.login.class",
        "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer",
        "sasl.oauthbearer.jwt.retriever.class", "sasl.oauthbearer.jwt.validator.class",
        "sasl.oauthbearer.access.token.retriever.class",
        "sasl.oauthbearer.access.token.validator.class",
    )},
}
"""Kafka producer settings kproducer knows but does not implement, with the reason."""

# Names other clients use for a setting kproducer has under Kafka's Java name.
_ALIASES = {
    "queue.buffering.max.ms": "linger.ms",
    "compression.codec": "compression.type",
    "message.max.bytes": "max.request.size",
    "request.required.acks": "acks",
    "message.timeout.ms": "delivery.timeout.ms",
    "socket.timeout.ms": "request.timeout.ms",
    "message.send.max.retries": "retries",
    "topic.metadata.refresh.interval.ms": "metadata.max.age.ms",
    "max.in.flight": "max.in.flight.requests.per.connection",
}

# Java's PASSWORD-typed settings plus anything named like a credential.
_SECRET_NAMES = frozenset({
    "sasl.username",  # half a credential: kept out of reprs and messages like the password
    "sasl.oauthbearer.config",  # librdkafka marks it sensitive: it may hold client secrets
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
})
_SECRET_RE = re.compile(r"password|secret|passphrase|jaas|credential|private|\.pem$|token$",
                        re.IGNORECASE)
HIDDEN = "[hidden]"


def is_secret(name: str) -> bool:
    """Whether the value of setting ``name`` must never be shown (repr, errors, logs)."""
    return name in _SECRET_NAMES or bool(_SECRET_RE.search(name))


def _show(name: str, value: Any) -> str:
    return HIDDEN if is_secret(name) else repr(value)


# ---------------------------------------------------------------------------
# Names


def _canonical(key: str) -> str:
    # No Kafka producer setting has an underscore in its name, so the keyword
    # form maps back to the dotted one unambiguously.
    return key.replace("_", ".")


def _is_unsupported(name: str) -> bool:
    return (name in UNSUPPORTED or name.startswith(("ssl.", "sasl.", "metrics.context.")))


def _unknown_message(key: str) -> str:
    name = _canonical(key)
    if name in _ALIASES:
        return (f"unknown config {key!r} (another client's name); kproducer uses Kafka's Java "
                f"names: did you mean {_ALIASES[name]!r}?")
    match = difflib.get_close_matches(name.lower(), list(SETTINGS), n=1, cutoff=0.6)
    if match:
        return f"unknown config {key!r}; did you mean {match[0]!r}?"
    return f"unknown config {key!r}; ProducerConfig.names() lists the settings kproducer knows"


def _unsupported_message(key: str) -> str:
    name = _canonical(key)
    reason = UNSUPPORTED.get(name) or (
        _SECURITY if name.startswith(("ssl.", "sasl.")) else _METRICS)
    if name.startswith("sasl."):
        reason = _SASL_REASON
    if name.startswith("ssl."):
        reason = _TLS_REASON
    shown = repr(key) if key == name else f"{key!r} ({name})"
    return f"{shown} is a Kafka producer setting that kproducer does not support: {reason}"


# ---------------------------------------------------------------------------
# Values

_INT_RE = re.compile(r"[+-]?[0-9]+")


def _type_error(s: Setting, expected: str, value: Any) -> ConfigError:
    return ConfigError(
        f"{s.name}: expected {expected}, got {type(value).__name__} {_show(s.name, value)}",
        key=s.name)


def _range_text(lo: int, hi: int, tmin: int, tmax: int) -> str:
    # A 32-bit bound is worth stating (values above it are a common surprise);
    # a 64-bit one is not.
    if tmax == INT32_MAX or (lo <= tmin and hi >= tmax):
        return f"between {lo} and {hi}"
    if hi >= tmax:
        return f"at least {lo}"
    if lo <= tmin:
        return f"at most {hi}"
    return f"between {lo} and {hi}"


def _parse_integer(s: Setting, value: Any) -> int:
    tmin, tmax = (INT32_MIN, INT32_MAX) if s.kind == "int" else (INT64_MIN, INT64_MAX)
    expected = "an int (32-bit)" if s.kind == "int" else "an int (64-bit)"
    if isinstance(value, bool):
        raise _type_error(s, expected + "; bools are not ints", value)
    if isinstance(value, str):
        text = value.strip()
        if not _INT_RE.fullmatch(text):
            raise _type_error(s, expected + " or a decimal string", value)
        v = int(text)
    else:
        try:
            v = operator.index(value)
        except TypeError:
            raise _type_error(s, expected, value) from None
    lo = tmin if s.min is None else max(s.min, tmin)
    hi = tmax if s.max is None else min(s.max, tmax)
    if not lo <= v <= hi:
        shown = HIDDEN if is_secret(s.name) else v
        raise ConfigError(
            f"{s.name}: {shown} is out of range; expected {_range_text(lo, hi, tmin, tmax)}",
            key=s.name)
    return v


def _parse_bool(s: Setting, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _type_error(s, "a bool or 'true'/'false'", value)


def _parse_str(s: Setting, value: Any) -> str:
    if not isinstance(value, str):
        raise _type_error(s, "a str", value)
    return value.strip()


def _parse_password(s: Setting, value: Any) -> str:
    # Not stripped: surrounding spaces may be part of a password.
    if not isinstance(value, str):
        raise _type_error(s, "a str", value)
    return value


def _parse_choice(s: Setting, value: Any) -> str:
    v = _parse_str(s, value)
    key = v.upper() if s.case_insensitive else v
    if key not in s.choices:
        raise ConfigError(
            f"{s.name}: {v!r} is not a valid value; expected one of {', '.join(s.choices)}",
            key=s.name)
    if key not in s.supported:
        raise ConfigError(
            f"{s.name}: {key!r} is a valid Kafka value but kproducer does not support it yet; "
            f"supported: {', '.join(s.supported)}", key=s.name)
    return key


def _parse_acks(s: Setting, value: Any) -> int:
    if isinstance(value, str):
        text = value.strip()
        # Java's validator is case-sensitive: in("all", "-1", "0", "1").
        if text == "all":
            return -1
        if text in ("-1", "0", "1"):
            return int(text)
    elif isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(s, "'all', -1, 0 or 1", value)
    elif value in (-1, 0, 1):
        return int(value)
    raise ConfigError(f"acks: {value!r} is not a valid value; expected 'all', -1, 0 or 1",
                      key=s.name)


_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]*://")
_HOST_RE = re.compile(r"[A-Za-z0-9_.-]+")


def _parse_address(entry: str) -> tuple[str, int]:
    """Parses one ``host:port`` entry of bootstrap.servers; IPv6 hosts in brackets."""
    where = f"bootstrap.servers: {entry!r}"
    text = entry
    # Java's Utils.getHost/getPort pattern skips a leading "PLAINTEXT://"-style prefix.
    m = _SCHEME_RE.match(text)
    if m:
        text = text[m.end():]
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ConfigError(f"{where} has no closing ']' for its IPv6 address",
                              key="bootstrap.servers")
        host, rest = text[1:close], text[close + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{where}: brackets must hold an IPv6 address, not {host!r}",
                              key="bootstrap.servers") from None
        if not rest.startswith(":"):
            raise ConfigError(f"{where} has no port; expected [ipv6]:port",
                              key="bootstrap.servers")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ConfigError(f"{where} has no port; expected host:port", key="bootstrap.servers")
        if ":" in host:
            raise ConfigError(f"{where}: an IPv6 address must be in brackets, as in "
                              f"'[{host}]:{port_text}'", key="bootstrap.servers")
        if not host:
            raise ConfigError(f"{where} has an empty host; expected host:port",
                              key="bootstrap.servers")
        if not _HOST_RE.fullmatch(host):
            raise ConfigError(f"{where}: {host!r} is not a valid host name or address",
                              key="bootstrap.servers")
    if not port_text.isascii() or not port_text.isdigit():
        raise ConfigError(f"{where}: port {port_text!r} is not a number",
                          key="bootstrap.servers")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ConfigError(f"{where}: port {port} is out of range; expected between 1 and 65535",
                          key="bootstrap.servers")
    return host, port


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_servers(s: Setting, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        entries = [e.strip() for e in value.split(",")]
        if entries == [""]:
            entries = []
    elif isinstance(value, (list, tuple)):
        entries = []
        for e in value:
            if not isinstance(e, str):
                raise ConfigError(f"bootstrap.servers: expected str entries, got "
                                  f"{type(e).__name__} {e!r}", key=s.name)
            entries.append(e.strip())
    else:
        raise _type_error(s, "a list of 'host:port' strings or a comma-separated str", value)
    if not entries:
        raise ConfigError("bootstrap.servers: must name at least one broker (host:port)",
                          key=s.name)
    out: list[str] = []
    for e in entries:
        if not e:
            raise ConfigError(f"bootstrap.servers: empty entry in {value!r}", key=s.name)
        addr = _format_address(*_parse_address(e))
        if addr in out:
            raise ConfigError(f"bootstrap.servers: {addr!r} is listed twice", key=s.name)
        out.append(addr)
    return tuple(out)


def _parse_callable(s: Setting, value: Any):
    if callable(value):
        return value
    if isinstance(value, str):
        raise ConfigError(
            f"{s.name}: expected a Python callable, got the str {value!r}; Java class names "
            f"have no meaning in kproducer", key=s.name)
    raise _type_error(s, "a callable or None", value)


def _parse_logger(s: Setting, value: Any):
    if isinstance(value, (logging.Logger, logging.LoggerAdapter)):
        return value
    raise _type_error(s, "a logging.Logger, a logging.LoggerAdapter or None", value)


def _parse_interceptors(s: Setting, value: Any):
    from .interceptors import parse_setting      # imports the compiled module: only when used
    return parse_setting(s.name, value) or None


def _parse_double(s: Setting, value: Any) -> float:
    # Java's ConfigDef DOUBLE: a number, or a string Double.parseDouble reads.
    if isinstance(value, bool):
        raise _type_error(s, "a float; bools are not numbers", value)
    if isinstance(value, str):
        try:
            v = float(value.strip())
        except ValueError:
            raise _type_error(s, "a float or a decimal string", value) from None
    elif isinstance(value, (int, float)):
        v = float(value)
    else:
        raise _type_error(s, "a float", value)
    if v != v or (s.min is not None and v < s.min) or (s.max is not None and v > s.max):
        raise ConfigError(f"{s.name}: {v} is out of range; expected between {s.min} and {s.max}",
                          key=s.name)
    return v


# Java's OIDC login callback handler (KIP-768; the .secured one is its deprecated first home):
# naming it selects kproducer's built-in client credentials.
JAVA_OIDC_HANDLERS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                      "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler")


def _parse_handler(s: Setting, value: Any):
    if callable(value):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text in JAVA_OIDC_HANDLERS:
            return text
        raise ConfigError(
            f"{s.name}: expected a Python callable (a token provider) or "
            f"{JAVA_OIDC_HANDLERS[0]} (the built-in OIDC client credentials), got the str "
            f"{value!r}: other Java classes have no meaning in kproducer", key=s.name)
    raise _type_error(s, "a callable, Java's OIDC handler class name or None", value)


def _parse_unset(s: Setting, value: Any):
    reason = _TRANSACTIONS if s.name == "transactional.id" else "not supported yet"
    raise ConfigError(f"{s.name}: {reason}; it must be None (got {_show(s.name, value)})",
                      key=s.name)


_PARSERS = {
    "int": _parse_integer, "long": _parse_integer, "bool": _parse_bool, "str": _parse_str,
    "password": _parse_password,
    "choice": _parse_choice, "acks": _parse_acks, "servers": _parse_servers,
    "callable": _parse_callable, "unset": _parse_unset, "double": _parse_double,
    "handler": _parse_handler, "list": _parse_interceptors, "logger": _parse_logger,
}


def _parse(s: Setting, value: Any) -> Any:
    return _PARSERS[s.kind](s, value)


# ---------------------------------------------------------------------------
# The config object


class ProducerConfig(Mapping):
    """The producer's configuration: validated, normalised and immutable.

    ``ProducerConfig(config=None, /, **settings)``: ``config`` is a mapping of
    dotted Kafka names (``{"bootstrap.servers": "localhost:9092"}``) and
    ``settings`` the same names with underscores (``linger_ms=10``). Raises
    :class:`~kproducer.errors.ConfigError` for unknown or unsupported names,
    wrong types, out-of-range values and conflicting settings.

    Read a setting as an attribute (``cfg.linger_ms``) or by name
    (``cfg["linger.ms"]``); ``cfg.as_dict()`` gives every resolved setting,
    ``cfg.user_config`` only what the user passed (the values as given, which
    rebuild an equal config: pickling uses it). ``acks`` reads as an int
    (-1, 0 or 1), ``bootstrap.servers`` as a tuple of ``host:port`` strings,
    ``security.protocol`` in upper case. ``client.id`` stays ``""`` when not
    set; the producer then names itself as Java does (``producer-N``).
    """

    __slots__ = ("_user", "_values")

    def __init__(self, config: Mapping[str, Any] | None = None, /, **settings: Any):
        if isinstance(config, ProducerConfig):
            config = config.user_config
        elif config is not None and not isinstance(config, Mapping):
            hint = (f" (for the broker address, pass bootstrap_servers={config!r})"
                    if isinstance(config, str) else "")
            raise ConfigError(
                f"ProducerConfig takes a mapping of settings, not {type(config).__name__}{hint}")
        given: dict[str, tuple[str, Any, Any]] = {}  # name -> (key as given, raw, parsed)
        for key, value in [*(config or {}).items(), *settings.items()]:
            if not isinstance(key, str):
                raise ConfigError(f"config names must be str, got {type(key).__name__} {key!r}")
            name = _canonical(key)
            if name not in SETTINGS:
                if _is_unsupported(name):
                    if value is None:
                        continue
                    raise ConfigError(_unsupported_message(key), key=name)
                raise ConfigError(_unknown_message(key), key=key)
            if value is None and name != "bootstrap.servers":
                parsed = None
            else:
                parsed = _parse(SETTINGS[name], value)
            if name in given:
                first_key, first_raw, first_parsed = given[name]
                if first_parsed != parsed:
                    raise ConfigError(
                        f"config {name!r} given twice with different values: "
                        f"{_show(name, first_raw)} (as {first_key!r}) and "
                        f"{_show(name, value)} (as {key!r})", key=name)
                continue
            given[name] = (key, value, parsed)

        # Copies of list values, so that later changes to the caller's list show in neither.
        user = {name: list(raw) if isinstance(raw, list) else raw
                for name, (_, raw, parsed) in given.items() if parsed is not None}
        explicit = {name: parsed for name, (_, _, parsed) in given.items() if parsed is not None}
        if "bootstrap.servers" not in given:
            raise ConfigError("bootstrap.servers is required: the brokers to connect to first, "
                              "e.g. 'localhost:9092'", key="bootstrap.servers")
        values = {s.name: explicit.get(s.name, s.default) for s in _DEFS}
        _resolve(values, explicit)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_user", user)

    # -- mapping ----------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        name = _canonical(key) if isinstance(key, str) else key
        try:
            return self._values[name]
        except (KeyError, TypeError):
            raise KeyError(_unknown_message(key) if isinstance(key, str) else key) from None

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and _canonical(key) in self._values

    # -- views ------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """Every setting's resolved value, by dotted name (a new dict)."""
        return dict(self._values)

    @property
    def user_config(self) -> dict[str, Any]:
        """Only the settings the user passed, by dotted name, values as given (a new dict).

        ``ProducerConfig(cfg.user_config)`` rebuilds an equal config.
        """
        return {k: list(v) if isinstance(v, list) else v for k, v in self._user.items()}

    @property
    def compression_level(self) -> int | None:
        """The level for the chosen codec (its ``compression.<codec>.level``), or None
        for ``none`` and ``snappy``, which take no level."""
        codec = self._values["compression.type"]
        if codec not in LEVELS:
            return None
        return self._values[f"compression.{codec}.level"]

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        """``bootstrap.servers`` as ``[(host, port), ...]``, IPv6 hosts without brackets."""
        return [_parse_address(e) for e in self._values["bootstrap.servers"]]

    @property
    def sasl_credentials(self):
        """The SASL mechanism and credentials (from ``sasl.jaas.config`` or
        ``sasl.username``/``sasl.password``: a :class:`~kproducer.sasl.SaslCredentials`; for
        OAUTHBEARER a new :class:`~kproducer.oauth.OAuthBearerCredentials` at every call,
        its token login not started), or None when ``security.protocol`` does not use SASL.
        Their ``repr`` hides the user name, password, secrets and tokens."""
        return _sasl_credentials(self._values, self._user)

    @staticmethod
    def names() -> list[str]:
        """The dotted names of every setting kproducer implements."""
        return list(SETTINGS)

    # -- immutability, pickling, display ------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ProducerConfig is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ProducerConfig is immutable; cannot delete {name!r}")

    def __reduce__(self):
        return (_rebuild, (self.user_config,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        # The settings that differ from Kafka's defaults (bootstrap.servers always).
        shown = {
            name: (HIDDEN if is_secret(name) else v)
            for name, v in self._values.items()
            if name == "bootstrap.servers" or v != SETTINGS[name].default
        }
        for name in self._user:  # and anything the user set that the table does not show
            if is_secret(name):
                shown[name] = HIDDEN
        body = ", ".join(f"{k!r}: {v if v is HIDDEN else repr(v)}" for k, v in shown.items())
        return f"ProducerConfig({{{body}}})"


def _rebuild(user_config: dict) -> ProducerConfig:
    return ProducerConfig(user_config)


def _resolve(values: dict[str, Any], explicit: dict[str, Any]) -> None:
    """Cross-setting rules, in Java's order; ``explicit`` holds what the user set. Their
    messages go to the ``logger`` setting's logger when one is given."""
    log = values["logger"] if values["logger"] is not None else _log
    # CommonClientConfigs.postProcessReconnectBackoffConfigs
    if "reconnect.backoff.ms" in explicit and "reconnect.backoff.max.ms" not in explicit:
        log.warning("Disabling exponential reconnect backoff because reconnect.backoff.ms is "
                    "set, but reconnect.backoff.max.ms is not.")
        values["reconnect.backoff.max.ms"] = values["reconnect.backoff.ms"]

    # CommonClientConfigs.warnDisablingExponentialBackoff
    for base, top, what in (("retry.backoff.ms", "retry.backoff.max.ms", "backoff"),
                            ("socket.connection.setup.timeout.ms",
                             "socket.connection.setup.timeout.max.ms", "connection setup timeout")):
        if values[base] > values[top]:
            log.warning("Configuration '%s' with value '%d' is greater than configuration '%s' "
                        "with value '%d'. A static %s with value '%d' will be applied.",
                        base, values[base], top, values[top], what, values[top])

    # ProducerConfig.postProcessAndValidateIdempotenceConfigs (Kafka 4.x)
    if values["enable.idempotence"]:
        user_set = "enable.idempotence" in explicit
        disable = False
        if values["retries"] == 0:
            if user_set:
                raise ConfigError("Must set retries to non-zero when using the idempotent "
                                  "producer (enable.idempotence=true).", key="retries")
            log.info("Idempotence will be disabled because retries is set to 0.")
            disable = True
        if values["acks"] != -1:
            if user_set:
                raise ConfigError("Must set acks to all in order to use the idempotent producer "
                                  "(enable.idempotence=true). Otherwise we cannot guarantee "
                                  "idempotence.", key="acks")
            log.info("Idempotence will be disabled because acks is set to %d, not set to 'all'.",
                     values["acks"])
            disable = True
        in_flight = values["max.in.flight.requests.per.connection"]
        if in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            # An error since Kafka 4.0 even when idempotence is only on by default
            # (KAFKA-17927); Java checks it before applying the disablement above.
            raise ConfigError(
                f"To use the idempotent producer, max.in.flight.requests.per.connection must be "
                f"set to at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE}. Current value is {in_flight}."
                + ("" if user_set else " Set enable.idempotence=false to allow more."),
                key="max.in.flight.requests.per.connection")
        if disable:
            values["enable.idempotence"] = False

    # ProducerConfig: "Cannot set a transactional.id without also enabling idempotence."
    if values["transactional.id"] is not None and not values["enable.idempotence"]:
        if "enable.idempotence" in explicit:
            why = "enable.idempotence is set to false"
        else:
            why = "idempotence was turned off by acks or retries"
        raise ConfigError(f"transactional.id needs idempotence, but {why}: transactions use the "
                          f"idempotent producer's ids and sequence numbers (set "
                          f"enable.idempotence=true, acks=all, retries > 0).", key="transactional.id")
    if values["transactional.id"] == "":
        raise ConfigError("transactional.id must not be empty (None: not transactional)",
                          key="transactional.id")

    _batch_max_size(values, explicit)
    _sasl_credentials(values, explicit)
    _resolve_tls(values, explicit)

    # KafkaProducer.configureDeliveryTimeout
    linger = min(values["linger.ms"], INT32_MAX)
    floor = min(linger + values["request.timeout.ms"], INT32_MAX)
    if values["delivery.timeout.ms"] < floor:
        if "delivery.timeout.ms" in explicit:
            raise ConfigError(
                f"delivery.timeout.ms should be equal to or larger than linger.ms + "
                f"request.timeout.ms ({values['delivery.timeout.ms']} < {linger} + "
                f"{values['request.timeout.ms']})", key="delivery.timeout.ms")
        log.warning("delivery.timeout.ms should be equal to or larger than linger.ms + "
                    "request.timeout.ms. Setting it to %d.", floor)
        values["delivery.timeout.ms"] = floor


def _batch_max_size(values: dict[str, Any], explicit: Mapping[str, Any]) -> None:
    """KIP-782's bound on a growing batch: between batch.size and max.request.size."""
    size, most, request = values["batch.size"], values["batch.max.size"], values["max.request.size"]
    if "batch.max.size" in explicit:
        if most < size:
            raise ConfigError(f"batch.max.size ({most}) must be at least batch.size ({size})",
                              key="batch.max.size")
        if most > request:
            raise ConfigError(f"batch.max.size ({most}) must be at most max.request.size "
                              f"({request}): a batch larger than a request can never be sent",
                              key="batch.max.size")
    elif size == 0:
        values["batch.max.size"] = 0      # batching disabled: no growth either
    else:
        values["batch.max.size"] = max(size, min(most, request))


_SASL_KEYS = ("sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password")
# Settings that only OAUTHBEARER uses.
_OAUTH_KEYS = tuple(name for name in SETTINGS
                    if name.startswith(("sasl.oauthbearer.", "sasl.login.")) or name == "oauth.cb")
_JAVA_CLIENT_ID = "sasl.oauthbearer.client.credentials.client.id"
_JAVA_CLIENT_SECRET = "sasl.oauthbearer.client.credentials.client.secret"


def _sasl_credentials(values: dict[str, Any], explicit: Mapping[str, Any]):
    """The SASL credentials the settings describe (None without SASL): a
    :class:`~kproducer.sasl.SaslCredentials`, or for OAUTHBEARER a
    :class:`~kproducer.oauth.OAuthBearerCredentials` (no thread, no I/O until the network
    client starts it); ConfigError naming the key when they are missing or malformed.
    Messages never show the values."""
    protocol = values["security.protocol"]
    if not protocol.startswith("SASL_"):
        given = [k for k in _SASL_KEYS + _OAUTH_KEYS if k in explicit]
        if given:
            # Ignoring them (as Java does) would send unauthenticated traffic the user
            # meant to authenticate.
            raise ConfigError(f"{given[0]} is set but security.protocol is {protocol}, which does "
                              f"not use SASL; set security.protocol to SASL_PLAINTEXT or SASL_SSL",
                              key=given[0])
        return None
    mechanism = values["sasl.mechanism"]
    if mechanism not in SETTINGS["sasl.mechanism"].supported:  # Kafka's default, GSSAPI
        raise ConfigError(f"security.protocol={protocol} needs sasl.mechanism: Kafka's default "
                          f"{mechanism} (Kerberos) is not supported; set it to PLAIN, "
                          f"SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", key="sasl.mechanism")
    if mechanism == "OAUTHBEARER":
        return _oauthbearer_credentials(values, explicit)
    given = [k for k in _OAUTH_KEYS if k in explicit]
    if given:
        raise ConfigError(f"{given[0]} is set but sasl.mechanism is {mechanism}; it belongs to "
                          f"sasl.mechanism=OAUTHBEARER", key=given[0])
    jaas, username, password = (values[k] for k in _SASL_KEYS[1:])
    extensions: dict[str, str] = {}
    if jaas is not None:
        if username is not None or password is not None:
            raise ConfigError("set either sasl.jaas.config or sasl.username/sasl.password, not "
                              "both", key="sasl.jaas.config")
        try:
            _module, username, password, extensions = parse_jaas_config(jaas)
        except ValueError as exc:
            raise ConfigError(f"sasl.jaas.config: {exc}", key="sasl.jaas.config") from None
    elif username is None or password is None:
        missing = "sasl.username" if username is None else "sasl.password"
        raise ConfigError(f"security.protocol={protocol} needs credentials: set sasl.jaas.config, "
                          f"or sasl.username and sasl.password ({missing} is missing)", key=missing)
    elif not username:
        raise ConfigError("sasl.username is empty", key="sasl.username")
    where = "sasl.jaas.config" if jaas is not None else None
    for key, value in (("sasl.username", username), ("sasl.password", password)):
        # SCRAM takes any string (raw UTF-8, as Kafka's Java client sends it; see kproducer.sasl).
        if mechanism == "PLAIN" and "\0" in value:
            raise ConfigError(f"{key}: a PLAIN credential may not contain NUL characters",
                              key=where or key)
    return SaslCredentials(mechanism, username, password, extensions)


def _parse_extensions_setting(text: str) -> dict[str, str]:
    """librdkafka's sasl.oauthbearer.extensions: ``key=value,key2=value2``."""
    out: dict[str, str] = {}
    for i, pair in enumerate(p for p in text.split(",") if p.strip()):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"entry {i + 1} is not key=value")
        key = key.strip()
        if key in out:
            raise ValueError(f"extension {key!r} is given twice")
        out[key] = value
    return validate_extensions(out)


def _one_of(values: dict[str, Any], *sources: tuple[str, Any]) -> tuple[str | None, Any]:
    """The one source of a value given under several names (Java's, librdkafka's, the JAAS
    option): ``(name, value)``, (None, None) when none; ConfigError naming the second."""
    given = [(name, value) for name, value in sources if value is not None]
    if len(given) > 1:
        raise ConfigError(f"set either {given[0][0]} or {given[1][0]}, not both", key=given[1][0])
    return given[0] if given else (None, None)


def _oauthbearer_credentials(values: dict[str, Any], explicit: Mapping[str, Any]):
    """sasl.mechanism=OAUTHBEARER: the token source (a callable or OIDC client credentials)
    and how it is renewed, checked against each other."""
    import threading

    from .oauth import (ClientCredentialsRetriever, FileTokenRetriever, OAuthBearerCredentials,
                        RefreshConfig, https_context, provider_source)

    for key in ("sasl.username", "sasl.password"):
        if values[key] is not None:
            raise ConfigError(f"{key} is set but sasl.mechanism is OAUTHBEARER, which sends a "
                              f"token, not a password", key=key)
    jaas: dict[str, Any] = {}
    if values["sasl.jaas.config"] is not None:
        try:
            jaas = parse_oauthbearer_jaas(values["sasl.jaas.config"])
        except ValueError as exc:
            raise ConfigError(f"sasl.jaas.config: {exc}", key="sasl.jaas.config") from None
    handler = values["sasl.login.callback.handler.class"]
    handler_oidc = isinstance(handler, str)
    provider_key, provider = _one_of(
        values, ("sasl.oauthbearer.token.provider", values["sasl.oauthbearer.token.provider"]),
        ("oauth.cb", values["oauth.cb"]),
        ("sasl.login.callback.handler.class", None if handler_oidc else handler))
    url = values["sasl.oauthbearer.token.endpoint.url"]
    method = values["sasl.oauthbearer.method"]
    if provider is not None and url is not None:
        raise ConfigError(f"set either {provider_key} (a token provider) or "
                          f"sasl.oauthbearer.token.endpoint.url (OIDC), not both",
                          key="sasl.oauthbearer.token.endpoint.url")
    if provider is not None and (method == "oidc" or handler_oidc):
        key = "sasl.oauthbearer.method" if method == "oidc" else "sasl.login.callback.handler.class"
        raise ConfigError(f"{key} asks for the built-in OIDC client credentials but {provider_key} "
                          f"gives a token provider; set one of them", key=key)
    if url is not None and method == "default":
        raise ConfigError("sasl.oauthbearer.token.endpoint.url is set but sasl.oauthbearer.method "
                          "is default (the token provider); set it to oidc or leave it unset",
                          key="sasl.oauthbearer.method")
    extensions: dict[str, str] = dict(jaas.get("extensions", {}))
    if values["sasl.oauthbearer.extensions"] is not None:
        try:
            extensions.update(_parse_extensions_setting(values["sasl.oauthbearer.extensions"]))
        except ValueError as exc:
            raise ConfigError(f"sasl.oauthbearer.extensions: {exc}",
                              key="sasl.oauthbearer.extensions") from None
    backoff, backoff_max = values["sasl.login.retry.backoff.ms"], values["sasl.login.retry.backoff.max.ms"]
    if backoff_max < backoff:
        # Java's Retry refuses it (retryBackoffMaxMs less than retryBackoffMs).
        raise ConfigError(f"sasl.login.retry.backoff.max.ms ({backoff_max}) is less than "
                          f"sasl.login.retry.backoff.ms ({backoff})",
                          key="sasl.login.retry.backoff.max.ms")
    refresh = RefreshConfig(values["sasl.login.refresh.window.factor"],
                            values["sasl.login.refresh.window.jitter"],
                            values["sasl.login.refresh.min.period.seconds"],
                            values["sasl.login.refresh.buffer.seconds"])
    claims = dict(sub_claim_name=values["sasl.oauthbearer.sub.claim.name"],
                  scope_claim_name=values["sasl.oauthbearer.scope.claim.name"])
    for key, claim in (("sasl.oauthbearer.sub.claim.name", claims["sub_claim_name"]),
                       ("sasl.oauthbearer.scope.claim.name", claims["scope_claim_name"])):
        if not claim:
            raise ConfigError(f"{key} is empty", key=key)
    common = dict(extensions=extensions, refresh=refresh, retry_backoff_ms=backoff,
                  retry_backoff_max_ms=backoff_max)
    oidc_only = [k for k in (_JAVA_CLIENT_ID, _JAVA_CLIENT_SECRET, "sasl.oauthbearer.client.id",
                             "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
                             "sasl.oauthbearer.header.urlencode", "sasl.login.connect.timeout.ms",
                             "sasl.login.read.timeout.ms") if k in explicit]
    if provider is not None:
        if oidc_only or "client_id" in jaas or "client_secret" in jaas:
            key = oidc_only[0] if oidc_only else "sasl.jaas.config"
            raise ConfigError(f"{key} is an OIDC client credentials setting, but {provider_key} "
                              f"gives a token provider", key=key)
        fetch = provider_source(provider, values["sasl.oauthbearer.config"], **claims)
        return OAuthBearerCredentials(fetch, fetch.description,
                                      secrets=(values["sasl.oauthbearer.config"] or "",), **common)
    if url is None:
        if method == "oidc" or handler_oidc or "client_id" in jaas:
            raise ConfigError("the OIDC client credentials need sasl.oauthbearer.token.endpoint.url "
                              "(the identity provider's token endpoint)",
                              key="sasl.oauthbearer.token.endpoint.url")
        raise ConfigError("sasl.mechanism=OAUTHBEARER needs a token source: "
                          "sasl.oauthbearer.token.provider (a callable; confluent-kafka's oauth_cb "
                          "is accepted), or sasl.oauthbearer.token.endpoint.url with OIDC client "
                          "credentials", key="sasl.oauthbearer.token.provider")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "file":
        from urllib.parse import unquote, urlsplit
        path = unquote(urlsplit(url).path)
        if not path:
            raise ConfigError("sasl.oauthbearer.token.endpoint.url: a file: URL needs a path",
                              key="sasl.oauthbearer.token.endpoint.url")
        fetch = FileTokenRetriever(path, **claims)
        return OAuthBearerCredentials(fetch, fetch.description, **common)
    if scheme not in ("https", "http"):
        raise ConfigError("sasl.oauthbearer.token.endpoint.url must be an https:// (or http://, "
                          "or file:) URL", key="sasl.oauthbearer.token.endpoint.url")
    id_key, client_id = _one_of(values, (_JAVA_CLIENT_ID, values[_JAVA_CLIENT_ID]),
                                ("sasl.oauthbearer.client.id", values["sasl.oauthbearer.client.id"]),
                                ("sasl.jaas.config", jaas.get("client_id")))
    secret_key, secret = _one_of(values, (_JAVA_CLIENT_SECRET, values[_JAVA_CLIENT_SECRET]),
                                 ("sasl.oauthbearer.client.secret", values["sasl.oauthbearer.client.secret"]),
                                 ("sasl.jaas.config", jaas.get("client_secret")))
    _scope_key, scope = _one_of(values, ("sasl.oauthbearer.scope", values["sasl.oauthbearer.scope"]),
                                ("sasl.jaas.config", jaas.get("scope")))
    for key, value, alias in ((_JAVA_CLIENT_ID, client_id, "sasl.oauthbearer.client.id"),
                              (_JAVA_CLIENT_SECRET, secret, "sasl.oauthbearer.client.secret")):
        if value is None or not value.strip():
            what = "is empty" if value is not None else "is missing"
            raise ConfigError(f"OIDC client credentials need {key} (or librdkafka's {alias}); it "
                              f"{what}", key=key)
    # The trust of the broker connections (kproducer.tls's settings) serves the token endpoint.
    tls = values["security.protocol"] == "SASL_SSL"
    cafile = (values["ssl.truststore.location"] or values["ssl.ca.location"]) if tls else None
    check_hostname = values["ssl.endpoint.identification.algorithm"] == "https" if tls else True
    stop = threading.Event()
    fetch = ClientCredentialsRetriever(
        url, client_id, secret, scope, stop=stop,
        ssl_context_factory=lambda: https_context(cafile, check_hostname),
        retry_backoff_ms=backoff, retry_backoff_max_ms=backoff_max,
        connect_timeout_ms=values["sasl.login.connect.timeout.ms"],
        read_timeout_ms=values["sasl.login.read.timeout.ms"],
        urlencode_header=values["sasl.oauthbearer.header.urlencode"], **claims)
    return OAuthBearerCredentials(fetch, fetch.description, secrets=(secret,), stop=stop, **common)


_TLS_KEYS = ("ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
             "ssl.keystore.type", "ssl.key.password", "ssl.endpoint.identification.algorithm",
             "ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def _resolve_tls(values: dict[str, Any], explicit: Mapping[str, Any]) -> None:
    """Checks the TLS settings against each other (files are read by kproducer.tls when the
    producer starts) and normalises ssl.endpoint.identification.algorithm to "https" or ""."""
    protocol = values["security.protocol"]
    if protocol not in ("SSL", "SASL_SSL"):
        given = [k for k in _TLS_KEYS if k in explicit]
        if given:
            # Ignoring them (as Java does) would send in the clear what the user meant to encrypt.
            raise ConfigError(f"{given[0]} is set but security.protocol is {protocol}, which does "
                              f"not use TLS; set security.protocol to SSL or SASL_SSL",
                              key=given[0])
        return
    algo = values["ssl.endpoint.identification.algorithm"].strip().lower()
    if algo not in ("https", "", "none"):
        raise ConfigError(f"ssl.endpoint.identification.algorithm: {algo!r} is not supported; "
                          f"expected 'https' (check the broker's name) or '' (do not)",
                          key="ssl.endpoint.identification.algorithm")
    values["ssl.endpoint.identification.algorithm"] = "" if algo == "none" else algo
    for java, rdkafka in (("ssl.truststore.location", "ssl.ca.location"),
                          ("ssl.keystore.location", "ssl.certificate.location")):
        if values[java] is not None and values[rdkafka] is not None:
            raise ConfigError(f"set either {java} or {rdkafka} (librdkafka's name), not both",
                              key=rdkafka)
    for key in ("ssl.truststore.location", "ssl.keystore.location", "ssl.ca.location",
                "ssl.certificate.location", "ssl.key.location"):
        if values[key] == "":
            raise ConfigError(f"{key} is empty; expected the path of a PEM file", key=key)
    if values["ssl.key.location"] is not None and values["ssl.certificate.location"] is None:
        raise ConfigError("ssl.key.location is set without ssl.certificate.location (the client "
                          "certificate it belongs to)", key="ssl.key.location")
    if values["ssl.key.password"] is not None and values["ssl.keystore.location"] is None \
            and values["ssl.certificate.location"] is None:
        raise ConfigError("ssl.key.password is set without a private key (ssl.keystore.location)",
                          key="ssl.key.password")


def _add_accessors() -> None:
    lines = ["", "Settings (attribute name, Kafka name, default):", ""]
    for s in _DEFS:
        setattr(ProducerConfig, s.attr,
                property(lambda self, _n=s.name: self._values[_n], doc=s.doc))
        default = "required" if s.required else repr(s.default)
        lines.append(f"- ``{s.attr}`` (``{s.name}``, {default}): {s.doc}")
    ProducerConfig.__doc__ = (ProducerConfig.__doc__ or "") + "\n    ".join(lines) + "\n"


_add_accessors()
