/* kp_produce.c - Produce request writer and response reader (see kp_produce.h). */
#include "kp_produce.h"

#include <string.h>

#include "kp_endian.h"
#include "kp_varint.h"

#define API_KEY_PRODUCE 0

/* ---- UTF-8 ------------------------------------------------------------------- */

int kp_utf8_valid(const uint8_t *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* Names and messages are ASCII as a rule: 8 bytes at a time while they are. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= len) break;
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;   /* the allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }            /* no overlong forms */
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; }            /* no surrogates */
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }            /* no overlong forms */
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }            /* nothing above U+10FFFF */
        else return 0;
        if (len - i - 1 < need) return 0;
        if (p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

/* ---- request ------------------------------------------------------------------- */

/* A compact length (flexible versions): unsigned varint of n + 1. */
static size_t compact_size(uint64_t n) { return kp_uvarint_size(n + 1); }

kp_status kp_produce_request_size(const kp_produce_request *r, size_t *size)
{
    if (r->version < KP_PRODUCE_MIN_VERSION || r->version > KP_PRODUCE_MAX_VERSION)
        return KP_ERR_INVALID;
    int flexible = r->version >= KP_PRODUCE_FIRST_FLEXIBLE_VERSION;
    if (r->client_id_len > KP_PRODUCE_MAX_STRING || r->transactional_id_len > KP_PRODUCE_MAX_STRING)
        return KP_ERR_OVERFLOW;
    /* After the size prefix: ApiKey, ApiVersion, CorrelationId, ClientId (int16 length in
     * both header versions). Sums stay far below 2^64: each is checked against INT32_MAX
     * as it grows, and every addend is below 2^63. */
    uint64_t n = 2 + 2 + 4 + 2 + (r->client_id ? r->client_id_len : 0);
    if (flexible) {
        n += 1;                                                      /* header tags */
        n += r->transactional_id ? compact_size(r->transactional_id_len) + r->transactional_id_len : 1;
        n += 2 + 4 + compact_size(r->n_topics) + 1;                  /* acks, timeout, count, body tags */
    } else {
        n += 2 + (r->transactional_id ? r->transactional_id_len : 0);
        n += 2 + 4 + 4;
    }
    for (size_t t = 0; t < r->n_topics; t++) {
        const kp_produce_topic *topic = &r->topics[t];
        if (topic->name_len > KP_PRODUCE_MAX_STRING) return KP_ERR_OVERFLOW;
        if (flexible)
            n += compact_size(topic->name_len) + topic->name_len + compact_size(topic->n_partitions) + 1;
        else
            n += 2 + topic->name_len + 4;
        for (size_t i = 0; i < topic->n_partitions; i++) {
            int64_t len = topic->partitions[i].records_len;
            if (len < -1) return KP_ERR_INVALID;
            n += 4;                                                  /* Index */
            if (flexible)
                n += (len < 0 ? 1 : compact_size((uint64_t)len) + (uint64_t)len) + 1;
            else
                n += 4 + (len < 0 ? 0 : (uint64_t)len);
            if (n > INT32_MAX) return KP_ERR_OVERFLOW;
        }
        if (n > INT32_MAX) return KP_ERR_OVERFLOW;
    }
    *size = (size_t)n + 4;
    return KP_OK;
}

/* Unchecked writers: kp_produce_request_write checked the whole frame fits first. */
static uint8_t *put16(uint8_t *o, int16_t v) { kp_store_be16(o, (uint16_t)v); return o + 2; }
static uint8_t *put32(uint8_t *o, int32_t v) { kp_store_be32(o, (uint32_t)v); return o + 4; }
static uint8_t *put_bytes(uint8_t *o, const uint8_t *src, size_t n)
{
    if (n) memcpy(o, src, n);
    return o + n;
}
static uint8_t *put_compact_len(uint8_t *o, uint64_t n) { return o + kp_uvarint_put(o, n + 1); }

static uint8_t *put_string(uint8_t *o, int flexible, const uint8_t *s, size_t n)
{
    if (flexible) {
        if (!s) { *o = 0; return o + 1; }
        o = put_compact_len(o, n);
    } else {
        o = put16(o, s ? (int16_t)n : -1);
    }
    return s ? put_bytes(o, s, n) : o;
}

kp_status kp_produce_request_write(const kp_produce_request *r, uint8_t *out, size_t cap,
                                   size_t *written)
{
    size_t size;
    kp_status st = kp_produce_request_size(r, &size);
    if (st != KP_OK) return st;
    if (cap < size) return KP_ERR_FULL;
    int flexible = r->version >= KP_PRODUCE_FIRST_FLEXIBLE_VERSION;
    uint8_t *o = out;
    o = put32(o, (int32_t)(size - 4));
    o = put16(o, API_KEY_PRODUCE);
    o = put16(o, (int16_t)r->version);
    o = put32(o, r->correlation_id);
    o = put_string(o, 0, r->client_id, r->client_id_len);           /* int16 length in v2 too */
    if (flexible) *o++ = 0;                                         /* header tags */
    o = put_string(o, flexible, r->transactional_id, r->transactional_id_len);
    o = put16(o, r->acks);
    o = put32(o, r->timeout_ms);
    o = flexible ? put_compact_len(o, r->n_topics) : put32(o, (int32_t)r->n_topics);
    for (size_t t = 0; t < r->n_topics; t++) {
        const kp_produce_topic *topic = &r->topics[t];
        o = put_string(o, flexible, topic->name, topic->name_len);
        o = flexible ? put_compact_len(o, topic->n_partitions) : put32(o, (int32_t)topic->n_partitions);
        for (size_t i = 0; i < topic->n_partitions; i++) {
            const kp_produce_partition *part = &topic->partitions[i];
            o = put32(o, part->index);
            if (part->records_len < 0) {
                if (flexible) *o++ = 0;
                else o = put32(o, -1);
            } else {
                size_t len = (size_t)part->records_len;
                o = flexible ? put_compact_len(o, len) : put32(o, (int32_t)len);
                o = put_bytes(o, part->records, len);
            }
            if (flexible) *o++ = 0;                                 /* partition tags */
        }
        if (flexible) *o++ = 0;                                     /* topic tags */
    }
    if (flexible) *o++ = 0;                                         /* body tags */
    KP_ASSERT((size_t)(o - out) == size);
    *written = (size_t)(o - out);
    return KP_OK;
}

/* ---- response ------------------------------------------------------------------ */

typedef struct reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int flexible;
    kp_error *err;
} reader;

