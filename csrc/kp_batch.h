/* kp_batch.h - Kafka record batch v2 (magic 2): writer and validating reader.
 *
 * Wire schema (big-endian; offsets from the start of the batch):
 *
 *   0  BaseOffset            int64    0 from a producer; the broker assigns
 *   8  Length                int32    bytes after this field (total - 12)
 *  12  PartitionLeaderEpoch  int32    -1 from a producer
 *  16  Magic                 int8     2
 *  17  CRC                   uint32   CRC-32C of bytes 21..end
 *  21  Attributes            int16    bits 0-2 codec, 3 timestamp type,
 *                                     4 transactional, 5 control
 *  23  LastOffsetDelta       int32    RecordsCount - 1
 *  27  BaseTimestamp         int64    timestamp of the first record
 *  35  MaxTimestamp          int64
 *  43  ProducerId            int64
 *  51  ProducerEpoch         int16
 *  53  BaseSequence          int32
 *  57  RecordsCount          int32
 *  61  Records (possibly compressed as one block)
 *
 * Record:
 *   Length varint | Attributes int8 | TimestampDelta varlong | OffsetDelta varint |
 *   KeyLength varint | Key | ValueLength varint | Value | HeadersCount varint |
 *   [HeaderKeyLength varint | HeaderKey | HeaderValueLength varint | HeaderValue]
 *   (a null key, value or header value has length -1)
 */
#ifndef KP_BATCH_H
#define KP_BATCH_H

#include "kp_common.h"
#include <string.h>
#include "kp_buf.h"
#include "kp_varint.h"

#define KP_BATCH_HEADER_SIZE 61
#define KP_BATCH_OFF_BASE_OFFSET 0
#define KP_BATCH_OFF_LENGTH 8
#define KP_BATCH_OFF_PARTITION_LEADER_EPOCH 12
#define KP_BATCH_OFF_MAGIC 16
#define KP_BATCH_OFF_CRC 17
#define KP_BATCH_OFF_ATTRIBUTES 21
#define KP_BATCH_OFF_LAST_OFFSET_DELTA 23
#define KP_BATCH_OFF_BASE_TIMESTAMP 27
#define KP_BATCH_OFF_MAX_TIMESTAMP 35
#define KP_BATCH_OFF_PRODUCER_ID 43
#define KP_BATCH_OFF_PRODUCER_EPOCH 51
#define KP_BATCH_OFF_BASE_SEQUENCE 53
#define KP_BATCH_OFF_RECORDS_COUNT 57
/* Bytes before Length that Length does not count (BaseOffset + Length). */
#define KP_BATCH_LOG_OVERHEAD 12

/* The most one record adds to its key, value and header bytes in a batch of its own:
 * Length varint 5, Attributes 1, TimestampDelta 1, OffsetDelta 1, KeyLength 5,
 * ValueLength 5, HeadersCount 1 (fewer than 64 headers), 2 spare. With
 * KP_BATCH_HEADER_SIZE it is the size the producer checks a record against
 * max.request.size and buffer.memory with (each header adds its key, value and 10). */
#define KP_RECORD_MAX_FRAMING 21
#define KP_HEADER_MAX_FRAMING 10

#define KP_BATCH_MAGIC 2
#define KP_ATTR_COMPRESSION_MASK 0x07
#define KP_ATTR_TIMESTAMP_TYPE 0x08
#define KP_ATTR_TRANSACTIONAL 0x10
#define KP_ATTR_CONTROL 0x20

/* Compression codec ids as stored in Attributes bits 0-2. */
enum { KP_CODEC_NONE = 0, KP_CODEC_GZIP = 1, KP_CODEC_SNAPPY = 2, KP_CODEC_LZ4 = 3, KP_CODEC_ZSTD = 4 };

/* A record header as the writer takes it and the reader returns it;
 * value_len -1 means a null value. Pointers borrow the caller's memory. */
typedef struct kp_header {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    int64_t value_len;
} kp_header;

/* ---- writer ---------------------------------------------------------- */

typedef struct kp_batch_writer {
    kp_buf buf;              /* the batch: header placeholder + records */
    int64_t base_timestamp;
    int64_t max_timestamp;
    int32_t count;
    int32_t sealed;          /* no more appends: kp_courier sends it (its owner's flag) */
    int32_t compressed;      /* kp_courier compressed its Records section (closing it does
                                not compress again) */
    int32_t full;            /* closed for appends at its size bound: the next record starts
                                a new batch (its owner's flag; kp_courier paces by it) */
} kp_batch_writer;

