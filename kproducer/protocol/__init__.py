"""Kafka wire protocol for the requests a producer needs (pure Python).

* :mod:`.primitives` - bounds-checked :class:`Reader`, :class:`Writer`, varints, framing
* :mod:`.schema` - declarative :class:`Field` / :class:`Message` schemas and the codec
* :mod:`.messages` - ApiVersions, Metadata, Produce, InitProducerId, CreateTopics,
  SaslHandshake, SaslAuthenticate
* :mod:`.versions` - API keys, ``SUPPORTED_VERSIONS``, :func:`pick_version`
* :mod:`.errors_table` - Kafka error codes, names and retriability

This package imports nothing compiled and does not rely on ``kproducer``'s own
``__init__``, so it can be used (and tested) before the C codec is built.
"""

from .errors_table import (ERRORS, ErrorCode, ErrorInfo, broker_error, error_info, error_name,
                           is_invalid_metadata, is_retriable, raise_for_code)
from .messages import (DEFAULT_CLIENT_ID, REQUESTS, RESPONSES, STRUCTS, ApiVersionsRequest,
                       ApiVersionsResponse, CreatableReplicaAssignment, CreatableTopic,
                       CreatableTopicConfig, CreateTopicsRequest, CreateTopicsResponse,
                       InitProducerIdRequest, InitProducerIdResponse, MetadataRequest,
                       MetadataRequestTopic, MetadataResponse, PartitionProduceData,
                       ProduceRequest, ProduceResponse, SaslAuthenticateRequest,
                       SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
                       TopicProduceData, decode_response, encode_response,
                       encode_request, peek_correlation_id, request_class,
                       request_header_version, response_header_version)
from .primitives import Reader, Writer, frame
from .versions import (API_NAMES, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID, METADATA,
                       PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE, SUPPORTED_VERSIONS, api_name,
                       pick_version, pick_versions)

__all__ = [
    "ERRORS", "ErrorCode", "ErrorInfo", "broker_error", "error_info", "error_name",
    "is_invalid_metadata", "is_retriable", "raise_for_code",
    "DEFAULT_CLIENT_ID", "REQUESTS", "RESPONSES", "STRUCTS",
    "ApiVersionsRequest", "ApiVersionsResponse", "MetadataRequest", "MetadataRequestTopic",
    "MetadataResponse", "ProduceRequest", "TopicProduceData", "PartitionProduceData",
    "ProduceResponse", "InitProducerIdRequest", "InitProducerIdResponse",
    "CreateTopicsRequest", "CreatableTopic", "CreatableReplicaAssignment",
    "CreatableTopicConfig", "CreateTopicsResponse",
    "SaslHandshakeRequest", "SaslHandshakeResponse", "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "decode_response", "encode_request", "encode_response", "peek_correlation_id", "request_class",
    "request_header_version", "response_header_version",
    "Reader", "Writer", "frame",
    "API_NAMES", "API_VERSIONS", "CREATE_TOPICS", "INIT_PRODUCER_ID", "METADATA", "PRODUCE",
    "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "SUPPORTED_VERSIONS", "api_name",
    "pick_version", "pick_versions",
]
