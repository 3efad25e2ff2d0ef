"""Golden vectors and property tests for the pure-Python reference twin (kproducer._reference).

The twin is the oracle the compiled codec is compared against, so it is itself checked
against sources that owe nothing to kproducer:

- CRC-32C: the check value of the Castagnoli CRC, RFC 3720 (iSCSI) appendix B.4, and the
  ``crc32c`` PyPI package (C/SSE4.2) on random data.
- varints: Apache Kafka's ``ByteUtilsTest`` tables (testVarintSerde, testVarlongSerde,
  testInvalidVarint/Varlong), and kafka-python's ``kafka.record.util``.
- murmur2: test vectors generated with the JVM Kafka client (the values asserted by
  Kafka's ``UtilsTest.testMurmur2``, also used by sarama/kafkautil) and kafka-python's
  ``kafka.partitioner.default.murmur2`` on thousands of random keys.
- record batches: the twin's batches read by kafka-python's ``DefaultRecordBatch`` and by
  aiokafka's pure-Python and Cython readers, for every codec; batches built by
  kafka-python's and aiokafka's builders read by the twin's ``decode_batch``.
- hostile input: random bytes, every truncation, every single-byte flip (with and without
  the CRC fixed up so the parser is reached) raise only CorruptRecordError.

kafka-python 3.0.12 reads snappy/lz4/zstd only through python-snappy, lz4 and zstandard;
when those are not installed its decompressors are swapped for cramjam ones (kafka-python's
own xerial and record parsing still run).
"""

from __future__ import annotations

import random
import struct
import time
import types

import cramjam
import crc32c as crc32c_pkg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kproducer import _reference as ref
from kproducer import compression
from kproducer.errors import CorruptRecordError, FrameError

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------- helpers

def sample_records(n=20, seed=1):
    """Compressible records exercising null keys/values, empty bytes and headers."""
    rnd = random.Random(seed)
    base = 1_700_000_000_000
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else (b"" if i % 7 == 0 else b"key-%d" % (i % 4))
        value = None if i % 6 == 3 else b"value %d " % i * rnd.randint(1, 8)
        headers = []
        if i % 3 == 0:
            headers = [("trace-id", b"abc%d" % i), ("null", None), ("", b""), ("ünï", b"\x00\xff")]
        ts = base + rnd.randint(-5000, 5000)
        out.append((key, value, ts, headers))
    return out


def refix(batch: bytes | bytearray) -> bytes:
    """Recomputes Length and CRC so a mutated batch reaches the record parser."""
    b = bytearray(batch)
    if len(b) >= 12:
        struct.pack_into(">i", b, 8, len(b) - 12)
    if len(b) >= 21:
        struct.pack_into(">I", b, 17, crc32c_pkg.crc32c(bytes(b[21:])))
    return bytes(b)


def raw_batch(section: bytes, count: int, *, last_offset_delta=None, base_ts=0, max_ts=None,
              attributes=0, magic=2) -> bytes:
    """A batch around a hand-written Records section (Length and CRC correct)."""
    header = struct.pack(">qiibIhiqqqhii", 0, 0, -1, magic, 0, attributes,
                         count - 1 if last_offset_delta is None else last_offset_delta,
                         base_ts, base_ts if max_ts is None else max_ts, -1, -1, -1, count)
    return refix(header + section)


def raw_record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return ref.encode_varint(len(body)) + body


V = ref.encode_varint
VL = ref.encode_varlong


def simple_record(key=b"k", value=b"v", ts_delta=0, offset_delta=0, headers=()):
    parts = [b"\x00", VL(ts_delta), V(offset_delta)]
    parts.append(V(-1) if key is None else V(len(key)) + key)
    parts.append(V(-1) if value is None else V(len(value)) + value)
    parts.append(V(len(headers)))
    for hk, hv in headers:
        parts.append(V(len(hk)) + hk)
        parts.append(V(-1) if hv is None else V(len(hv)) + hv)
    return raw_record(*parts)


def expect_corrupt(data, field=None, offset=None, match=None):
    with pytest.raises(CorruptRecordError) as info:
        ref.decode_batch(data)
    if field is not None:
        assert info.value.field == field, str(info.value)
    if offset is not None:
        assert info.value.offset == offset, str(info.value)
    if match is not None:
        assert match in str(info.value), str(info.value)
    return info.value


def as_expected(records):
    """(key, value, ts, headers) with headers normalised to a list."""
    return [(bytes(k) if k is not None else None, bytes(v) if v is not None else None, ts,
             [(hk, bytes(hv) if hv is not None else None) for hk, hv in (h or [])])
            for k, v, ts, h in records]


# ----------------------------------------------------------------------------- CRC-32C

RFC3720_VECTORS = [
    # RFC 3720 appendix B.4; the RFC lists the CRC bytes as sent (little-endian).
    (bytes(32), "aa36918a"),
    (b"\xff" * 32, "43aba862"),
    (bytes(range(32)), "4e79dd46"),
    (bytes(range(31, -1, -1)), "5cdb3f11"),
    (bytes.fromhex("01c00000000000000000000000000000" "14000000000004000000001400000018"
                   "28000000000000000200000000000000"), "563a96d9"),
]


def test_crc32c_check_value():
    assert ref.crc32c(b"123456789") == 0xE3069283
    assert ref.crc32c(b"") == 0


@pytest.mark.parametrize("data,wire", RFC3720_VECTORS)
def test_crc32c_rfc3720(data, wire):
    assert ref.crc32c(data) == int.from_bytes(bytes.fromhex(wire), "little")