/* Starts a batch: reserves the 61-byte header placeholder (and initial_cap total). */
kp_status kp_batch_init(kp_batch_writer *w, size_t initial_cap);
/* Starts a batch in caller-owned memory (see kp_buf_init_external); cap >= 61. */
kp_status kp_batch_init_external(kp_batch_writer *w, uint8_t *data, size_t cap);
void kp_batch_free(kp_batch_writer *w);

/* Encoded size of one record including its Length varint, for batch.size checks.
 * key_len / value_len -1 = null. */
size_t kp_batch_record_size(int64_t timestamp_delta, int32_t offset_delta,
                            int64_t key_len, int64_t value_len,
                            const kp_header *headers, size_t n_headers);

/* Appends one record. KP_ERR_OVERFLOW if a length or the count leaves int32. */
kp_status kp_batch_append(kp_batch_writer *w, int64_t timestamp,
                          const uint8_t *key, int64_t key_len,
                          const uint8_t *value, int64_t value_len,
                          const kp_header *headers, size_t n_headers);

/* As kp_batch_append, but leaves the batch untouched and sets *appended = 0 when
 * the batch already holds a record and this one would take it past `limit` bytes
 * (the producer's batch.size). A first record is always appended, whatever its size. */
kp_status kp_batch_append_limited(kp_batch_writer *w, size_t limit, int64_t timestamp,
                                  const uint8_t *key, int64_t key_len,
                                  const uint8_t *value, int64_t value_len,
                                  const kp_header *headers, size_t n_headers, int *appended);

/* ---- the per-record append, inlined into the hot loops ------------------
 * kp_batch_append / kp_batch_append_limited are the out-of-line forms. The
 * encode_batch loop and the accumulator append one record per iteration, so
 * they call this inline form: a function call per record was a tenth of the
 * per-record cost. */

KP_INLINE size_t kp_headers_size(const kp_header *headers, size_t n_headers)
{
    size_t size = 0;
    for (size_t i = 0; i < n_headers; i++) {
        size += kp_varint_size((int32_t)headers[i].key_len) + headers[i].key_len;
        if (headers[i].value_len < 0)
            size += kp_varint_size(-1);
        else
            size += kp_varint_size((int32_t)headers[i].value_len) + (size_t)headers[i].value_len;
    }
    return size;
}

/* Body = everything after the record's Length varint. */
KP_INLINE size_t kp_record_body_size(int64_t ts_delta, int32_t offset_delta, int64_t key_len,
                                     int64_t value_len, const kp_header *headers, size_t n_headers)
{
    size_t size = 1; /* Attributes */
    size += kp_varlong_size(ts_delta);
    size += kp_varint_size(offset_delta);
    size += key_len < 0 ? 1 : kp_varint_size((int32_t)key_len) + (size_t)key_len;
    size += value_len < 0 ? 1 : kp_varint_size((int32_t)value_len) + (size_t)value_len;
    size += kp_varint_size((int32_t)n_headers);
    if (n_headers)
        size += kp_headers_size(headers, n_headers);
    return size;
}

KP_INLINE uint8_t *kp_put_bytes(uint8_t *p, const uint8_t *src, int64_t n)
{
    p += kp_varint_put(p, (int32_t)n);
    if (n > 0) {
        memcpy(p, src, (size_t)n);
        p += n;
    }
    return p;
}

