"""Kafka error codes: names, which a client may retry, which end a producer, and which
make a transaction abort.

Checked against ``org.apache.kafka.common.protocol.Errors`` (codes -1..137) and
the "Retriable" column of Kafka's generated protocol error table, which is True
exactly when the Java exception extends ``RetriableException``.
``invalid_metadata`` marks codes whose Java exception extends
``InvalidMetadataException``: the client's view of leaders is stale and a
metadata refresh should precede the retry.

``fatal`` marks codes after which the producer cannot go on (Java's TransactionManager
treats them as fatal errors: fenced, not authorized for the cluster or the transactional
id, a version or a SASL exchange the broker does not support); ``abortable`` the codes that,
failing a transactional producer's record or call, leave a transaction to abort and
nothing worse: every code that is not fatal (a retriable one reaches the application only
once the producer gave up retrying it; KIP-1050).

Codes not in the table (a newer broker) are reported as non-retriable, as the
Java client does by mapping them to UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import enum
from typing import Dict, NamedTuple, Optional

from ..errors import BrokerResponseError
from ..errors import broker_error as _broker_error


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133
    GROUP_DELETION_FAILED = 134
    STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED = 135
    PARTITION_OPERATION_IN_PROGRESS = 136
    INVALID_DELETE_PARTITION_COUNT = 137


E = ErrorCode

# Java exceptions extending InvalidMetadataException (itself retriable).
INVALID_METADATA = frozenset({
    E.UNKNOWN_TOPIC_OR_PARTITION, E.LEADER_NOT_AVAILABLE, E.NOT_LEADER_OR_FOLLOWER,
    E.REPLICA_NOT_AVAILABLE, E.NETWORK_EXCEPTION, E.KAFKA_STORAGE_ERROR,
    E.LISTENER_NOT_FOUND, E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH,
    E.PREFERRED_LEADER_NOT_AVAILABLE, E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    E.ELECTION_NOT_NEEDED, E.UNKNOWN_TOPIC_ID, E.INCONSISTENT_TOPIC_ID,
})

# Java exceptions extending RetriableException.
RETRIABLE = INVALID_METADATA | frozenset({
    E.CORRUPT_MESSAGE,            # CorruptRecordException: a bit flip in transit may not recur
    E.REQUEST_TIMED_OUT,
    E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
    E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.NOT_CONTROLLER, E.CONCURRENT_TRANSACTIONS,
    E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH,
    E.OFFSET_NOT_AVAILABLE, E.UNSTABLE_OFFSET_COMMIT, E.THROTTLING_QUOTA_EXCEEDED,
    E.FETCH_SESSION_TOPIC_ID_ERROR,
    E.SHARE_SESSION_NOT_FOUND, E.INVALID_SHARE_SESSION_EPOCH, E.SHARE_SESSION_LIMIT_REACHED,
})


# The producer cannot go on after these (Java's TransactionManager fatal errors, and the
# authentication and version failures every client treats as such).
FATAL = frozenset({
    E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    E.PRODUCER_FENCED, E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_TRANSACTION_TIMEOUT,
    E.UNSUPPORTED_VERSION, E.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    E.UNSUPPORTED_SASL_MECHANISM, E.ILLEGAL_SASL_STATE, E.SASL_AUTHENTICATION_FAILED,
    E.SECURITY_DISABLED,
})


class ErrorInfo(NamedTuple):
    code: int
    name: str
    retriable: bool
    invalid_metadata: bool
    fatal: bool = False
    abortable: bool = False


ERRORS: Dict[int, ErrorInfo] = {
    int(e): ErrorInfo(int(e), e.name, e in RETRIABLE, e in INVALID_METADATA, e in FATAL,
                      e != E.NONE and e not in FATAL)
    for e in ErrorCode
}


def error_info(code: int) -> ErrorInfo:
    """The :class:`ErrorInfo` for ``code``; unknown codes get a synthetic name (not
    retriable, not fatal, abortable, as UNKNOWN_SERVER_ERROR)."""
    info = ERRORS.get(code)
    if info is None:
        info = ErrorInfo(code, f"UNKNOWN_ERROR_CODE_{code}", False, False, False, True)
    return info


def error_name(code: int) -> str:
    return error_info(code).name


def is_retriable(code: int) -> bool:
    return error_info(code).retriable


def is_invalid_metadata(code: int) -> bool:
    return error_info(code).invalid_metadata


def broker_error(code: int, message: Optional[str] = None) -> BrokerResponseError:
    """The exception for ``code``: :func:`kproducer.errors.broker_error` (Java's class for
    the common codes, a :class:`~kproducer.errors.BrokerResponseError` always)."""
    return _broker_error(code, message)


def raise_for_code(code: int, message: Optional[str] = None) -> None:
    """Raise :class:`BrokerResponseError` unless ``code`` is 0 (NONE)."""
    if code:
        raise broker_error(code, message)
