"""Exceptions raised by kproducer, and the errors records fail with.

Every error kproducer raises derives from :class:`KafkaError`, which says what the
application can do about it (Java's exception hierarchy, KIP-1050's categories):

- ``retriable``: the condition may pass (Kafka's "retriable" flag; Java's
  ``RetriableException``). The producer has retried it already, until
  ``delivery.timeout.ms``: a record that fails with one may succeed if sent again.
- ``fatal``: the producer cannot go on (fenced, not authorized, not supported by the
  broker): every later call fails the same way; close it.
- ``abortable``: a transactional producer must abort the transaction it happened in, then
  can go on (``abort_transaction()``, ``begin_transaction()``).

A broker's error code becomes an exception in one place, :func:`broker_error`, which picks
Java's class for the common codes (:class:`NotLeaderOrFollowerError`,
:class:`RecordTooLargeError`, ...), all subclasses of :class:`BrokerResponseError` with
``code``, ``name`` and the flags of that code. Errors from the compiled codec carry the
Kafka field name and the byte offset where decoding stopped, so a bad batch or frame can be
located without a debugger.
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class KafkaError(Exception):
    """Base class of every kproducer error. ``retriable``, ``fatal`` and ``abortable`` (see
    the module docstring) are class defaults, per code for broker errors."""

    retriable = False
    fatal = False
    abortable = False


class BrokerResponseError(KafkaError):
    """A broker answered with a non-zero error code.

    ``code`` is Kafka's numeric error code and ``name`` its symbolic name
    (``"NOT_LEADER_OR_FOLLOWER"``); ``retriable``, ``fatal`` and ``abortable`` are that
    code's (kproducer.protocol.errors_table). Made by :func:`broker_error`, which picks the
    subclass of the code where Java has an exception class of its own.
    """

    def __init__(self, code: int, name: str, message: str | None = None):
        super().__init__(f"{name} ({code})" + (f": {message}" if message else ""))
        self.code = code
        self.name = name

    @property
    def retriable(self) -> bool:
        return _flags(self.code).retriable

    @property
    def fatal(self) -> bool:
        return _flags(self.code).fatal

    @property
    def abortable(self) -> bool:
        return _flags(self.code).abortable


def _flags(code: int):
    # Imported here: the table imports this module for broker_error.
    from kproducer.protocol.errors_table import error_info
    return error_info(code)


# Java's exception class of a broker code: filled by _code() below, read by broker_error.
_BY_CODE: Dict[int, Type[BrokerResponseError]] = {}


def _code(code: int, name: str):
    """Registers the decorated class as the one for broker ``code`` (Kafka's ``name``)."""
    def register(cls):
        cls.CODE, cls.NAME = code, name
        _BY_CODE[code] = cls
        return cls
    return register


def broker_error(code: int, message: Optional[str] = None) -> BrokerResponseError:
    """The exception for a broker's error ``code`` (not 0): Java's class where kproducer has
    it (:class:`NotLeaderOrFollowerError` for 6, ...), else :class:`BrokerResponseError`;
    ``message`` says where it came from (``"topic-0"``, ``"InitProducerId"``)."""
    from kproducer.protocol.errors_table import error_name
    return _BY_CODE.get(code, BrokerResponseError)(code, error_name(code), message)


class _ClientSideBrokerError(BrokerResponseError):
    """A broker code's class the producer also raises itself, with a message only: then
    ``code`` and ``name`` are the class's and the message is the whole text."""

    CODE = -1
    NAME = "UNKNOWN_SERVER_ERROR"

    def __init__(self, code_or_message: int | str = "", name: str | None = None,
                 message: str | None = None, **kwargs):
        if isinstance(code_or_message, str):
            KafkaError.__init__(self, code_or_message)
            self.code, self.name = self.CODE, self.NAME
        else:
            BrokerResponseError.__init__(self, code_or_message, name or self.NAME, message)
        for key, value in kwargs.items():
            setattr(self, key, value)


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


@_code(2, "CORRUPT_MESSAGE")
class CorruptRecordError(CodecError, _ClientSideBrokerError):
    """A record batch failed validation (length, count, magic or CRC): the codec's (with
    ``field`` and ``offset``) or a broker's CORRUPT_MESSAGE (2; Java's
    CorruptRecordException, retriable: a flip in transit may not recur)."""

    def __init__(self, code_or_message: int | str = "", name: str | None = None,
                 message: str | None = None, *, field: str | None = None, offset: int | None = None):
        _ClientSideBrokerError.__init__(self, code_or_message, name, message)
        self.field = field
        self.offset = offset


class FrameError(CodecError):
    """A size-prefixed frame was negative or above the receiver's limit."""


class ProtocolError(KafkaError):
    """A request could not be encoded or a response could not be decoded."""


class UnsupportedVersionError(ProtocolError):
    """No API version is supported by both kproducer and the broker."""

    fatal = True


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
    record within ``delivery.timeout.ms``, a future's ``result(timeout)`` (Java's
    TimeoutException; retriable). The subclasses say which wait."""

    retriable = True
    abortable = True


class MetadataTimeoutError(KafkaTimeoutError):
    """The topic (or the partition asked for) was not in the metadata within
    ``max.block.ms``: the record's future fails with it."""


