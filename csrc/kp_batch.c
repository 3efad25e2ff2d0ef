/* kp_batch.c - record batch v2 writer (reserve, append, back-patch) and reader. */
#include <string.h>
#include "kp_batch.h"
#include "kp_crc32c.h"
#include "kp_endian.h"
#include "kp_varint.h"

/* ---- writer ---------------------------------------------------------- */

kp_status kp_batch_init(kp_batch_writer *w, size_t initial_cap)
{
    kp_buf_init(&w->buf);
    w->base_timestamp = 0;
    w->max_timestamp = INT64_MIN;
    w->count = 0;
    w->sealed = 0;
    w->compressed = 0;
    w->full = 0;
    if (initial_cap < KP_BATCH_HEADER_SIZE) initial_cap = KP_BATCH_HEADER_SIZE;
    /* Exactly initial_cap, not the next doubling: the producer charges its memory pool
     * for the capacity it asked for. */
    kp_status st = kp_buf_resize(&w->buf, initial_cap);
    if (st != KP_OK) return st;
    /* Placeholder: every header field is back-patched by kp_batch_finish. */
    memset(w->buf.data, 0, KP_BATCH_HEADER_SIZE);
    w->buf.len = KP_BATCH_HEADER_SIZE;
    return KP_OK;
}

kp_status kp_batch_init_external(kp_batch_writer *w, uint8_t *data, size_t cap)
{
    if (cap < KP_BATCH_HEADER_SIZE) return KP_ERR_FULL;
    kp_buf_init_external(&w->buf, data, cap);
    w->base_timestamp = 0;
    w->max_timestamp = INT64_MIN;
    w->count = 0;
    w->sealed = 0;
    w->compressed = 0;
    w->full = 0;
    memset(w->buf.data, 0, KP_BATCH_HEADER_SIZE);
    w->buf.len = KP_BATCH_HEADER_SIZE;
    return KP_OK;
}

void kp_batch_free(kp_batch_writer *w)
{
    kp_buf_free(&w->buf);
}

size_t kp_batch_record_size(int64_t timestamp_delta, int32_t offset_delta, int64_t key_len,
                            int64_t value_len, const kp_header *headers, size_t n_headers)
{
    size_t body = kp_record_body_size(timestamp_delta, offset_delta, key_len, value_len,
                                      headers, n_headers);
    return kp_varint_size((int32_t)body) + body;
}

kp_status kp_batch_append(kp_batch_writer *w, int64_t timestamp,
                          const uint8_t *key, int64_t key_len,
                          const uint8_t *value, int64_t value_len,
                          const kp_header *headers, size_t n_headers)
{
    int appended;
    return kp_batch_append_inline(w, 0, timestamp, key, key_len, value, value_len,
                                  headers, n_headers, &appended);
}

kp_status kp_batch_append_limited(kp_batch_writer *w, size_t limit, int64_t timestamp,
                                  const uint8_t *key, int64_t key_len,
                                  const uint8_t *value, int64_t value_len,
                                  const kp_header *headers, size_t n_headers, int *appended)
{
    return kp_batch_append_inline(w, limit, timestamp, key, key_len, value, value_len,
                                  headers, n_headers, appended);
}

kp_status kp_batch_replace_records(kp_batch_writer *w, const uint8_t *data, size_t len)
{
    /* Room first: on a failure the records stay as they were. */
    if (KP_BATCH_HEADER_SIZE + len > w->buf.len) {
        kp_status st = kp_buf_reserve(&w->buf, KP_BATCH_HEADER_SIZE + len - w->buf.len);
        if (st != KP_OK) return st;
    }
    w->buf.len = KP_BATCH_HEADER_SIZE;
    return kp_buf_append(&w->buf, data, len);
}

