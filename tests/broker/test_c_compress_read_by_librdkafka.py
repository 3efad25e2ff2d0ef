"""Batches the C codecs (csrc/kp_compress.h) compressed, produced to the broker as they are
and read back by librdkafka (confluent-kafka's consumer, CRC checks on): the Kafka reader
users run. The codecs' own tests: tests/unit/test_c_compress.py."""

from __future__ import annotations

import pytest

from kproducer import compression
from kproducer._core import batch_from_records
from kproducer._reference import decode_batch
from kproducer.testing.client import BlockingClient
from kproducer.testing.readback import expect_records

from _compress_samples import CODECS, _sample


@pytest.mark.timeout(300)
def test_librdkafka_reads_batches_the_c_codecs_compressed(broker):
    """Batches whose Records section the C codecs compressed, produced as they are, read back
    by librdkafka (confluent-kafka's consumer, CRC checks on): the Kafka reader users run."""
    topic = "c-codecs-readback"
    broker.create_topic(topic, len(CODECS))
    host, port = broker.bootstrap.rsplit(":", 1)
    expected = {}
    with BlockingClient(host, int(port)) as client:
        for p, codec in enumerate(CODECS):
            # Values over lz4's and snappy's 64 KiB blocks and zstd's 128 KiB ones.
            records = [(b"k%d" % i, _sample(size), 1_700_000_000_000 + i, [("i", b"%d" % i)])
                       for i, size in enumerate([0, 100, 70_000, 140_000, 33])]
            b = batch_from_records(topic, p, records, compression.CODEC_IDS[codec],
                                   compression.resolve_level(codec, None))
            b.finish(-1, -1, -1)
            batch = bytes(b)
            assert decode_batch(batch).compression == codec
            assert client.produce(topic, p, batch, acks=-1) == (0, 0), codec
            expected[p] = records
    expect_records(broker.bootstrap, topic, expected, timeout=60)
