"""Tests of kproducer.protocol and kproducer.testing.

Here, without a broker:

1. primitives - golden varint vectors, round trips (hypothesis), and
   truncated/hostile input raising ProtocolDecodeError that names the field and
   the byte offset;
2. the schema codec - golden request/response bytes written out by hand from
   the JSON specs, round trips of every response at every version, every
   truncation of those, and fuzzing that only ProtocolError ever escapes;
3. BlockingClient against a fake server on a local socket (protocol misbehaviour).

Against a real Tansu broker (ApiVersions, Metadata, CreateTopics, InitProducerId and a
Produce round trip at every version): tests/broker/test_protocol_against_tansu.py."""

from __future__ import annotations

import socket
import struct
import threading
import uuid

import crc32c
import pytest
from _mutation import mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproducer.errors import (BrokerResponseError, ProtocolDecodeError, ProtocolError,
                              UnsupportedVersionError)
from kproducer.protocol import (API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID, METADATA, PRODUCE,
                                REQUESTS, SASL_AUTHENTICATE, SASL_HANDSHAKE, RESPONSES, STRUCTS, SUPPORTED_VERSIONS,
                                ApiVersionsRequest, ApiVersionsResponse, CreateTopicsResponse, ErrorCode,
                                InitProducerIdRequest, InitProducerIdResponse, MetadataRequest,
                                MetadataRequestTopic, MetadataResponse, PartitionProduceData,
                                ProduceRequest, ProduceResponse, Reader, TopicProduceData, Writer,
                                decode_response, error_info, error_name, frame, is_invalid_metadata,
                                is_retriable, pick_version, pick_versions, raise_for_code,
                                request_header_version, response_header_version)
from kproducer.protocol import messages
from kproducer.protocol import primitives as prim
from kproducer.protocol import versions as pv
from kproducer.protocol.schema import Versions, snake_case
from kproducer.testing import BlockingClient

S = STRUCTS
ALL_RESPONSE_VERSIONS = [(k, v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)]


def h(s: str) -> bytes:
    """Hex with spaces and ``|`` separators allowed (for annotated goldens)."""
    return bytes.fromhex(s.replace("|", " "))


# ===========================================================================
# 1. primitives
# ===========================================================================