def test_crc32c_continuation_and_buffer_types():
    data = bytes(range(256)) * 3
    for cut in (0, 1, 5, 255, 700, len(data)):
        assert ref.crc32c(data[cut:], ref.crc32c(data[:cut])) == ref.crc32c(data)
    assert ref.crc32c(bytearray(data)) == ref.crc32c(memoryview(data)) == ref.crc32c(data)
    with pytest.raises(TypeError):
        ref.crc32c("text")
    with pytest.raises(ValueError):
        ref.crc32c(b"", 1 << 32)


@SETTINGS
@given(st.binary(max_size=2000), st.integers(0, 2**32 - 1))
def test_crc32c_matches_crc32c_package(data, start):
    assert ref.crc32c(data) == crc32c_pkg.crc32c(data)
    assert ref.crc32c(data, start) == crc32c_pkg.crc32c(data, start)


# ----------------------------------------------------------------------------- varints

# Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/ByteUtilsTest.java
VARINT_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"),
    (1048575, "feff7f"), (-1048576, "ffff7f"), (1048576, "80808001"), (-1048577, "81808001"),
    (134217727, "feffff7f"), (-134217728, "ffffff7f"), (134217728, "8080808001"),
    (-134217729, "8180808001"), (INT32_MAX, "feffffff0f"), (INT32_MIN, "ffffffff0f"),
]
VARLONG_VECTORS = VARINT_VECTORS + [
    (17179869183, "feffffff7f"), (-17179869184, "ffffffff7f"),
    (17179869184, "808080808001"), (-17179869185, "818080808001"),
    (2199023255551, "feffffffff7f"), (-2199023255552, "ffffffffff7f"),
    (2199023255552, "80808080808001"), (-2199023255553, "81808080808001"),
    (281474976710655, "feffffffffff7f"), (-281474976710656, "ffffffffffff7f"),
    (281474976710656, "8080808080808001"), (-281474976710657, "8180808080808001"),
    (36028797018963967, "feffffffffffff7f"), (-36028797018963968, "ffffffffffffff7f"),
    (36028797018963968, "808080808080808001"), (-36028797018963969, "818080808080808001"),
    (4611686018427387903, "feffffffffffffff7f"), (-4611686018427387904, "ffffffffffffffff7f"),
    (4611686018427387904, "80808080808080808001"), (-4611686018427387905, "81808080808080808001"),
    (INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize("value,hexbytes", VARINT_VECTORS)
def test_varint_kafka_vectors(value, hexbytes):
    wire = bytes.fromhex(hexbytes)
    assert ref.encode_varint(value) == wire
    assert ref.size_of_varint(value) == len(wire)
    assert ref.decode_varint(wire) == (value, len(wire))
    assert ref.decode_varint(b"\xaa\xbb" + wire + b"\x99", 2) == (value, 2 + len(wire))


@pytest.mark.parametrize("value,hexbytes", VARLONG_VECTORS)
def test_varlong_kafka_vectors(value, hexbytes):
    wire = bytes.fromhex(hexbytes)
    assert ref.encode_varlong(value) == wire
    assert ref.size_of_varlong(value) == len(wire)
    assert ref.decode_varlong(wire) == (value, len(wire))


def test_varint_invalid():
    # ByteUtilsTest.testInvalidVarint / testInvalidVarlong: one overflow byte.
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        ref.decode_varint(bytes.fromhex("ffffffffff01"))
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        ref.decode_varlong(bytes.fromhex("ffffffffffffffffffff01"))
    for wire in (b"", b"\x80", b"\xff\xff\xff\xff"):
        with pytest.raises(CorruptRecordError, match="truncated") as info:
            ref.decode_varint(wire)
        assert info.value.offset == 0
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        ref.decode_varint(b"\x00\x00\x80", 2)
    assert info.value.offset == 2
    # A 5th byte carrying bits beyond 32 (Java would silently drop them): rejected.
    with pytest.raises(CorruptRecordError, match="overflows"):
        ref.decode_varint(bytes.fromhex("ffffffff1f"))
    with pytest.raises(CorruptRecordError, match="overflows"):
        ref.decode_varlong(bytes.fromhex("ffffffffffffffffff03"))
    # Non-canonical (padded) encodings are accepted, as Java and librdkafka do.
    assert ref.decode_varint(b"\x80\x00") == (0, 2)


def test_varint_encode_ranges():
    with pytest.raises(OverflowError):
        ref.encode_varint(INT32_MAX + 1)
    with pytest.raises(OverflowError):
        ref.encode_varint(INT32_MIN - 1)
    with pytest.raises(OverflowError):
        ref.encode_varlong(INT64_MAX + 1)
    with pytest.raises(OverflowError):
        ref.size_of_varlong(INT64_MIN - 1)
    with pytest.raises(TypeError):
        ref.encode_varint(1.0)
    with pytest.raises(TypeError):
        ref.encode_varlong(True)


@SETTINGS
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_matches_kafka_python(value):
    from kafka.record.util import decode_varint, encode_varint, size_of_varint
    out = bytearray()
    encode_varint(value, out.append)
    assert ref.encode_varlong(value) == bytes(out)
    assert ref.size_of_varlong(value) == size_of_varint(value) == len(out)
    assert ref.decode_varlong(bytes(out)) == decode_varint(out, 0) == (value, len(out))
    if INT32_MIN <= value <= INT32_MAX:
        assert ref.encode_varint(value) == bytes(out)
        assert ref.decode_varint(bytes(out)) == (value, len(out))


# ----------------------------------------------------------------------------- murmur2

# Generated offline with the JVM Kafka client (asserted by Kafka's UtilsTest.testMurmur2).
MURMUR2_JAVA = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (bytes([12, 42, 56, 24, 109, 111]), 274204207),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize("key,expected", MURMUR2_JAVA)
def test_murmur2_java_vectors(key, expected):
    assert ref.murmur2(key) == expected
    assert ref.murmur2(bytearray(key)) == expected
    assert ref.murmur2(memoryview(key)) == expected


def test_murmur2_matches_kafka_python_on_random_keys():
    from kafka.partitioner.default import murmur2 as kp_murmur2  # returns the unsigned form
    rnd = random.Random(20240611)
    keys = [b""] + [rnd.randbytes(rnd.randint(0, 64)) for _ in range(4000)]
    keys += [b"key-%d" % i for i in range(1000)]
    for key in keys:
        h = ref.murmur2(key)
        assert INT32_MIN <= h <= INT32_MAX
        assert h & 0xFFFFFFFF == kp_murmur2(key), key
        # Java's Utils.toPositive(murmur2(key)) % numPartitions
        assert (h & 0x7FFFFFFF) % 12 == (kp_murmur2(key) & 0x7FFFFFFF) % 12


# ----------------------------------------------------------------------------- encoder layout

def test_batch_layout_uncompressed():
    recs = [(b"k", b"v", 1000, [("h", b"x"), ("n", None)]), (None, None, 999, None), (b"", b"", 1005, [])]
    batch = ref.encode_batch(recs, producer_id=77, producer_epoch=3, base_sequence=12)
    (base_offset, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq,
     count) = struct.unpack_from(">qiibIhiqqqhii", batch)
    assert (base_offset, length, epoch, magic, attrs, lod) == (0, len(batch) - 12, -1, 2, 0, 2)
    assert (base_ts, max_ts, pid, pepoch, bseq, count) == (1000, 1005, 77, 3, 12, 3)
    assert crc == crc32c_pkg.crc32c(batch[21:])
    expected = (
        simple_record(b"k", b"v", 0, 0, [(b"h", b"x"), (b"n", None)])
        + simple_record(None, None, -1, 1)
        + simple_record(b"", b"", 5, 2)
    )
    assert batch[61:] == expected
    # Hand-assembled first record (varints zig-zag: 1 -> 02, 2 -> 04, 15 -> 1e, -1 -> 01):
    # Length 15, Attributes 0, TimestampDelta 0, OffsetDelta 0, key "k", value "v",
    # HeadersCount 2, "h" = "x", "n" = null.
    assert batch[61:77].hex() == "1e" "00" "00" "00" "026b" "0276" "04" "0268" "0278" "026e" "01"


def test_batch_matches_kafka_python_builder_bytes():
    """kafka-python's builder lays out the same records byte for byte (codec none)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    recs = sample_records(30)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=9, producer_epoch=1, base_sequence=100,
                                        batch_size=1 << 20)
    for i, (k, v, ts, h) in enumerate(recs):
        assert builder.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    theirs = bytearray(builder.build())
    ours = ref.encode_batch(recs, producer_id=9, producer_epoch=1, base_sequence=100)
    # kafka-python writes PartitionLeaderEpoch 0 where a producer should send -1.
    assert theirs[12:16] == b"\x00\x00\x00\x00"
    theirs[12:16] = b"\xff\xff\xff\xff"
    assert ours[:17] == theirs[:17]
    assert ours[21:] == theirs[21:]


def test_two_tuple_form_uses_now_and_no_headers():
    before = int(time.time() * 1000)
    batch = ref.decode_batch(ref.encode_batch([(b"a", b"b"), (None, b"c")]))
    after = int(time.time() * 1000)
    assert before <= batch.base_timestamp <= after
    assert [r.timestamp for r in batch.records] == [batch.base_timestamp] * 2
    assert all(r.headers == [] for r in batch.records)
    # None as the timestamp of the long form means "now" too.
    batch = ref.decode_batch(ref.encode_batch([(b"a", b"b", None, None)]))
    assert before <= batch.base_timestamp <= int(time.time() * 1000)


def test_bytes_like_inputs_and_empty_headers_are_equivalent():
    a = ref.encode_batch([(b"key", b"value", 5, None)])
    assert ref.encode_batch([(bytearray(b"key"), memoryview(b"value"), 5, [])]) == a
    assert ref.encode_batch([(b"key", b"value", 5, ())]) == a
    import array
    arr = array.array("B", b"value")
    assert ref.encode_batch([(b"key", arr, 5, None)]) == a


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_codec(codec):
    recs = sample_records(50)
    batch = ref.encode_batch(recs, compression=codec, producer_id=1234567890123,
                             producer_epoch=32767, base_sequence=INT32_MAX - 49)
    assert batch[21:23] == struct.pack(">h", CODEC_ID[codec])
    d = ref.decode_batch(batch)
    assert d.compression == codec and d.timestamp_type == "create"
    assert not d.is_transactional and not d.is_control
    assert (d.producer_id, d.producer_epoch, d.base_sequence) == (1234567890123, 32767, INT32_MAX - 49)
    assert d.records_count == 50 and d.last_offset_delta == 49
    assert d.base_timestamp == recs[0][2] and d.max_timestamp == max(r[2] for r in recs)
    got = [(r.key, r.value, r.timestamp, r.headers) for r in d.records]
    assert got == as_expected(recs)
    assert [r.offset_delta for r in d.records] == list(range(50))
    assert all(r.attributes == 0 for r in d.records)


def test_compression_framing_details():
    recs = sample_records(40)
    section = ref.encode_batch(recs)[61:]
    lz4 = ref.encode_batch(recs, compression="lz4")[61:]
    assert lz4[:4] == b"\x04\x22\x4d\x18"            # LZ4 frame magic
    flg = lz4[4]
    assert flg >> 6 == 1                              # frame version 01
    assert flg & 0x20                                 # B.Indep: blocks not linked (KIP-57)
    assert not flg & 0x04                             # no content checksum
    assert bytes(cramjam.lz4.decompress(lz4)) == section
    snappy = ref.encode_batch(recs, compression="snappy")[61:]
    assert snappy[:8] != b"\x82SNAPPY\x00"           # a raw block, not xerial framing
    assert bytes(cramjam.snappy.decompress_raw(snappy)) == section
    gz = ref.encode_batch(recs, compression="gzip")[61:]
    assert gz[:2] == b"\x1f\x8b"
    import gzip
    assert gzip.decompress(gz) == section               # stdlib zlib reads it
    zs = ref.encode_batch(recs, compression="zstd")[61:]
    assert zs[:4] == b"\x28\xb5\x2f\xfd"


def test_compression_levels():
    recs = sample_records(40)
    for codec, (lo, hi, default) in ref.LEVELS.items():
        implicit = ref.encode_batch(recs, compression=codec)
        assert implicit == ref.encode_batch(recs, compression=codec, compression_level=default)
        for level in (lo, hi):
            d = ref.decode_batch(ref.encode_batch(recs, compression=codec, compression_level=level))
            assert len(d.records) == 40
        for bad in (lo - 1, hi + 1):
            with pytest.raises(ValueError, match="compression_level"):
                ref.encode_batch(recs, compression=codec, compression_level=bad)
        with pytest.raises(TypeError, match="compression_level"):
            ref.encode_batch(recs, compression=codec, compression_level="9")
    # cramjam's own defaults: gzip 6 and zstd 3 are Kafka's; lz4's (4) is not, hence explicit 9.
    data = ref.encode_batch(recs)[61:]
    assert bytes(cramjam.gzip.compress(data)) == ref.encode_batch(recs, compression="gzip")[61:]
    assert bytes(cramjam.zstd.compress(data)) == ref.encode_batch(recs, compression="zstd")[61:]
    # lz4 levels above 12 are LZ4HC's maximum in cramjam.
    assert (ref.encode_batch(recs, compression="lz4", compression_level=17)
            == ref.encode_batch(recs, compression="lz4", compression_level=12))
    for codec in ("none", "snappy"):
        with pytest.raises(ValueError, match="compression_level"):
            ref.encode_batch(recs, compression=codec, compression_level=1)
    with pytest.raises(ValueError, match="brotli"):
        ref.encode_batch(recs, compression="brotli")
    with pytest.raises(ValueError, match="GZIP"):
        ref.encode_batch(recs, compression="GZIP")


def test_encode_argument_errors():
    with pytest.raises(ValueError, match="empty"):
        ref.encode_batch([])
    cases = [
        ([(b"a", b"b"), ("str", b"v")], "record 1: key"),
        ([(b"a", b"b"), (b"k", 12)], "record 1: value"),
        ([(b"k", b"v", 1.5, None)], "record 0: timestamp"),
        ([(b"k", b"v", 1, {"a": b"b"})], "record 0: headers"),
        ([(b"k", b"v", 1, [(b"bytes-key", b"x")])], "record 0: header 0 key"),
        ([(b"k", b"v", 1, [("ok", b"x"), ("k", "str")])], "record 0: header 1 value"),
        ([(b"k", b"v", 1, [("k",)])], "record 0: header 0"),
        ([(b"k", b"v", 1)], "record 0"),
        ([[b"k", b"v"]], "record 0"),
        ([b"kv"], "record 0"),
        (b"kv", "records"),
        (42, "records"),
    ]
    for records, match in cases:
        with pytest.raises(TypeError, match=match):
            ref.encode_batch(records)
    with pytest.raises(ValueError, match="header 0 key"):
        ref.encode_batch([(b"k", b"v", 1, [("\ud800", b"x")])])
    ok = [(b"k", b"v", 0, None)]
    for kwargs, match in [
        (dict(producer_id=INT64_MAX + 1), "ProducerId"),
        (dict(producer_id=INT64_MIN - 1), "ProducerId"),
        (dict(producer_epoch=32768), "ProducerEpoch"),
        (dict(producer_epoch=-32769), "ProducerEpoch"),
        (dict(base_sequence=INT32_MAX + 1), "BaseSequence"),
    ]:
        with pytest.raises(ValueError, match=match):
            ref.encode_batch(ok, **kwargs)
    with pytest.raises(TypeError, match="ProducerId"):
        ref.encode_batch(ok, producer_id="1")
    with pytest.raises(OverflowError, match="record 0: timestamp"):
        ref.encode_batch([(b"k", b"v", INT64_MAX + 1, None)])
    with pytest.raises(OverflowError, match="record 1: TimestampDelta"):
        ref.encode_batch([(b"k", b"v", INT64_MIN, None), (b"k", b"v", INT64_MAX, None)])
    # Extremes that do fit.
    d = ref.decode_batch(ref.encode_batch([(None, None, INT64_MIN, None)], producer_id=INT64_MIN,
                                          producer_epoch=-32768, base_sequence=INT32_MIN))
    assert d.records[0].timestamp == INT64_MIN and d.producer_id == INT64_MIN


# ----------------------------------------------------------------------------- other readers

@pytest.fixture
def kafka_python_codecs(monkeypatch):
    """Lets kafka-python handle snappy/lz4/zstd with cramjam when its optional libraries are absent."""
    import kafka.codec as kc
    import kafka.record.default_records as kdr
    if not kc.has_snappy():
        shim = types.SimpleNamespace(compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
                                     decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)))
        monkeypatch.setattr(kc, "snappy", shim)  # kafka-python's xerial code keeps running
    if not kc.has_lz4():
        def lz4_encode(data):
            c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
            c.compress(data)
            return bytes(c.finish())
        monkeypatch.setattr(kc, "has_lz4", lambda: True)
        monkeypatch.setattr(kdr, "lz4_encode", lz4_encode)
        monkeypatch.setattr(kdr, "lz4_decode", lambda b: bytes(cramjam.lz4.decompress(b)))
    if not kc.has_zstd():
        monkeypatch.setattr(kc, "has_zstd", lambda: True)
        monkeypatch.setattr(kdr, "zstd_encode", lambda b: bytes(cramjam.zstd.compress(b, level=3)))
        monkeypatch.setattr(kdr, "zstd_decode", lambda b: bytes(cramjam.zstd.decompress(b)))
    return kdr


def aiokafka_readers():
    from aiokafka.record._crecords import DefaultRecordBatch as CBatch
    from aiokafka.record.default_records import _DefaultRecordBatchPy as PyBatch
    return [PyBatch, CBatch]


def aiokafka_builders():
    from aiokafka.record._crecords import DefaultRecordBatchBuilder as CBuilder
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as PyBuilder
    return [PyBuilder, CBuilder]


def check_foreign_batch(batch, recs, codec, pid, epoch, seq, with_count=True):
    assert batch.magic == 2
    assert batch.base_offset == 0
    assert batch.compression_type == CODEC_ID[codec]
    assert batch.timestamp_type == 0
    assert not batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
    assert batch.first_timestamp == recs[0][2]
    assert batch.max_timestamp == max(r[2] for r in recs)
    assert batch.last_offset_delta == len(recs) - 1
    if with_count:
        assert batch.records_count == len(recs)
    assert batch.validate_crc()
    got = [(m.offset, m.key, m.value, m.timestamp, list(m.headers)) for m in batch]
    assert got == [(i, k, v, ts, h) for i, (k, v, ts, h) in enumerate(as_expected(recs))]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_twin_batches(codec, kafka_python_codecs):
    recs = sample_records(60, seed=CODEC_ID[codec])
    data = ref.encode_batch(recs, compression=codec, producer_id=4242, producer_epoch=7,
                            base_sequence=1000)
    batch = kafka_python_codecs.DefaultRecordBatch(bytearray(data))
    check_foreign_batch(batch, recs, codec, 4242, 7, 1000)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_twin_batches(codec):
    recs = sample_records(60, seed=10 + CODEC_ID[codec])
    data = ref.encode_batch(recs, compression=codec, producer_id=99, producer_epoch=0,
                            base_sequence=0)
    for reader in aiokafka_readers():
        check_foreign_batch(reader(data), recs, codec, 99, 0, 0, with_count=False)


@pytest.mark.parametrize("codec", CODECS)
def test_twin_reads_kafka_python_batches(codec, kafka_python_codecs):
    recs = sample_records(80, seed=20 + CODEC_ID[codec])
    builder = kafka_python_codecs.DefaultRecordBatchBuilder(
        magic=2, compression_type=CODEC_ID[codec], is_transactional=False,
        producer_id=5, producer_epoch=2, base_sequence=77, batch_size=1 << 20)
    for i, (k, v, ts, h) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v, headers=h)
    data = bytes(builder.build())
    if codec == "snappy":
        assert data[61:69] == b"\x82SNAPPY\x00"   # kafka-python writes xerial framing
    d = ref.decode_batch(data)
    assert d.compression == codec                  # compressible data: codec kept
    assert d.partition_leader_epoch == 0
    assert (d.producer_id, d.producer_epoch, d.base_sequence) == (5, 2, 77)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in d.records] == as_expected(recs)


@pytest.mark.parametrize("codec", CODECS)
def test_twin_reads_aiokafka_batches(codec):
    recs = sample_records(80, seed=30 + CODEC_ID[codec])
    for builder_cls in aiokafka_builders():
        builder = builder_cls(2, CODEC_ID[codec], 0, 6, 3, 88, 1 << 20)
        for i, (k, v, ts, h) in enumerate(recs):
            builder.append(i, timestamp=ts, key=k, value=v, headers=h)
        data = bytes(builder.build())
        d = ref.decode_batch(data)
        assert d.compression == codec
        assert (d.producer_id, d.producer_epoch, d.base_sequence) == (6, 3, 88)
        assert [(r.key, r.value, r.timestamp, r.headers) for r in d.records] == as_expected(recs)


def test_twin_reads_xerial_snappy_multi_chunk():
    """Java's snappy writer (xerial, 32 KiB chunks): several chunks, and an empty stream."""
    from aiokafka.codec import snappy_encode
    recs = [(b"k%d" % i, b"x" * 3000 + b"%d" % i, 1000 + i, None) for i in range(40)]
    section = ref.encode_batch(recs)[61:]
    framed = snappy_encode(section, xerial_compatible=True, xerial_blocksize=32 * 1024)
    assert framed[:8] == b"\x82SNAPPY\x00" and len(section) > 3 * 32 * 1024
    data = raw_batch(framed, len(recs), base_ts=1000, max_ts=1039, attributes=2)
    assert [r.value for r in ref.decode_batch(data).records] == [r[1] for r in recs]
    # Truncated and hostile xerial streams.
    header_only = raw_batch(framed[:16], 0, last_offset_delta=0, attributes=2)
    assert ref.decode_batch(header_only).records == []
    expect_corrupt(raw_batch(framed[:12], 40, attributes=2), field="Records", match="xerial")
    expect_corrupt(raw_batch(framed[:18], 40, attributes=2), field="Records", match="chunk length")
    bad = bytearray(framed)
    bad[16:20] = struct.pack(">i", -5)
    expect_corrupt(raw_batch(bytes(bad), 40, attributes=2), field="Records", offset=61 + 16)
    bad[16:20] = struct.pack(">i", len(framed))
    expect_corrupt(raw_batch(bytes(bad), 40, attributes=2), field="Records", match="exceeds")


@SETTINGS
@given(st.lists(st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=120),
    st.integers(-(2**62) + 1, 2**62 - 1),  # any two differ by less than 2**63
    st.none() | st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)),
                         max_size=3)),
    min_size=1, max_size=12),
    st.sampled_from(CODECS), st.integers(-1, 2**40), st.integers(-1, 32767),
    st.integers(-1, INT32_MAX))