KP_INLINE kp_status kp_batch_append_inline(kp_batch_writer *w, size_t limit, int64_t timestamp,
                                           const uint8_t *key, int64_t key_len,
                                           const uint8_t *value, int64_t value_len,
                                           const kp_header *headers, size_t n_headers,
                                           int *appended)
{
    *appended = 0;
    if (KP_UNLIKELY(w->count == INT32_MAX || key_len > INT32_MAX || value_len > INT32_MAX ||
                    n_headers > INT32_MAX))
        return KP_ERR_OVERFLOW;
    for (size_t i = 0; i < n_headers; i++)
        if (KP_UNLIKELY(headers[i].key_len > INT32_MAX || headers[i].value_len > INT32_MAX))
            return KP_ERR_OVERFLOW;
    KP_ASSERT(key_len >= -1 && value_len >= -1);

    int64_t base = w->count == 0 ? timestamp : w->base_timestamp;
    /* Deltas are varlongs of a difference: reject wrap-around rather than encode garbage. */
    int64_t ts_delta;
    if (KP_UNLIKELY(__builtin_sub_overflow(timestamp, base, &ts_delta)))
        return KP_ERR_OVERFLOW;
    int32_t offset_delta = w->count;

    size_t body = kp_record_body_size(ts_delta, offset_delta, key_len, value_len, headers, n_headers);
    if (KP_UNLIKELY(body > INT32_MAX)) return KP_ERR_OVERFLOW;
    size_t total = kp_varint_size((int32_t)body) + body;
    if (limit && w->count > 0 && w->buf.len + total > limit) return KP_OK; /* full: not appended */
    kp_status st = kp_buf_reserve(&w->buf, total);
    if (KP_UNLIKELY(st != KP_OK)) return st;

    uint8_t *p = w->buf.data + w->buf.len;
    p += kp_varint_put(p, (int32_t)body);        /* Length */
    *p++ = 0;                                    /* Attributes (unused in v2) */
    p += kp_varlong_put(p, ts_delta);            /* TimestampDelta */
    p += kp_varint_put(p, offset_delta);         /* OffsetDelta */
    p = kp_put_bytes(p, key, key_len);           /* KeyLength | Key */
    p = kp_put_bytes(p, value, value_len);       /* ValueLength | Value */
    p += kp_varint_put(p, (int32_t)n_headers);   /* HeadersCount */
    for (size_t i = 0; i < n_headers; i++) {
        p = kp_put_bytes(p, headers[i].key, (int64_t)headers[i].key_len);  /* HeaderKey */
        p = kp_put_bytes(p, headers[i].value, headers[i].value_len);       /* HeaderValue */
    }
    KP_ASSERT((size_t)(p - (w->buf.data + w->buf.len)) == total);
    w->buf.len += total;
    if (w->count == 0) w->base_timestamp = timestamp;
    if (timestamp > w->max_timestamp) w->max_timestamp = timestamp;
    w->count++;
    *appended = 1;
    return KP_OK;
}

/* Swaps the uncompressed Records section for `len` bytes of compressed data; KP_ERR_NOMEM
 * (or KP_ERR_FULL for a fixed buffer) leaves the records as they were. */
kp_status kp_batch_replace_records(kp_batch_writer *w, const uint8_t *data, size_t len);

/* Back-patches every header field and the CRC. `attributes` carries the codec. */
kp_status kp_batch_finish(kp_batch_writer *w, int16_t attributes, int64_t producer_id,
                          int16_t producer_epoch, int32_t base_sequence);

/* ---- reader ---------------------------------------------------------- */

typedef struct kp_batch_info {
    int64_t base_offset;
    int32_t length;
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;
    const uint8_t *records;  /* the Records section as stored (maybe compressed) */
    size_t records_len;
} kp_batch_info;

/* Validates the header: enough bytes, Length equal to the buffer (exactly one
 * batch), Magic 2, CRC, non-negative RecordsCount, LastOffsetDelta consistent. */
kp_status kp_batch_read_header(const uint8_t *data, size_t len, kp_batch_info *out, kp_error *err);

typedef struct kp_record_view {
    int8_t attributes;
    int64_t timestamp_delta;
    int32_t offset_delta;
    const uint8_t *key;      /* NULL when key_len == -1 */
    int32_t key_len;
    const uint8_t *value;
    int32_t value_len;
    int32_t headers_count;
    const uint8_t *headers;  /* start of the first header; read with kp_record_read_header */
    size_t headers_len;      /* bytes from `headers` to the end of the record */
} kp_record_view;

/* Reads the record at *pos in the (decompressed) Records section of `len` bytes.
 * Checks every varint and length against the record's own Length, and that
 * the headers consume exactly the rest of the record. `base` is added to
 * offsets reported in errors (so they can refer to the whole batch). */
kp_status kp_record_read(const uint8_t *buf, size_t len, size_t *pos, kp_record_view *out,
                         kp_error *err, size_t base);

/* Reads header i from a record view's header area; *hpos starts at 0. */
kp_status kp_record_read_header(const kp_record_view *rec, size_t *hpos, kp_header *out,
                                kp_error *err, size_t base);

#endif /* KP_BATCH_H */