# Zig-zag varint vectors as in Kafka's ByteUtilsTest (each follows from
# zigzag(n) = (n << 1) ^ (n >> 31), then 7 bits per byte, low group first).
VARINT_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"),
    (1048575, "feff7f"), (-1048576, "ffff7f"), (1048576, "80808001"), (-1048577, "81808001"),
    (134217727, "feffff7f"), (-134217728, "ffffff7f"), (134217728, "8080808001"),
    (-134217729, "8180808001"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
]
VARLONG_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize("value,hexstr", VARINT_VECTORS)
def test_varint_vectors(value, hexstr):
    assert prim.encode_varint(value).hex() == hexstr
    assert prim.decode_varint(bytes.fromhex(hexstr)) == (value, len(hexstr) // 2)
    w = Writer()
    w.varint(value)
    assert w.getvalue().hex() == hexstr
    assert Reader(bytes.fromhex(hexstr)).varint("X") == value


@pytest.mark.parametrize("value,hexstr", VARLONG_VECTORS)
def test_varlong_vectors(value, hexstr):
    assert prim.encode_varlong(value).hex() == hexstr
    assert prim.decode_varlong(bytes.fromhex(hexstr)) == (value, len(hexstr) // 2)


def test_unsigned_varint_vectors():
    # 300 = 0b10_0101100 -> 0xac 0x02 (the protobuf documentation example)
    assert prim.encode_uvarint(300) == b"\xac\x02"
    assert prim.encode_uvarint(0) == b"\x00"
    assert prim.encode_uvarint(127) == b"\x7f"
    assert prim.encode_uvarint(128) == b"\x80\x01"
    assert prim.encode_uvarint(2**32 - 1) == b"\xff\xff\xff\xff\x0f"
    with pytest.raises(ProtocolError):
        prim.encode_uvarint(2**32)
    with pytest.raises(ProtocolError):
        prim.encode_uvarint(-1)
    with pytest.raises(ProtocolError):
        prim.encode_varint(2**31)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_roundtrip(n):
    data = prim.encode_varint(n)
    assert 1 <= len(data) <= 5
    assert prim.decode_varint(data + b"\xff", 0) == (n, len(data))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(n):
    data = prim.encode_varlong(n)
    assert 1 <= len(data) <= 10
    assert prim.decode_varlong(data) == (n, len(data))


@given(st.integers(0, 2**32 - 1), st.binary(max_size=3))
def test_uvarint_roundtrip(n, prefix):
    data = prefix + prim.encode_uvarint(n)
    r = Reader(data, len(prefix))
    assert r.uvarint("X") == n
    assert r.remaining == 0


@given(st.one_of(st.none(), st.text(max_size=200)))
def test_compact_nullable_string_roundtrip(s):
    w = Writer()
    w.compact_nullable_string(s)
    data = w.getvalue()
    if s is None:
        assert data == b"\x00"
    else:
        encoded = s.encode()
        assert data == prim.encode_uvarint(len(encoded) + 1) + encoded
    r = Reader(data)
    assert r.compact_nullable_string("X") == s
    assert r.remaining == 0


@given(st.text(max_size=100), st.binary(max_size=100), st.one_of(st.none(), st.binary(max_size=50)))
def test_string_bytes_roundtrip(s, b, nb):
    w = Writer()
    w.string(s)
    w.compact_string(s)
    w.bytes(b)
    w.compact_bytes(b)
    w.nullable_bytes(nb)
    w.compact_nullable_bytes(nb)
    w.nullable_string(None)
    r = Reader(w.getvalue())
    assert r.string("a") == s
    assert r.compact_string("b") == s
    assert r.bytes("c") == b
    assert r.compact_bytes("d") == b
    assert r.nullable_bytes("e") == nb
    assert r.compact_nullable_bytes("f") == nb
    assert r.nullable_string("g") is None
    r.expect_end("all")


def test_fixed_width_roundtrip_and_range():
    w = Writer()
    w.int8(-128)
    w.int16(32767)
    w.int32(-(2**31))
    w.int64(2**63 - 1)
    w.uint32(0xE3069283)
    w.bool(True)
    u = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    w.uuid(u)
    r = Reader(w.getvalue())
    assert (r.int8("a"), r.int16("b"), r.int32("c"), r.int64("d"), r.uint32("e"), r.bool("f"),
            r.uuid("g")) == (-128, 32767, -(2**31), 2**63 - 1, 0xE3069283, True, u)
    for meth, bad in ((w.int8, 128), (w.int16, -32769), (w.int32, 2**31), (w.int64, 2**63)):
        with pytest.raises(ProtocolError):
            meth(bad)


def test_frame_prefix():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(memoryview(b"")) == b"\x00\x00\x00\x00"


@pytest.mark.parametrize("method,data,offset", [
    ("int8", b"", 0), ("int16", b"\x00", 0), ("int32", b"\x00\x00\x00", 0),
    ("int64", b"\x00" * 7, 0), ("uuid", b"\x00" * 15, 0), ("bool", b"", 0),
    ("string", b"\x00\x05ab", 0), ("compact_string", b"\x06ab", 0),
    ("bytes", b"\x00\x00\x00\x09abc", 0), ("compact_bytes", b"\x0aabc", 0),
    ("uvarint", b"\x80\x80", 0), ("varlong", b"\xff", 0),
])
def test_truncation_names_field_and_offset(method, data, offset):
    prefix = b"\xaa\xbb"  # reads start at byte 2, so offsets are absolute
    r = Reader(prefix + data, 2)
    with pytest.raises(ProtocolDecodeError) as ei:
        getattr(r, method)("Some.Field")
    assert ei.value.field == "Some.Field"
    assert ei.value.offset == 2 + offset
    assert "Some.Field" in str(ei.value) and "byte 2" in str(ei.value)
    assert isinstance(ei.value, ProtocolError)


def test_hostile_lengths_and_varints():
    # Varint longer than 5 bytes: refused without reading further.
    with pytest.raises(ProtocolDecodeError, match="longer than 5 bytes"):
        Reader(b"\x80" * 64).uvarint("Len")
    # 5-byte varint whose value exceeds 32 bits.
    with pytest.raises(ProtocolDecodeError, match="overflows"):
        Reader(b"\xff\xff\xff\xff\x1f").uvarint("Len")
    with pytest.raises(ProtocolDecodeError, match="longer than 10 bytes"):
        Reader(b"\xff" * 11).varlong("TimestampDelta")
    # Null where null is not allowed, and other negative lengths.
    with pytest.raises(ProtocolDecodeError, match="null length"):
        Reader(b"\xff\xff").string("Name")
    with pytest.raises(ProtocolDecodeError, match="negative length"):
        Reader(b"\xff\xfe").nullable_string("Name")
    with pytest.raises(ProtocolDecodeError, match="null length"):
        Reader(b"\x00").compact_string("Name")
    # An array count that cannot fit in the remaining bytes fails at once.
    with pytest.raises(ProtocolDecodeError, match="cannot fit") as ei:
        Reader(b"\x7f\xff\xff\xff\x00\x00").array_length("Topics", False, False, 2)
    assert ei.value.offset == 0
    with pytest.raises(ProtocolDecodeError, match="null array"):
        Reader(b"\xff\xff\xff\xff").array_length("Topics", False, False)
    assert Reader(b"\xff\xff\xff\xff").array_length("Topics", False, True) == -1
    # Invalid UTF-8.
    with pytest.raises(ProtocolDecodeError, match="UTF-8") as ei:
        Reader(b"\x00\x02\xc3\x28").string("Host")
    assert ei.value.offset == 2
    # Skipping a tagged field longer than what is left.
    with pytest.raises(ProtocolDecodeError):
        Reader(b"\x01\x00\x05ab").skip_tagged_fields("Hdr")


def test_reader_accepts_buffer_types():
    data = b"\x00\x00\x00\x2a"
    for buf in (data, bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert Reader(buf).int32("X") == 42
    assert Reader(memoryview(struct.pack(">2i", 7, 8)).cast("i")).int32("X") == 7


# ===========================================================================
# 2. schema codec
# ===========================================================================

def test_snake_case_and_versions():
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("timeoutMs") == "timeout_ms"
    assert snake_case("IsrNodes") == "isr_nodes"
    assert snake_case("ZkMigrationReady") == "zk_migration_ready"
    assert 3 in Versions.parse("3+") and 2 not in Versions.parse("3+")
    assert 10 in Versions.parse("8-10") and 11 not in Versions.parse("8-10")
    assert Versions.parse("none").empty


def test_schemas_cover_supported_versions():
    for api_key, (lo, hi) in SUPPORTED_VERSIONS.items():
        assert REQUESTS[api_key].API_KEY == api_key == RESPONSES[api_key].API_KEY
        for v in (lo, hi):
            REQUESTS[api_key].SCHEMA.check_version(v)
            RESPONSES[api_key].SCHEMA.check_version(v)
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest().encode(2)
    with pytest.raises(UnsupportedVersionError):
        MetadataRequest().encode(13)


def test_header_versions():
    # flexibleVersions: ApiVersions 3+, Metadata 9+, Produce 9+, InitProducerId 2+, CreateTopics 5+
    assert [request_header_version(METADATA, v) for v in (8, 9)] == [1, 2]
    assert [response_header_version(PRODUCE, v) for v in (8, 9)] == [0, 1]
    assert [response_header_version(INIT_PRODUCER_ID, v) for v in (1, 2)] == [0, 1]
    assert [response_header_version(CREATE_TOPICS, v) for v in (4, 5)] == [0, 1]
    # ApiVersions responses always use header v0, requests follow the rule.
    assert [response_header_version(API_VERSIONS, v) for v in (0, 3, 4)] == [0, 0, 0]
    assert request_header_version(API_VERSIONS, 3) == 2


# --- golden requests --------------------------------------------------------
# Written out field by field from RequestHeader.json and the message specs.

def test_golden_api_versions_v0():
    expected = h(
        "0012"          # RequestApiKey 18
        "|0000"         # RequestApiVersion 0
        "|00000001"     # CorrelationId 1
        "|0002 6b70"    # ClientId "kp": int16 length + UTF-8 (header v1)
    )                   # body: v0 has no fields
    assert ApiVersionsRequest().encode(0, 1, "kp") == expected
    assert ApiVersionsRequest().encode_framed(0, 1, "kp") == b"\x00\x00\x00\x0c" + expected


def test_golden_api_versions_v3():
    expected = h(
        "0012 0003 00000007"          # key 18, version 3, correlation 7
        "|0002 6b70"                  # ClientId stays int16-length even in header v2
        "|00"                         # header v2 tagged fields: none
        "|0a 6b70726f6475636572"      # ClientSoftwareName "kproducer": uvarint(9+1)
        "|04 312e30"                  # ClientSoftwareVersion "1.0": uvarint(3+1)
        "|00"                         # body tagged fields: none
    )
    req = ApiVersionsRequest(client_software_name="kproducer", client_software_version="1.0")
    assert req.encode(3, 7, "kp") == expected


def test_golden_metadata_v0_v1_v12():
    # v1, one topic, null client id
    assert MetadataRequest(topics=[MetadataRequestTopic(name="t")]).encode(1, 2, None) == h(
        "0003 0001 00000002 ffff"     # header v1 with ClientId null (-1)
        "|00000001"                   # Topics: int32 count 1
        "|0001 74"                    # Name "t"
    )
    # v0: "all topics" is an empty array (no null arrays before v1)
    assert MetadataRequest(topics=[]).encode(0, 2, None) == h("0003 0000 00000002 ffff | 00000000")
    with pytest.raises(ProtocolError, match="null array"):
        MetadataRequest(topics=None).encode(0)
    # v12 (flexible): compact array, TopicId uuid, compact nullable name, tagged sections
    assert MetadataRequest(topics=[{"name": "t"}], allow_auto_topic_creation=False).encode(12, 3, "kp") == h(
        "0003 000c 00000003 0002 6b70 00"     # header v2
        "|02"                                 # Topics: uvarint(1+1)
        "|00000000000000000000000000000000"   # TopicId: null uuid
        "|02 74"                              # Name "t"
        "|00"                                 # topic tagged fields
        "|00"                                 # AllowAutoTopicCreation false
        "|00"                                 # IncludeTopicAuthorizedOperations false
        "|00"                                 # body tagged fields
    )


PRODUCE_V9_GOLDEN = h(
    "0000 0009 00000003 0002 6b70 00"   # header v2: Produce v9, correlation 3, "kp", no tags
    "|00"                               # TransactionalId: null (compact 0)
    "|ffff"                             # Acks -1
    "|000003e8"                         # TimeoutMs 1000
    "|02"                               # TopicData: 1 item
    "|02 74"                            #   Name "t"
    "|02"                               #   PartitionData: 1 item
    "|00000002"                         #     Index 2
    "|04 010203"                        #     Records: compact bytes, uvarint(3+1)
    "|00"                               #     PartitionProduceData tagged fields
    "|00"                               #   TopicProduceData tagged fields
    "|00"                               # body tagged fields
)

PRODUCE_V8_GOLDEN = h(
    "0000 0008 00000003 0002 6b70"      # header v1
    "|ffff"                             # TransactionalId null: int16 -1
    "|ffff 000003e8"                    # Acks -1, TimeoutMs 1000
    "|00000001 0001 74"                 # TopicData count 1, Name "t"
    "|00000001 00000002"                # PartitionData count 1, Index 2
    "|00000003 010203"                  # Records: int32 length 3
)


@pytest.mark.parametrize("records", [b"\x01\x02\x03", bytearray(b"\x01\x02\x03"),
                                     memoryview(b"\x00\x01\x02\x03")[1:]])
def test_golden_produce(records):
    req = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        TopicProduceData(name="t", partition_data=[PartitionProduceData(index=2, records=records)])])
    assert req.encode(9, 3, "kp") == PRODUCE_V9_GOLDEN
    assert req.encode(8, 3, "kp") == PRODUCE_V8_GOLDEN
    # v10/v11 bodies are identical to v9 (only the version field changes)
    assert req.encode(11, 3, "kp") == PRODUCE_V9_GOLDEN[:2] + b"\x00\x0b" + PRODUCE_V9_GOLDEN[4:]
    # dicts are accepted for nested items
    as_dicts = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        {"name": "t", "partition_data": [{"index": 2, "records": records}]}])
    assert as_dicts.encode(9, 3, "kp") == PRODUCE_V9_GOLDEN