class BufferExhaustedError(KafkaTimeoutError):
    """``buffer.memory`` had no room for the record within ``max.block.ms`` (Java's
    BufferExhaustedException): the record's future fails with it."""


class DeliveryTimeoutError(KafkaTimeoutError):
    """The record was not acknowledged within ``delivery.timeout.ms`` of its send(),
    retries included (Java's TimeoutException from the accumulator or the Sender)."""


class NetworkError(KafkaError):
    """A connection could not be opened, failed, or was used in a way its
    state does not allow (a second send while one is in flight).

    ``conn_id`` is the selector's connection id and ``errno`` the OS error
    number (``errno.ECONNREFUSED``); either may be ``None``.
    """

    retriable = True

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


@_code(10, "MESSAGE_TOO_LARGE")
class RecordTooLargeError(_ClientSideBrokerError, ValueError):
    """A record larger than ``max.request.size`` or ``buffer.memory`` (checked by the
    producer itself, as not every broker enforces it: the message says the size and the
    limit), or a broker's MESSAGE_TOO_LARGE (10) for a record alone in its batch (Java's
    RecordTooLargeException). Either way ``code`` is 10."""


class AuthenticationError(KafkaError):
    """SASL authentication with a broker failed: wrong credentials, a mechanism the
    broker does not enable, or a server that could not prove it knows the password
    (a SCRAM server signature that does not match).

    Not retried: records waiting for that broker fail with it and metadata waits
    raise it (Java's AuthenticationException). Messages never contain credentials.
    """

    fatal = True


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

    fatal = True


class InvalidTxnStateError(TransactionError):
    """A transactional call in the wrong order (``send()`` outside a transaction,
    ``commit_transaction()`` without ``begin_transaction()``, ...) or a broker's
    INVALID_TXN_STATE. The message names the call and the state."""


class TransactionAbortableError(TransactionError):
    """Something inside the transaction failed (a record, AddPartitionsToTxn, an offset
    commit): the transaction cannot commit; ``abort_transaction()`` and begin again.
    ``commit_transaction()`` and ``send()`` raise it until then. ``__cause__`` is the
    original error."""

    abortable = True


class TransactionFatalError(TransactionError):
    """The transactional producer cannot go on (an authorization failure, an unexpected
    broker answer): every later call raises it; only ``close()`` remains."""

    fatal = True


class TransactionTimeoutError(TransactionError, KafkaTimeoutError):
    """A transactional call did not finish within its timeout (``max.block.ms`` by
    default). The operation goes on in the background: calling the same method again
    waits for it (Java's TimeoutException from initTransactions/commitTransaction)."""

    abortable = False


class TransactionAbortedError(TransactionError):
    """The error a record's future gets when its transaction was aborted before the
    record was sent."""


class PurgedError(KafkaError):
    """The record was purged by ``purge()`` before it was acknowledged (librdkafka's
    ``_PURGE_QUEUE`` and ``_PURGE_INFLIGHT``): ``in_flight`` is True when its request was
    sent and its answer will be ignored, False when it was still queued. Not retriable by
    the producer: the application decides whether to send it again."""

    abortable = True

    def __init__(self, message: str, *, in_flight: bool = False):
        super().__init__(message)
        self.in_flight = in_flight


# -- broker codes with Java's exception classes (broker_error picks them) ----------------------

@_code(3, "UNKNOWN_TOPIC_OR_PARTITION")
class UnknownTopicOrPartitionError(BrokerResponseError):
    """The broker does not host the topic or partition (Java's UnknownTopicOrPartitionException)."""


@_code(5, "LEADER_NOT_AVAILABLE")
class LeaderNotAvailableError(BrokerResponseError):
    """The partition has no leader right now, as during an election (Java's LeaderNotAvailableException)."""


