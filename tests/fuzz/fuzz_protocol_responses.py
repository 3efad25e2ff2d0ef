"""Fuzz target: the generic protocol response decoders (``kproducer.protocol``) for
ApiVersions, Metadata, InitProducerId and CreateTopics, at every version kproducer speaks.

Input: byte 0 picks the API, byte 1 the version (modulo the supported range), the rest is
the response payload (header + body, no size prefix). Only ProtocolDecodeError with a
field and byte offset may escape. A response that decodes must survive a round trip
through the (symmetric) schema encoder: encoded again and decoded, it is equal.
"""

from __future__ import annotations

import atheris
from _harness import check_error, main, verdict

with atheris.instrument_imports(include=["kproducer"]):
    from kproducer.errors import ProtocolDecodeError
    from kproducer.protocol import (
        API_VERSIONS,
        CREATE_TOPICS,
        INIT_PRODUCER_ID,
        METADATA,
        RESPONSES,
        SUPPORTED_VERSIONS,
        Writer,
        decode_response,
        response_header_version,
    )

APIS = (API_VERSIONS, METADATA, INIT_PRODUCER_ID, CREATE_TOPICS)


def encode_response(api_key: int, version: int, obj) -> bytes:
    w = Writer()
    w.int32(obj.correlation_id)
    if response_header_version(api_key, version) >= 1:
        w.empty_tagged_fields()
    schema = RESPONSES[api_key].SCHEMA
    schema.encode_into(w, obj, version, schema.is_flexible(version))
    return w.getvalue()


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    api_key = APIS[data[0] % len(APIS)]
    lo, hi = SUPPORTED_VERSIONS[api_key]
    version = lo + data[1] % (hi - lo + 1)
    payload = data[2:]
    kind, out = verdict(decode_response, api_key, version, payload, allowed=ProtocolDecodeError)
    if kind == "error":
        check_error(out)
        return
    if api_key == API_VERSIONS and version > 0 and out.error_code == 35:
        return  # read as the v0 UNSUPPORTED_VERSION fallback (KIP-511): not re-encodable as v{version}
    again = decode_response(api_key, version, encode_response(api_key, version, out))
    assert again == out, "decode(encode(decode(x))) differs from decode(x)"


if __name__ == "__main__":
    main(test_one_input)