static kp_status rd_uvarint(reader *r, const char *field, uint64_t *out)
{
    size_t start = r->pos;
    kp_status st = kp_uvarint_read(r->p, r->len, &r->pos, KP_VARINT_MAX, out);
    if (KP_UNLIKELY(st != KP_OK)) return kp_fail(r->err, st, field, start, 0);
    return KP_OK;
}

/* A length or count prefix: compact (uvarint N + 1) when flexible, else an int16 (width 2)
 * or int32 (width 4). -1 is null. */
static kp_status rd_length(reader *r, int width, const char *field, int64_t *n)
{
    if (r->flexible) {
        if (KP_LIKELY(r->pos < r->len && r->p[r->pos] < 0x80)) {
            *n = (int64_t)r->p[r->pos++] - 1;
            return KP_OK;
        }
        uint64_t u;
        kp_status st = rd_uvarint(r, field, &u);
        if (st != KP_OK) return st;
        *n = (int64_t)u - 1;
        return KP_OK;
    }
    if (KP_UNLIKELY(r->len - r->pos < (size_t)width))
        return kp_fail(r->err, KP_ERR_TRUNCATED, field, r->pos, width);
    *n = width == 2 ? (int16_t)kp_load_be16(r->p + r->pos) : (int32_t)kp_load_be32(r->p + r->pos);
    r->pos += (size_t)width;
    return KP_OK;
}