@_code(6, "NOT_LEADER_OR_FOLLOWER")
class NotLeaderOrFollowerError(BrokerResponseError):
    """The broker is not the partition's leader: the producer's metadata is stale (Java's
    NotLeaderOrFollowerException)."""


@_code(7, "REQUEST_TIMED_OUT")
class RequestTimedOutError(BrokerResponseError, KafkaTimeoutError):
    """The broker did not replicate the records within the request's timeout (Java's
    TimeoutException for REQUEST_TIMED_OUT); also a KafkaTimeoutError."""


@_code(17, "INVALID_TOPIC_EXCEPTION")
class InvalidTopicError(BrokerResponseError):
    """The broker refuses the topic's name, or writes to it (an internal topic) (Java's InvalidTopicException)."""


@_code(18, "RECORD_LIST_TOO_LARGE")
class RecordBatchTooLargeError(BrokerResponseError):
    """The batch is larger than the broker's segment size (Java's RecordBatchTooLargeException)."""


@_code(19, "NOT_ENOUGH_REPLICAS")
class NotEnoughReplicasError(BrokerResponseError):
    """Fewer in-sync replicas than ``min.insync.replicas``: nothing was written (Java's
    NotEnoughReplicasException)."""


@_code(20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND")
class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    """Written to the leader's log, but too few replicas remained in sync to acknowledge it
    (Java's NotEnoughReplicasAfterAppendException): a retry may duplicate it without idempotence."""


@_code(21, "INVALID_REQUIRED_ACKS")
class InvalidRequiredAcksError(BrokerResponseError):
    """The broker refuses the ``acks`` value (Java's InvalidRequiredAcksException)."""


@_code(29, "TOPIC_AUTHORIZATION_FAILED")
class TopicAuthorizationFailedError(BrokerResponseError):
    """The principal may not write to the topic (Java's TopicAuthorizationException)."""


@_code(31, "CLUSTER_AUTHORIZATION_FAILED")
class ClusterAuthorizationFailedError(BrokerResponseError):
    """The principal lacks a cluster permission it needs, IdempotentWrite for an idempotent
    producer (Java's ClusterAuthorizationException); fatal."""


@_code(32, "INVALID_TIMESTAMP")
class InvalidTimestampError(BrokerResponseError):
    """The record's timestamp is outside the topic's ``message.timestamp.*.max.ms`` (Java's
    InvalidTimestampException)."""


@_code(44, "POLICY_VIOLATION")
class PolicyViolationError(BrokerResponseError):
    """A broker policy refused the request (Java's PolicyViolationException)."""


@_code(45, "OUT_OF_ORDER_SEQUENCE_NUMBER")
class OutOfOrderSequenceError(BrokerResponseError):
    """The broker received a sequence number out of order: records may be lost between
    (Java's OutOfOrderSequenceException)."""


@_code(46, "DUPLICATE_SEQUENCE_NUMBER")
class DuplicateSequenceError(BrokerResponseError):
    """The broker has the batch already (Java's DuplicateSequenceException)."""


@_code(47, "INVALID_PRODUCER_EPOCH")
class InvalidProducerEpochError(BrokerResponseError):
    """The producer's epoch is older than the broker's (Java's InvalidProducerEpochException)."""


@_code(49, "INVALID_PRODUCER_ID_MAPPING")
class InvalidProducerIdMappingError(BrokerResponseError):
    """The transactional id's producer id is not the one used (Java's InvalidPidMappingException)."""


@_code(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    """The principal may not use the ``transactional.id`` (Java's
    TransactionalIdAuthorizationException); fatal."""


@_code(56, "KAFKA_STORAGE_ERROR")
class KafkaStorageError(BrokerResponseError):
    """The replica's log directory is offline (Java's KafkaStorageException)."""


@_code(59, "UNKNOWN_PRODUCER_ID")
class UnknownProducerIdError(BrokerResponseError):
    """The broker no longer knows the producer id (its records were deleted by retention)
    (Java's UnknownProducerIdException)."""


@_code(76, "UNSUPPORTED_COMPRESSION_TYPE")
class UnsupportedCompressionTypeError(BrokerResponseError):
    """The broker cannot read the batch's compression codec (Java's UnsupportedCompressionTypeException)."""


@_code(87, "INVALID_RECORD")
class InvalidRecordError(BrokerResponseError):
    """The broker refused a record of the batch, as a compacted topic refuses one without a
    key (Java's InvalidRecordException); the whole batch fails."""


@_code(89, "THROTTLING_QUOTA_EXCEEDED")
class ThrottlingQuotaExceededError(BrokerResponseError):
    """A quota refused the request (Java's ThrottlingQuotaExceededException)."""
