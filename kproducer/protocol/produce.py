"""The codec of the producer's hot requests: Produce v3-v11, compiled.

The generic codec (:mod:`.schema` / :mod:`.messages`) interprets a schema for every field
of every struct; that is correct but costs ~140 us to encode a 4-partition Produce request
and ~170 us to decode its response. The Sender uses this pair instead: C without Python
(``csrc/kp_produce.c``, whose header gives the wire layout; v9+ are flexible, KIP-482),
bound in ``kproducer/_codec_parts/produce.pxi``. It is byte-for-byte / value-for-value
equivalent to the generic codec (``tests/unit/test_produce_fast.py`` checks it for every
version, with every truncation and random mutations).

API::

    frame = encode_produce_request(version, correlation_id, client_id, acks, timeout_ms,
                                   [(topic, [(partition, records_buffer), ...]), ...],
                                   transactional_id=None)
    (correlation_id, results, throttle_time_ms, trailing,
     leaders, endpoints) = decode_produce_response(version, payload)
    # results: [(topic, partition, error_code, base_offset, log_append_time_ms,
    #            error_message), ...] in wire order
    # throttle_time_ms: ThrottleTimeMs (KIP-219: from v6 the broker answers before it
    #   throttles, and the client sends that connection nothing for that long)
    # trailing: how many bytes followed the last field the version defines (ignored)
    # leaders: {(topic, partition): (leader_id, leader_epoch)} of the partitions whose
    #   CurrentLeader names a leader (v10+, KIP-951: sent with NOT_LEADER_OR_FOLLOWER /
    #   FENCED_LEADER_EPOCH, so the batch can go there before a metadata refresh);
    #   None when no partition has one (always before v10; no dict is built)
    # endpoints: {node_id: (host, port)} of the NodeEndpoints (v10+, KIP-951: where those
    #   leaders listen); None when the response carries none

``encode_produce_request`` returns the complete frame (4-byte size prefix included) and
copies each records buffer exactly once. Records may be ``bytes``, ``bytearray``, a
contiguous ``memoryview``, any object exporting the buffer protocol (kproducer's
``ProducerBatch``), or ``None`` (null). A value that cannot be encoded raises
:class:`~kproducer.errors.ProtocolError` naming the field.

``decode_produce_response`` validates everything it reads: a truncated or inconsistent
payload, a null where none is allowed or a string that is not UTF-8 raises
:class:`~kproducer.errors.ProtocolDecodeError` with the Kafka field name and the byte
offset (into ``payload``) where the failing read started. Fields outside what is returned
(LogStartOffset, RecordErrors, a NodeEndpoint's Rack, unknown tagged fields) are checked
and skipped. CurrentLeader and NodeEndpoints must fill their tag's size exactly (a
mismatch raises, naming ``PartitionProduceResponse.CurrentLeader`` or
``ProduceResponse.NodeEndpoints``; the generic decoder ignores what such a tag leaves).
Bytes after the last field the version defines are no error: as Java and librdkafka do,
the decoder reads the fields it knows and ignores the rest (brokers of other
implementations add some), and counts them in ``trailing``.
"""

from __future__ import annotations

from typing import Optional, Tuple

from kproducer._codec import PRODUCE_FIRST_FLEXIBLE_VERSION as FIRST_FLEXIBLE_VERSION
from kproducer._codec import PRODUCE_MAX_VERSION as MAX_VERSION
from kproducer._codec import PRODUCE_MIN_VERSION as MIN_VERSION
from kproducer._codec import decode_produce_response, encode_produce_request

__all__ = ["encode_produce_request", "decode_produce_response", "MIN_VERSION", "MAX_VERSION",
           "FIRST_FLEXIBLE_VERSION", "ProduceResult"]

ProduceResult = Tuple[str, int, int, int, int, Optional[str]]
