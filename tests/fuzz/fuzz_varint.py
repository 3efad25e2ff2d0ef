"""Fuzz target: the varint/varlong readers. The C reader (``kproducer.codec``), the record
codec's twin (``kproducer._reference``) and the protocol layer's reader
(``kproducer.protocol.primitives``) must agree on every input: same value and end
position, or an error from each (CodecError / ProtocolDecodeError naming the offset).

Input: byte 0 is the start position, the rest the buffer.
"""

from __future__ import annotations

import atheris
from _harness import main, verdict

with atheris.instrument_imports(include=["kproducer"]):
    from kproducer import _reference as ref
    from kproducer import codec
    from kproducer.errors import CodecError, ProtocolDecodeError
    from kproducer.protocol import primitives as prim

READERS = (
    (codec.decode_varint, ref.decode_varint, prim.decode_varint),
    (codec.decode_varlong, ref.decode_varlong, prim.decode_varlong),
)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    buf = data[1:]
    pos = data[0] % (len(buf) + 1)
    for c_fn, r_fn, p_fn in READERS:
        outcomes = []
        for fn, allowed in ((c_fn, CodecError), (r_fn, CodecError), (p_fn, ProtocolDecodeError)):
            kind, out = verdict(fn, buf, pos, allowed=allowed)
            if kind == "error":
                assert out.offset == pos, (fn, out, out.offset, pos)
                out = None
            outcomes.append((kind, out))
        assert outcomes[0] == outcomes[1] == outcomes[2], (c_fn.__name__, buf[pos:].hex(), outcomes)
        if outcomes[0][0] == "ok":
            value, end = outcomes[0][1]
            # Re-encoding gives the canonical form, never longer than what was read.
            enc = (codec.encode_varint if c_fn is codec.decode_varint else codec.encode_varlong)(value)
            assert len(enc) <= end - pos and c_fn(enc, 0) == (value, len(enc))


if __name__ == "__main__":
    main(test_one_input)
