"""The fast Produce codec (kproducer.protocol.produce) against a Tansu broker: frames it
encodes at every version 3..11, with and without a transactional id, are accepted, and it
decodes the broker's responses. Against the generic codec: tests/unit/test_produce_fast.py."""

from __future__ import annotations

import pytest

from kproducer.codec import encode_batch
from kproducer.protocol import PRODUCE
from kproducer.protocol.produce import decode_produce_response, encode_produce_request

VERSIONS = list(range(3, 12))


# --------------------------------------------------------------------------
# against the real broker
# --------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_fast_frames_against_broker(broker):
    broker.create_topic("fast", 2)
    batch = encode_batch([(b"k", b"v", 1000, None)])
    with broker.client() as c:     # ApiVersions exchange done on connect
        lo, hi = c.broker_versions[PRODUCE]
        assert lo <= 3 and hi >= 11
        offsets = {0: [], 1: []}
        cid = 1000
        for version in VERSIONS:
            for txn_client in (None, "kproducer-fast"):
                cid += 1
                frame = encode_produce_request(
                    version, cid, txn_client, -1, 10000,
                    [("fast", [(0, batch), (1, memoryview(batch))])])
                c.sock.sendall(frame)
                got_cid, results, throttle_time_ms, trailing, leaders, endpoints = decode_produce_response(
                    version, c.recv_raw())
                assert (got_cid, throttle_time_ms, trailing) == (cid, 0, 0)
                assert leaders is None and endpoints is None    # every partition succeeded
                assert sorted(r[:3] for r in results) == [("fast", 0, 0), ("fast", 1, 0)], results
                for _topic, p, _err, base, _lat, msg in results:
                    offsets[p].append(base)
                    assert msg is None
    for p in (0, 1):
        assert offsets[p] == list(range(len(VERSIONS) * 2)), offsets