static kp_status bad_length(reader *r, int64_t n, const char *field, size_t start)
{
    return kp_fail(r->err, n == -1 ? KP_ERR_NULL : KP_ERR_INVALID, field, start, n);
}

/* A count of items of at least min_item bytes each, all of which must fit. */
static kp_status check_count(reader *r, int64_t n, size_t min_item, const char *field, size_t start)
{
    if (KP_UNLIKELY(n < 0)) return bad_length(r, n, field, start);
    if (KP_UNLIKELY((uint64_t)n * min_item > r->len - r->pos))
        return kp_fail(r->err, KP_ERR_TRUNCATED, field, start, n);
    return KP_OK;
}

static kp_status rd_array_count(reader *r, size_t min_item, const char *field, int64_t *n)
{
    size_t start = r->pos;
    kp_status st = rd_length(r, 4, field, n);
    if (st != KP_OK) return st;
    return check_count(r, *n, min_item, field, start);
}

/* A (compact) string: *off and *n locate its bytes in the payload; *n -1 is null. */
static kp_status rd_string(reader *r, int nullable, const char *field, size_t *off, int64_t *n)
{
    size_t start = r->pos;
    kp_status st = rd_length(r, 2, field, n);
    if (st != KP_OK) return st;
    if (*n < 0) {
        if (*n == -1 && nullable) return KP_OK;
        return bad_length(r, *n, field, start);
    }
    if (KP_UNLIKELY((uint64_t)*n > r->len - r->pos))
        return kp_fail(r->err, KP_ERR_TRUNCATED, field, start, *n);
    if (KP_UNLIKELY(!kp_utf8_valid(r->p + r->pos, (size_t)*n)))
        return kp_fail(r->err, KP_ERR_UTF8, field, r->pos, *n);
    *off = r->pos;
    r->pos += (size_t)*n;
    return KP_OK;
}

/* Reads tag 0's value from the window [r->pos, r->pos + size) that read_tags sets as
 * r->len; `into` is where it goes. */
typedef kp_status (*tag0_reader)(reader *r, void *into);

/* A tagged-field section (`field` names it in errors). With read0, tag 0 is a field this
 * version defines (`tag0_field`): it is read from its own window and must fill it, and a
 * window past the end is reported under its name. Every other tag is skipped by its size.
 * A repeated tag 0 is read again and the last one stands, as in the generic decoder. */
static kp_status read_tags(reader *r, const char *field, const char *tag0_field,
                           tag0_reader read0, void *into)
{
    if (KP_LIKELY(r->pos < r->len && r->p[r->pos] == 0)) {
        r->pos++;
        return KP_OK;
    }
    uint64_t count, tag, size;
    kp_status st = rd_uvarint(r, field, &count);
    /* Terminates: every tag takes at least two bytes, or the read fails. */
    for (uint64_t i = 0; st == KP_OK && i < count; i++) {
        st = rd_uvarint(r, field, &tag);
        if (st != KP_OK) break;
        size_t start = r->pos;
        st = rd_uvarint(r, field, &size);
        if (st != KP_OK) break;
        int known = tag == 0 && read0 != NULL;
        if (size > r->len - r->pos)
            return kp_fail(r->err, KP_ERR_TRUNCATED, known ? tag0_field : field, start, (int64_t)size);
        if (!known) {
            r->pos += (size_t)size;
            continue;
        }
        size_t end = r->pos + (size_t)size, outer = r->len;
        r->len = end;
        st = read0(r, into);
        r->len = outer;
        if (st == KP_OK && r->pos != end)
            st = kp_fail(r->err, KP_ERR_TRAILING, tag0_field, r->pos, (int64_t)(end - r->pos));
    }
    return st;
}

