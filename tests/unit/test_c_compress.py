"""The C codecs the courier and the steps compress with (csrc/kp_compress.h): what they write
is what the Python codecs (kproducer.compression, cramjam) and independent decoders (the lz4,
zstandard and python-snappy packages) take, at every level a producer can set and across the
codecs' block sizes; every build has every codec (lz4, zstd and snappy vendored in
csrc/vendor, zlib the system's); a step closing a batch compresses with them without the GIL.
Kafka's reader (librdkafka) reads them in tests/broker/test_c_compress_read_by_librdkafka.py."""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pytest

from kproducer import compression
from kproducer._core import RecordAccumulator, batch_from_records, c_compress, courier_codecs
from kproducer._reference import decode_batch

from _compress_samples import CODECS, _sample

SAMPLES = {
    "empty": b"",
    "one byte": b"k",
    "text": b"the quick brown fox jumps over the lazy dog; " * 400,
    "random": os.urandom(70_000),       # over one 64 KiB lz4 block, incompressible
    "mixed": b"".join(os.urandom(64) + b"\0" * 512 for _ in range(300)),
}


def _levels(codec):
    if codec not in compression.LEVELS:
        return [None]
    lo, hi, default = compression.LEVELS[codec]
    return sorted({max(lo, -5), 1, default, hi})     # zstd's lowest (-131072) is slow to no gain


def test_every_build_has_every_codec():
    """lz4, zstd and snappy are compiled in from csrc/vendor and zlib is required (setup.py):
    no build lacks one, whatever the machine's codec headers."""
    assert courier_codecs() == set(CODECS)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
@pytest.mark.parametrize("codec", sorted(courier_codecs()))
def test_what_the_c_codec_writes_the_python_codec_reads(codec, sample):
    data = SAMPLES[sample]
    for level in _levels(codec):
        out = c_compress(codec, data, level)
        assert compression.decompress(compression.CODEC_IDS[codec], out) == data, (codec, level)


@pytest.mark.parametrize("codec", sorted(courier_codecs()))
def test_levels_matter_and_are_checked_as_the_producer_checks_them(codec):
    data = b"".join(b"%d:%x;" % (i, i * 7919) for i in range(20000))
    if codec in compression.LEVELS:
        lo, hi, _ = compression.LEVELS[codec]
        assert len(c_compress(codec, data, hi)) < len(c_compress(codec, data, 1))
        with pytest.raises(ValueError, match=f"compression_level {hi + 1} out of range for {codec}"):
            c_compress(codec, data, hi + 1)
    else:
        with pytest.raises(ValueError, match="takes no level"):
            c_compress(codec, data, 3)


def test_lz4_frames_have_independent_blocks_as_kafka_s_reader_wants():
    """Kafka's Java reader refuses linked blocks (FLG bit 5 set: independent)."""
    assert "lz4" in courier_codecs(), "every build has the C lz4 (csrc/vendor/lz4)"
    out = c_compress("lz4", SAMPLES["random"])
    assert out[:4] == b"\x04\x22\x4d\x18"      # the frame's magic number
    flg = out[4]
    assert flg >> 6 == 1 and flg & 0x20, f"FLG {flg:#x}: version 01, independent blocks"
    assert not flg & 0x08 and not flg & 0x04, "no content size, no content checksum"


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="unknown codec 'brotli'"):
        c_compress("brotli", b"x")
    with pytest.raises(ValueError, match="'none' is not a codec"):
        c_compress("none", b"x")
    with pytest.raises(TypeError):
        c_compress("gzip", "not bytes")


# Around the codecs' block sizes: lz4's frames here have 64 KiB blocks, snappy compresses
# 64 KiB fragments, zstd's blocks hold up to 128 KiB.
SIZES = [0, 1, 17, 4095, 65535, 65536, 65537, 131071, 131072, 131073, 200_003, (1 << 20) + 7]


def _independent_decoders(codec):
    """Decoders of other projects than the one that compressed: cramjam (Rust crates) and
    the codec's own Python binding (its reference C library, built by that package)."""
    import cramjam
    import lz4.frame
    import snappy
    import zstandard

    if codec == "lz4":
        return {"cramjam": lambda b: bytes(cramjam.lz4.decompress(b)), "lz4.frame": lz4.frame.decompress}
    if codec == "zstd":
        # ZSTD_compressCCtx writes the content size into the frame header: no bound needed.
        return {"cramjam": lambda b: bytes(cramjam.zstd.decompress(b)),
                "zstandard": zstandard.ZstdDecompressor().decompress}
    assert codec == "snappy"
    return {"cramjam": lambda b: bytes(cramjam.snappy.decompress_raw(b)), "python-snappy": snappy.uncompress}


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy"])
def test_independent_decoders_read_the_vendored_codecs_at_every_size(codec):
    """What the vendored codecs write (csrc/vendor) is read by decoders that share no code with
    them, at sizes around each codec's block size, at the default level and at the highest
    (the lz4 frame's HC path, zstd's slowest strategies) for the smaller sizes."""
    decoders = _independent_decoders(codec)
    for size in SIZES:
        data = _sample(size)
        levels = _levels(codec) if size <= 131073 else [None]
        for level in levels:
            out = c_compress(codec, data, level)
            for name, decode in decoders.items():
                assert decode(out) == data, (codec, size, level, name)