def test_property_roundtrip_and_aiokafka_agree(recs, codec, pid, epoch, seq):
    data = ref.encode_batch(recs, compression=codec, producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq)
    assert ref.encode_batch(recs, compression=codec, producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq) == data  # deterministic
    d = ref.decode_batch(data)
    expected = as_expected(recs)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in d.records] == expected
    assert (d.producer_id, d.producer_epoch, d.base_sequence) == (pid, epoch, seq)
    from aiokafka.record._crecords import DefaultRecordBatch as CBatch
    got = [(m.key, m.value, m.timestamp, list(m.headers)) for m in CBatch(data)]
    assert got == expected


# ----------------------------------------------------------------------------- decoder validation

def good_records_section():
    return (simple_record(b"k", b"v", 0, 0, [(b"h", b"x")]) + simple_record(None, None, 5, 1))


def test_decode_header_checks():
    good = raw_batch(good_records_section(), 2, base_ts=100, max_ts=105)
    assert len(ref.decode_batch(good).records) == 2
    expect_corrupt(b"", field="BaseOffset", offset=0)
    expect_corrupt(good[:10], field="Length", offset=8)
    expect_corrupt(good[:40], field="Length", offset=8, match="truncated")
    expect_corrupt(good[:-1], field="Length", offset=8, match="truncated")
    expect_corrupt(good + b"\x00", field="Length", offset=8, match="trailing")
    expect_corrupt(good + good, field="Length", offset=8, match="trailing")
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 48)
    expect_corrupt(bytes(short), field="Length", offset=8, match="minimum")
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    expect_corrupt(bytes(bad_magic), field="Magic", offset=16)
    expect_corrupt(bytes(bad_magic[:20]), field="Magic", offset=16)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0x01
    expect_corrupt(bytes(bad_crc), field="CRC", offset=17, match="CRC mismatch")
    for codec_id in (5, 6, 7):
        expect_corrupt(raw_batch(good_records_section(), 2, base_ts=100, max_ts=105,
                                 attributes=codec_id), field="Attributes", offset=21)
    expect_corrupt(raw_batch(b"", -1, last_offset_delta=0), field="RecordsCount", offset=57)
    expect_corrupt(raw_batch(good_records_section(), 2, last_offset_delta=-3),
                   field="LastOffsetDelta", offset=23)