# --- golden responses ---------------------------------------------------------

PRODUCE_RESPONSE_V9 = h(
    "00000005"                  # CorrelationId 5
    "|00"                       # response header v1: no tagged fields
    "|02"                       # Responses: 1 item
    "|02 74"                    #   Name "t"
    "|02"                       #   PartitionResponses: 1 item
    "|00000002"                 #     Index 2
    "|0000"                     #     ErrorCode 0
    "|000000000000002a"         #     BaseOffset 42
    "|ffffffffffffffff"         #     LogAppendTimeMs -1
    "|0000000000000000"         #     LogStartOffset 0
    "|01"                       #     RecordErrors: empty (compact 0+1)
    "|00"                       #     ErrorMessage: null
    "|00"                       #     partition tagged fields
    "|00"                       #   topic tagged fields
    "|00000000"                 # ThrottleTimeMs 0
    "|00"                       # body tagged fields
)


def test_golden_produce_response_v9():
    resp = ProduceResponse.decode(9, PRODUCE_RESPONSE_V9)
    assert resp.correlation_id == 5
    p = resp.responses[0].partition_responses[0]
    assert resp.responses[0].name == "t"
    assert (p.index, p.partition_index, p.error_code, p.base_offset) == (2, 2, 0, 42)
    assert (p.log_append_time_ms, p.log_start_offset, p.record_errors, p.error_message) == (-1, 0, [], None)
    assert resp == decode_response(PRODUCE, 9, PRODUCE_RESPONSE_V9)
    # trailing garbage is refused by default, tolerated when asked
    with pytest.raises(ProtocolDecodeError, match="trailing"):
        ProduceResponse.decode(9, PRODUCE_RESPONSE_V9 + b"\x00")
    ProduceResponse.decode(9, PRODUCE_RESPONSE_V9 + b"\x00", strict=False)