def _filled(codec, level=None, partitions=1, records=8, value_size=1000):
    """An accumulator whose partitions hold one batch each of ``records`` mixed values."""
    acc = RecordAccumulator(batch_size=64 << 20, linger_ms=0, compression=codec,
                            compression_level=level, buffer_memory=256 << 20,
                            max_request_size=64 << 20)
    acc.set_partition_count("t", partitions)
    rng = random.Random(records)       # the same values for the same arguments
    values = [b"".join(rng.randbytes(16) + b"%06d" % i * 20 for i in range(value_size // 136 + 1))
              [:value_size] for _ in range(records)]
    for p in range(partitions):
        for i, v in enumerate(values):
            acc.append("t", p, b"k%d" % i, v, 1_700_000_000_000 + i, None, None)
    return acc, values


def _drain(acc, node, out):
    """Drains the batch of partition ``node`` (each partition its own leader) into ``out``."""
    batches = acc.drain(lambda topic, p: p, {node}, 64 << 20, 0, lingering=True)
    out.extend(batches[node])


@pytest.mark.parametrize("codec", sorted(courier_codecs()))
def test_a_step_closes_a_batch_with_the_c_codec(codec):
    """The Records section a step's drain leaves is the C codec's output for the plain
    section, at the producer's level, under the codec's attribute bits."""
    level = compression.LEVELS[codec][0] if codec in compression.LEVELS else None
    plain_acc, values = _filled("none")
    acc, _ = _filled(codec, level)
    plain, batch = [], []
    _drain(plain_acc, 0, plain)
    _drain(acc, 0, batch)
    [plain], [batch] = plain, batch
    for b in (plain, batch):
        b.finish(-1, -1, -1)
    assert bytes(batch)[61:] == c_compress(codec, bytes(plain)[61:], level)
    decoded = decode_batch(bytes(batch))
    assert decoded.compression == codec
    assert [(r.key, r.value) for r in decoded.records] == [(b"k%d" % i, v) for i, v in enumerate(values)]


# A level at which a large batch takes a while (zstd's highest takes ten times gzip's).
SLOW_LEVELS = {"gzip": 9, "zstd": 15}


@pytest.mark.parametrize("codec", sorted(courier_codecs() & set(SLOW_LEVELS)))
def test_a_step_compresses_without_the_gil_and_two_at_once(codec):
    """Two threads drain (and so close) one large batch each at a slow level while a third
    runs Python: with a switch interval far longer than the test, a thread holding the GIL
    keeps it until it blocks, so the ticker (which lets go of it between ticks) gets to tick
    during the drains only if the compression lets go of the GIL; and both batches, one
    compressed with the producer's kept compressor and one with a compressor of its own
    (the kept one is lent out), read back whole."""
    acc, values = _filled(codec, SLOW_LEVELS[codec], partitions=2, records=96, value_size=40_000)
    in_drains = threading.Event()
    ticks = [0]                 # ticks while the drains run
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            if in_drains.is_set():
                ticks[0] += 1
            time.sleep(0.001)   # lets go of the GIL, so the drains are never held up by it

    out = [[], []]
    ticker = threading.Thread(target=tick)
    drains = [threading.Thread(target=_drain, args=(acc, node, out[node])) for node in (0, 1)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)    # no forced switch: the GIL changes hands only when let go
    try:
        ticker.start()
        in_drains.set()
        t0 = time.perf_counter()
        for d in drains:
            d.start()
        for d in drains:
            d.join(120)
        took = time.perf_counter() - t0
        in_drains.clear()
    finally:
        stop.set()
        ticker.join(10)
        sys.setswitchinterval(old)
    assert all(len(o) == 1 for o in out)
    assert took > 0.2, f"the compression took {took:.3f} s: too little to tell"
    # Held for the compression, the GIL would reach the ticker only at the few points where
    # a drain or the main thread blocks (thread start and end): a handful of ticks at most.
    assert ticks[0] >= 20, f"the ticker ticked {ticks[0]} times in {took:.2f} s of compression"
    for [b] in out:
        b.finish(-1, -1, -1)
        decoded = decode_batch(bytes(b))
        assert decoded.compression == codec
        assert [r.value for r in decoded.records] == values


@pytest.mark.parametrize("codec", sorted(courier_codecs()))
def test_a_split_batch_is_compressed_with_a_compressor_of_its_own(codec):
    """The halves of a batch split after MESSAGE_TOO_LARGE (sender.py) are built outside any
    accumulator: each compresses with a C compressor of its own."""
    records = [(b"k%d" % i, b"%d" % i * 50, 1_700_000_000_000 + i, []) for i in range(50)]
    b = batch_from_records("t", 3, records, compression.CODEC_IDS[codec],
                           compression.resolve_level(codec, None))
    b.finish(-1, -1, -1)
    decoded = decode_batch(bytes(b))
    assert decoded.compression == codec
    assert [(r.key, r.value, r.timestamp) for r in decoded.records] == [r[:3] for r in records]
