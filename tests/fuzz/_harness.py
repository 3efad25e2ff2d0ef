"""Shared plumbing of the atheris harnesses in this directory.

Each ``fuzz_<target>.py`` defines ``test_one_input(data)`` (and optionally a custom
mutator) and ends with ``main(...)``. Run one by hand for a longer session, e.g.::

    python tests/fuzz/fuzz_decode_batch.py /tmp/new-units tests/fuzz/corpus/decode_batch \
        -max_total_time=600

libFuzzer writes new inputs into the FIRST corpus directory: give it a scratch directory
first, so the seeds kept in the repository stay as they are. ``tests/resilience/test_fuzz.py`` runs
every harness this way for a fixed number of executions with a fixed seed.

The rule every harness enforces: only kproducer's documented decode errors may escape a
decoder. Anything else (IndexError, struct.error, UnicodeDecodeError, MemoryError, a
Python error from a disagreement assertion) propagates, atheris prints the input's
traceback, writes the input to ``-artifact_prefix`` and exits non-zero.
"""

from __future__ import annotations

import os
import sys

import atheris

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# The harnesses import kproducer from the checkout they live in (or PYTHONPATH, for the
# sanitizer build), never from an unrelated installed copy.
sys.path.insert(0, os.environ.get("KPRODUCER_FUZZ_ROOT", os.path.dirname(os.path.dirname(HERE))))


def verdict(fn, *args, allowed):
    """``("ok", result)`` or ``("error", exc)`` for the allowed exception types; any other
    exception propagates (that is the crash the fuzzer looks for)."""
    try:
        return "ok", fn(*args)
    except allowed as exc:
        return "error", exc


def check_error(exc, *, need_offset: bool = True) -> None:
    """A decode error must say where: a field name and a non-negative byte offset."""
    field = getattr(exc, "field", None)
    offset = getattr(exc, "offset", None)
    if not field or (need_offset and (offset is None or offset < 0)):
        raise AssertionError(f"{type(exc).__name__} without field/offset: {exc!r} "
                             f"(field={field!r}, offset={offset!r})")


def main(test_one_input, custom_mutator=None) -> None:
    atheris.Setup(sys.argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