def test_golden_produce_response_v10_tagged_fields():
    data = h(
        "00000006 00"                       # CorrelationId 6, header tags none
        "|02 02 74 02 00000000 0000"        # 1 topic "t", 1 partition, Index 0, ErrorCode 0
        "|0000000000000007"                 # BaseOffset 7
        "|ffffffffffffffff 0000000000000000 01 00"
        "|02"                               # partition tagged fields: 2
        "|00 09 0000006f 00000003 00"       #   tag 0 CurrentLeader (9 bytes): leader 111,
                                            #   epoch 3, and its own (empty) tagged fields
        "|09 03 aabbcc"                     #   tag 9 (unknown, 3 bytes): skipped
        "|00"                               # topic tagged fields
        "|00000000"                         # ThrottleTimeMs
        "|02"                               # body tagged fields: 2
        "|00 15"                            #   tag 0 NodeEndpoints, 21 bytes:
        "|02 0000006f"                      #     1 endpoint, NodeId 111
        "|0a 3132372e302e302e31"            #     Host "127.0.0.1"
        "|00002384 00 00"                   #     Port 9092, Rack null, tags none
        "|05 02 aabb"                       #   tag 5 (unknown): skipped
    )
    resp = ProduceResponse.decode(10, data)
    p = resp.responses[0].partition_responses[0]
    assert p.base_offset == 7
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (111, 3)
    ep = resp.node_endpoints[0]
    assert (ep.node_id, ep.host, ep.port, ep.rack) == (111, "127.0.0.1", 9092, None)
    # A tag whose size lies past the end of the input is a decode error.
    bad = data[:-4] + b"\x05\x7f\xaa\xbb"
    with pytest.raises(ProtocolDecodeError):
        ProduceResponse.decode(10, bad)