/* A tagged-field section of which this version defines no tag. */
static kp_status skip_tags(reader *r, const char *field)
{
    return read_tags(r, field, NULL, NULL, NULL);
}

/* An int32 at r->pos (fixed width in every version). */
static kp_status rd_int32(reader *r, const char *field, int32_t *v)
{
    if (KP_UNLIKELY(r->len - r->pos < 4)) return kp_fail(r->err, KP_ERR_TRUNCATED, field, r->pos, 4);
    *v = (int32_t)kp_load_be32(r->p + r->pos);
    r->pos += 4;
    return KP_OK;
}

/* PartitionProduceResponse.CurrentLeader (v10+, tag 0): a LeaderIdAndEpoch. */
static kp_status read_current_leader(reader *r, void *into)
{
    kp_produce_result *res = into;
    int32_t id, epoch;
    kp_status st = rd_int32(r, "LeaderIdAndEpoch.LeaderId", &id);
    if (st == KP_OK) st = rd_int32(r, "LeaderIdAndEpoch.LeaderEpoch", &epoch);
    if (st == KP_OK) st = skip_tags(r, "LeaderIdAndEpoch._tagged_fields");
    if (st != KP_OK) return st;
    res->current_leader_id = id;
    res->current_leader_epoch = epoch;
    return KP_OK;
}

/* Where ProduceResponse.NodeEndpoints go: out NULL to validate and locate them only. */
typedef struct endpoints_into {
    kp_produce_endpoint *out;
    size_t cap;
    kp_produce_endpoints where;
} endpoints_into;

/* ProduceResponse.NodeEndpoints (v10+, tag 0): []NodeEndpoint, the whole window. */
static kp_status read_node_endpoints(reader *r, void *into)
{
    endpoints_into *e = into;
    size_t start = r->pos;
    int64_t count;
    kp_status st = rd_array_count(r, KP_PRODUCE_MIN_ENDPOINT_BYTES, "ProduceResponse.NodeEndpoints", &count);
    if (st != KP_OK) return st;
    if (e->out != NULL && (uint64_t)count > e->cap) return KP_ERR_FULL;
    for (int64_t i = 0; i < count; i++) {
        kp_produce_endpoint ep;
        int64_t host_len;
        ep.rack_off = 0;
        st = rd_int32(r, "NodeEndpoint.NodeId", &ep.node_id);
        if (st == KP_OK) st = rd_string(r, 0, "NodeEndpoint.Host", &ep.host_off, &host_len);
        if (st == KP_OK) st = rd_int32(r, "NodeEndpoint.Port", &ep.port);
        if (st == KP_OK) st = rd_string(r, 1, "NodeEndpoint.Rack", &ep.rack_off, &ep.rack_len);
        if (st == KP_OK) st = skip_tags(r, "NodeEndpoint._tagged_fields");
        if (st != KP_OK) return st;
        ep.host_len = (size_t)host_len;
        if (e->out != NULL) e->out[i] = ep;
    }
    e->where.off = start;
    e->where.len = r->len - start;      /* the window: read_tags checks it was all read */
    e->where.count = (size_t)count;
    return KP_OK;
}

static kp_status skip_record_errors(reader *r, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        if (r->len - r->pos < 4)
            return kp_fail(r->err, KP_ERR_TRUNCATED, "BatchIndexAndErrorMessage.BatchIndex", r->pos, 4);
        r->pos += 4;
        size_t off;
        int64_t n;
        kp_status st = rd_string(r, 1, "BatchIndexAndErrorMessage.BatchIndexErrorMessage", &off, &n);
        if (st == KP_OK && r->flexible) st = skip_tags(r, "BatchIndexAndErrorMessage._tagged_fields");
        if (st != KP_OK) return st;
    }
    return KP_OK;
}

