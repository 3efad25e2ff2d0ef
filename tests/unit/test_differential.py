"""Differential tests: the compiled codec against its pure-Python twin.

Same input, byte-identical output for every writer; the same verdict (an equal
result, or CorruptRecordError/CodecError from both) for every reader, on valid
and hostile input alike.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kproducer import _reference as ref
from kproducer import codec
from kproducer.errors import CodecError, CorruptRecordError, FrameError

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

blobs = st.one_of(st.none(), st.binary(max_size=64), st.binary(min_size=200, max_size=3000))
header_lists = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=4),
)
timestamps = st.integers(-(2**40), 2**42)
full_records = st.tuples(blobs, blobs, timestamps, header_lists)
record_lists = st.lists(full_records, min_size=1, max_size=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists, st.sampled_from(CODECS), st.integers(-1, 2**62),
       st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1))
def test_writer_byte_identical(records, compression, pid, epoch, seq):
    kwargs = dict(compression=compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    c_bytes = codec.encode_batch(records, **kwargs)
    assert c_bytes == ref.encode_batch(records, **kwargs)
    c_dec = codec.decode_batch(c_bytes)
    assert c_dec == ref.decode_batch(c_bytes)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in c_dec.records] == \
        [(k, v, t, list(h or [])) for k, v, t, h in records]


@settings(max_examples=60, deadline=None)
@given(record_lists, st.data())
def test_writer_byte_identical_every_level(records, data):
    compression = data.draw(st.sampled_from(["gzip", "lz4", "zstd"]))
    lo, hi, _ = ref.LEVELS[compression]
    level = data.draw(st.integers(max(lo, -50), hi))
    assert codec.encode_batch(records, compression=compression, compression_level=level) == \
        ref.encode_batch(records, compression=compression, compression_level=level)


def _verdict(fn, data):
    try:
        return ("ok", fn(data))
    except CorruptRecordError as exc:
        return ("corrupt", exc.field)


def _refresh_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, codec.crc32c(bytes(buf[21:])))
    return bytes(buf)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists, st.sampled_from(CODECS), st.data())
def test_readers_agree_on_mutations(records, compression, data):
    good = bytearray(codec.encode_batch(records, compression=compression))
    mode = data.draw(st.sampled_from(["flip", "flip-crc", "truncate", "splice"]))
    if mode in ("flip", "flip-crc"):
        i = data.draw(st.integers(0, len(good) - 1))
        good[i] ^= data.draw(st.integers(1, 255))
        bad = _refresh_crc(good) if mode == "flip-crc" and i >= 21 else bytes(good)
    elif mode == "truncate":
        bad = bytes(good[:data.draw(st.integers(0, len(good) - 1))])
    else:
        at = data.draw(st.integers(61, len(good)))
        good[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        struct.pack_into(">i", good, 8, len(good) - 12)
        bad = _refresh_crc(good)
    c_kind, c_val = _verdict(codec.decode_batch, bad)
    r_kind, r_val = _verdict(ref.decode_batch, bad)
    assert c_kind == r_kind, (mode, c_val, r_val)
    if c_kind == "ok":
        assert c_val == r_val


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_readers_agree_on_records_section_garbage(section):
    head = bytearray(codec.encode_batch([(b"k", b"v", 0, None)])[:61])
    buf = bytearray(head + section)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    for count in (0, 1, 3):
        struct.pack_into(">i", buf, 57, count)
        struct.pack_into(">i", buf, 23, max(count - 1, 0))
        bad = _refresh_crc(buf)
        assert _verdict(codec.decode_batch, bad)[0] == _verdict(ref.decode_batch, bad)[0]


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_varints_agree(v32, v64):
    assert codec.encode_varint(v32) == ref.encode_varint(v32)
    assert codec.encode_varlong(v64) == ref.encode_varlong(v64)
    assert codec.varint_size(v32) == ref.varint_size(v32)
    assert codec.varlong_size(v64) == ref.varlong_size(v64)


@given(st.binary(max_size=12), st.integers(0, 3))
def test_varint_readers_agree(data, pos):
    assume(pos <= len(data))
    for c_fn, r_fn in ((codec.decode_varint, ref.decode_varint), (codec.decode_varlong, ref.decode_varlong)):
        try:
            c = c_fn(data, pos)
        except CodecError:
            c = "error"
        try:
            r = r_fn(data, pos)
        except CodecError:
            r = "error"
        assert c == r


@given(st.binary(max_size=200), st.integers(0, 2**32 - 1))
def test_hashes_agree(data, start):
    assert codec.crc32c(data, start) == ref.crc32c(data, start)
    assert codec.murmur2(data) == ref.murmur2(data)


@given(st.lists(st.binary(max_size=200), max_size=6), st.lists(st.integers(1, 50), min_size=1, max_size=20),
       st.binary(max_size=8))
def test_frame_receivers_agree(payloads, splits, tail):
    stream = b"".join(codec.frame(p) for p in payloads) + tail
    assert stream[:-len(tail) or None] == b"".join(ref.frame(p) for p in payloads)
    c_rx, r_rx = codec.FrameReceiver(150), ref.FrameReceiver(150)
    pos, i = 0, 0
    while pos < len(stream):
        chunk = stream[pos:pos + splits[i % len(splits)]]
        pos += len(chunk)
        i += 1
        try:
            c = c_rx.feed(chunk)
        except FrameError:
            c = "error"
        try:
            r = r_rx.feed(chunk)
        except FrameError:
            r = "error"
        assert c == r
        if c == "error":
            break
        assert c_rx.buffered == r_rx.buffered


@pytest.mark.parametrize("compression", CODECS)
def test_large_batches_identical(compression):
    records = [(b"key-%d" % i, bytes([i % 251]) * (i % 3000), 1_700_000_000_000 + i, [("n", b"%d" % i)])
               for i in range(2000)]
    c_bytes = codec.encode_batch(records, compression=compression, producer_id=1, producer_epoch=0,
                                 base_sequence=0)
    assert c_bytes == ref.encode_batch(records, compression=compression, producer_id=1,
                                       producer_epoch=0, base_sequence=0)
