"""kproducer.protocol and kproducer.testing against a real Tansu broker (``broker`` fixture):
the broker helper's start failures and log checks, ApiVersions, Metadata, CreateTopics,
InitProducerId and a Produce round trip at every version, read back by confluent-kafka with
CRC checks on. The primitives and the schema codec: tests/unit/test_protocol.py."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import crc32c
import pytest

from kproducer.errors import BrokerResponseError
from kproducer.protocol import (API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID, METADATA, PRODUCE,
                                SUPPORTED_VERSIONS, ErrorCode, PartitionProduceData, ProduceRequest,
                                TopicProduceData)
from kproducer.protocol import primitives as prim
from kproducer.testing import BlockingClient, BrokerStartError, TansuBroker


# ===========================================================================
# Tansu
# ===========================================================================

def test_check_log_detects_crc_errors_and_panics(tmp_path):
    b = TansuBroker(log_dir=str(tmp_path))
    with open(b.log_path, "w") as f:
        f.write("\x1b[2m2026-01-01T00:00:00Z\x1b[0m \x1b[31mERROR\x1b[0m tansu_service::stream: "
                "err=KafkaProtocol(Io(UnexpectedEof))\n")
    b.check_log()   # a connection closed mid-frame is not a failure by default
    with pytest.raises(AssertionError):
        b.check_log(strict=True)
    with open(b.log_path, "a") as f:
        f.write("2026-01-01T00:00:01Z ERROR tansu_storage: Crc mismatch expected=1 got=2\n")
    with pytest.raises(AssertionError, match="Crc mismatch"):
        b.check_log()
    with open(b.log_path, "w") as f:
        f.write("thread 'tokio-rt-worker' panicked at src/x.rs:1:1:\n")
    with pytest.raises(AssertionError, match="panicked"):
        b.check_log()


@pytest.mark.timeout(60)
def test_broker_start_failures(tmp_path):
    with pytest.raises(BrokerStartError):
        TansuBroker(binary="/bin/false", startup_timeout=2, log_dir=str(tmp_path)).start()
    # A port already taken: Tansu panics on bind; start gives up at the deadline.
    with socket.create_server(("127.0.0.1", 0)) as s:
        b = TansuBroker(port=s.getsockname()[1], startup_timeout=1)
        with pytest.raises(BrokerStartError, match="(?i)addr.*in use"):
            b.start()
        assert not b.running
        b.cleanup()


@pytest.mark.timeout(60)
def test_broker_fixture_basics(broker):
    assert broker.running and broker.pid > 0
    assert broker.bootstrap == f"127.0.0.1:{broker.port}"
    assert broker.advertised_port == broker.port
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
        pass


@pytest.mark.timeout(60)
def test_advertised_port_override():
    with TansuBroker(advertised_port=4242) as b:
        with b.client() as c:
            md = c.metadata([])
        assert [(x.node_id, x.host, x.port) for x in md.brokers] == [(111, "127.0.0.1", 4242)]
    b.check_log()
    b.cleanup()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions(broker, version):
    with BlockingClient("127.0.0.1", broker.port, api_versions_version=version) as c:
        resp = c.api_versions_response
        assert resp.error_code == 0
        ranges = resp.version_ranges()
        for api_key in (PRODUCE, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID):
            assert api_key in ranges, api_key
        # What TANSU.md documents for Tansu 0.6.
        assert ranges[PRODUCE][1] >= 11 and ranges[METADATA][1] >= 12 and ranges[API_VERSIONS][1] >= 4
        assert c.versions == {k: min(hi, ranges[k][1]) for k, (lo, hi) in SUPPORTED_VERSIONS.items()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_auto_creates_topic(broker, version):
    with broker.client() as c:
        topic = f"auto-v{version}"
        md = c.metadata([topic], version=version)
        assert [b.node_id for b in md.brokers] == [111]
        assert md.brokers[0].port == broker.port
        (t,) = md.topics
        assert (t.name, t.error_code) == (topic, 0)
        assert sorted(p.partition_index for p in t.partitions) == [0, 1, 2, 3]
        assert {p.leader_id for p in t.partitions} == {111}
        assert all(p.error_code == 0 for p in t.partitions)
        if version >= 10:
            assert t.topic_id.int != 0
        if version >= 2:
            assert md.cluster_id == "tansu_cluster"
        # All topics (null array from v1, empty array in v0) includes it too.
        assert topic in {x.name for x in c.metadata(None, version=version).topics}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("version", range(0, 8))
def test_create_topics_then_metadata(broker, version):
    n = version + 2
    with broker.client() as c:
        resp = c.create_topics({f"ct-v{version}": n}, version=version)
        (t,) = resp.topics
        assert (t.name, t.error_code) == (f"ct-v{version}", 0)
        md = c.metadata([f"ct-v{version}"])
        assert len(md.topics[0].partitions) == n
        again = c.create_topics({f"ct-v{version}": n}, version=version)
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    broker.create_topic("via-helper", 5)
    broker.create_topic("via-helper", 5, exist_ok=True)
    with pytest.raises(BrokerResponseError, match="TOPIC_ALREADY_EXISTS"):
        broker.create_topic("via-helper", 5)


@pytest.mark.timeout(60)
def test_init_producer_id(broker):
    with broker.client() as c:
        seen = set()
        for version in (3, 4, 5):
            r = c.init_producer_id(version=version)
            assert r.error_code == 0 and r.producer_id >= 0 and r.producer_epoch >= 0
            seen.add(r.producer_id)
        assert len(seen) == 3
        # Tansu quirk (TANSU.md): v0-2 always answer UNKNOWN_SERVER_ERROR.
        for version in (0, 1, 2):
            assert c.init_producer_id(version=version).error_code == ErrorCode.UNKNOWN_SERVER_ERROR


def build_batch(value: bytes, key: bytes | None = None, *, timestamp_ms: int = 1_700_000_000_000,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A record batch v2 holding one record (DESIGN.md section 3), built by hand.

    Record: Length varint | Attributes int8 | TimestampDelta varlong |
    OffsetDelta varint | KeyLength varint | Key | ValueLength varint | Value |
    HeadersCount varint. Batch header (61 bytes): BaseOffset int64 | Length
    int32 (from PartitionLeaderEpoch to the end) | PartitionLeaderEpoch int32 |
    Magic int8 = 2 | CRC uint32 (CRC-32C of Attributes..end) | Attributes int16
    | LastOffsetDelta int32 | BaseTimestamp int64 | MaxTimestamp int64 |
    ProducerId int64 | ProducerEpoch int16 | BaseSequence int32 | RecordsCount int32.
    """
    body = (b"\x00"                                   # Attributes
            + prim.encode_varlong(0)                  # TimestampDelta
            + prim.encode_varint(0)                   # OffsetDelta
            + (prim.encode_varint(-1) if key is None else prim.encode_varint(len(key)) + key)
            + prim.encode_varint(len(value)) + value
            + prim.encode_varint(0))                  # HeadersCount
    record = prim.encode_varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, 0, timestamp_ms, timestamp_ms,
                            producer_id, producer_epoch, base_sequence, 1) + record
    crc = crc32c.crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    batch = struct.pack(">qi", 0, len(after_length)) + after_length
    assert len(batch) == 61 + len(record)
    return batch


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, deadline_s: float = 30.0):
    """Read every partition from offset 0 to EOF with CRC checks (TANSU.md settings)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 500, "check.crcs": True,
                  "queued.min.messages": 2000000, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, eof = [], set()
        end = time.monotonic() + deadline_s
        while (len(eof) < partitions or len(got) < expected) and time.monotonic() < end:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            eof.discard(msg.partition())
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_produce_every_version_and_read_back(broker):
    broker.create_topic("p", 1)
    with broker.client() as c:
        assert c.versions[PRODUCE] == 11
        offsets = []
        for version in range(3, 12):
            err, base = c.produce("p", 0, build_batch(b"v%d" % version, key=b"k"), version=version)
            assert err == 0, (version, err)
            offsets.append(base)
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert offsets[0] == 0 and offsets[-1] == 8
        # acks=0 is not answered by Kafka but is by Tansu: the client skips it.
        assert c.produce("p", 0, build_batch(b"acks0"), acks=0) == (0, -1)
        assert c.metadata(["p"]).topics[0].name == "p"
        # A bytearray / memoryview batch goes through unchanged.
        err, base = c.produce("p", 0, memoryview(bytearray(build_batch(b"mv"))))
        assert (err, base) == (0, 10)
    got = consume_all(broker.bootstrap, "p", 1, 11)
    assert [v for _, _, _, v in got] == [b"v%d" % v for v in range(3, 12)] + [b"acks0", b"mv"]
    assert [o for _, o, _, _ in got] == list(range(11))
    assert got[0][2] == b"k" and got[-1][2] is None


@pytest.mark.timeout(60)
def test_produce_response_fields(broker):
    broker.create_topic("r", 2)
    with broker.client() as c:
        resp = c.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
            TopicProduceData(name="r", partition_data=[
                PartitionProduceData(index=0, records=build_batch(b"a")),
                PartitionProduceData(index=1, records=build_batch(b"b"))])]))
        (t,) = resp.responses
        assert t.name == "r"
        assert sorted((p.index, p.error_code, p.base_offset) for p in t.partition_responses) == \
            [(0, 0, 0), (1, 0, 0)]
        # The same request at the oldest version we speak.
        resp3 = c.request(PRODUCE, version=3, acks=-1, timeout_ms=5000, topic_data=[
            {"name": "r", "partition_data": [{"index": 0, "records": build_batch(b"c")}]}])
        assert resp3.responses[0].partition_responses[0].base_offset == 1


@pytest.mark.timeout(60)
def test_restart_same_port_loses_state(broker):
    broker.create_topic("gone", 2)
    port, pid = broker.port, broker.pid
    broker.restart()
    assert broker.port == port and broker.pid != pid and broker.running
    with broker.client() as c:
        assert c.metadata(None).topics == []
