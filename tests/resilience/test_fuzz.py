"""Fuzzing with atheris: every decoder and the frame receiver (harnesses in tests/fuzz/)
runs for a fixed number of executions with a fixed seed, starting from the seed corpus
kept in tests/fuzz/corpus/. A harness fails on any exception other than the decoder's
documented error type, on any disagreement with its oracle (the pure-Python twin, the
generic protocol decoder, a round trip), and on any allocation above the address-space
limit set here (a hostile declared length must be refused, not allocated).

Below: the seed corpus is checked to be valid input, and every bug the fuzzers (or
reading the decoders with them in mind) found has a regression test.
"""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kproducer import _reference as ref
from kproducer import codec
from kproducer.errors import CorruptRecordError, FrameError
from kproducer.protocol import (
    API_VERSIONS,
    CREATE_TOPICS,
    INIT_PRODUCER_ID,
    METADATA,
    SUPPORTED_VERSIONS,
    decode_response,
)
from kproducer.protocol.produce import decode_produce_response

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
CORPUS = FUZZ / "corpus"

# target: (seed corpus directory, executions). Sized so all of them take well under two
# minutes on a 2-core CI machine (measured: ~3-10 s each here).
TARGETS = {
    "decode_batch": ("decode_batch", 50_000),
    "batch_differential": ("decode_batch", 30_000),
    "frame_receiver": ("frame_receiver", 50_000),
    "varint": ("varint", 50_000),
    "produce_response": ("produce_response", 50_000),
    "protocol_responses": ("protocol_responses", 40_000),
}
# Address-space cap of a harness process (it needs ~100 MiB; the frame receiver may
# reserve one 100 MiB frame): an attempt to allocate what a hostile length declares fails
# loudly (MemoryError, or an abort in a Rust decompressor) instead of passing unnoticed
# on a machine with overcommit.
ADDRESS_SPACE = 1 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _seed_files(corpus: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((CORPUS / corpus).iterdir())}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target(target, tmp_path):
    corpus, runs = TARGETS[target]
    seeds_before = _seed_files(corpus)
    assert seeds_before, f"no seeds in {CORPUS / corpus}"
    scratch = tmp_path / "new-units"       # libFuzzer adds what it finds to the FIRST directory
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, str(FUZZ / f"fuzz_{target}.py"), str(scratch), str(CORPUS / corpus),
         f"-runs={runs}", "-seed=1", "-max_len=4096", "-timeout=60", "-rss_limit_mb=1024",
         f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=FUZZ, env=dict(os.environ, PYTHONHASHSEED="0"), preexec_fn=_limit_memory,
        capture_output=True, text=True, timeout=280, check=False)
    log = "\n".join(line for line in proc.stderr.splitlines()
                    if not line.startswith("#") or "DONE" in line)   # drop the progress lines
    crashes = [p for p in tmp_path.iterdir() if p.is_file()]
    assert proc.returncode == 0 and not crashes, \
        f"fuzz_{target} failed (exit {proc.returncode}); inputs: {crashes}\n{log[-6000:]}"
    assert f"Done {runs} runs" in proc.stderr, log[-3000:]
    assert _seed_files(corpus) == seeds_before, "the fuzzer must not modify the kept corpus"


# -- the seed corpus: small, valid inputs ---------------------------------------------


def test_seed_batches_decode_in_every_codec():
    seeds = _seed_files("decode_batch")
    codecs = set()
    for name, data in seeds.items():
        if name.startswith("regress-"):
            with pytest.raises(CorruptRecordError):
                codec.decode_batch(data)
            continue
        batch = codec.decode_batch(data)
        assert batch == ref.decode_batch(data), name
        assert batch.records, name
        codecs.add(batch.compression)
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}


def test_seed_responses_decode():
    apis = (API_VERSIONS, METADATA, INIT_PRODUCER_ID, CREATE_TOPICS)     # the harness's order
    seen = set()
    for name, data in _seed_files("protocol_responses").items():
        api_key = apis[data[0]]
        version = SUPPORTED_VERSIONS[api_key][0] + data[1]
        decode_response(api_key, version, data[2:])
        seen.add((api_key, version))
    assert seen == {(k, v) for k in apis for v in range(SUPPORTED_VERSIONS[k][0], SUPPORTED_VERSIONS[k][1] + 1)}
    versions = set()
    for name, data in _seed_files("produce_response").items():
        _, results, throttle_time_ms, trailing, leaders, endpoints = decode_produce_response(3 + data[0], data[1:])
        assert results and all(r[2] == 0 for r in results), (name, results)
        assert (throttle_time_ms, trailing, leaders, endpoints) == (0, 0, None, None), name
        versions.add(3 + data[0])
    assert versions == set(range(3, 12))


