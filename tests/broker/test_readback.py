"""read_back against a real broker: batches built by the reference twin, produced with the
blocking test client, read back by librdkafka (confluent-kafka) with CRC checks on.

This is the end-to-end proof that the twin's layout (and so the C writer's, which must match
it byte for byte) is what a real consumer accepts, for every codec: raw-block snappy, LZ4
frames with independent blocks, gzip, zstd; null keys and values; headers with null values.
"""

from __future__ import annotations

import pytest

from kproducer import _reference as ref
from kproducer.testing.client import BlockingClient
from kproducer.testing.readback import Msg, ReadBackError, expect_records, read_back

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def records_for(codec_index: int, start: int, n: int):
    out = []
    for i in range(start, start + n):
        key = None if i % 4 == 0 else b"key-%d-%d" % (codec_index, i)
        value = None if i % 5 == 2 else b"value %d " % i * (1 + i % 7)
        headers = [("h1", b"x%d" % i), ("null", None), ("", b"")] if i % 3 == 0 else []
        out.append((key, value, BASE_TS + codec_index * 1000 + (i * 37) % 500, headers))
    return out


def client_for(broker) -> BlockingClient:
    host, port = broker.bootstrap.rsplit(":", 1)
    return BlockingClient(host, int(port))


def test_read_back_twin_batches_every_codec(broker):
    topic = "readback-codecs"
    broker.create_topic(topic, len(CODECS))
    expected = {}
    with client_for(broker) as c:
        for p, codec in enumerate(CODECS):
            first = records_for(p, 0, 7)
            second = records_for(p, 7, 12)
            for batch_recs, want_base in ((first, 0), (second, len(first))):
                batch = ref.encode_batch(batch_recs, compression=codec, producer_id=-1)
                assert ref.decode_batch(batch).compression == codec
                err, base = c.produce(topic, p, batch, acks=-1)
                assert (err, base) == (0, want_base), codec
            expected[p] = first + second

    got = read_back(broker.bootstrap, topic, timeout=30)
    assert sorted(got) == list(range(len(CODECS)))
    for p, recs in expected.items():
        assert got[p] == [
            Msg(key=k, value=v, headers=h, timestamp=ts, offset=i, partition=p)
            for i, (k, v, ts, h) in enumerate(recs)
        ], CODECS[p]
    # The same check through expect_records.
    expect_records(broker.bootstrap, topic, expected, timeout=30)


def test_read_back_two_tuple_records_and_empty_partitions(broker):
    topic = "readback-sparse"
    broker.create_topic(topic, 3)
    with client_for(broker) as c:
        assert c.produce(topic, 1, ref.encode_batch([(b"a", b"1"), (None, b"2")]))[0] == 0
    got = read_back(broker.bootstrap, topic, timeout=30)
    assert got[0] == [] and got[2] == []
    assert [(m.key, m.value, m.headers, m.offset) for m in got[1]] == [
        (b"a", b"1", [], 0), (None, b"2", [], 1)]
    assert got[1][0].timestamp == got[1][1].timestamp > 0
    expect_records(broker.bootstrap, topic, {1: [(b"a", b"1"), (None, b"2")]}, timeout=30)
    with pytest.raises(AssertionError, match="expected 1 records, got 2"):
        expect_records(broker.bootstrap, topic, {1: [(b"a", b"1")]}, timeout=30)
    assert read_back(broker.bootstrap, topic, partitions=[1], timeout=30).keys() == {1}
    with pytest.raises(ReadBackError, match="do not exist"):
        read_back(broker.bootstrap, topic, partitions=[7], timeout=10)


def test_read_back_rejects_a_bad_crc(broker):
    """The broker stores a corrupted batch as sent; the read side must catch it."""
    topic = "readback-badcrc"
    broker.create_topic(topic, 1)
    bad = bytearray(ref.encode_batch([(b"k", b"v", BASE_TS, None)]))
    bad[-1] ^= 0x01
    with client_for(broker) as c:
        assert c.produce(topic, 0, bytes(bad))[0] == 0
    with pytest.raises(ReadBackError, match="CRC"):
        read_back(broker.bootstrap, topic, timeout=20)
