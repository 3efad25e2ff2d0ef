/* kp_produce.h - the Produce request and response (v3-v11): the protocol pair of the
 * producer's steady state, encoded and decoded without Python.
 *
 * Wire layout (Apache Kafka ProduceRequest.json / ProduceResponse.json; v9+ are
 * flexible, KIP-482: strings, bytes and arrays "compact" - unsigned varint length + 1,
 * 0 = null - and a tagged-field section after each struct):
 *
 *   Request frame:  Size int32 | RequestHeader | Body
 *     RequestHeader v1 (v3-8) / v2 (v9+):
 *       ApiKey int16 = 0 | ApiVersion int16 | CorrelationId int32
 *       | ClientId nullable string (int16 length, also in v2) | [v2: tagged fields]
 *     Body:
 *       TransactionalId nullable string | Acks int16 | TimeoutMs int32
 *       | TopicData[] { Name string
 *                       | PartitionData[] { Index int32 | Records nullable bytes | [tags] }
 *                       | [tags] }
 *       | [tags]
 *
 *   Response payload (no size prefix):
 *     ResponseHeader v0 (v3-8): CorrelationId int32; v1 (v9+): CorrelationId | [tags]
 *     Body:
 *       Responses[] { Name string
 *                     | PartitionResponses[] {
 *                         Index int32 | ErrorCode int16 | BaseOffset int64
 *                         | LogAppendTimeMs int64 | LogStartOffset int64 (v5+)
 *                         | RecordErrors[] (v8+) { BatchIndex int32
 *                                                  | BatchIndexErrorMessage nullable string
 *                                                  | [tags] }
 *                         | ErrorMessage nullable string (v8+)
 *                         | [tags: v10+ tag 0 CurrentLeader (KIP-951) {
 *                               LeaderId int32 | LeaderEpoch int32 | [tags] }] }
 *                     | [tags] }
 *       | ThrottleTimeMs int32
 *       | [tags: v10+ tag 0 NodeEndpoints (KIP-951) [] {
 *               NodeId int32 | Host string | Port int32 | Rack nullable string | [tags] }]
 *
 * The reader validates everything it reads (lengths and counts against the bytes left,
 * varints, UTF-8 of every string) and fails with the Kafka field name and the byte offset
 * where the failing read started. Bytes after the last field it knows (ThrottleTimeMs and,
 * v9+, the tagged fields) are not read: they are counted and ignored, as Java and
 * librdkafka ignore them (a broker of another implementation may add some). Tagged
 * fields are skipped by their size, except the two that v10+ define (tag 0 of a
 * partition, CurrentLeader; tag 0 of the body, NodeEndpoints: a broker that answers
 * NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the new leader, so that the client
 * need not wait for a metadata refresh), which are read from their own window and must
 * fill it exactly (the generic decoder of kproducer.protocol ignores what a known tag
 * leaves; a size that disagrees with its content is a broken encoder, reported here).
 * The writer computes the exact frame size first and writes into caller-owned memory of
 * that size.
 */
#ifndef KP_PRODUCE_H
#define KP_PRODUCE_H

#include "kp_common.h"

#define KP_PRODUCE_MIN_VERSION 3
#define KP_PRODUCE_MAX_VERSION 11
#define KP_PRODUCE_FIRST_FLEXIBLE_VERSION 9
/* The first version with CurrentLeader and NodeEndpoints (KIP-951). */
#define KP_PRODUCE_FIRST_LEADER_HINT_VERSION 10
/* Longest string the request carries (a Kafka string's int16 length). */
#define KP_PRODUCE_MAX_STRING 0x7FFF
/* The fewest bytes a PartitionProduceResponse takes (v3-4): no response holds more than
 * len / KP_PRODUCE_MIN_PARTITION_BYTES partition entries. */
#define KP_PRODUCE_MIN_PARTITION_BYTES 22
/* The fewest bytes a NodeEndpoint takes: NodeId, an empty Host, Port, a null Rack and
 * the tagged-field count. */
#define KP_PRODUCE_MIN_ENDPOINT_BYTES 11

typedef struct kp_produce_partition {
    int32_t index;
    const uint8_t *records;
    int64_t records_len;            /* -1: null records */
} kp_produce_partition;

typedef struct kp_produce_topic {
    const uint8_t *name;            /* UTF-8 */
    size_t name_len;
    const kp_produce_partition *partitions;
    size_t n_partitions;
} kp_produce_topic;

typedef struct kp_produce_request {
    int version;
    int32_t correlation_id;
    const uint8_t *client_id;       /* NULL: a null ClientId */
    size_t client_id_len;
    const uint8_t *transactional_id;    /* NULL: none */
    size_t transactional_id_len;
    int16_t acks;
    int32_t timeout_ms;
    const kp_produce_topic *topics;
    size_t n_topics;
} kp_produce_request;