def test_decode_header_flags():
    sec = good_records_section()
    d = ref.decode_batch(raw_batch(sec, 2, base_ts=100, max_ts=999, attributes=0x08 | 0x10))
    assert d.timestamp_type == "log_append" and d.is_transactional and not d.is_control
    assert [r.timestamp for r in d.records] == [999, 999]  # LogAppendTime: MaxTimestamp
    d = ref.decode_batch(raw_batch(sec, 2, base_ts=100, max_ts=105, attributes=0x20))
    assert d.is_control
    empty = ref.decode_batch(raw_batch(b"", 0, last_offset_delta=4))
    assert empty.records == [] and empty.records_count == 0


def test_decode_count_and_offset_checks():
    sec = good_records_section()
    expect_corrupt(raw_batch(sec, 3, last_offset_delta=1, base_ts=100, max_ts=105),
                   field="RecordsCount", offset=57, match="holds only 2")
    expect_corrupt(raw_batch(sec, 1, last_offset_delta=0, base_ts=100, max_ts=105),
                   field="Records", match="left after the last record")
    expect_corrupt(raw_batch(sec, 2, last_offset_delta=5, base_ts=100, max_ts=105),
                   field="LastOffsetDelta", offset=23)
    expect_corrupt(raw_batch(sec, 2, base_ts=100, max_ts=104), field="MaxTimestamp", offset=35)
    dup = simple_record(b"k", b"v", 0, 0) + simple_record(b"k", b"v", 0, 0)
    second = 61 + len(simple_record(b"k", b"v", 0, 0))
    expect_corrupt(raw_batch(dup, 2, last_offset_delta=1), field="OffsetDelta", offset=second + 3)
    gap = simple_record(b"k", b"v", 0, 0) + simple_record(b"k", b"v", 0, 3)
    d = ref.decode_batch(raw_batch(gap, 2, last_offset_delta=3))  # compacted-style gaps are fine
    assert [r.offset_delta for r in d.records] == [0, 3]
    overflow = simple_record(b"k", b"v", INT64_MAX, 0)
    expect_corrupt(raw_batch(overflow, 1, base_ts=1, max_ts=1), field="TimestampDelta", offset=63,
                   match="overflows int64")


