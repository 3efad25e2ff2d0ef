"""Allocation cycles for leak checks: producer create/send/close against a real broker, and
the codec's success and error paths (a batch abandoned mid-encode, a corrupt batch, a
frame receiver dropped with a partial frame or after a bad size, Produce requests and
responses).

Run as a script under the sanitizer build with LeakSanitizer on (tests/broker/test_build.py):
any C buffer or Python object lost by kproducer's compiled code is reported at exit.
``tests/resilience/test_leaks.py`` runs the same cycles in-process against RSS on the plain build.
"""

from __future__ import annotations

import gc
import struct
import sys

from kproducer import Producer, codec
from kproducer.errors import (CorruptRecordError, FrameError, ProtocolDecodeError, ProtocolError,
                              RecordTooLargeError)
from kproducer.protocol import produce

TOPIC = "leak"


def codec_cycles(n: int) -> None:
    records = [(b"k", b"v" * 100, 1, [("h", b"x")])] * 20
    good = codec.encode_batch(records, compression="lz4")
    for i in range(n):
        codec.decode_batch(codec.encode_batch(records, compression=("none", "gzip", "snappy", "lz4", "zstd")[i % 5]))
        try:
            codec.encode_batch([(b"k", b"v")] * 50 + [("not bytes", b"v")])
        except TypeError:
            pass
        try:
            codec.encode_batch([(b"k", b"v", 1, [("h", b"x")])] * 50 + [(b"k", b"v", 1, [(1, b"x")])],
                               compression="zstd")
        except TypeError:
            pass
        bad = bytearray(good)
        bad[-1] ^= 1
        try:
            codec.decode_batch(bytes(bad))
        except CorruptRecordError:
            pass
        rx = codec.FrameReceiver(1 << 20)
        rx.feed(codec.frame(b"a" * 100) + codec.frame(b"b" * 5000)[:300])   # one whole, one partial
        del rx
        rx = codec.FrameReceiver(10)
        try:
            rx.feed(codec.frame(b"c" * 100))
        except FrameError:
            pass
        produce_cycle(good)


def produce_cycle(batch: bytes) -> None:
    """The Produce codec: a request, one refused after its first buffers were taken, a
    response of 40 partitions (its results on the heap), the same with bytes after its
    last field (ignored) and the same cut short; a v10 one with leader hints and
    NodeEndpoints (both on the heap), cut short and with a bad tag size."""
    produce.encode_produce_request(9, 1, "c", -1, 100, [("t", [(0, batch), (1, bytearray(batch))])])
    try:
        produce.encode_produce_request(9, 1, "c", -1, 100, [("t", [(0, batch), (1, "not bytes")])])
    except ProtocolError:
        pass
    parts = b"".join(struct.pack(">ihqqq", i, 0, i, -1, 0) + b"\x01\x00\x00" for i in range(40))
    payload = b"\x00\x00\x00\x01\x00\x02\x02t" + bytes([41]) + parts + b"\x00" + b"\x00" * 5
    cid, results, throttle_time_ms, trailing, leaders, endpoints = produce.decode_produce_response(9, payload)
    assert (cid, len(results), throttle_time_ms, trailing, leaders, endpoints) == (1, 40, 0, 0, None, None)
    cid, results, throttle_time_ms, trailing, _, _ = produce.decode_produce_response(9, payload + b"\x00" * 3)
    assert (cid, len(results), throttle_time_ms, trailing) == (1, 40, 0, 3)
    try:
        produce.decode_produce_response(9, payload[:-9])
    except ProtocolDecodeError:
        pass
    # v10 (KIP-951): every partition NOT_LEADER_OR_FOLLOWER with a CurrentLeader, and 12
    # NodeEndpoints (more than the decoder keeps on the stack: a heap array); the same cut
    # inside the endpoints, and with a CurrentLeader shorter than its tag's size.
    leader = b"\x01\x00\x09" + struct.pack(">ii", 7, 3) + b"\x00"
    parts = b"".join(struct.pack(">ihqqq", i, 6, -1, -1, -1) + b"\x01\x00" + leader for i in range(40))
    nodes = b"".join(struct.pack(">i", n) + b"\x0bhost-%02d.kp" % n + struct.pack(">i", 9092) + b"\x00\x00"
                     for n in range(12))
    nodes = bytes([13]) + nodes
    payload = (b"\x00\x00\x00\x01\x00\x02\x02t" + bytes([41]) + parts + b"\x00" + b"\x00" * 4
               + b"\x01\x00" + bytes([len(nodes) & 0x7F | 0x80, len(nodes) >> 7]) + nodes)   # size: 2-byte uvarint
    cid, results, _, trailing, leaders, endpoints = produce.decode_produce_response(10, payload)
    assert (len(results), trailing, len(leaders), len(endpoints)) == (40, 0, 40, 12)
    assert leaders[("t", 39)] == (7, 3) and endpoints[11] == ("host-11.kp", 9092)
    for bad in (payload[:-5], payload.replace(b"\x01\x00\x09", b"\x01\x00\x0a", 1)):
        try:
            produce.decode_produce_response(10, bad)
        except ProtocolDecodeError:
            pass
        else:
            raise AssertionError("decoded a bad v10 response")


def producer_cycles(bootstrap: str, n: int) -> None:
    for i in range(n):
        p = Producer(bootstrap_servers=bootstrap, linger_ms=0, max_request_size=100_000,
                     compression_type="gzip" if i % 2 else "none")
        futs = [p.send(TOPIC, b"x" * 100, key=b"k%d" % j, headers=[("h", b"v")]) for j in range(50)]
        p.send_many(TOPIC, [b"y" * 100] * 100, keys=[b"k"] * 100, headers=[("h", b"v")]).wait(10)
        for bad in (lambda p=p: p.send(TOPIC, b"z" * 200_000),
                    lambda p=p: p.send(TOPIC, b"v", headers=[("h", "not bytes")]),
                    lambda p=p: p.send_many(TOPIC, [b"a", b"z" * 200_000])):
            try:
                bad()
            except (RecordTooLargeError, TypeError):
                pass
        p.close(10)
        assert all(f.done() and f.exception() is None for f in futs)


def main() -> None:
    from kproducer.testing import TansuBroker
    codec_cycles(200)
    broker = TansuBroker()
    broker.start()
    try:
        broker.create_topic(TOPIC, 2)
        producer_cycles(broker.bootstrap, 20)
    finally:
        broker.stop()
        broker.cleanup()
    gc.collect()
    print("cycles done")


if __name__ == "__main__":
    sys.exit(main())