def test_seed_frame_streams_split_into_frames():
    for name, data in _seed_files("frame_receiver").items():
        rx = codec.FrameReceiver((0, 1, 7, 64, 4096, 1 << 20, codec.DEFAULT_MAX_FRAME_SIZE)[data[0] % 7])
        if name in ("oversized.bin", "negative-size.bin"):
            with pytest.raises(FrameError, match="invalid Size"):
                rx.feed(data[3:])
        else:
            assert rx.feed(data[3:]) and rx.buffered == 0, name


# -- regressions -----------------------------------------------------------------------


def _refresh(buf: bytearray) -> bytes:
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, codec.crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize("attributes", [0x00, 0x08], ids=["create-time", "log-append-time"])
@pytest.mark.parametrize("base,stamps", [(2**63 - 1, (5, 6)), (-(2**63), (6, 5))], ids=["above", "below"])
def test_timestamp_delta_overflow_is_refused_by_both_readers(attributes, base, stamps):
    """The C reader added BaseTimestamp + TimestampDelta in int64 (undefined behaviour on
    overflow) and accepted the wrapped value in a LogAppendTime batch, which the twin
    refuses."""
    buf = bytearray(codec.encode_batch([(b"k", b"v", stamps[0], None), (b"k", b"v", stamps[1], None)]))
    struct.pack_into(">h", buf, 21, attributes)
    struct.pack_into(">q", buf, 27, base)
    data = _refresh(buf)
    for decode in (codec.decode_batch, ref.decode_batch):
        with pytest.raises(CorruptRecordError, match="overflows int64") as info:
            decode(data)
        assert (info.value.field, info.value.offset) == ("TimestampDelta", 72)


def _snappy_batch(section: bytes) -> bytes:
    head = bytearray(codec.encode_batch([(b"k", b"v", 1, None)])[:61])
    struct.pack_into(">h", head, 21, 2)
    return _refresh(head + section)


@pytest.mark.parametrize("xerial", [False, True], ids=["raw-block", "xerial-chunk"])
@pytest.mark.parametrize("preamble,message", [
    (b"\xff\xff\xff\xff\x0f", "claims 4294967295 uncompressed bytes"),
    (b"\xff\xff\xff\xff\x8f", "does not start with a valid length"),
], ids=["claims-4GiB", "unterminated-varint"])
def test_snappy_block_claiming_gigabytes_is_refused_before_allocating(xerial, preamble, message):
    """A 15-byte snappy block whose length preamble claims 4 GiB made cramjam allocate it;
    where that allocation fails (a memory limit) the process aborted. cramjam also takes
    an unterminated 5-byte preamble (ff ff ff ff 8f) as 4 GiB. Both found by the
    decode_batch harness under its address-space limit."""
    block = preamble + b"\x00" * 10
    if xerial:
        section = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
        where = 61 + 16 + 4
    else:
        section, where = block, 61
    data = _snappy_batch(section)
    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))\n"
            "from kproducer import codec, _reference as ref\n"
            "from kproducer.errors import CorruptRecordError\n"
            "for decode in (codec.decode_batch, ref.decode_batch):\n"
            "    try:\n"
            f"        decode({data!r})\n"
            "    except CorruptRecordError as exc:\n"
            "        print(exc.field, exc.offset, exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    for line in lines:
        assert line.startswith(f"Records {where} ") and message in line, line


def test_snappy_at_maximum_expansion_still_decodes():
    """The claim check is a bound, not a guess: snappy's best case (runs of one byte, ~21x)
    passes."""
    for size in (0, 1, 64, 100_000, 1 << 20):
        records = [(None, b"\0" * size, 1, None)]
        assert codec.decode_batch(codec.encode_batch(records, compression="snappy")).records[0].value == b"\0" * size


def test_c_reader_errors_carry_byte_offsets():
    """The C reader reported OffsetDelta and HeaderKey errors without a byte offset; it now
    gives the same offsets as the twin."""
    good = codec.encode_batch([(b"k", b"v", 1, [("\xe9", b"x")]), (b"k", b"v", 1, None)])
    bad_key = bytearray(good)
    at = bad_key.index("\xe9".encode())
    bad_key[at:at + 2] = b"\xff\xfe"                          # same length, invalid UTF-8
    bad_delta = bytearray(good)
    struct.pack_into(">i", bad_delta, 23, 0)                  # LastOffsetDelta 0: record 1's delta 1 is out
    for data, field in ((_refresh(bad_key), "HeaderKey"), (_refresh(bad_delta), "OffsetDelta")):
        errors = []
        for decode in (codec.decode_batch, ref.decode_batch):
            with pytest.raises(CorruptRecordError) as info:
                decode(data)
            assert f"at byte {info.value.offset}" in str(info.value)
            errors.append((info.value.field, info.value.offset))
        assert errors[0] == errors[1] and errors[0][0] == field and errors[0][1] > 61, errors
