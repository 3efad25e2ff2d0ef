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
    from kproducer.errors import ProtocolDecodeError
    from kproducer.protocol import PRODUCE, RESPONSES, Reader
    from kproducer.protocol.messages import read_response_header
    from kproducer.protocol.produce import (
        MAX_VERSION,
        MIN_VERSION,
        decode_produce_response,
    )


def generic_decode(version, payload):
    """The generic decoder, leaving the bytes after the body: (response, their count)."""
    r = Reader(payload)
    correlation_id = read_response_header(PRODUCE, version, r)
    resp = RESPONSES[PRODUCE].SCHEMA.decode_body(r, version, strict=False)
    resp.correlation_id = correlation_id
    return resp, r.end - r.pos


def flatten(generic, version):
    resp, trailing = generic
    leaders = endpoints = None
    if version >= 10:
        leaders = {(t.name, p.index): (p.current_leader.leader_id, p.current_leader.leader_epoch)
                   for t in resp.responses for p in t.partition_responses
                   if p.current_leader is not None and p.current_leader.leader_id >= 0} or None
        endpoints = {e.node_id: (e.host, e.port) for e in resp.node_endpoints or ()} or None
    return resp.correlation_id, [
        (t.name, p.index, p.error_code, p.base_offset, p.log_append_time_ms,
         p.error_message if version >= 8 else None)
        for t in resp.responses for p in t.partition_responses], resp.throttle_time_ms, trailing, \
        leaders, endpoints


# The fields whose tag size the fast decoder checks against their content.
SIZED_TAGS = ("PartitionProduceResponse.CurrentLeader", "ProduceResponse.NodeEndpoints")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    version = MIN_VERSION + data[0] % (MAX_VERSION - MIN_VERSION + 1)
    payload = data[1:]
    fast = verdict(decode_produce_response, version, payload, allowed=ProtocolDecodeError)
    generic = verdict(generic_decode, version, payload, allowed=ProtocolDecodeError)
    if fast[0] == "error":
        check_error(fast[1])
    if generic[0] == "error":
        check_error(generic[1])
    if fast[0] == generic[0] == "ok":
        assert fast[1] == flatten(generic[1], version), "fast and generic decoders disagree"
    elif fast[0] != generic[0] and not (
            version >= 10 and fast[0] == "error" and fast[1].field in SIZED_TAGS
            and "trailing bytes" in str(fast[1])):
        raise AssertionError(f"v{version}: fast decoder {fast[0]} {fast[1]!r}, "
                             f"generic {generic[0]} {generic[1]!r}")


if __name__ == "__main__":
    main(test_one_input)