/* The whole frame's size, the 4-byte prefix included. KP_ERR_INVALID for a version
 * outside 3-11 or a negative records length below -1; KP_ERR_OVERFLOW for a string over
 * KP_PRODUCE_MAX_STRING bytes or a frame over INT32_MAX. */
kp_status kp_produce_request_size(const kp_produce_request *r, size_t *size);

/* Writes the frame into out[0, cap); cap must hold kp_produce_request_size's size
 * (KP_ERR_FULL otherwise). *written is that size. Each records buffer is copied once. */
kp_status kp_produce_request_write(const kp_produce_request *r, uint8_t *out, size_t cap,
                                   size_t *written);

/* One PartitionProduceResponse, in wire order. Strings are offsets into the payload. */
typedef struct kp_produce_result {
    size_t topic_off;               /* the topic's name: payload[topic_off, + topic_len) */
    size_t topic_len;
    int32_t partition;
    int16_t error_code;
    int64_t base_offset;
    int64_t log_append_time_ms;
    size_t message_off;             /* ErrorMessage (v8+) */
    int64_t message_len;            /* -1: null (always before v8) */
    int32_t current_leader_id;      /* CurrentLeader.LeaderId (v10+, tag 0); -1: absent */
    int32_t current_leader_epoch;   /* CurrentLeader.LeaderEpoch; -1: absent */
} kp_produce_result;

/* Where a response's NodeEndpoints lie (v10+, tag 0 of the body's tagged fields): the
 * tag's value is payload[off, off + len) and holds `count` NodeEndpoints. len 0 and
 * count 0: the response has none. */
typedef struct kp_produce_endpoints {
    size_t off;
    size_t len;
    size_t count;
} kp_produce_endpoints;

/* One NodeEndpoint, in wire order. Strings are offsets into the payload. */
typedef struct kp_produce_endpoint {
    int32_t node_id;
    int32_t port;
    size_t host_off;                /* Host: payload[host_off, + host_len) */
    size_t host_len;
    size_t rack_off;                /* Rack */
    int64_t rack_len;               /* -1: null */
} kp_produce_endpoint;

/* Decodes a Produce response payload (header + body, no size prefix) of `version`.
 * The results go to out[0, *n); cap = len / KP_PRODUCE_MIN_PARTITION_BYTES + 1 always
 * suffices (KP_ERR_FULL otherwise). Each result's current_leader_id/_epoch are its
 * CurrentLeader (v10+; -1 when the partition has none). *throttle_time_ms is
 * ThrottleTimeMs (every version 3-11; KIP-219: from v6 the broker answers before it
 * throttles, and the client is to send that connection nothing for that long);
 * *trailing is how many bytes followed the last field known (0 for a response exactly as
 * Kafka lays it out); *endpoints locates the NodeEndpoints (v10+; count 0 when there are
 * none), validated here and read out by kp_produce_endpoints_read - their number is not
 * bounded by anything the caller knows beforehand, so they cost the caller no memory
 * unless there are some. Each of the three may be NULL; every field is validated either
 * way. The outputs are written only on KP_OK. Statuses, with err's field and offset:
 *   KP_ERR_TRUNCATED  a field, or an array's items, do not fit in the bytes left (a
 *                     tag's own window, for the fields of CurrentLeader/NodeEndpoints)
 *   KP_ERR_VARINT     an unsigned varint longer than 5 bytes or over 32 bits
 *   KP_ERR_NULL       a null (-1) length or count where none is allowed
 *   KP_ERR_INVALID    another negative length or count (err->value)
 *   KP_ERR_UTF8       a string that is not valid UTF-8 (offset: its first byte)
 *   KP_ERR_TRAILING   a CurrentLeader or NodeEndpoints shorter than its tag's size
 *                     (offset: the first byte left over; err->value: how many)
 * and KP_ERR_INVALID without a field for a version outside 3-11. */
kp_status kp_produce_response_read(const uint8_t *p, size_t len, int version,
                                   int32_t *correlation_id, kp_produce_result *out,
                                   size_t cap, size_t *n, int32_t *throttle_time_ms,
                                   size_t *trailing, kp_produce_endpoints *endpoints,
                                   kp_error *err);

/* The NodeEndpoints that kp_produce_response_read located in the same p[0, len), into
 * out[0, *n) (*n = where->count). KP_ERR_FULL when cap < where->count; KP_ERR_INVALID
 * without a field when `where` lies outside p[0, len); the statuses above (it validates
 * again what it reads) for bytes that do not hold NodeEndpoints. */
kp_status kp_produce_endpoints_read(const uint8_t *p, size_t len, const kp_produce_endpoints *where,
                                    kp_produce_endpoint *out, size_t cap, size_t *n, kp_error *err);

/* Whether p[0, len) is valid UTF-8 as Python's strict decoder sees it (no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
int kp_utf8_valid(const uint8_t *p, size_t len);

#endif /* KP_PRODUCE_H */