def test_golden_api_versions_fallback_to_v0():
    # A broker that does not support our ApiVersions version answers with
    # UNSUPPORTED_VERSION in a v0 body (KIP-511); it must still decode.
    data = h(
        "00000001"                  # CorrelationId (header v0 always)
        "|0023"                     # ErrorCode 35 UNSUPPORTED_VERSION
        "|00000001"                 # ApiKeys: int32 count 1
        "|0012 0000 0002"           # ApiKey 18, MinVersion 0, MaxVersion 2
    )
    resp = ApiVersionsResponse.decode(4, data)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert resp.version_ranges() == {18: (0, 2)}


def test_api_versions_unsupported_in_neither_layout_is_read_by_its_error_code():
    # librdkafka's mock broker answers a v4 request it does not support with the error code,
    # a one-byte count and one entry without tagged fields, then ThrottleTimeMs: neither v4
    # nor v0. As librdkafka does, the error code decides: the client retries at a lower version.
    data = h(
        "00000001"                  # CorrelationId
        "|0023"                     # ErrorCode 35 UNSUPPORTED_VERSION
        "|02"                       # ApiKeys: one byte, count 1 + 1
        "|0012 0000 0002"           # ApiKey 18, MinVersion 0, MaxVersion 2 (no tagged fields)
        "|00000000"                 # ThrottleTimeMs
    )
    resp = ApiVersionsResponse.decode(4, data)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert resp.correlation_id == 1
    # Any other error code in an unreadable body is the decode error it is.
    with pytest.raises(ProtocolDecodeError):
        ApiVersionsResponse.decode(4, data[:4] + b"\x00\x00" + data[6:])
    with pytest.raises(ProtocolDecodeError):
        ApiVersionsResponse.decode(4, data[:5])


def test_bytes_after_the_last_field_are_ignored_when_lenient_and_counted():
    # librdkafka's mock broker adds a byte after MetadataResponse v9+; Java and librdkafka
    # read the fields they know and ignore the rest. Truncation still fails.
    from kproducer.protocol.messages import decode_response_lenient
    w = Writer()
    w.int32(7)                                           # CorrelationId
    payload = bytes(w.getvalue()) + h("00 00000000 01 00 00000001 01 00")
    #                                   header tags | ThrottleTimeMs | Brokers [] | ClusterId null |
    #                                   ControllerId 1 | Topics [] | body tags
    resp, trailing = decode_response_lenient(METADATA, 12, payload)
    assert (resp.correlation_id, resp.controller_id, trailing) == (7, 1, 0)
    resp, trailing = decode_response_lenient(METADATA, 12, payload + b"\x00")
    assert (resp.controller_id, trailing) == (1, 1)
    with pytest.raises(ProtocolDecodeError, match="trailing"):
        decode_response(METADATA, 12, payload + b"\x00")
    with pytest.raises(ProtocolDecodeError, match="truncated"):
        decode_response_lenient(METADATA, 12, payload[:-3])


# --- encoding rules -----------------------------------------------------------

