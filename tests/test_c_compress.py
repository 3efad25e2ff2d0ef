"""The C codecs the courier compresses with (csrc/kp_compress.h): what they write is what the
Python codecs (kproducer.compression, cramjam) and Kafka's readers take, at every level a
producer can set; the build links every codec whose library this machine has."""

from __future__ import annotations

import os
import pathlib

import pytest

from kproducer import compression
from kproducer._accumulator import c_compress, courier_codecs
from kproducer.errors import CodecError

CODECS = ["gzip", "snappy", "lz4", "zstd"]
# The header setup.py looks for, by codec (setup.py: C_CODECS).
HEADERS = {"gzip": "zlib.h", "snappy": "snappy-c.h", "lz4": "lz4frame.h", "zstd": "zstd.h"}

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


def test_the_build_links_every_codec_this_machine_has():
    """setup.py links a codec when its header and library are there: on a machine with the
    headers (CI installs them), the courier has each codec."""
    wanted = {c.strip() for c in os.environ.get("KPRODUCER_C_CODECS", "").split(",")} & set(CODECS)
    for codec, header in HEADERS.items():
        if codec in wanted or pathlib.Path("/usr/include", header).exists():
            assert codec in courier_codecs(), f"{header} is here, but the build has no {codec}"
    assert courier_codecs() <= set(CODECS)


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
    if "lz4" not in courier_codecs():
        pytest.fail("this build has no C lz4 (setup.py found no liblz4)")
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
    for codec in set(CODECS) - courier_codecs():
        with pytest.raises(CodecError, match=f"compress {codec}: this build has no C codec"):
            c_compress(codec, b"x")