def test_decode_record_checks():
    def batch_of(*records, n=None):
        return raw_batch(b"".join(records), len(records) if n is None else n)
    r0 = 61  # first record's Length
    # KeyLength / ValueLength below -1 and past the record.
    expect_corrupt(batch_of(raw_record(b"\x00", V(0), V(0), V(-2), V(-1), V(0))),
                   field="KeyLength", offset=r0 + 4)
    expect_corrupt(batch_of(raw_record(b"\x00", V(0), V(0), V(-1), V(-7), V(0))),
                   field="ValueLength", offset=r0 + 5)
    expect_corrupt(batch_of(raw_record(b"\x00", V(0), V(0), V(50), b"abc")),
                   field="KeyLength", offset=r0 + 4, match="exceeds")
    # Record Length larger than the bytes left, negative, and not matching the fields.
    expect_corrupt(raw_batch(V(40) + b"\x00" * 5, 1), field="Length", offset=r0, match="exceeds")
    expect_corrupt(raw_batch(V(-3) + b"\x00" * 5, 1), field="Length", offset=r0, match="negative")
    body = b"\x00" + V(0) + V(0) + V(-1) + V(-1) + V(0)
    expect_corrupt(raw_batch(V(len(body) + 2) + body + b"\x00\x00", 1), field="Length",
                   offset=r0, match="fields take 6")
    # A field running past the record's Length (but not past the section).
    expect_corrupt(raw_batch(V(len(body) - 1) + body, 1), field="HeadersCount")
    # Truncated / overlong varints inside a record.
    expect_corrupt(raw_batch(V(3) + b"\x00\xff\xff", 1), field="TimestampDelta", offset=r0 + 2,
                   match="truncated")
    expect_corrupt(batch_of(raw_record(b"\x00", b"\xff" * 10 + b"\x01")), field="TimestampDelta",
                   match="longer than 10")
    expect_corrupt(batch_of(raw_record(b"\x00", V(0), b"\xff\xff\xff\xff\xff\x01")),
                   field="OffsetDelta", match="longer than 5")
    expect_corrupt(raw_batch(b"\xff\xff\xff\xff\xff\x01", 1), field="Length", offset=r0)
    expect_corrupt(batch_of(raw_record()), field="Attributes", offset=r0 + 1)
    # Headers: negative count, null key, bad UTF-8, negative value length.
    base = b"\x00" + V(0) + V(0) + V(-1) + V(-1)
    expect_corrupt(batch_of(raw_record(base, V(-1))), field="HeadersCount", offset=r0 + 6)
    expect_corrupt(batch_of(raw_record(base, V(1), V(-1), V(-1))), field="HeaderKeyLength",
                   offset=r0 + 7, match="null header key")
    expect_corrupt(batch_of(raw_record(base, V(1), V(2), b"\xc3\x28", V(-1))), field="HeaderKey",
                   offset=r0 + 8, match="UTF-8")
    expect_corrupt(batch_of(raw_record(base, V(1), V(1), b"a", V(-2))),
                   field="HeaderValueLength", offset=r0 + 9)
    expect_corrupt(batch_of(raw_record(base, V(3), V(1), b"a", V(-1))), field="HeaderKeyLength",
                   match="truncated")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decode_compressed_errors_name_the_section(codec):
    recs = [(b"k", b"v", 10, None), (b"k2", b"v2", 11, None)]
    good = ref.encode_batch(recs, compression=codec)
    # Garbage instead of a compressed stream.
    expect_corrupt(refix(good[:61] + b"\x13garbage-garbage-garbage"), field="Records", offset=61)
    # Valid compression of a bad records section: offsets count in the decompressed section.
    section = simple_record(b"k", b"v", 0, 0) + raw_record(b"\x00", V(1), V(1), V(-5))
    compressed = compression.compress(CODEC_ID[codec], section, ref.LEVELS.get(codec, (0, 0, None))[2])
    err = expect_corrupt(raw_batch(compressed, 2, attributes=CODEC_ID[codec], base_ts=10, max_ts=11),
                         field="KeyLength")
    assert err.offset == len(simple_record(b"k", b"v", 0, 0)) + 4
    assert "decompressed records section" in str(err)