def test_encode_errors_name_the_field():
    with pytest.raises(ProtocolError, match=r"ProduceRequest\.Acks"):
        ProduceRequest(acks=40000).encode(9)
    with pytest.raises(ProtocolError, match=r"PartitionProduceData\.Index"):
        ProduceRequest(topic_data=[{"name": "t", "partition_data": [{"index": "x", "records": b""}]}]).encode(3)
    with pytest.raises(ProtocolError, match=r"no field\(s\) \['partition'\]"):
        ProduceRequest(topic_data=[{"name": "t", "partition_data": [{"partition": 1}]}]).encode(9)
    with pytest.raises(ProtocolError, match=r"MetadataRequestTopic\.Name"):
        MetadataRequest(topics=[{"name": None}]).encode(9)   # nullable only from v10
    MetadataRequest(topics=[{"name": None}]).encode(10)


def test_fields_absent_from_a_version():
    # Not ignorable and not default: refused, as Kafka's generated code does.
    with pytest.raises(UnsupportedVersionError, match="AllowAutoTopicCreation"):
        MetadataRequest(topics=[], allow_auto_topic_creation=False).encode(3)
    with pytest.raises(UnsupportedVersionError, match="ProducerId"):
        InitProducerIdRequest(producer_id=5, producer_epoch=1).encode(2)
    # Default values and ignorable fields are silently dropped.
    # AllowAutoTopicCreation at its default (true) is dropped where v3 has no such field.
    assert (MetadataRequest(topics=[], allow_auto_topic_creation=True).encode(3)
            == MetadataRequest(topics=[]).encode(3))
    assert len(MetadataRequest(topics=[]).encode(4)) == len(MetadataRequest(topics=[]).encode(3)) + 1
    tid = uuid.uuid4()
    assert (MetadataRequest(topics=[{"name": "t", "topic_id": tid}]).encode(9)
            == MetadataRequest(topics=[{"name": "t"}]).encode(9))


# --- responses: round trips, truncations, fuzzing -------------------------------

def rich_responses():
    """One response per API with every field set to something non-default."""
    u = uuid.UUID("0123456789abcdef0123456789abcdef")
    return {
        API_VERSIONS: ApiVersionsResponse(
            error_code=0, throttle_time_ms=3,
            api_keys=[S["ApiVersion"](api_key=k, min_version=lo, max_version=hi)
                      for k, (lo, hi) in SUPPORTED_VERSIONS.items()],
            supported_features=[S["SupportedFeatureKey"](name="metadata.version", min_version=1, max_version=20)],
            finalized_features_epoch=9,
            finalized_features=[S["FinalizedFeatureKey"](name="metadata.version", max_version_level=20,
                                                          min_version_level=1)],
            zk_migration_ready=True),
        METADATA: MetadataResponse(
            throttle_time_ms=1,
            brokers=[S["MetadataResponseBroker"](node_id=111, host="h\u00e9", port=9092, rack="r1"),
                     S["MetadataResponseBroker"](node_id=112, host="b", port=1, rack=None)],
            cluster_id="c", controller_id=111,
            topics=[S["MetadataResponseTopic"](
                error_code=0, name="t", topic_id=u, is_internal=True,
                partitions=[S["MetadataResponsePartition"](
                    error_code=0, partition_index=i, leader_id=111, leader_epoch=4,
                    replica_nodes=[111, 112], isr_nodes=[111], offline_replicas=[112]) for i in range(3)])]),
        PRODUCE: ProduceResponse(
            throttle_time_ms=2,
            responses=[S["TopicProduceResponse"](name="t", partition_responses=[
                S["PartitionProduceResponse"](
                    index=1, error_code=6, base_offset=-1, log_append_time_ms=123, log_start_offset=5,
                    record_errors=[S["BatchIndexAndErrorMessage"](batch_index=0, batch_index_error_message="bad")],
                    error_message="msg",
                    current_leader=S["LeaderIdAndEpoch"](leader_id=112, leader_epoch=8))])],
            node_endpoints=[S["NodeEndpoint"](node_id=112, host="b", port=1, rack="r")]),
        INIT_PRODUCER_ID: InitProducerIdResponse(throttle_time_ms=1, error_code=0, producer_id=77,
                                                 producer_epoch=2),
        CREATE_TOPICS: CreateTopicsResponse(
            throttle_time_ms=4,
            topics=[S["CreatableTopicResult"](
                name="t", topic_id=u, error_code=36, error_message="exists", topic_config_error_code=40,
                num_partitions=3, replication_factor=1,
                configs=[S["CreatableTopicConfigs"](name="k", value=None, read_only=True, config_source=1,
                                                    is_sensitive=False)])]),
        SASL_HANDSHAKE: RESPONSES[SASL_HANDSHAKE](error_code=33, mechanisms=["PLAIN", "SCRAM-SHA-256"]),
        SASL_AUTHENTICATE: RESPONSES[SASL_AUTHENTICATE](error_code=58, error_message="no",
                                                        auth_bytes=b"v=abc", session_lifetime_ms=9),
        # FindCoordinator v0-3 (one coordinator); v4+ is rich_response's other object.
        pv.FIND_COORDINATOR: RESPONSES[pv.FIND_COORDINATOR](
            throttle_time_ms=4, error_code=15, error_message="loading", node_id=7, host="h", port=9093),
        pv.ADD_PARTITIONS_TO_TXN: RESPONSES[pv.ADD_PARTITIONS_TO_TXN](
            throttle_time_ms=5, results_by_topic_v3_and_below=[S["AddPartitionsToTxnTopicResult"](
                name="t", results_by_partition=[S["AddPartitionsToTxnPartitionResult"](
                    partition_index=3, partition_error_code=51)])]),
        pv.ADD_OFFSETS_TO_TXN: RESPONSES[pv.ADD_OFFSETS_TO_TXN](throttle_time_ms=6, error_code=90),
        pv.END_TXN: RESPONSES[pv.END_TXN](throttle_time_ms=7, error_code=48),
        pv.TXN_OFFSET_COMMIT: RESPONSES[pv.TXN_OFFSET_COMMIT](
            throttle_time_ms=8, topics=[S["TxnOffsetCommitResponseTopic"](
                name="t", partitions=[S["TxnOffsetCommitResponsePartition"](partition_index=1, error_code=16)])]),
        pv.FETCH: RESPONSES[pv.FETCH](throttle_time_ms=9, responses=[S["FetchableTopicResponse"](
            topic="t", partitions=[S["PartitionData"](
                partition_index=2, error_code=1, high_watermark=77, last_stable_offset=70,
                aborted_transactions=[S["AbortedTransaction"](producer_id=5, first_offset=60)],
                records=b"\x00\x01batch")])]),
    }


