"""End to end: batches built by the compiled ``encode_batch`` are sent in Produce requests over
a plain blocking socket (kproducer.protocol + BlockingClient) to the real broker, and
confluent-kafka (librdkafka, ``check.crcs=true``) reads back exactly the same records.

Tansu accepts almost anything on Produce (TANSU.md), so each batch is also decoded by our own
validating reader before it is sent, and the read-back is the independent verdict.
"""

from __future__ import annotations

import os
import random

import pytest

from kproducer import codec
from kproducer.protocol import PRODUCE, SUPPORTED_VERSIONS
from kproducer.testing.client import BlockingClient
from kproducer.testing.readback import Msg, read_back

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def _client(broker) -> BlockingClient:
    host, port = broker.bootstrap.rsplit(":", 1)
    return BlockingClient(host, int(port))


def _records(rng: random.Random, n: int, *, start: int, max_value: int):
    out = []
    for i in range(start, start + n):
        key = None if i % 7 == 3 else b"k%d" % i
        value = None if i % 11 == 5 else rng.randbytes(rng.randrange(0, max_value + 1))
        headers = [("trace", b"t%d" % i), ("empty", b""), ("null", None)] if i % 4 == 1 else []
        out.append((key, value, BASE_TS + (i * 7919) % 100_000, headers))
    return out


def _expected(records, partition: int, first_offset: int):
    return [Msg(key=k, value=v, headers=h, timestamp=t, offset=first_offset + i, partition=partition)
            for i, (k, v, t, h) in enumerate(records)]


@pytest.mark.timeout(300)
def test_encode_batch_read_back_every_codec(broker):
    """Each codec on its own partition; batches of 1, 100 and 10,000 records; idempotent
    producer id with sequences, as the producer will send them."""
    topic = "e2e-codecs"
    broker.create_topic(topic, len(CODECS))
    rng = random.Random(2024)
    expected = {}
    with _client(broker) as client:
        pid_resp = client.init_producer_id()
        pid, epoch = pid_resp.producer_id, pid_resp.producer_epoch
        assert pid >= 0
        for p, compression in enumerate(CODECS):
            sent, seq = [], 0
            for n, max_value in ((1, 10), (100, 300), (10_000, 100)):
                recs = _records(rng, n, start=len(sent), max_value=max_value)
                batch = codec.encode_batch(recs, compression=compression, producer_id=pid,
                                           producer_epoch=epoch, base_sequence=seq)
                decoded = codec.decode_batch(batch)
                assert decoded.records_count == n and decoded.compression == compression
                err, base = client.produce(topic, p, batch, acks=-1)
                assert (err, base) == (0, len(sent)), (compression, n)
                sent += recs
                seq += n
            expected[p] = _expected(sent, p, 0)

    got = read_back(broker.bootstrap, topic, timeout=120)
    for p, compression in enumerate(CODECS):
        assert len(got[p]) == len(expected[p]), compression
        assert got[p] == expected[p], compression


@pytest.mark.timeout(300)
def test_large_values_read_back(broker):
    """Values from 0 bytes to 1 MiB, every codec (random bytes barely compress)."""
    topic = "e2e-large"
    broker.create_topic(topic, len(CODECS))
    expected = {}
    with _client(broker) as client:
        for p, compression in enumerate(CODECS):
            recs = [(b"big", os.urandom(1 << 20), BASE_TS, [("size", b"1MiB")]),
                    (None, b"", BASE_TS + 1, None),
                    (b"half", os.urandom(512 * 1024), BASE_TS + 2, [])]
            batch = codec.encode_batch(recs, compression=compression)
            err, base = client.produce(topic, p, batch, acks=1)
            assert (err, base) == (0, 0), compression
            expected[p] = _expected([(k, v, t, list(h or [])) for k, v, t, h in recs], p, 0)
    got = read_back(broker.bootstrap, topic, timeout=120)
    for p, compression in enumerate(CODECS):
        assert got[p] == expected[p], compression


@pytest.mark.timeout(120)
def test_every_produce_version_with_encode_batch(broker):
    """Each Produce version kproducer implements, flexible (v9+) and not, carries a
    compiled batch the consumer reads back."""
    topic = "e2e-versions"
    broker.create_topic(topic, 1)
    sent = []
    with _client(broker) as client:
        lo = max(SUPPORTED_VERSIONS[PRODUCE][0], client.broker_versions[PRODUCE][0])
        hi = client.version_for(PRODUCE)
        for version in range(lo, hi + 1):
            recs = [(b"v%d" % version, b"payload-%d" % version, BASE_TS + version, [("ver", b"%d" % version)])]
            batch = codec.encode_batch(recs, compression=CODECS[version % len(CODECS)])
            err, base = client.produce(topic, 0, batch, acks=-1, version=version)
            assert (err, base) == (0, len(sent)), version
            sent += recs
    assert len(sent) >= 9  # Produce v3..v11
    got = read_back(broker.bootstrap, topic, timeout=60)
    assert got[0] == _expected(sent, 0, 0)
