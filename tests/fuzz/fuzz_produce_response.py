"""Fuzz target: the fast Produce response decoder
(``kproducer.protocol.produce.decode_produce_response``, the producer's hot path) against
the generic schema decoder.

Input: byte 0 picks the version (3..11), the rest is the response payload (header + body,
no size prefix). Only ProtocolDecodeError with a field and byte offset may escape. Both
decoders read the fields they know and leave the bytes after them (counted by the fast
one), as Java and librdkafka do. Both must give the same outcome and, when they decode,
the same values: ThrottleTimeMs, the count of bytes left and, from v10 (KIP-951), the
leader hints (CurrentLeader) and NodeEndpoints included. One difference is allowed: the
fast decoder refuses a CurrentLeader / NodeEndpoints shorter than its tag's size
("trailing bytes after" the field), whose rest the generic decoder ignores.
"""

from __future__ import annotations

import atheris
from _harness import check_error, main, verdict

with atheris.instrument_imports(include=["kproducer"]):
    from kproducer import _reference as reference
    from kproducer.errors import ProtocolDecodeError
    from kproducer.protocol.produce import (
        MAX_VERSION,
        MIN_VERSION,
        decode_produce_response,
    )


# The fields whose tag size the fast decoder checks against their content.
SIZED_TAGS = ("PartitionProduceResponse.CurrentLeader", "ProduceResponse.NodeEndpoints")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    version = MIN_VERSION + data[0] % (MAX_VERSION - MIN_VERSION + 1)
    payload = data[1:]
    fast = verdict(decode_produce_response, version, payload, allowed=ProtocolDecodeError)
    generic = verdict(reference.produce_response, version, payload, allowed=ProtocolDecodeError)
    if fast[0] == "error":
        check_error(fast[1])
    if generic[0] == "error":
        check_error(generic[1])
    if fast[0] == generic[0] == "ok":
        assert fast[1] == generic[1], "fast and generic decoders disagree"
    elif fast[0] != generic[0] and not (
            version >= 10 and fast[0] == "error" and fast[1].field in SIZED_TAGS
            and "trailing bytes" in str(fast[1])):
        raise AssertionError(f"v{version}: fast decoder {fast[0]} {fast[1]!r}, "
                             f"generic {generic[0]} {generic[1]!r}")


if __name__ == "__main__":
    main(test_one_input)
