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
 *                         | [tags: v10+ CurrentLeader, skipped by size] }
 *                     | [tags] }
 *       | ThrottleTimeMs int32
 *       | [tags: v10+ NodeEndpoints, skipped by size]
 *
 * The reader validates everything it reads (lengths and counts against the bytes left,
 * varints, UTF-8 of every string) and fails with the Kafka field name and the byte offset
 * where the failing read started. Bytes after the last field it knows (ThrottleTimeMs and,
 * v9+, the tagged fields) are not read: they are counted and ignored, as Java and
 * librdkafka ignore them (a broker of another implementation may add some). The writer
 * computes the exact frame size first and writes into caller-owned memory of that size.
 */
#ifndef KP_PRODUCE_H
#define KP_PRODUCE_H

#include "kp_common.h"

#define KP_PRODUCE_MIN_VERSION 3
#define KP_PRODUCE_MAX_VERSION 11
#define KP_PRODUCE_FIRST_FLEXIBLE_VERSION 9
/* Longest string the request carries (a Kafka string's int16 length). */
#define KP_PRODUCE_MAX_STRING 0x7FFF
/* The fewest bytes a PartitionProduceResponse takes (v3-4): no response holds more than
 * len / KP_PRODUCE_MIN_PARTITION_BYTES partition entries. */
#define KP_PRODUCE_MIN_PARTITION_BYTES 22

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
} kp_produce_result;

/* Decodes a Produce response payload (header + body, no size prefix) of `version`.
 * The results go to out[0, *n); cap = len / KP_PRODUCE_MIN_PARTITION_BYTES + 1 always
 * suffices (KP_ERR_FULL otherwise). *throttle_time_ms is ThrottleTimeMs (every version
 * 3-11; KIP-219: from v6 the broker answers before it throttles, and the client is to
 * send that connection nothing for that long); *trailing is how many bytes followed the
 * last field known (0 for a response exactly as Kafka lays it out). Either may be NULL.
 * The outputs are written only on KP_OK. Statuses, with err's field and offset:
 *   KP_ERR_TRUNCATED  a field, or an array's items, do not fit in the bytes left
 *   KP_ERR_VARINT     an unsigned varint longer than 5 bytes or over 32 bits
 *   KP_ERR_NULL       a null (-1) length or count where none is allowed
 *   KP_ERR_INVALID    another negative length or count (err->value)
 *   KP_ERR_UTF8       a string that is not valid UTF-8 (offset: its first byte)
 * and KP_ERR_INVALID without a field for a version outside 3-11. */
kp_status kp_produce_response_read(const uint8_t *p, size_t len, int version,
                                   int32_t *correlation_id, kp_produce_result *out,
                                   size_t cap, size_t *n, int32_t *throttle_time_ms,
                                   size_t *trailing, kp_error *err);

/* Whether p[0, len) is valid UTF-8 as Python's strict decoder sees it (no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
int kp_utf8_valid(const uint8_t *p, size_t len);

#endif /* KP_PRODUCE_H */