/* The fixed-width run that starts a PartitionProduceResponse. */
static const struct { const char *field; size_t width; } PARTITION_RUN[] = {
    {"PartitionProduceResponse.Index", 4},
    {"PartitionProduceResponse.ErrorCode", 2},
    {"PartitionProduceResponse.BaseOffset", 8},
    {"PartitionProduceResponse.LogAppendTimeMs", 8},
    {"PartitionProduceResponse.LogStartOffset", 8},   /* v5+ */
    {"PartitionProduceResponse.RecordErrors", 4},     /* v8: the int32 count */
};

/* The run's fields for a version: 4 (v3-4), 5 (v5-7, v9+) or 6 (v8). */
static size_t run_fields(int version)
{
    return version < 5 ? 4 : version == 8 ? 6 : 5;
}

static kp_status truncated_run(reader *r, size_t fields)
{
    size_t p = r->pos;
    for (size_t i = 0; i < fields; i++) {
        if (r->len - p < PARTITION_RUN[i].width)
            return kp_fail(r->err, KP_ERR_TRUNCATED, PARTITION_RUN[i].field, p, (int64_t)PARTITION_RUN[i].width);
        p += PARTITION_RUN[i].width;
    }
    return kp_fail(r->err, KP_ERR_TRUNCATED, "PartitionProduceResponse", r->pos, 0);  /* not reached */
}

static kp_status read_partition(reader *r, int version, size_t topic_off, size_t topic_len,
                                kp_produce_result *res)
{
    size_t fields = run_fields(version), run = 0;
    for (size_t i = 0; i < fields; i++) run += PARTITION_RUN[i].width;
    if (KP_UNLIKELY(r->len - r->pos < run)) return truncated_run(r, fields);
    const uint8_t *q = r->p + r->pos;
    res->topic_off = topic_off;
    res->topic_len = topic_len;
    res->partition = (int32_t)kp_load_be32(q);
    res->error_code = (int16_t)kp_load_be16(q + 4);
    res->base_offset = (int64_t)kp_load_be64(q + 6);
    res->log_append_time_ms = (int64_t)kp_load_be64(q + 14);
    res->message_off = 0;
    res->message_len = -1;
    res->current_leader_id = -1;
    res->current_leader_epoch = -1;
    r->pos += run;
    kp_status st = KP_OK;
    if (version == 8) {
        int64_t nerr = (int32_t)kp_load_be32(q + 30);
        if (nerr) {
            st = check_count(r, nerr, 6, "PartitionProduceResponse.RecordErrors", r->pos - 4);
            if (st == KP_OK) st = skip_record_errors(r, nerr);
        }
        if (st == KP_OK)
            st = rd_string(r, 1, "PartitionProduceResponse.ErrorMessage", &res->message_off, &res->message_len);
    } else if (r->flexible) {
        int64_t nerr;
        st = rd_array_count(r, 6, "PartitionProduceResponse.RecordErrors", &nerr);
        if (st == KP_OK) st = skip_record_errors(r, nerr);
        if (st == KP_OK)
            st = rd_string(r, 1, "PartitionProduceResponse.ErrorMessage", &res->message_off, &res->message_len);
        if (st == KP_OK) {
            if (version >= KP_PRODUCE_FIRST_LEADER_HINT_VERSION)
                st = read_tags(r, "PartitionProduceResponse._tagged_fields",
                               "PartitionProduceResponse.CurrentLeader", read_current_leader, res);
            else
                st = skip_tags(r, "PartitionProduceResponse._tagged_fields");
        }
    }
    return st;
}

/* The fewest bytes a PartitionProduceResponse takes at a version: the fixed run, then
 * v8 an int16 ErrorMessage length, v9+ a RecordErrors count, an ErrorMessage length and
 * the tagged fields (one byte each). */
static size_t partition_min(int version)
{
    return version >= 9 ? 33 : version == 8 ? 36 : version >= 5 ? 30 : 22;
}