def test_decode_refuses_lz4_frames_java_refuses():
    """librdkafka and cramjam read linked-block LZ4 frames; Java Kafka does not (KIP-57)."""
    recs = [(b"k", b"x" * 70000 + b"%d" % i, 1000, None) for i in range(3)]
    section = ref.encode_batch(recs)[61:]
    c = cramjam.lz4.Compressor(content_checksum=False, block_linked=True)
    c.compress(section)
    linked = bytes(c.finish())
    assert bytes(cramjam.lz4.decompress(linked)) == section
    expect_corrupt(raw_batch(linked, 3, base_ts=1000, max_ts=1000, attributes=3),
                   field="Records", offset=65, match="linked blocks")
    ok = ref.encode_batch(recs, compression="lz4")
    for pos, value, what in [(65, ok[65] & ~0xC0, "version"), (65, ok[65] | 0x01, "reserved"),
                             (66, 0x30, "block descriptor"), (66, ok[66] | 0x80, "block descriptor")]:
        bad = bytearray(ok)
        bad[pos] = value
        expect_corrupt(refix(bad), field="Records", offset=65, match=what)
    expect_corrupt(refix(ok[:61] + b"\x05" + ok[62:]), field="Records", offset=61, match="not an LZ4 frame")
    # cramjam sets B.Indep and B.Checksum (0x70); Kafka's own KafkaLZ4BlockOutputStream writes
    # 0x60 (no block checksum). Both readers accept both.
    assert ok[65] == 0x70


