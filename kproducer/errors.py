"""Exceptions raised by kproducer.

Every error kproducer raises derives from :class:`KafkaError`. Errors from the
compiled codec carry the Kafka field name and the byte offset where decoding
stopped, so a bad batch or frame can be located without a debugger.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base class of every kproducer error."""


class CodecError(KafkaError, ValueError):
    """Malformed or unencodable wire data.

    ``field`` is Kafka's name for the field (``"KeyLength"``, ``"CRC"``) and
    ``offset`` the byte offset into the input where that field starts; either
    may be ``None`` when it does not apply.
    """

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.field = field
        self.offset = offset


class CorruptRecordError(CodecError):
    """A record batch failed validation (length, count, magic or CRC)."""


class FrameError(CodecError):
    """A size-prefixed frame was negative or above the receiver's limit."""


class ProtocolError(KafkaError):
    """A request could not be encoded or a response could not be decoded."""


class UnsupportedVersionError(ProtocolError):
    """No API version is supported by both kproducer and the broker."""


class BrokerResponseError(KafkaError):
    """A broker answered with a non-zero error code.

    ``code`` is Kafka's numeric error code and ``name`` its symbolic name
    (``"NOT_LEADER_OR_FOLLOWER"``).
    """

    def __init__(self, code: int, name: str, message: str | None = None):
        super().__init__(f"{name} ({code})" + (f": {message}" if message else ""))
        self.code = code
        self.name = name


class ProtocolDecodeError(ProtocolError):
    """A response could not be decoded: truncated, malformed or hostile bytes.

    ``field`` names the Kafka field being read (``"MetadataResponsePartition.LeaderId"``)
    and ``offset`` is the byte offset into the decoded buffer where that read
    started; either may be ``None`` when it does not apply.
    """

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.field = field
        self.offset = offset


class ConfigError(KafkaError, ValueError):
    """A producer setting is unknown, unsupported, of the wrong type or out of range.

    ``key`` is the dotted Kafka name of the offending setting (``"linger.ms"``; an
    unknown name as given), or ``None`` when no single setting is at fault.
    """

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.key = key


class TlsConfigError(ConfigError):
    """A TLS file or password that OpenSSL could not use (``kproducer._net.TlsContext``);
    the message carries OpenSSL's reason.

    ``tls_input`` names the TlsContext argument at fault (``"cafile"``, ``"certfile"``,
    ``"keyfile"``, or ``None``); ``key_password_failed`` is True when the key is encrypted
    and could not be decrypted (no password, or a wrong one).
    """

    def __init__(self, message: str, *, key: str | None = None, tls_input: str | None = None,
                 key_password_failed: bool = False):
        super().__init__(message, key=key)
        self.tls_input = tls_input
        self.key_password_failed = key_password_failed


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A bounded wait ran out: metadata or memory within ``max.block.ms``, a
    record within ``delivery.timeout.ms``, a future's ``result(timeout)``."""


class NetworkError(KafkaError):
    """A connection could not be opened, failed, or was used in a way its
    state does not allow (a second send while one is in flight).

    ``conn_id`` is the selector's connection id and ``errno`` the OS error
    number (``errno.ECONNREFUSED``); either may be ``None``.
    """

    def __init__(self, message: str, *, conn_id: int | None = None, errno: int | None = None):
        super().__init__(message)
        self.conn_id = conn_id
        self.errno = errno


class AllBrokersDownError(NetworkError):
    """Every broker the producer knows failed to connect, or lost its connection, since one
    was last connected (librdkafka's ``_ALL_BROKERS_DOWN``): given to ``error_cb``, once
    until a broker connects again. The message names each broker with its last error.
    Records are not failed by it: they wait, and are retried, within
    ``delivery.timeout.ms``."""


class RecordTooLargeError(KafkaError, ValueError):
    """A record larger than ``max.request.size`` or ``buffer.memory`` (checked by the
    producer itself: not every broker enforces it)."""


class AuthenticationError(KafkaError):
    """SASL authentication with a broker failed: wrong credentials, a mechanism the
    broker does not enable, or a server that could not prove it knows the password
    (a SCRAM server signature that does not match).

    Not retried: records waiting for that broker fail with it and metadata waits
    raise it (Java's AuthenticationException). Messages never contain credentials.
    """


class TokenProviderError(AuthenticationError):
    """No usable OAUTHBEARER token: the token provider raised or returned something
    unusable, the OIDC token endpoint refused the client or could not be reached, or the
    token expired before a new one could be obtained. The message names the source and the
    cause (``__cause__`` is the original exception); handled like any AuthenticationError."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake with a broker failed: its certificate did not verify (unknown CA,
    expired, not issued for the host connected to) or it refused ours (no client
    certificate, or one it does not trust). Handled like any AuthenticationError (Java's
    SslAuthenticationException); the message carries OpenSSL's reason."""


# -- transactions (Java's names) ---------------------------------------------------------

class TransactionError(KafkaError):
    """Base of the transactional producer's errors."""


class ProducerFencedError(TransactionError):
    """Another producer with the same ``transactional.id`` has initialized since (a newer
    epoch): this one is fenced for good. Fatal: every later call raises it; only
    ``close()`` remains (Java's ProducerFencedException)."""


class InvalidTxnStateError(TransactionError):
    """A transactional call in the wrong order (``send()`` outside a transaction,
    ``commit_transaction()`` without ``begin_transaction()``, ...) or a broker's
    INVALID_TXN_STATE. The message names the call and the state."""


class TransactionAbortableError(TransactionError):
    """Something inside the transaction failed (a record, AddPartitionsToTxn, an offset
    commit): the transaction cannot commit; ``abort_transaction()`` and begin again.
    ``commit_transaction()`` and ``send()`` raise it until then. ``__cause__`` is the
    original error."""


class TransactionFatalError(TransactionError):
    """The transactional producer cannot go on (an authorization failure, an unexpected
    broker answer): every later call raises it; only ``close()`` remains."""


class TransactionTimeoutError(TransactionError, KafkaTimeoutError):
    """A transactional call did not finish within its timeout (``max.block.ms`` by
    default). The operation goes on in the background: calling the same method again
    waits for it (Java's TimeoutException from initTransactions/commitTransaction)."""


class TransactionAbortedError(TransactionError):
    """The error a record's future gets when its transaction was aborted before the
    record was sent."""