kp_status kp_produce_response_read(const uint8_t *p, size_t len, int version,
                                   int32_t *correlation_id, kp_produce_result *out,
                                   size_t cap, size_t *n, int32_t *throttle_time_ms,
                                   size_t *trailing, kp_produce_endpoints *endpoints,
                                   kp_error *err)
{
    if (version < KP_PRODUCE_MIN_VERSION || version > KP_PRODUCE_MAX_VERSION) return KP_ERR_INVALID;
    reader r = {p, len, 0, version >= KP_PRODUCE_FIRST_FLEXIBLE_VERSION, err};
    size_t count = 0;
    if (len < 4) return kp_fail(err, KP_ERR_TRUNCATED, "ResponseHeader.CorrelationId", 0, 4);
    int32_t cid = (int32_t)kp_load_be32(p);
    r.pos = 4;
    kp_status st = KP_OK;
    if (r.flexible) st = skip_tags(&r, "ResponseHeader._tagged_fields");
    int64_t ntopics = 0;
    /* A topic is at least its name and partition count (and tagged fields). */
    if (st == KP_OK) st = rd_array_count(&r, r.flexible ? 3 : 6, "ProduceResponse.Responses", &ntopics);
    size_t p_min = partition_min(version);
    for (int64_t t = 0; st == KP_OK && t < ntopics; t++) {
        size_t name_off = 0;
        int64_t name_len, nparts;
        st = rd_string(&r, 0, "TopicProduceResponse.Name", &name_off, &name_len);
        if (st == KP_OK) st = rd_array_count(&r, p_min, "TopicProduceResponse.PartitionResponses", &nparts);
        for (int64_t i = 0; st == KP_OK && i < nparts; i++) {
            if (count == cap) return KP_ERR_FULL;
            st = read_partition(&r, version, name_off, (size_t)name_len, &out[count]);
            if (st == KP_OK) count++;
        }
        if (st == KP_OK && r.flexible) st = skip_tags(&r, "TopicProduceResponse._tagged_fields");
    }
    if (st != KP_OK) return st;
    if (r.len - r.pos < 4) return kp_fail(err, KP_ERR_TRUNCATED, "ProduceResponse.ThrottleTimeMs", r.pos, 4);
    int32_t throttle = (int32_t)kp_load_be32(r.p + r.pos);
    r.pos += 4;
    endpoints_into eps = {NULL, 0, {0, 0, 0}};
    if (version >= KP_PRODUCE_FIRST_LEADER_HINT_VERSION)
        st = read_tags(&r, "ProduceResponse._tagged_fields", "ProduceResponse.NodeEndpoints",
                       read_node_endpoints, &eps);
    else if (r.flexible)
        st = skip_tags(&r, "ProduceResponse._tagged_fields");
    if (st != KP_OK) return st;
    /* What follows the last field known is left unread, as Java's and librdkafka's readers
     * leave it (a broker of another implementation may add bytes): counted, not an error. */
    *correlation_id = cid;
    *n = count;
    if (throttle_time_ms) *throttle_time_ms = throttle;
    if (trailing) *trailing = r.len - r.pos;
    if (endpoints) *endpoints = eps.where;
    return KP_OK;
}

kp_status kp_produce_endpoints_read(const uint8_t *p, size_t len, const kp_produce_endpoints *where,
                                    kp_produce_endpoint *out, size_t cap, size_t *n, kp_error *err)
{
    if (where->off > len || where->len > len - where->off) return KP_ERR_INVALID;
    if (where->len == 0) {
        *n = 0;
        return KP_OK;
    }
    /* The tag's window, read as kp_produce_response_read read it. */
    reader r = {p, where->off + where->len, where->off, 1, err};
    endpoints_into eps = {out, cap, {0, 0, 0}};
    kp_status st = read_node_endpoints(&r, &eps);
    if (st != KP_OK) return st;
    if (r.pos != r.len)
        return kp_fail(err, KP_ERR_TRAILING, "ProduceResponse.NodeEndpoints", r.pos, (int64_t)(r.len - r.pos));
    *n = eps.where.count;
    return KP_OK;
}