kp_status kp_batch_finish(kp_batch_writer *w, int16_t attributes, int64_t producer_id,
                          int16_t producer_epoch, int32_t base_sequence)
{
    uint8_t *h = w->buf.data;
    size_t length = w->buf.len - KP_BATCH_LOG_OVERHEAD;
    if (KP_UNLIKELY(length > INT32_MAX)) return KP_ERR_OVERFLOW;
    int64_t max_ts = w->count ? w->max_timestamp : w->base_timestamp;

    kp_store_be64(h + KP_BATCH_OFF_BASE_OFFSET, 0);
    kp_store_be32(h + KP_BATCH_OFF_LENGTH, (uint32_t)length);
    kp_store_be32(h + KP_BATCH_OFF_PARTITION_LEADER_EPOCH, (uint32_t)-1);
    h[KP_BATCH_OFF_MAGIC] = KP_BATCH_MAGIC;
    kp_store_be16(h + KP_BATCH_OFF_ATTRIBUTES, (uint16_t)attributes);
    kp_store_be32(h + KP_BATCH_OFF_LAST_OFFSET_DELTA, (uint32_t)(w->count - 1));
    kp_store_be64(h + KP_BATCH_OFF_BASE_TIMESTAMP, (uint64_t)w->base_timestamp);
    kp_store_be64(h + KP_BATCH_OFF_MAX_TIMESTAMP, (uint64_t)max_ts);
    kp_store_be64(h + KP_BATCH_OFF_PRODUCER_ID, (uint64_t)producer_id);
    kp_store_be16(h + KP_BATCH_OFF_PRODUCER_EPOCH, (uint16_t)producer_epoch);
    kp_store_be32(h + KP_BATCH_OFF_BASE_SEQUENCE, (uint32_t)base_sequence);
    kp_store_be32(h + KP_BATCH_OFF_RECORDS_COUNT, (uint32_t)w->count);
    /* CRC last: it covers Attributes..end, all written above. */
    uint32_t crc = kp_crc32c_update(0, h + KP_BATCH_OFF_ATTRIBUTES, w->buf.len - KP_BATCH_OFF_ATTRIBUTES);
    kp_store_be32(h + KP_BATCH_OFF_CRC, crc);
    return KP_OK;
}

/* ---- reader ---------------------------------------------------------- */

kp_status kp_batch_read_header(const uint8_t *data, size_t len, kp_batch_info *out, kp_error *err)
{
    if (len < KP_BATCH_HEADER_SIZE)
        return kp_fail(err, KP_ERR_TRUNCATED, "RecordBatch header", len, (int64_t)len);
    out->base_offset = (int64_t)kp_load_be64(data + KP_BATCH_OFF_BASE_OFFSET);
    out->length = (int32_t)kp_load_be32(data + KP_BATCH_OFF_LENGTH);
    if (out->length < KP_BATCH_HEADER_SIZE - KP_BATCH_LOG_OVERHEAD)
        return kp_fail(err, KP_ERR_INVALID, "Length", KP_BATCH_OFF_LENGTH, out->length);
    if ((uint64_t)out->length + KP_BATCH_LOG_OVERHEAD > len)
        return kp_fail(err, KP_ERR_TRUNCATED, "Length", KP_BATCH_OFF_LENGTH, out->length);
    if ((uint64_t)out->length + KP_BATCH_LOG_OVERHEAD < len)
        return kp_fail(err, KP_ERR_TRAILING, "Length", KP_BATCH_OFF_LENGTH, out->length);
    out->partition_leader_epoch = (int32_t)kp_load_be32(data + KP_BATCH_OFF_PARTITION_LEADER_EPOCH);
    out->magic = (int8_t)data[KP_BATCH_OFF_MAGIC];
    if (out->magic != KP_BATCH_MAGIC)
        return kp_fail(err, KP_ERR_MAGIC, "Magic", KP_BATCH_OFF_MAGIC, out->magic);
    out->crc = kp_load_be32(data + KP_BATCH_OFF_CRC);
    uint32_t actual = kp_crc32c_update(0, data + KP_BATCH_OFF_ATTRIBUTES, len - KP_BATCH_OFF_ATTRIBUTES);
    if (actual != out->crc)
        return kp_fail(err, KP_ERR_CRC, "CRC", KP_BATCH_OFF_CRC, (int64_t)actual);
    out->attributes = (int16_t)kp_load_be16(data + KP_BATCH_OFF_ATTRIBUTES);
    out->last_offset_delta = (int32_t)kp_load_be32(data + KP_BATCH_OFF_LAST_OFFSET_DELTA);
    out->base_timestamp = (int64_t)kp_load_be64(data + KP_BATCH_OFF_BASE_TIMESTAMP);
    out->max_timestamp = (int64_t)kp_load_be64(data + KP_BATCH_OFF_MAX_TIMESTAMP);
    out->producer_id = (int64_t)kp_load_be64(data + KP_BATCH_OFF_PRODUCER_ID);
    out->producer_epoch = (int16_t)kp_load_be16(data + KP_BATCH_OFF_PRODUCER_EPOCH);
    out->base_sequence = (int32_t)kp_load_be32(data + KP_BATCH_OFF_BASE_SEQUENCE);
    out->records_count = (int32_t)kp_load_be32(data + KP_BATCH_OFF_RECORDS_COUNT);
    if (out->records_count < 0)
        return kp_fail(err, KP_ERR_INVALID, "RecordsCount", KP_BATCH_OFF_RECORDS_COUNT, out->records_count);
    if ((out->attributes & KP_ATTR_COMPRESSION_MASK) > KP_CODEC_ZSTD)
        return kp_fail(err, KP_ERR_INVALID, "Attributes", KP_BATCH_OFF_ATTRIBUTES, out->attributes);
    out->records = data + KP_BATCH_HEADER_SIZE;
    out->records_len = len - KP_BATCH_HEADER_SIZE;
    return KP_OK;
}

