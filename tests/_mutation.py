"""One helper of the decoders' mutation tests: a payload with a few bytes set, inserted or
deleted where hypothesis chooses."""

from __future__ import annotations

from hypothesis import strategies as st


def mutate(data, payload: bytes, most: int) -> bytes:
    """``payload`` after 1 to ``most`` single-byte edits drawn from ``data`` (st.data())."""
    out = bytearray(payload)
    for _ in range(data.draw(st.integers(1, most))):
        i = data.draw(st.integers(0, len(out) - 1))
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        b = data.draw(st.integers(0, 255))
        if op == "set":
            out[i] = b
        elif op == "insert":
            out.insert(i, b)
        elif len(out) > 1:
            del out[i]
    return bytes(out)