def rich_response(api_key, version):
    """rich_responses()'s object for ``api_key``, in the shape ``version`` has."""
    if api_key == pv.FIND_COORDINATOR and version >= 4:
        return RESPONSES[api_key](throttle_time_ms=4, coordinators=[S["Coordinator"](
            key="tx", node_id=7, host="h", port=9093, error_code=15, error_message="loading")])
    return rich_responses()[api_key]


def encode_response(api_key, version, obj, correlation_id=99):
    return messages.encode_response(api_key, version, obj, correlation_id)


@pytest.mark.parametrize("api_key,version", ALL_RESPONSE_VERSIONS)
def test_response_roundtrip_and_every_truncation(api_key, version):
    payload = encode_response(api_key, version, rich_response(api_key, version))
    resp = decode_response(api_key, version, payload)
    assert resp.correlation_id == 99
    assert encode_response(api_key, version, resp) == payload
    for n in range(len(payload)):
        with pytest.raises(ProtocolDecodeError) as ei:
            decode_response(api_key, version, payload[:n])
        assert 0 <= ei.value.offset <= n and ei.value.field


def test_version_dependent_fields_decode():
    r = rich_responses()[METADATA]
    m0 = decode_response(METADATA, 0, encode_response(METADATA, 0, r))
    assert m0.cluster_id is None and m0.controller_id == -1 and m0.brokers[0].rack is None
    assert m0.topics[0].partitions[0].leader_epoch == -1
    m12 = decode_response(METADATA, 12, encode_response(METADATA, 12, r))
    assert m12 == r
    p3 = decode_response(PRODUCE, 3, encode_response(PRODUCE, 3, rich_responses()[PRODUCE]))
    pr = p3.responses[0].partition_responses[0]
    assert (pr.log_append_time_ms, pr.log_start_offset, pr.error_message) == (123, -1, None)
    assert pr.current_leader.leader_id == -1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200))
@pytest.mark.parametrize("api_key,version", ALL_RESPONSE_VERSIONS)
def test_fuzz_random_bytes_only_raise_protocol_error(api_key, version, data):
    try:
        decode_response(api_key, version, data)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_mutated_responses_only_raise_protocol_error(data):
    api_key, version = data.draw(st.sampled_from(ALL_RESPONSE_VERSIONS))
    payload = mutate(data, encode_response(api_key, version, rich_response(api_key, version)), 4)
    try:
        decode_response(api_key, version, payload)
    except ProtocolError:
        pass


# --- versions and errors ----------------------------------------------------------