/* Reads a length-prefixed byte field: -1 is null, other negatives invalid. */
static kp_status read_bytes_field(const uint8_t *buf, size_t end, size_t *pos, const uint8_t **out,
                                  int32_t *out_len, const char *field, kp_error *err, size_t base)
{
    size_t start = *pos;
    int32_t n;
    kp_status st = kp_varint_read(buf, end, pos, &n);
    if (st != KP_OK) return kp_fail(err, st, field, base + start, 0);
    if (n < -1) return kp_fail(err, KP_ERR_INVALID, field, base + start, n);
    if (n == -1) {
        *out = NULL;
    } else {
        if ((size_t)n > end - *pos) return kp_fail(err, KP_ERR_TRUNCATED, field, base + start, n);
        *out = buf + *pos;
        *pos += (size_t)n;
    }
    *out_len = n;
    return KP_OK;
}

kp_status kp_record_read(const uint8_t *buf, size_t len, size_t *pos, kp_record_view *out,
                         kp_error *err, size_t base)
{
    size_t p = *pos;
    size_t start = p;
    int32_t rec_len;
    kp_status st = kp_varint_read(buf, len, &p, &rec_len);
    if (st != KP_OK) return kp_fail(err, st, "Length", base + start, 0);
    if (rec_len < 1) return kp_fail(err, KP_ERR_INVALID, "Length", base + start, rec_len);
    if ((size_t)rec_len > len - p) return kp_fail(err, KP_ERR_TRUNCATED, "Length", base + start, rec_len);
    size_t end = p + (size_t)rec_len;  /* fields below may not cross the record's end */

    out->attributes = (int8_t)buf[p++];
    size_t fpos = p;
    st = kp_varlong_read(buf, end, &p, &out->timestamp_delta);
    if (st != KP_OK) return kp_fail(err, st, "TimestampDelta", base + fpos, 0);
    fpos = p;
    st = kp_varint_read(buf, end, &p, &out->offset_delta);
    if (st != KP_OK) return kp_fail(err, st, "OffsetDelta", base + fpos, 0);
    st = read_bytes_field(buf, end, &p, &out->key, &out->key_len, "KeyLength", err, base);
    if (st != KP_OK) return st;
    st = read_bytes_field(buf, end, &p, &out->value, &out->value_len, "ValueLength", err, base);
    if (st != KP_OK) return st;
    fpos = p;
    st = kp_varint_read(buf, end, &p, &out->headers_count);
    if (st != KP_OK) return kp_fail(err, st, "HeadersCount", base + fpos, 0);
    /* Each header takes at least 2 bytes: a count beyond that is a lie. */
    if (out->headers_count < 0 || (size_t)out->headers_count > (end - p) / 2)
        return kp_fail(err, KP_ERR_INVALID, "HeadersCount", base + fpos, out->headers_count);
    out->headers = buf + p;
    out->headers_len = end - p;

    /* Walk the headers now so a record is only returned whole and consistent. */
    size_t hpos = 0;
    kp_header h;
    for (int32_t i = 0; i < out->headers_count; i++) {
        st = kp_record_read_header(out, &hpos, &h, err, base + p);
        if (st != KP_OK) return st;
    }
    if (hpos != out->headers_len)
        return kp_fail(err, KP_ERR_TRAILING, "Length", base + start, rec_len);
    *pos = end;
    return KP_OK;
}

kp_status kp_record_read_header(const kp_record_view *rec, size_t *hpos, kp_header *out,
                                kp_error *err, size_t base)
{
    const uint8_t *key, *value;
    int32_t key_len, value_len;
    size_t start = *hpos;
    kp_status st = read_bytes_field(rec->headers, rec->headers_len, hpos, &key, &key_len,
                                    "HeaderKeyLength", err, base);
    if (st != KP_OK) return st;
    if (key_len < 0) return kp_fail(err, KP_ERR_INVALID, "HeaderKeyLength", base + start, key_len);
    st = read_bytes_field(rec->headers, rec->headers_len, hpos, &value, &value_len,
                          "HeaderValueLength", err, base);
    if (st != KP_OK) return st;
    out->key = key;
    out->key_len = (size_t)key_len;
    out->value = value;
    out->value_len = value_len;
    return KP_OK;
}
