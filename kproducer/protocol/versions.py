"""API keys, the versions kproducer implements, and version negotiation.

Every connection starts with ApiVersions; for each API the client then uses the
highest version both sides support (KIP-35). ``SUPPORTED_VERSIONS`` is the
client side of that intersection and must match the schemas in
:mod:`kproducer.protocol.messages` (a test checks it).
"""

from __future__ import annotations

from typing import Dict, Mapping, Tuple

from ..errors import UnsupportedVersionError

# API keys (Apache Kafka protocol guide, "Api Keys").
PRODUCE = 0
FETCH = 1
METADATA = 3
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
INIT_PRODUCER_ID = 22
SASL_AUTHENTICATE = 36
FIND_COORDINATOR = 10
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

API_NAMES: Dict[int, str] = {
    PRODUCE: "Produce",
    FETCH: "Fetch",
    METADATA: "Metadata",
    SASL_HANDSHAKE: "SaslHandshake",
    API_VERSIONS: "ApiVersions",
    CREATE_TOPICS: "CreateTopics",
    INIT_PRODUCER_ID: "InitProducerId",
    SASL_AUTHENTICATE: "SaslAuthenticate",
    FIND_COORDINATOR: "FindCoordinator",
    ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
    ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
    END_TXN: "EndTxn",
    TXN_OFFSET_COMMIT: "TxnOffsetCommit",
}

# What kproducer implements, {api_key: (min, max)} inclusive.
#  - Produce starts at 3: the first version carrying record batch v2 (magic 2),
#    the only format kproducer writes.
#  - Metadata 12 and CreateTopics 7 are the newest versions Tansu 0.6 speaks
#    and the newest whose layouts differ only by fields we decode.
#  - Produce 11 / InitProducerId 5 are the last versions before KIP-890 part 2
#    changes transactional semantics (Produce 12 implies AddPartitionsToTxn).
#  - The transaction APIs stop where KIP-890 part 2 begins (AddPartitionsToTxn 4+ is
#    broker-to-broker; EndTxn 5 and TxnOffsetCommit 5 go with Produce 12).
#  - SaslHandshake starts at 1: version 0 sends the SASL tokens as bare frames
#    instead of SaslAuthenticate requests (brokers before Kafka 1.0, KIP-152).
SUPPORTED_VERSIONS: Dict[int, Tuple[int, int]] = {
    PRODUCE: (3, 11),
    METADATA: (0, 12),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (0, 7),
    INIT_PRODUCER_ID: (0, 5),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
    FIND_COORDINATOR: (0, 4),
    # Fetch only to read back a small log of the producer's own (the Spark sink's ledger of
    # committed micro-batches): v4, the first with IsolationLevel, not flexible.
    FETCH: (4, 4),
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 4),
    TXN_OFFSET_COMMIT: (0, 4),
}


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"ApiKey{api_key}")


def pick_version(api_key: int, broker_min: int, broker_max: int) -> int:
    """Highest version of ``api_key`` supported by both kproducer and the broker.

    Raises :class:`~kproducer.errors.UnsupportedVersionError` naming the API
    when the ranges do not overlap or kproducer does not implement the API.
    """
    name = api_name(api_key)
    ours = SUPPORTED_VERSIONS.get(api_key)
    if ours is None:
        raise UnsupportedVersionError(f"kproducer does not implement {name} (API key {api_key})")
    lo = max(ours[0], broker_min)
    hi = min(ours[1], broker_max)
    if lo > hi:
        raise UnsupportedVersionError(
            f"no common {name} version (API key {api_key}): kproducer supports "
            f"{ours[0]}-{ours[1]}, broker supports {broker_min}-{broker_max}")
    return hi


def pick_versions(broker_versions: Mapping[int, Tuple[int, int]],
                  required=(PRODUCE, METADATA)) -> Dict[int, int]:
    """Pick a version for every API both sides know.

    ``broker_versions`` maps api_key -> (min, max) as advertised in the
    ApiVersions response. APIs in ``required`` must be usable, otherwise
    :class:`UnsupportedVersionError` is raised; others are left out when absent.
    """
    picked: Dict[int, int] = {}
    for api_key in SUPPORTED_VERSIONS:
        rng = broker_versions.get(api_key)
        if rng is None:
            if api_key in required:
                raise UnsupportedVersionError(
                    f"broker does not support {api_name(api_key)} (API key {api_key})")
            continue
        try:
            picked[api_key] = pick_version(api_key, rng[0], rng[1])
        except UnsupportedVersionError:
            if api_key in required:
                raise
    return picked
