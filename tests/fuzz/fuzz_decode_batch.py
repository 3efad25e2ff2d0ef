"""Fuzz target: ``kproducer.codec.decode_batch`` (the record batch v2 reader in C), every
compression.

Input: one record batch. Most random bytes die at the CRC, so the custom mutator works
like a careful attacker: it decompresses the Records section, mutates the plain records,
compresses them again with the batch's codec and fixes Length and CRC; or mutates the
compressed bytes, or sets a header field to a boundary value, and fixes the CRC; a share
of mutations stays raw so the Length/CRC/Magic checks are fuzzed too.

Only CorruptRecordError (with a field and byte offset) may escape. A batch that decodes
must survive a round trip: re-encoded with the same codec, it decodes to the same records.
"""

from __future__ import annotations

import random
import struct

import atheris
from _harness import check_error, main, verdict

with atheris.instrument_imports(include=["kproducer"]):
    from kproducer import compression
    from kproducer.codec import crc32c, decode_batch, encode_batch
    from kproducer.errors import CorruptRecordError

HEADER = 61
# Header fields past the CRC (offset, struct format), and boundary values for them: what a
# byte-level mutator rarely hits by chance (an int64 timestamp at its limit).
FIELDS = ((21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"), (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i"))
BITS = {">h": 16, ">i": 32, ">q": 64}
ATTRIBUTE_BITS = (0x08, 0x10, 0x20, 0x07)   # LogAppendTime, transactional, control, codec bits


def fix_length_and_crc(buf: bytearray) -> bytes:
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def mutate(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if len(data) < HEADER or rng.random() < 0.25:
        return atheris.Mutate(data, max_size)
    head, section = bytearray(data[:HEADER]), bytes(data[HEADER:])
    codec = struct.unpack_from(">h", head, 21)[0] & 7
    roll = rng.random()
    if roll < 0.1:
        head[21:] = atheris.Mutate(bytes(head[21:]), 40).ljust(40, b"\0")[:40]
    elif roll < 0.25:
        at, fmt = rng.choice(FIELDS)
        if at == 21 and rng.random() < 0.5:
            struct.pack_into(fmt, head, at, struct.unpack_from(fmt, head, at)[0] ^ rng.choice(ATTRIBUTE_BITS))
        else:
            top = 1 << (BITS[fmt] - 1)
            value = struct.unpack_from(fmt, head, at)[0]
            value = rng.choice((-top, top - 1, 0, -1, 1, value + rng.randint(-3, 3), top - 1 - rng.randint(0, 3),
                                -top + rng.randint(0, 3)))
            struct.pack_into(fmt, head, at, max(-top, min(top - 1, value)))
    elif codec in compression.CODEC_NAMES and codec != 0 and rng.random() < 0.7:
        try:
            plain = compression.decompress(codec, section)
        except CorruptRecordError:
            return atheris.Mutate(data, max_size)
        plain = atheris.Mutate(plain, max(2 * len(plain), 64))
        level = compression.resolve_level(compression.CODEC_NAMES[codec], None)
        section = compression.compress(codec, plain, level)
    else:
        # Plain records, or the compressed bytes themselves (frame headers, declared sizes).
        section = atheris.Mutate(section, max(max_size - HEADER, 1))
    if rng.random() < 0.3:
        # RecordsCount / LastOffsetDelta drift apart from the records actually present.
        struct.pack_into(">i", head, 57, rng.choice([0, 1, 2, 1000, -1, 2**31 - 1]))
    return fix_length_and_crc(head + section)


def test_one_input(data: bytes) -> None:
    kind, out = verdict(decode_batch, data, allowed=CorruptRecordError)
    if kind == "error":
        check_error(out, need_offset=False)
        return
    if out.is_control or not out.records:
        return
    try:
        wire = encode_batch([(r.key, r.value, r.timestamp, r.headers) for r in out.records],
                            compression=out.compression, producer_id=out.producer_id,
                            producer_epoch=out.producer_epoch, base_sequence=out.base_sequence)
    except OverflowError:
        return  # timestamps a full int64 apart: a legal batch the writer cannot rebase
    again = decode_batch(wire)
    assert [(r.key, r.value, r.headers) for r in again.records] == \
        [(r.key, r.value, r.headers) for r in out.records], "round trip changed the records"
    if out.timestamp_type == "create":
        assert [r.timestamp for r in again.records] == [r.timestamp for r in out.records]


if __name__ == "__main__":
    main(test_one_input, mutate)
