"""The Kafka messages a producer speaks, each described once as a schema.

Field names, types, version ranges, nullability, tags and defaults are taken
from Apache Kafka's ``clients/src/main/resources/common/message/*.json`` specs
(newest names, so ``ProduceRequest.topic_data[].partition_data[].index`` and
``ProduceResponse.responses[].partition_responses[].base_offset`` at every
version: the wire layout of a field never depended on its JSON name).

Requests are dataclasses built from keyword arguments (nested items may be
dataclass instances or plain dicts)::

    req = MetadataRequest(topics=[MetadataRequestTopic(name="t")])
    payload = req.encode(version=12, correlation_id=7, client_id="me")
    framed = req.encode_framed(12, 7)          # with the 4-byte size prefix

Responses are decoded from a frame payload (header + body, no size prefix)::

    resp = ProduceResponse.decode(9, payload)  # resp.correlation_id is set
    resp.responses[0].partition_responses[0].base_offset

Headers (``RequestHeader.json`` / ``ResponseHeader.json``): requests use header
v2 (with tagged fields) in flexible versions and v1 otherwise; responses use v1
in flexible versions and v0 otherwise, except ApiVersions responses, which are
always v0 so a client can read them before it knows what the broker speaks.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Optional, Tuple, Type

from ..errors import ProtocolError, UnsupportedVersionError
from . import versions as _v
from .primitives import Reader, Writer, frame
from .schema import Field as F
from .schema import Message, Struct

DEFAULT_CLIENT_ID = "kproducer"
_UNSUPPORTED_VERSION = 35

# --------------------------------------------------------------------------
# Headers
# --------------------------------------------------------------------------

REQUEST_HEADER = Struct("RequestHeader", [
    F("RequestApiKey", "int16", "0+"),
    F("RequestApiVersion", "int16", "0+"),
    F("CorrelationId", "int32", "0+"),
    # Always the old int16-length string, even in header v2: old brokers must
    # be able to read the header of any ApiVersions request.
    F("ClientId", "string", "1+", nullable="1+", ignorable=True, flexible="none", default=None),
])
RequestHeader = REQUEST_HEADER.cls

RESPONSE_HEADER = Struct("ResponseHeader", [
    F("CorrelationId", "int32", "0+"),
])


def request_header_version(api_key: int, version: int) -> int:
    return 2 if REQUESTS[api_key].SCHEMA.is_flexible(version) else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == _v.API_VERSIONS:
        return 0
    return 1 if RESPONSES[api_key].SCHEMA.is_flexible(version) else 0


# --------------------------------------------------------------------------
# Methods attached to the generated request / response classes
# --------------------------------------------------------------------------

def encode_request(request, version: int, correlation_id: int = 0,
                   client_id: Optional[str] = DEFAULT_CLIENT_ID) -> bytes:
    """Header + body of ``request`` at ``version``, without the size prefix."""
    schema: Message = request.SCHEMA
    schema.check_version(version)
    flexible = schema.is_flexible(version)
    w = Writer()
    hv = 2 if flexible else 1
    REQUEST_HEADER.encode_into(
        w, {"request_api_key": schema.api_key, "request_api_version": version,
            "correlation_id": correlation_id, "client_id": client_id},
        hv, hv >= 2)
    schema.encode_into(w, request, version, flexible)
    return w.getvalue()


def _encode(self, version: int, correlation_id: int = 0,
            client_id: Optional[str] = DEFAULT_CLIENT_ID) -> bytes:
    """Encode header + body at ``version`` (no size prefix)."""
    return encode_request(self, version, correlation_id, client_id)


def _encode_framed(self, version: int, correlation_id: int = 0,
                   client_id: Optional[str] = DEFAULT_CLIENT_ID) -> bytes:
    """Encode header + body at ``version`` with the 4-byte size prefix."""
    return frame(encode_request(self, version, correlation_id, client_id))


def read_response_header(api_key: int, version: int, reader: Reader) -> int:
    """Read the response header for ``api_key``/``version``; return the correlation id."""
    hv = response_header_version(api_key, version)
    correlation_id = reader.int32("ResponseHeader.CorrelationId")
    if hv >= 1:
        reader.skip_tagged_fields("ResponseHeader._tagged_fields")
    return correlation_id


_unpack_cid = struct.Struct(">i").unpack_from


def peek_correlation_id(payload) -> int:
    """Correlation id of a response payload (its first 4 bytes, in every header version)."""
    if len(payload) >= 4:       # every response read: one call, no Reader
        return _unpack_cid(payload)[0]
    return Reader(payload).int32("ResponseHeader.CorrelationId")   # raises, naming the field


def decode_response(api_key: int, version: int, payload, *, strict: bool = True):
    """Decode a response payload (header + body, no size prefix).

    Returns the body dataclass with ``correlation_id`` set from the header.
    ``strict`` rejects trailing bytes after the body. Raises
    :class:`~kproducer.errors.ProtocolDecodeError` on malformed input.
    """
    return decode_response_lenient(api_key, version, payload, strict=strict)[0]


def encode_response(api_key: int, version: int, body, correlation_id: int) -> bytes:
    """A response payload (header + body, no size prefix): what a broker writes. kproducer
    sends none; the test brokers, gateways and proxies do, and the codec is symmetric."""
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise UnsupportedVersionError(f"kproducer has no encoder for API key {api_key}")
    schema: Message = cls.SCHEMA
    schema.check_version(version)
    w = Writer()
    w.int32(correlation_id)
    if response_header_version(api_key, version) >= 1:
        w.empty_tagged_fields()
    return bytes(w.getvalue()) + schema.encode_body(body, version)


def decode_response_lenient(api_key: int, version: int, payload, *, strict: bool = False):
    """Like :func:`decode_response`, but bytes after the last field this version defines are
    ignored, as Java and librdkafka ignore them (a broker of another implementation may
    add some); returns ``(body, how many bytes were ignored)``. Truncated or corrupt
    fields still raise."""
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise UnsupportedVersionError(f"kproducer has no decoder for API key {api_key}")
    schema: Message = cls.SCHEMA
    schema.check_version(version)
    r = Reader(payload)
    correlation_id = read_response_header(api_key, version, r)
    body_start = r.pos
    try:
        obj = schema.decode_body(r, version, strict=strict)
    except ProtocolError as exc:
        if api_key != _v.API_VERSIONS or version == 0:
            raise
        obj, r = _api_versions_fallback(schema, payload, body_start, exc)
    obj.correlation_id = correlation_id
    return obj, r.end - r.pos


def _api_versions_fallback(schema, payload, body_start: int, exc):
    """KIP-511: a broker that does not support our ApiVersions version answers
    UNSUPPORTED_VERSION, in a v0 body (Apache Kafka) or in one that is neither v0 nor ours
    (librdkafka's mock: the error code, then one entry laid out as the request's version).
    As librdkafka does, the error code is read first: when it is UNSUPPORTED_VERSION the
    answer stands whatever follows, with the versions a v0 reading finds (none when it
    finds nothing readable), and the client retries at a lower version. Any other reading
    that fails is the failure it is: a truncated v1+ response is still reported as
    truncated."""
    r = Reader(payload, body_start)
    if r.end - r.pos < 2 or r.int16("ApiVersionsResponse.ErrorCode") != _UNSUPPORTED_VERSION:
        raise exc from None
    r = Reader(payload, body_start)
    try:
        return schema.decode_body(r, 0, strict=False), r
    except ProtocolError:
        obj = schema.cls(error_code=_UNSUPPORTED_VERSION)
        r = Reader(payload, body_start)
        r.pos = r.end
        return obj, r


def _decode(cls, version: int, payload, *, strict: bool = True):
    """Decode header + body (no size prefix); sets ``correlation_id``."""
    return decode_response(cls.API_KEY, version, payload, strict=strict)


def _decode_body(cls, version: int, body, *, strict: bool = True):
    """Decode only the body (no header)."""
    return cls.SCHEMA.decode_body(body, version, strict=strict)


_REQUEST_NS = {"encode": _encode, "encode_framed": _encode_framed}
_RESPONSE_NS = {"decode": classmethod(_decode), "decode_body": classmethod(_decode_body)}
_RESPONSE_EXTRA = (("correlation_id", int, -1),)


def _request(name, api_key, valid, flexible, fields):
    return Message(name, api_key=api_key, kind="request", valid=valid, flexible=flexible,
                   fields=fields, namespace=_REQUEST_NS).cls


def _response(name, api_key, valid, flexible, fields, extra_ns=None):
    ns = dict(_RESPONSE_NS)
    ns.update(extra_ns or {})
    return Message(name, api_key=api_key, kind="response", valid=valid, flexible=flexible,
                   fields=fields, extra_fields=_RESPONSE_EXTRA, namespace=ns).cls


# --------------------------------------------------------------------------
# ApiVersions (key 18)
# --------------------------------------------------------------------------

ApiVersionsRequest = _request("ApiVersionsRequest", _v.API_VERSIONS, "0-4", "3+", [
    # Brokers validate these in v3+ against [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
    F("ClientSoftwareName", "string", "3+", ignorable=True),
    F("ClientSoftwareVersion", "string", "3+", ignorable=True),
])


def _version_ranges(self) -> Dict[int, Tuple[int, int]]:
    """``{api_key: (min_version, max_version)}`` as advertised by the broker."""
    return {k.api_key: (k.min_version, k.max_version) for k in self.api_keys}


ApiVersionsResponse = _response("ApiVersionsResponse", _v.API_VERSIONS, "0-4", "3+", [
    F("ErrorCode", "int16", "0+"),
    F("ApiKeys", "[]ApiVersion", "0+", fields=[
        F("ApiKey", "int16", "0+"),
        F("MinVersion", "int16", "0+"),
        F("MaxVersion", "int16", "0+"),
    ]),
    F("ThrottleTimeMs", "int32", "1+", ignorable=True),
    F("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, tagged="3+", ignorable=True, fields=[
        F("Name", "string", "3+"),
        F("MinVersion", "int16", "3+"),
        F("MaxVersion", "int16", "3+"),
    ]),
    F("FinalizedFeaturesEpoch", "int64", "3+", tag=1, tagged="3+", default=-1, ignorable=True),
    F("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, tagged="3+", ignorable=True, fields=[
        F("Name", "string", "3+"),
        F("MaxVersionLevel", "int16", "3+"),
        F("MinVersionLevel", "int16", "3+"),
    ]),
    F("ZkMigrationReady", "bool", "3+", tag=3, tagged="3+", default=False, ignorable=True),
], extra_ns={"version_ranges": _version_ranges})

# --------------------------------------------------------------------------
# Metadata (key 3)
# --------------------------------------------------------------------------

MetadataRequest = _request("MetadataRequest", _v.METADATA, "0-12", "9+", [
    # v0: an empty array means all topics; v1+: null means all, empty means none.
    F("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        F("TopicId", "uuid", "10+", ignorable=True),
        F("Name", "string", "0+", nullable="10+"),
    ]),
    F("AllowAutoTopicCreation", "bool", "4+", default=True),
    F("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    F("IncludeTopicAuthorizedOperations", "bool", "8+"),
])

MetadataResponse = _response("MetadataResponse", _v.METADATA, "0-12", "9+", [
    F("ThrottleTimeMs", "int32", "3+", ignorable=True),
    F("Brokers", "[]MetadataResponseBroker", "0+", fields=[
        F("NodeId", "int32", "0+"),
        F("Host", "string", "0+"),
        F("Port", "int32", "0+"),
        F("Rack", "string", "1+", nullable="1+", ignorable=True, default=None),
    ]),
    F("ClusterId", "string", "2+", nullable="2+", ignorable=True, default=None),
    F("ControllerId", "int32", "1+", default=-1, ignorable=True),
    F("Topics", "[]MetadataResponseTopic", "0+", fields=[
        F("ErrorCode", "int16", "0+"),
        F("Name", "string", "0+", nullable="12+"),
        F("TopicId", "uuid", "10+", ignorable=True),
        F("IsInternal", "bool", "1+", default=False, ignorable=True),
        F("Partitions", "[]MetadataResponsePartition", "0+", fields=[
            F("ErrorCode", "int16", "0+"),
            F("PartitionIndex", "int32", "0+"),
            F("LeaderId", "int32", "0+"),
            F("LeaderEpoch", "int32", "7+", default=-1, ignorable=True),
            F("ReplicaNodes", "[]int32", "0+"),
            F("IsrNodes", "[]int32", "0+"),
            F("OfflineReplicas", "[]int32", "5+", ignorable=True),
        ]),
        F("TopicAuthorizedOperations", "int32", "8+", default=-2147483648),
    ]),
    F("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
])

# --------------------------------------------------------------------------
# Produce (key 0)
# --------------------------------------------------------------------------

# Versions 0-2 carry message format v0/v1; kproducer only writes record batch
# v2, introduced with Produce v3, so the schemas start there.
ProduceRequest = _request("ProduceRequest", _v.PRODUCE, "3-11", "9+", [
    F("TransactionalId", "string", "3+", nullable="3+", default=None),
    F("Acks", "int16", "0+"),
    F("TimeoutMs", "int32", "0+"),
    F("TopicData", "[]TopicProduceData", "0+", fields=[
        F("Name", "string", "0+"),
        F("PartitionData", "[]PartitionProduceData", "0+", fields=[
            F("Index", "int32", "0+"),
            # Opaque record batch bytes (bytes, bytearray or memoryview).
            F("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

ProduceResponse = _response("ProduceResponse", _v.PRODUCE, "3-11", "9+", [
    F("Responses", "[]TopicProduceResponse", "0+", fields=[
        F("Name", "string", "0+"),
        F("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=[
            F("Index", "int32", "0+"),
            F("ErrorCode", "int16", "0+"),
            F("BaseOffset", "int64", "0+"),
            F("LogAppendTimeMs", "int64", "2+", default=-1, ignorable=True),
            F("LogStartOffset", "int64", "5+", default=-1, ignorable=True),
            F("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", ignorable=True, fields=[
                F("BatchIndex", "int32", "8+"),
                F("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
            ]),
            F("ErrorMessage", "string", "8+", nullable="8+", default=None, ignorable=True),
            F("CurrentLeader", "LeaderIdAndEpoch", "10+", tag=0, tagged="10+", ignorable=True, fields=[
                F("LeaderId", "int32", "10+", default=-1),
                F("LeaderEpoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    F("ThrottleTimeMs", "int32", "1+", default=0, ignorable=True),
    F("NodeEndpoints", "[]NodeEndpoint", "10+", tag=0, tagged="10+", ignorable=True, fields=[
        F("NodeId", "int32", "10+"),
        F("Host", "string", "10+"),
        F("Port", "int32", "10+"),
        F("Rack", "string", "10+", nullable="10+", default=None),
    ]),
])

# --------------------------------------------------------------------------
# InitProducerId (key 22)
# --------------------------------------------------------------------------

InitProducerIdRequest = _request("InitProducerIdRequest", _v.INIT_PRODUCER_ID, "0-5", "2+", [
    F("TransactionalId", "string", "0+", nullable="0+", default=None),
    F("TransactionTimeoutMs", "int32", "0+"),
    # v3+ (KIP-360): an existing id/epoch asks the broker to bump the epoch.
    F("ProducerId", "int64", "3+", default=-1),
    F("ProducerEpoch", "int16", "3+", default=-1),
])

InitProducerIdResponse = _response("InitProducerIdResponse", _v.INIT_PRODUCER_ID, "0-5", "2+", [
    F("ThrottleTimeMs", "int32", "0+", ignorable=True),
    F("ErrorCode", "int16", "0+"),
    F("ProducerId", "int64", "0+", default=-1),
    F("ProducerEpoch", "int16", "0+"),
])

# --------------------------------------------------------------------------
# CreateTopics (key 19)
# --------------------------------------------------------------------------

CreateTopicsRequest = _request("CreateTopicsRequest", _v.CREATE_TOPICS, "0-7", "5+", [
    F("Topics", "[]CreatableTopic", "0+", fields=[
        F("Name", "string", "0+"),
        F("NumPartitions", "int32", "0+"),
        F("ReplicationFactor", "int16", "0+"),
        F("Assignments", "[]CreatableReplicaAssignment", "0+", fields=[
            F("PartitionIndex", "int32", "0+"),
            F("BrokerIds", "[]int32", "0+"),
        ]),
        F("Configs", "[]CreatableTopicConfig", "0+", fields=[
            F("Name", "string", "0+"),
            F("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    F("timeoutMs", "int32", "0+", default=60000),
    F("validateOnly", "bool", "1+", default=False),
])

CreateTopicsResponse = _response("CreateTopicsResponse", _v.CREATE_TOPICS, "0-7", "5+", [
    F("ThrottleTimeMs", "int32", "2+", ignorable=True),
    F("Topics", "[]CreatableTopicResult", "0+", fields=[
        F("Name", "string", "0+"),
        F("TopicId", "uuid", "7+", ignorable=True),
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "1+", nullable="0+", default=None, ignorable=True),
        F("TopicConfigErrorCode", "int16", "5+", tag=0, tagged="5+", ignorable=True),
        F("NumPartitions", "int32", "5+", default=-1, ignorable=True),
        F("ReplicationFactor", "int16", "5+", default=-1, ignorable=True),
        F("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", ignorable=True, fields=[
            F("Name", "string", "5+"),
            F("Value", "string", "5+", nullable="5+"),
            F("ReadOnly", "bool", "5+"),
            F("ConfigSource", "int8", "5+", default=-1, ignorable=True),
            F("IsSensitive", "bool", "5+"),
        ]),
    ]),
])

# --------------------------------------------------------------------------
# SaslHandshake (key 17) and SaslAuthenticate (key 36)
# --------------------------------------------------------------------------

# Handshake v1 means "the SASL tokens follow in SaslAuthenticate requests"; after a
# v0 handshake they travel as bare size-prefixed frames (the pre-KIP-152 form).
SaslHandshakeRequest = _request("SaslHandshakeRequest", _v.SASL_HANDSHAKE, "0-1", "none", [
    F("Mechanism", "string", "0+"),
])

SaslHandshakeResponse = _response("SaslHandshakeResponse", _v.SASL_HANDSHAKE, "0-1", "none", [
    F("ErrorCode", "int16", "0+"),
    F("Mechanisms", "[]string", "0+"),
])

SaslAuthenticateRequest = _request("SaslAuthenticateRequest", _v.SASL_AUTHENTICATE, "0-2", "2+", [
    F("AuthBytes", "bytes", "0+"),
])

SaslAuthenticateResponse = _response("SaslAuthenticateResponse", _v.SASL_AUTHENTICATE, "0-2", "2+", [
    F("ErrorCode", "int16", "0+"),
    F("ErrorMessage", "string", "0+", nullable="0+", default=None),
    F("AuthBytes", "bytes", "0+"),
    F("SessionLifetimeMs", "int64", "1+", default=0, ignorable=True),
])

# --------------------------------------------------------------------------
# Transactions: FindCoordinator (10), AddPartitionsToTxn (24), AddOffsetsToTxn (25),
# EndTxn (26), TxnOffsetCommit (28)
# --------------------------------------------------------------------------

# KeyType: 0 group, 1 transaction. v4 (KIP-699) batches keys.
FindCoordinatorRequest = _request("FindCoordinatorRequest", _v.FIND_COORDINATOR, "0-4", "3+", [
    F("Key", "string", "0-3"),
    F("KeyType", "int8", "1+", default=0),
    F("CoordinatorKeys", "[]string", "4+"),
])

FindCoordinatorResponse = _response("FindCoordinatorResponse", _v.FIND_COORDINATOR, "0-4", "3+", [
    F("ThrottleTimeMs", "int32", "1+", ignorable=True),
    F("ErrorCode", "int16", "0-3"),
    F("ErrorMessage", "string", "1-3", nullable="1-3", ignorable=True, default=None),
    F("NodeId", "int32", "0-3"),
    F("Host", "string", "0-3"),
    F("Port", "int32", "0-3"),
    F("Coordinators", "[]Coordinator", "4+", fields=[
        F("Key", "string", "4+"),
        F("NodeId", "int32", "4+"),
        F("Host", "string", "4+"),
        F("Port", "int32", "4+"),
        F("ErrorCode", "int16", "4+"),
        F("ErrorMessage", "string", "4+", nullable="4+", ignorable=True, default=None),
    ]),
])

AddPartitionsToTxnRequest = _request("AddPartitionsToTxnRequest", _v.ADD_PARTITIONS_TO_TXN, "0-3", "3+", [
    F("V3AndBelowTransactionalId", "string", "0-3"),
    F("V3AndBelowProducerId", "int64", "0-3"),
    F("V3AndBelowProducerEpoch", "int16", "0-3"),
    F("V3AndBelowTopics", "[]AddPartitionsToTxnTopic", "0-3", fields=[
        F("Name", "string", "0+"),
        F("Partitions", "[]int32", "0+"),
    ]),
])

AddPartitionsToTxnResponse = _response("AddPartitionsToTxnResponse", _v.ADD_PARTITIONS_TO_TXN, "0-3", "3+", [
    F("ThrottleTimeMs", "int32", "0+", ignorable=True),
    F("ResultsByTopicV3AndBelow", "[]AddPartitionsToTxnTopicResult", "0-3", fields=[
        F("Name", "string", "0+"),
        F("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
            F("PartitionIndex", "int32", "0+"),
            F("PartitionErrorCode", "int16", "0+"),
        ]),
    ]),
])

AddOffsetsToTxnRequest = _request("AddOffsetsToTxnRequest", _v.ADD_OFFSETS_TO_TXN, "0-4", "3+", [
    F("TransactionalId", "string", "0+"),
    F("ProducerId", "int64", "0+"),
    F("ProducerEpoch", "int16", "0+"),
    F("GroupId", "string", "0+"),
])

AddOffsetsToTxnResponse = _response("AddOffsetsToTxnResponse", _v.ADD_OFFSETS_TO_TXN, "0-4", "3+", [
    F("ThrottleTimeMs", "int32", "0+", ignorable=True),
    F("ErrorCode", "int16", "0+"),
])

EndTxnRequest = _request("EndTxnRequest", _v.END_TXN, "0-4", "3+", [
    F("TransactionalId", "string", "0+"),
    F("ProducerId", "int64", "0+"),
    F("ProducerEpoch", "int16", "0+"),
    F("Committed", "bool", "0+"),
])

EndTxnResponse = _response("EndTxnResponse", _v.END_TXN, "0-4", "3+", [
    F("ThrottleTimeMs", "int32", "0+", ignorable=True),
    F("ErrorCode", "int16", "0+"),
])

TxnOffsetCommitRequest = _request("TxnOffsetCommitRequest", _v.TXN_OFFSET_COMMIT, "0-4", "3+", [
    F("TransactionalId", "string", "0+"),
    F("GroupId", "string", "0+"),
    F("ProducerId", "int64", "0+"),
    F("ProducerEpoch", "int16", "0+"),
    F("GenerationId", "int32", "3+", default=-1),
    F("MemberId", "string", "3+", default=""),
    F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    F("Topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=[
        F("Name", "string", "0+"),
        F("Partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=[
            F("PartitionIndex", "int32", "0+"),
            F("CommittedOffset", "int64", "0+"),
            F("CommittedLeaderEpoch", "int32", "2+", default=-1, ignorable=True),
            F("CommittedMetadata", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
])

TxnOffsetCommitResponse = _response("TxnOffsetCommitResponse", _v.TXN_OFFSET_COMMIT, "0-4", "3+", [
    F("ThrottleTimeMs", "int32", "0+", ignorable=True),
    F("Topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=[
        F("Name", "string", "0+"),
        F("Partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=[
            F("PartitionIndex", "int32", "0+"),
            F("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

# --------------------------------------------------------------------------
# Fetch (key 1), v4 only: reading back a small log the producer wrote itself
# --------------------------------------------------------------------------

FetchRequest = _request("FetchRequest", _v.FETCH, "4-4", "none", [
    F("ReplicaId", "int32", "0+", default=-1),
    F("MaxWaitMs", "int32", "0+"),
    F("MinBytes", "int32", "0+"),
    F("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
    F("IsolationLevel", "int8", "4+", default=0),
    F("Topics", "[]FetchTopic", "0+", fields=[
        F("Topic", "string", "0+"),
        F("Partitions", "[]FetchPartition", "0+", fields=[
            F("Partition", "int32", "0+"),
            F("FetchOffset", "int64", "0+"),
            F("PartitionMaxBytes", "int32", "0+"),
        ]),
    ]),
])

FetchResponse = _response("FetchResponse", _v.FETCH, "4-4", "none", [
    F("ThrottleTimeMs", "int32", "1+", ignorable=True),
    F("Responses", "[]FetchableTopicResponse", "0+", fields=[
        F("Topic", "string", "0+"),
        F("Partitions", "[]PartitionData", "0+", fields=[
            F("PartitionIndex", "int32", "0+"),
            F("ErrorCode", "int16", "0+"),
            F("HighWatermark", "int64", "0+"),
            F("LastStableOffset", "int64", "4+", default=-1, ignorable=True),
            F("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+", ignorable=True,
              default=None, fields=[
                F("ProducerId", "int64", "4+"),
                F("FirstOffset", "int64", "4+"),
            ]),
            F("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

# --------------------------------------------------------------------------
# Registries and nested classes
# --------------------------------------------------------------------------

REQUESTS: Dict[int, Type[Any]] = {c.API_KEY: c for c in (
    ApiVersionsRequest, MetadataRequest, ProduceRequest, InitProducerIdRequest, CreateTopicsRequest,
    SaslHandshakeRequest, SaslAuthenticateRequest, FindCoordinatorRequest, AddPartitionsToTxnRequest,
    AddOffsetsToTxnRequest, EndTxnRequest, TxnOffsetCommitRequest, FetchRequest)}
RESPONSES: Dict[int, Type[Any]] = {c.API_KEY: c for c in (
    ApiVersionsResponse, MetadataResponse, ProduceResponse, InitProducerIdResponse, CreateTopicsResponse,
    SaslHandshakeResponse, SaslAuthenticateResponse, FindCoordinatorResponse,
    AddPartitionsToTxnResponse, AddOffsetsToTxnResponse, EndTxnResponse, TxnOffsetCommitResponse,
    FetchResponse)}

#: Every nested struct class by its Kafka name (``"MetadataResponsePartition"``).
STRUCTS: Dict[str, Type[Any]] = {}
for _cls in (*REQUESTS.values(), *RESPONSES.values()):
    for _s in _cls.SCHEMA.nested():
        STRUCTS[_s.name] = _s.cls
del _cls, _s

# Nested request items, for building requests without dicts.
MetadataRequestTopic = STRUCTS["MetadataRequestTopic"]
TopicProduceData = STRUCTS["TopicProduceData"]
PartitionProduceData = STRUCTS["PartitionProduceData"]
CreatableTopic = STRUCTS["CreatableTopic"]
CreatableReplicaAssignment = STRUCTS["CreatableReplicaAssignment"]
CreatableTopicConfig = STRUCTS["CreatableTopicConfig"]
AddPartitionsToTxnTopic = STRUCTS["AddPartitionsToTxnTopic"]
TxnOffsetCommitRequestTopic = STRUCTS["TxnOffsetCommitRequestTopic"]
TxnOffsetCommitRequestPartition = STRUCTS["TxnOffsetCommitRequestPartition"]
FetchTopic = STRUCTS["FetchTopic"]
FetchPartition = STRUCTS["FetchPartition"]


def request_class(api_key: int):
    try:
        return REQUESTS[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"kproducer has no encoder for API key {api_key}") from None


def _check_tables() -> None:
    # SUPPORTED_VERSIONS must agree with the schemas, or negotiation would pick
    # a version the codec then refuses.
    for api_key, (lo, hi) in _v.SUPPORTED_VERSIONS.items():
        for cls in (REQUESTS[api_key], RESPONSES[api_key]):
            valid = cls.SCHEMA.valid
            if not (valid.lo <= lo and hi <= valid.hi):
                raise AssertionError(f"{cls.__name__} schema {valid!r} does not cover {lo}-{hi}")


_check_tables()
