"""The error classes and their flags (kproducer.errors, kproducer.protocol.errors_table):
one factory from a broker code to Java's class, every flag from one table."""

from __future__ import annotations

import pytest

from kproducer import errors as E
from kproducer.protocol.errors_table import ERRORS, ErrorCode, broker_error, error_info


@pytest.mark.parametrize("code,cls", [
    (ErrorCode.CORRUPT_MESSAGE, E.CorruptRecordError),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, E.UnknownTopicOrPartitionError),
    (ErrorCode.LEADER_NOT_AVAILABLE, E.LeaderNotAvailableError),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, E.NotLeaderOrFollowerError),
    (ErrorCode.REQUEST_TIMED_OUT, E.RequestTimedOutError),
    (ErrorCode.MESSAGE_TOO_LARGE, E.RecordTooLargeError),
    (ErrorCode.NOT_ENOUGH_REPLICAS, E.NotEnoughReplicasError),
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.NotEnoughReplicasAfterAppendError),
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, E.TopicAuthorizationFailedError),
    (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, E.ClusterAuthorizationFailedError),
    (ErrorCode.POLICY_VIOLATION, E.PolicyViolationError),
    (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, E.OutOfOrderSequenceError),
    (ErrorCode.INVALID_PRODUCER_EPOCH, E.InvalidProducerEpochError),
    (ErrorCode.UNKNOWN_PRODUCER_ID, E.UnknownProducerIdError),
    (ErrorCode.INVALID_RECORD, E.InvalidRecordError),
])
def test_factory_gives_javas_class(code, cls):
    exc = broker_error(int(code), "events-0")
    assert type(exc) is cls
    assert isinstance(exc, E.BrokerResponseError) and isinstance(exc, E.KafkaError)
    assert exc.code == int(code) and exc.name == code.name
    assert str(exc) == f"{code.name} ({int(code)}): events-0"
    info = error_info(int(code))
    assert (exc.retriable, exc.fatal, exc.abortable) == (info.retriable, info.fatal, info.abortable)


def test_codes_without_a_class_are_plain_broker_errors():
    exc = broker_error(int(ErrorCode.INVALID_REQUEST))
    assert type(exc) is E.BrokerResponseError and exc.name == "INVALID_REQUEST"
    unknown = broker_error(4242)
    assert type(unknown) is E.BrokerResponseError and unknown.name == "UNKNOWN_ERROR_CODE_4242"
    assert (unknown.retriable, unknown.fatal, unknown.abortable) == (False, False, True)


def test_flags_follow_kafkas_table():
    assert broker_error(int(ErrorCode.NOT_LEADER_OR_FOLLOWER)).retriable
    assert broker_error(int(ErrorCode.NOT_ENOUGH_REPLICAS)).retriable
    assert broker_error(int(ErrorCode.CORRUPT_MESSAGE)).retriable          # Java's CorruptRecordException
    assert not broker_error(int(ErrorCode.MESSAGE_TOO_LARGE)).retriable
    assert not broker_error(int(ErrorCode.INVALID_RECORD)).retriable
    for code in (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                 ErrorCode.PRODUCER_FENCED, ErrorCode.UNSUPPORTED_VERSION):
        exc = broker_error(int(code))
        assert exc.fatal and not exc.abortable and not exc.retriable, code
    assert broker_error(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)).abortable
    assert broker_error(int(ErrorCode.TRANSACTION_ABORTABLE)).abortable
    # Every code: fatal and abortable exclude each other; NONE is neither.
    for info in ERRORS.values():
        assert not (info.fatal and info.abortable), info
        assert not (info.fatal and info.retriable), info
    assert not error_info(0).abortable


def test_record_too_large_both_ways():
    own = E.RecordTooLargeError("the record is 5000 bytes when serialized, larger than max.request.size=4096")
    assert str(own).startswith("the record is 5000 bytes")
    assert own.code == 10 and own.name == "MESSAGE_TOO_LARGE"
    assert isinstance(own, ValueError) and isinstance(own, E.BrokerResponseError)
    assert not own.retriable and own.abortable and not own.fatal
    broker = broker_error(10, "t-0")
    assert isinstance(broker, E.RecordTooLargeError) and broker.code == 10


def test_corrupt_record_from_the_codec_and_the_broker():
    codec = E.CorruptRecordError("bad CRC at byte 17", field="CRC", offset=17)
    assert (codec.field, codec.offset, codec.code) == ("CRC", 17, 2)
    assert isinstance(codec, E.CodecError) and isinstance(codec, E.BrokerResponseError)
    broker = broker_error(2, "t-1")
    assert isinstance(broker, E.CorruptRecordError) and broker.field is None and broker.retriable


def test_timeout_family():
    for cls in (E.MetadataTimeoutError, E.BufferExhaustedError, E.DeliveryTimeoutError,
                E.TransactionTimeoutError, E.RequestTimedOutError):
        assert issubclass(cls, E.KafkaTimeoutError) and issubclass(cls, TimeoutError), cls
    assert E.MetadataTimeoutError("x").retriable and E.DeliveryTimeoutError("x").abortable
    rto = broker_error(7)
    assert isinstance(rto, TimeoutError) and rto.retriable and rto.code == 7
    # A transactional call's timeout goes on in the background: nothing to abort.
    assert not E.TransactionTimeoutError("x").abortable


def test_class_defaults():
    assert (E.KafkaError("x").retriable, E.KafkaError("x").fatal, E.KafkaError("x").abortable) == (False, False, False)
    assert E.NetworkError("x").retriable
    assert E.AuthenticationError("x").fatal and E.SslAuthenticationError("x").fatal
    assert E.ProducerFencedError("x").fatal and E.TransactionFatalError("x").fatal
    assert E.TransactionAbortableError("x").abortable
    p = E.PurgedError("purged", in_flight=True)
    assert p.in_flight and not p.retriable and p.abortable and not p.fatal
    assert not E.PurgedError("purged").in_flight