def test_decode_only_bytes_like():
    with pytest.raises(TypeError):
        ref.decode_batch("text")
    good = ref.encode_batch([(b"k", b"v", 1, None)])
    assert ref.decode_batch(bytearray(good)) == ref.decode_batch(memoryview(good))


# ----------------------------------------------------------------------------- hostile input

def decode_or_corrupt(data):
    """decode_batch either succeeds or raises CorruptRecordError; nothing else escapes."""
    try:
        return ref.decode_batch(data)
    except CorruptRecordError as exc:
        assert exc.field is not None and exc.offset is not None and exc.offset >= 0, exc
        return None


@SETTINGS
@given(st.binary(max_size=300))
@example(b"")
@example(b"\x00" * 61)
def test_hostile_random_bytes(data):
    decode_or_corrupt(data)


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from(CODECS), st.integers(-5, 5), st.integers(0, 2**16 - 1))
def test_hostile_random_records_section(section, codec, count, attr_bits):
    """A valid header (Length, CRC fixed) around random Records bytes reaches the parser."""
    attrs = (attr_bits & ~0x07) | CODEC_ID[codec]
    attrs = attrs - 65536 if attrs > 32767 else attrs
    decode_or_corrupt(raw_batch(section, count, attributes=attrs))


@pytest.mark.parametrize("codec", CODECS)
def test_hostile_every_truncation(codec):
    good = ref.encode_batch(sample_records(6), compression=codec)
    for n in range(len(good)):
        expect_corrupt(good[:n])
        # With Length and CRC made consistent, the truncation hits the records parser.
        if n >= 61:
            decode_or_corrupt(refix(good[:n]))
            with pytest.raises(CorruptRecordError):
                ref.decode_batch(refix(good[:n]))


