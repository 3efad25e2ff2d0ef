"""Fuzz target: the incremental frame receiver (``kproducer.codec.FrameReceiver``, C),
fed a byte stream in fuzz-chosen chunk sizes, against the pure-Python twin
(``kproducer._reference.FrameReceiver``).

Input: byte 0 picks the receiver's ``max_size``, bytes 1-2 seed the chunk sizes, the
rest is the stream. After every chunk both receivers return the same frames and hold
the same number of bytes, or both raise FrameError (then every later feed raises too).
"""

from __future__ import annotations

import random

import atheris
from _harness import check_error, main, verdict

with atheris.instrument_imports(include=["kproducer"]):
    from kproducer import _reference as ref
    from kproducer import codec
    from kproducer.errors import FrameError

# Small limits reach the oversize path often; the default (100 MiB) is the production one:
# a hostile size just under it must not make either receiver touch that much memory.
MAX_SIZES = (0, 1, 7, 64, 4096, 1 << 20, codec.DEFAULT_MAX_FRAME_SIZE)


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    max_size = MAX_SIZES[data[0] % len(MAX_SIZES)]
    rng = random.Random(int.from_bytes(data[1:3], "big"))
    stream = data[3:]
    c_rx, r_rx = codec.FrameReceiver(max_size), ref.FrameReceiver(max_size)
    pos = 0
    while True:
        # Mostly short chunks (byte-by-byte splits), sometimes everything left at once;
        # an empty chunk must be harmless.
        n = rng.choice((0, 1, 1, 2, 3, 4, 5, 8, rng.randrange(1, 64), len(stream)))
        chunk = stream[pos:pos + n]
        pos += n
        c_kind, c_out = verdict(c_rx.feed, chunk, allowed=FrameError)
        r_kind, r_out = verdict(r_rx.feed, chunk, allowed=FrameError)
        if c_kind != r_kind:
            raise AssertionError(f"C receiver: {c_kind} {c_out!r}; reference: {r_kind} {r_out!r}")
        if c_kind == "error":
            check_error(c_out)
            assert c_out.offset == r_out.offset, (c_out, r_out)
            # The stream is lost: the receiver refuses anything more.
            assert verdict(c_rx.feed, b"\0\0\0\0", allowed=FrameError)[0] == "error"
            return
        assert c_out == r_out, "the receivers split the stream differently"
        assert all(len(f) <= max_size for f in c_out)
        assert c_rx.buffered == r_rx.buffered, (c_rx.buffered, r_rx.buffered)
        if pos >= len(stream):
            break


if __name__ == "__main__":
    main(test_one_input)