def test_pick_version():
    assert pick_version(PRODUCE, 0, 11) == 11
    assert pick_version(PRODUCE, 0, 20) == SUPPORTED_VERSIONS[PRODUCE][1]
    assert pick_version(METADATA, 0, 5) == 5
    with pytest.raises(UnsupportedVersionError, match="Produce"):
        pick_version(PRODUCE, 0, 2)
    with pytest.raises(UnsupportedVersionError, match="Metadata"):
        pick_version(METADATA, 13, 14)
    with pytest.raises(UnsupportedVersionError, match="API key 99"):
        pick_version(99, 0, 1)
    assert pick_versions({0: (0, 11), 3: (0, 12), 18: (0, 4)}) == {0: 11, 3: 12, 18: 4}
    with pytest.raises(UnsupportedVersionError, match="Produce"):
        pick_versions({3: (0, 12)})


@pytest.mark.parametrize("code,name,retriable", [
    (-1, "UNKNOWN_SERVER_ERROR", False), (0, "NONE", False), (1, "OFFSET_OUT_OF_RANGE", False),
    (2, "CORRUPT_MESSAGE", True), (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    (5, "LEADER_NOT_AVAILABLE", True), (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True), (10, "MESSAGE_TOO_LARGE", False),
    (13, "NETWORK_EXCEPTION", True), (18, "RECORD_LIST_TOO_LARGE", False),
    (19, "NOT_ENOUGH_REPLICAS", True), (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    (21, "INVALID_REQUIRED_ACKS", False), (29, "TOPIC_AUTHORIZATION_FAILED", False),
    (35, "UNSUPPORTED_VERSION", False), (36, "TOPIC_ALREADY_EXISTS", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False), (46, "DUPLICATE_SEQUENCE_NUMBER", False),
    (47, "INVALID_PRODUCER_EPOCH", False), (56, "KAFKA_STORAGE_ERROR", True),
    (59, "UNKNOWN_PRODUCER_ID", False), (74, "FENCED_LEADER_EPOCH", True),
    (87, "INVALID_RECORD", False), (89, "THROTTLING_QUOTA_EXCEEDED", True),
    (90, "PRODUCER_FENCED", False), (120, "TRANSACTION_ABORTABLE", False),
])
def test_error_table(code, name, retriable):
    assert error_name(code) == name
    assert is_retriable(code) is retriable
    assert error_info(code).code == code


def test_error_table_misc():
    assert is_invalid_metadata(6) and not is_invalid_metadata(7)
    assert error_name(9999) == "UNKNOWN_ERROR_CODE_9999" and not is_retriable(9999)
    raise_for_code(0)
    with pytest.raises(BrokerResponseError) as ei:
        raise_for_code(6, "p0")
    assert (ei.value.code, ei.value.name) == (6, "NOT_LEADER_OR_FOLLOWER")
    assert "p0" in str(ei.value)


# ===========================================================================
# 3. BlockingClient against a fake server (protocol misbehaviour)
# ===========================================================================

class FakeBroker:
    """Answers ApiVersions properly, then replays ``script`` raw frames."""

    def __init__(self, script):
        self.script = list(script)
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _read_frame(self, conn):
        size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
        return conn.recv(size, socket.MSG_WAITALL)

    def _run(self):
        conn, _ = self.srv.accept()
        with conn:
            req = self._read_frame(conn)
            api_key, version, cid = struct.unpack_from(">hhi", req)
            body = ApiVersionsResponse.SCHEMA.encode_body(rich_responses()[API_VERSIONS], version)
            conn.sendall(frame(struct.pack(">i", cid) + body))
            for raw in self.script:
                self._read_frame(conn)
                conn.sendall(raw)

    def close(self):
        self.srv.close()


@pytest.mark.timeout(30)
def test_client_rejects_wrong_correlation_id():
    fake = FakeBroker([frame(encode_response(INIT_PRODUCER_ID, 5, rich_responses()[INIT_PRODUCER_ID],
                                             correlation_id=12345))])
    try:
        with BlockingClient("127.0.0.1", fake.port, timeout=5) as c:
            assert c.versions[INIT_PRODUCER_ID] == 5
            with pytest.raises(ProtocolError, match="correlation id mismatch"):
                c.init_producer_id()
    finally:
        fake.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("raw,exc", [
    (b"\x7f\xff\xff\xff", ProtocolError),   # absurd frame size
    (b"\xff\xff\xff\xfe", ProtocolError),   # negative frame size
    (b"\x00\x00\x00\x10\x00", ConnectionError),  # frame cut short, then EOF
])
def test_client_bad_frames(raw, exc):
    fake = FakeBroker([raw])
    try:
        with BlockingClient("127.0.0.1", fake.port, timeout=5) as c:
            with pytest.raises(exc):
                c.metadata(["t"])
    finally:
        fake.close()


def test_crc32c_check_value():
    assert crc32c.crc32c(b"123456789") == 0xE3069283