@pytest.mark.parametrize("codec", CODECS)
def test_hostile_every_single_byte_flip(codec):
    good = ref.encode_batch(sample_records(4), compression=codec)
    rnd = random.Random(7)
    for pos in range(len(good)):
        for mask in (0x01, 0x80, rnd.randint(1, 255)):
            bad = bytearray(good)
            bad[pos] ^= mask
            if pos >= 16:
                # Magic, CRC, everything CRC covers, or Length: always detected.
                expect_corrupt(bytes(bad))
            else:
                decode_or_corrupt(bytes(bad))  # BaseOffset / Length / PartitionLeaderEpoch
            if pos >= 21:
                decode_or_corrupt(refix(bad))  # parser reached


@SETTINGS
@given(st.data())
def test_hostile_mutations_with_fixed_crc(data):
    codec = data.draw(st.sampled_from(CODECS))
    good = bytearray(ref.encode_batch(sample_records(5, seed=3), compression=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        pos = data.draw(st.integers(21, len(good) - 1))
        if kind == "flip":
            good[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            good[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif len(good) > 62:
            del good[pos:pos + data.draw(st.integers(1, 8))]
    decode_or_corrupt(refix(good))


# ----------------------------------------------------------------------------- framing

def test_frame():
    assert ref.frame(b"") == b"\x00\x00\x00\x00"
    assert ref.frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert ref.frame(bytearray(b"xy")) == b"\x00\x00\x00\x02xy"


def test_frame_receiver_any_split():
    payloads = [b"", b"a", b"hello world", bytes(range(256)) * 4, b"\x00\x00\x00\x05"]
    stream = b"".join(ref.frame(p) for p in payloads)
    # One byte at a time.
    rx = ref.FrameReceiver(2000)
    got = []
    for i in range(len(stream)):
        got += rx.feed(stream[i:i + 1])
    assert got == payloads and rx.buffered == 0
    # Everything in one chunk.
    assert ref.FrameReceiver(2000).feed(stream) == payloads
    # Random splits, including empty chunks.
    rnd = random.Random(5)
    for _ in range(200):
        rx = ref.FrameReceiver(2000)
        got, pos = [], 0
        while pos < len(stream):
            step = rnd.randint(0, 40)
            got += rx.feed(memoryview(stream)[pos:pos + step])
            pos += step
        assert got == payloads


def test_frame_receiver_limits():
    rx = ref.FrameReceiver(10)
    assert rx.feed(ref.frame(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameError) as info:
        rx.feed(ref.frame(b"ok") + struct.pack(">i", 11))
    assert info.value.field == "Size" and info.value.offset == 14 + 6
    with pytest.raises(FrameError):
        rx.feed(b"")  # stays failed
    rx = ref.FrameReceiver(10)
    assert rx.feed(b"\xff\xff") == []
    with pytest.raises(FrameError, match="negative") as info:
        rx.feed(b"\xff\xfe")
    assert info.value.offset == 0
    rx = ref.FrameReceiver(0)
    assert rx.feed(b"\x00" * 8) == [b"", b""]
    with pytest.raises(FrameError):
        rx.feed(b"\x00\x00\x00\x01")
    with pytest.raises(OverflowError):
        ref.FrameReceiver(-1)


@SETTINGS
@given(st.lists(st.binary(max_size=50), max_size=10), st.lists(st.integers(0, 30), max_size=40))
def test_frame_receiver_property(payloads, cuts):
    stream = b"".join(ref.frame(p) for p in payloads)
    rx = ref.FrameReceiver(50)
    got, pos = [], 0
    for c in cuts:
        got += rx.feed(stream[pos:pos + c])
        pos += c
    got += rx.feed(stream[pos:])
    assert got == payloads and rx.buffered == 0
