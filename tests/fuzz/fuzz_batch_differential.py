"""Fuzz target: the C record batch reader against its pure-Python twin
(``kproducer._reference.decode_batch``).

Same verdict on every input: both accept with equal results, or both raise
CorruptRecordError. The twin is the oracle the C reader was written against, so any
disagreement is a bug in one of them. Uses the batch mutator of ``fuzz_decode_batch`` and
its corpus.
"""

from __future__ import annotations

import atheris
from _harness import check_error, main, verdict

with atheris.instrument_imports(include=["kproducer"]):
    from kproducer import _reference as ref
    from kproducer.codec import decode_batch
    from kproducer.errors import CorruptRecordError

from fuzz_decode_batch import mutate


def test_one_input(data: bytes) -> None:
    c_kind, c_out = verdict(decode_batch, data, allowed=CorruptRecordError)
    r_kind, r_out = verdict(ref.decode_batch, data, allowed=CorruptRecordError)
    if c_kind != r_kind:
        raise AssertionError(f"C reader: {c_kind} {c_out!r}; reference: {r_kind} {r_out!r}")
    if c_kind == "ok":
        assert c_out == r_out, "the readers decode the same batch differently"
    else:
        check_error(c_out, need_offset=False)
        check_error(r_out)


if __name__ == "__main__":
    main(test_one_input, mutate)
