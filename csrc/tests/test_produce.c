/* test_produce.c - standalone test for kp_produce (no Python, no framework).
 *
 * Build and run from the repo root:
 *   gcc -O2 -Wall -Wextra -std=c11 -Icsrc csrc/kp_produce.c csrc/tests/test_produce.c \
 *       -o test_produce && ./test_produce
 * (add -fsanitize=address,undefined -g for the sanitizer run, as tests/test_build.py does)
 *
 * Checks: the v3 and v9 request frames byte for byte; a request's size equals what is
 * written and a short buffer is refused; a v9 response with an error message, a record
 * error and tagged fields decodes to its values; every truncation of it fails with a
 * field and an offset inside the input, and bytes after its last field are ignored and
 * counted; ThrottleTimeMs is returned at every version 3-11, with or without bytes after
 * it, and the optional outputs may be NULL; a v10/v11 response (KIP-951) gives each
 * partition's CurrentLeader and the NodeEndpoints, which v9 skips by size; a tag 0 whose
 * size disagrees with its content, or runs past the end, fails with the field and offset,
 * and so does every truncation; the UTF-8 check against hand-picked sequences; random
 * mutations of v3/v8/v9/v10/v11 responses never read outside the input (the sanitizer run
 * is what sees that) and, when they decode, give results and endpoints that lie inside it.
 */
#include "kp_produce.h"
#include "kp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t unhex(const char *s, uint8_t *out)
{
    size_t n = 0;
    int hi = -1;
    for (; *s; s++) {
        int v;
        if (*s >= '0' && *s <= '9') v = *s - '0';
        else if (*s >= 'a' && *s <= 'f') v = *s - 'a' + 10;
        else continue;                       /* spaces and '|' separate fields */
        if (hi < 0) hi = v;
        else { out[n++] = (uint8_t)(hi << 4 | v); hi = -1; }
    }
    return n;
}

static void encode(const kp_produce_request *r, const char *expect_hex)
{
    uint8_t expect[256], out[256];
    size_t n = unhex(expect_hex, expect), size = 0, written = 0;
    CHECK(kp_produce_request_size(r, &size) == KP_OK && size == n, "v%d size %zu != %zu", r->version, size, n);
    CHECK(kp_produce_request_write(r, out, size - 1, &written) == KP_ERR_FULL, "v%d short buffer accepted", r->version);
    CHECK(kp_produce_request_write(r, out, sizeof out, &written) == KP_OK && written == n, "v%d write", r->version);
    CHECK(memcmp(out, expect, n) == 0, "v%d bytes differ", r->version);
}

static void test_requests(void)
{
    kp_produce_partition part = {1, (const uint8_t *)"AB", 2};
    kp_produce_topic topic = {(const uint8_t *)"t", 1, &part, 1};
    kp_produce_request r = {3, 7, (const uint8_t *)"c", 1, NULL, 0, -1, 1000, &topic, 1};
    encode(&r, "00000028 0000 0003 00000007 0001 63 | ffff ffff 000003e8"
               "| 00000001 0001 74 00000001 | 00000001 00000002 4142");
    kp_produce_request r9 = {9, 7, NULL, 0, (const uint8_t *)"x", 1, 1, 1000, &topic, 1};
    encode(&r9, "00000021 0000 0009 00000007 ffff 00 | 02 78 0001 000003e8"
                "| 02 02 74 02 | 00000001 03 4142 00 | 00 00");
    /* null records */
    kp_produce_partition null_part = {0, NULL, -1};
    kp_produce_topic null_topic = {(const uint8_t *)"t", 1, &null_part, 1};
    kp_produce_request rn = {11, 1, NULL, 0, NULL, 0, 0, 0, &null_topic, 1};
    encode(&rn, "0000001e 0000 000b 00000001 ffff 00 | 00 0000 00000000"
                "| 02 02 74 02 | 00000000 00 00 | 00 00");
    size_t size;
    r.version = 12;
    CHECK(kp_produce_request_size(&r, &size) == KP_ERR_INVALID, "v12 accepted");
    r.version = 3;
    r.client_id_len = KP_PRODUCE_MAX_STRING + 1;
    CHECK(kp_produce_request_size(&r, &size) == KP_ERR_OVERFLOW, "long client id accepted");
    r.client_id_len = 1;
    part.records_len = (int64_t)INT32_MAX;
    CHECK(kp_produce_request_size(&r, &size) == KP_ERR_OVERFLOW, "2 GiB request accepted");
    part.records_len = -2;
    CHECK(kp_produce_request_size(&r, &size) == KP_ERR_INVALID, "records length -2 accepted");
}

/* A v9 response: one topic "tp", partitions 0 (ok, offset 42, append time 7) and 3
 * (error 10, one record error, message "bad", a tagged field), then throttle and tags. */
static const char *RESPONSE_V9 =
    "0000002a 00"                                   /* correlation id 42, header tags */
    "02 03 7470 03"                                 /* 1 topic "tp", 2 partitions */
    "00000000 0000 000000000000002a 0000000000000007 0000000000000000"
    "01 00 00"                                      /* no record errors, null message, tags */
    "00000003 000a ffffffffffffffff ffffffffffffffff 0000000000000000"
    "02 00000005 01 00"                             /* a record error: index 5, null msg, tags */
    "04 626164"                                     /* message "bad" */
    "01 00 02 abcd"                                 /* one tagged field (tag 0, 2 bytes) */
    "00"                                            /* topic tags */
    "00000000 00";                                  /* throttle, body tags */

static void test_response(void)
{
    uint8_t p[256];
    size_t len = unhex(RESPONSE_V9, p), n = 0;
    kp_produce_result res[16];
    kp_error err = {0};
    int32_t cid = 0, throttle = -7;
    size_t trailing = 99;
    kp_status st = kp_produce_response_read(p, len, 9, &cid, res, 16, &n, &throttle, &trailing, NULL, &err);
    CHECK(st == KP_OK, "v9 decode status %d (%s at %zu)", st, err.field ? err.field : "-", err.offset);
    if (st != KP_OK) return;
    CHECK(cid == 42 && n == 2, "cid %d n %zu", cid, n);
    CHECK(throttle == 0 && trailing == 0, "throttle %d trailing %zu", (int)throttle, trailing);
    CHECK(res[0].topic_len == 2 && memcmp(p + res[0].topic_off, "tp", 2) == 0, "topic name");
    CHECK(res[0].partition == 0 && res[0].error_code == 0 && res[0].base_offset == 42
          && res[0].log_append_time_ms == 7 && res[0].message_len == -1, "partition 0");
    CHECK(res[1].partition == 3 && res[1].error_code == 10 && res[1].base_offset == -1
          && res[1].message_len == 3 && memcmp(p + res[1].message_off, "bad", 3) == 0, "partition 3");
    /* v9 defines no tag: partition 3's tag 0 (2 bytes) is skipped, not a CurrentLeader. */
    CHECK(res[0].current_leader_id == -1 && res[0].current_leader_epoch == -1
          && res[1].current_leader_id == -1 && res[1].current_leader_epoch == -1, "v9 leaders");
    /* Every truncation fails with a field, at an offset inside what was given. */
    for (size_t cut = 0; cut < len; cut++) {
        kp_error e = {0};
        st = kp_produce_response_read(p, cut, 9, &cid, res, 16, &n, &throttle, &trailing, NULL, &e);
        CHECK(st != KP_OK && e.field != NULL && e.offset <= cut, "cut %zu: status %d offset %zu", cut, st, e.offset);
    }
    /* Bytes after the last field (the body's tagged fields): ignored and counted, the rest
     * read as without them. */
    for (size_t extra = 1; extra <= 3; extra++) {
        memset(p + len, 0xA5, extra);
        cid = 0;
        n = 0;
        throttle = -7;
        trailing = 0;
        st = kp_produce_response_read(p, len + extra, 9, &cid, res, 16, &n, &throttle, &trailing, NULL, &err);
        CHECK(st == KP_OK && cid == 42 && n == 2 && throttle == 0 && trailing == extra
              && res[1].partition == 3 && res[1].message_len == 3,
              "%zu trailing: status %d, cid %d, n %zu, trailing %zu", extra, st, (int)cid, n, trailing);
    }
    /* The optional outputs may be NULL. */
    CHECK(kp_produce_response_read(p, len + 1, 9, &cid, res, 16, &n, NULL, NULL, NULL, &err) == KP_OK,
          "NULL throttle and trailing");
    /* A null topic name: the byte after the array count. */
    uint8_t q[256];
    memcpy(q, p, len);
    q[6] = 0;
    st = kp_produce_response_read(q, len, 9, &cid, res, 16, &n, NULL, NULL, NULL, &err);
    CHECK(st == KP_ERR_NULL && err.offset == 6 && strcmp(err.field, "TopicProduceResponse.Name") == 0,
          "null name: %d %s at %zu", st, err.field, err.offset);
    /* Not UTF-8 in the error message: at its first byte. */
    memcpy(q, p, len);
    size_t msg = 0;
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(q + i, "bad", 3) == 0) msg = i;
    q[msg + 1] = 0xC0;
    st = kp_produce_response_read(q, len, 9, &cid, res, 16, &n, NULL, NULL, NULL, &err);
    CHECK(st == KP_ERR_UTF8 && err.offset == msg && strcmp(err.field, "PartitionProduceResponse.ErrorMessage") == 0,
          "utf8: %d at %zu", st, err.offset);
    /* The result array's bound holds: cap len/22 + 1 is enough, fewer is refused. */
    st = kp_produce_response_read(p, len, 9, &cid, res, 1, &n, NULL, NULL, NULL, &err);
    CHECK(st == KP_ERR_FULL, "cap 1 gave %d", st);
    CHECK(kp_produce_response_read(p, len, 2, &cid, res, 16, &n, NULL, NULL, NULL, &err) == KP_ERR_INVALID,
          "v2 accepted");
}

/* A Produce response of `version` as Kafka lays it out: correlation id 5, topic "t",
 * partition 1 (error 0, BaseOffset 77, LogAppendTimeMs -1, LogStartOffset 0 from v5,
 * RecordErrors empty and ErrorMessage null from v8), then ThrottleTimeMs. Its length. */
static size_t build_response(int version, int32_t throttle, uint8_t *o)
{
    int flexible = version >= KP_PRODUCE_FIRST_FLEXIBLE_VERSION;
    size_t n = 0;
#define PUT(v, width) do { for (int k_ = (width) - 1; k_ >= 0; k_--) \
                              o[n++] = (uint8_t)((uint64_t)(v) >> (8 * k_)); } while (0)
    PUT(5, 4);                                          /* CorrelationId */
    if (flexible) o[n++] = 0;                           /* header tags */
    if (flexible) o[n++] = 2; else PUT(1, 4);           /* Responses: 1 */
    if (flexible) o[n++] = 2; else PUT(1, 2);           /* Name "t" */
    o[n++] = 't';
    if (flexible) o[n++] = 2; else PUT(1, 4);           /* PartitionResponses: 1 */
    PUT(1, 4);                                          /* Index */
    PUT(0, 2);                                          /* ErrorCode */
    PUT(77, 8);                                         /* BaseOffset */
    PUT(-1, 8);                                         /* LogAppendTimeMs */
    if (version >= 5) PUT(0, 8);                        /* LogStartOffset */
    if (version == 8) { PUT(0, 4); PUT(-1, 2); }        /* RecordErrors [], ErrorMessage null */
    if (flexible) { o[n++] = 1; o[n++] = 0; o[n++] = 0; }  /* RecordErrors [], null, tags */
    if (flexible) o[n++] = 0;                           /* topic tags */
    PUT(throttle, 4);                                   /* ThrottleTimeMs */
    if (flexible) o[n++] = 0;                           /* body tags */
#undef PUT
    return n;
}

/* ThrottleTimeMs at every version (KIP-219: the client mutes the connection that long),
 * with and without bytes after it; a cut inside it is still a truncated ThrottleTimeMs. */
static void test_throttle_every_version(void)
{
    static const int32_t throttles[] = {0, 1, 250, INT32_MAX, -1};
    for (int version = KP_PRODUCE_MIN_VERSION; version <= KP_PRODUCE_MAX_VERSION; version++) {
        for (size_t t = 0; t < sizeof throttles / sizeof throttles[0]; t++) {
            uint8_t p[128];
            size_t len = build_response(version, throttles[t], p);
            for (size_t extra = 0; extra <= 2; extra++) {
                memset(p + len, 0x5A, extra);
                kp_produce_result res[4];
                kp_error err = {0};
                int32_t cid = 0, throttle = -7;
                size_t n = 0, trailing = 99;
                kp_status st = kp_produce_response_read(p, len + extra, version, &cid, res, 4, &n,
                                                        &throttle, &trailing, NULL, &err);
                CHECK(st == KP_OK && cid == 5 && n == 1 && res[0].partition == 1 && res[0].base_offset == 77
                      && throttle == throttles[t] && trailing == extra,
                      "v%d throttle %d + %zu bytes: status %d (%s at %zu), throttle %d, trailing %zu",
                      version, (int)throttles[t], extra, st, err.field ? err.field : "-", err.offset,
                      (int)throttle, trailing);
            }
            /* Cut inside ThrottleTimeMs: no bytes after it to mistake for it. */
            size_t at = len - 4 - (version >= KP_PRODUCE_FIRST_FLEXIBLE_VERSION);
            kp_produce_result res[4];
            kp_error err = {0};
            int32_t cid = 0;
            size_t n = 0;
            kp_status st = kp_produce_response_read(p, at + 2, version, &cid, res, 4, &n, NULL, NULL, NULL, &err);
            CHECK(st == KP_ERR_TRUNCATED && err.offset == at && err.field != NULL
                  && strcmp(err.field, "ProduceResponse.ThrottleTimeMs") == 0,
                  "v%d cut in ThrottleTimeMs: status %d at %zu", version, st, err.offset);
        }
    }
}

/* A v10 answer whose leaders moved (KIP-951): topic "orders" partition 0
 * NOT_LEADER_OR_FOLLOWER with CurrentLeader (2, 7), partition 1 ok; topic "logs"
 * partition 3 FENCED_LEADER_EPOCH with an unknown leader (-1, -1); NodeEndpoints 2
 * ("broker-2.example":9092, rack "rack-a") and 5 ("10.0.0.5":9102, no rack, one tag).
 * The same bytes as PRODUCE_RESPONSE_V10_NOT_LEADER in tests/test_produce_fast.py. */
static const char *RESPONSE_V10 =
    "0000002a 00 03"                                /* cid 42, header tags, 2 topics */
    "07 6f7264657273 03"                            /* "orders", 2 partitions */
    "00000000 0006 ffffffffffffffff ffffffffffffffff ffffffffffffffff"
    "01 0b 6e6f74206c6561646572"                    /* RecordErrors [], "not leader" */
    "01 00 09 00000002 00000007 00"                 /* CurrentLeader (9 bytes): 2, epoch 7 */
    "00000001 0000 0000000000000064 ffffffffffffffff 0000000000000000 01 00 00"
    "00"                                            /* topic tags */
    "05 6c6f6773 02"                                /* "logs", 1 partition */
    "00000003 004a ffffffffffffffff ffffffffffffffff ffffffffffffffff 01 00"
    "01 00 09 ffffffff ffffffff 00"                 /* CurrentLeader: unknown */
    "00 00000000"                                   /* topic tags, ThrottleTimeMs */
    "01 00 38 03"                                   /* NodeEndpoints (56 bytes): 2 */
    "00000002 11 62726f6b65722d322e6578616d706c65 00002384 07 7261636b2d61 00"
    "00000005 09 31302e302e302e35 0000238e 00 01 07 01 ff";
/* Byte offsets in RESPONSE_V10. */
enum { V10_LEADER_SIZE = 58, V10_LEADER = 59, V10_ENDPOINTS_SIZE = 159, V10_ENDPOINTS = 160,
       V10_HOST = 165, V10_LEN = 216 };

static kp_status read_v10(const uint8_t *p, size_t len, int version, kp_produce_result *res, size_t *n,
                          kp_produce_endpoints *where, kp_error *err)
{
    int32_t cid = 0;
    return kp_produce_response_read(p, len, version, &cid, res, 16, n, NULL, NULL, where, err);
}

static void expect_error(const uint8_t *p, size_t len, int version, kp_status want, const char *field,
                         size_t offset, const char *what)
{
    kp_produce_result res[16];
    kp_produce_endpoints where;
    kp_error err = {0};
    size_t n = 0;
    kp_status st = read_v10(p, len, version, res, &n, &where, &err);
    CHECK(st == want && err.field != NULL && strcmp(err.field, field) == 0 && err.offset == offset,
          "%s: status %d (want %d), %s at %zu (want %s at %zu)", what, st, want,
          err.field ? err.field : "-", err.offset, field, offset);
}

static void test_leader_hints(void)
{
    uint8_t p[512];
    size_t len = unhex(RESPONSE_V10, p);
    CHECK(len == V10_LEN && p[V10_LEADER_SIZE] == 9 && p[V10_ENDPOINTS_SIZE] == 0x38
          && p[V10_HOST] == 0x11, "RESPONSE_V10 layout (%zu bytes)", len);
    for (int version = 10; version <= 11; version++) {
        kp_produce_result res[16];
        kp_produce_endpoints where = {99, 99, 99};
        kp_error err = {0};
        size_t n = 0;
        kp_status st = read_v10(p, len, version, res, &n, &where, &err);
        CHECK(st == KP_OK && n == 3, "v%d status %d (%s at %zu) n %zu", version, st,
              err.field ? err.field : "-", err.offset, n);
        if (st != KP_OK) continue;
        CHECK(res[0].partition == 0 && res[0].error_code == 6 && res[0].current_leader_id == 2
              && res[0].current_leader_epoch == 7, "v%d orders-0 leader %d epoch %d", version,
              (int)res[0].current_leader_id, (int)res[0].current_leader_epoch);
        CHECK(res[1].partition == 1 && res[1].current_leader_id == -1 && res[1].current_leader_epoch == -1,
              "v%d orders-1: no CurrentLeader", version);
        CHECK(res[2].partition == 3 && res[2].error_code == 74 && res[2].current_leader_id == -1
              && res[2].current_leader_epoch == -1 && res[2].topic_len == 4
              && memcmp(p + res[2].topic_off, "logs", 4) == 0, "v%d logs-3", version);
        CHECK(where.count == 2 && where.off == V10_ENDPOINTS && where.len == 0x38,
              "v%d endpoints at %zu+%zu: %zu", version, where.off, where.len, where.count);
        kp_produce_endpoint eps[2];
        size_t n_eps = 0;
        st = kp_produce_endpoints_read(p, len, &where, eps, 2, &n_eps, &err);
        CHECK(st == KP_OK && n_eps == 2, "v%d endpoints status %d n %zu", version, st, n_eps);
        CHECK(eps[0].node_id == 2 && eps[0].port == 9092 && eps[0].host_len == 16
              && memcmp(p + eps[0].host_off, "broker-2.example", 16) == 0 && eps[0].rack_len == 6
              && memcmp(p + eps[0].rack_off, "rack-a", 6) == 0, "v%d endpoint 2", version);
        CHECK(eps[1].node_id == 5 && eps[1].port == 9102 && eps[1].host_len == 8
              && memcmp(p + eps[1].host_off, "10.0.0.5", 8) == 0 && eps[1].rack_len == -1,
              "v%d endpoint 5", version);
        /* The second pass: too little room, a locator outside the input. */
        CHECK(kp_produce_endpoints_read(p, len, &where, eps, 1, &n_eps, &err) == KP_ERR_FULL, "cap 1");
        kp_produce_endpoints off = where;
        off.len++;
        CHECK(kp_produce_endpoints_read(p, len, &off, eps, 2, &n_eps, &err) == KP_ERR_INVALID, "past the end");
        off.off = len + 1;
        off.len = 0;
        CHECK(kp_produce_endpoints_read(p, len, &off, eps, 2, &n_eps, &err) == KP_ERR_INVALID, "offset past");
        /* NULL outputs: the same validation. */
        int32_t cid;
        CHECK(kp_produce_response_read(p, len, version, &cid, res, 16, &n, NULL, NULL, NULL, &err) == KP_OK,
              "v%d NULL endpoints", version);
        /* Every truncation fails, with a field, inside what was given. */
        for (size_t cut = 0; cut < len; cut++) {
            kp_error e = {0};
            st = read_v10(p, cut, version, res, &n, &where, &e);
            CHECK(st != KP_OK && st != KP_ERR_FULL && e.field != NULL && e.offset <= cut,
                  "v%d cut %zu: status %d offset %zu", version, cut, st, e.offset);
        }
    }
    /* v9: tag 0 is no field of v9, skipped by size. */
    {
        kp_produce_result res[16];
        kp_produce_endpoints where = {99, 99, 99};
        kp_error err = {0};
        size_t n = 0;
        kp_status st = read_v10(p, len, 9, res, &n, &where, &err);
        CHECK(st == KP_OK && n == 3 && res[0].current_leader_id == -1 && where.count == 0 && where.len == 0,
              "v9 skips tag 0: status %d", st);
    }

    uint8_t q[512];
    /* CurrentLeader larger than its content: the byte left over, named. */
    memcpy(q, p, V10_LEADER + 9);
    q[V10_LEADER_SIZE] = 10;
    q[V10_LEADER + 9] = 0;
    memcpy(q + V10_LEADER + 10, p + V10_LEADER + 9, len - V10_LEADER - 9);
    expect_error(q, len + 1, 10, KP_ERR_TRAILING, "PartitionProduceResponse.CurrentLeader", V10_LEADER + 9,
                 "CurrentLeader size 10");
    {
        kp_produce_result res[16];
        size_t n;
        kp_error err;
        CHECK(read_v10(q, len + 1, 9, res, &n, NULL, &err) == KP_OK, "v9 skips a 10-byte tag 0");
    }
    /* Smaller: the field its window cuts. */
    memcpy(q, p, len);
    q[V10_LEADER_SIZE] = 8;
    expect_error(q, len, 11, KP_ERR_TRUNCATED, "LeaderIdAndEpoch._tagged_fields", V10_LEADER + 8, "size 8");
    q[V10_LEADER_SIZE] = 6;
    expect_error(q, len, 11, KP_ERR_TRUNCATED, "LeaderIdAndEpoch.LeaderEpoch", V10_LEADER + 4, "size 6");
    q[V10_LEADER_SIZE] = 3;
    expect_error(q, len, 11, KP_ERR_TRUNCATED, "LeaderIdAndEpoch.LeaderId", V10_LEADER, "size 3");
    /* Past the end of the input: named after the field, at its size. */
    q[V10_LEADER_SIZE] = 0x7f;
    expect_error(q, V10_LEADER + 40, 11, KP_ERR_TRUNCATED, "PartitionProduceResponse.CurrentLeader",
                 V10_LEADER_SIZE, "size past the end");
    /* NodeEndpoints: larger than its content, smaller, past the end. */
    memcpy(q, p, len);
    q[V10_ENDPOINTS_SIZE] = 0x39;
    q[len] = 0;
    expect_error(q, len + 1, 10, KP_ERR_TRAILING, "ProduceResponse.NodeEndpoints", len, "endpoints 0x39");
    expect_error(q, len, 10, KP_ERR_TRUNCATED, "ProduceResponse.NodeEndpoints", V10_ENDPOINTS_SIZE,
                 "endpoints past the end");
    q[V10_ENDPOINTS_SIZE] = 0x37;
    expect_error(q, len - 1, 10, KP_ERR_TRUNCATED, "NodeEndpoint._tagged_fields", len - 2, "endpoints 0x37");
    /* Its contents: a count it cannot hold, null, one more than there is; a null Host,
     * Host not UTF-8. */
    memcpy(q, p, len);
    q[V10_ENDPOINTS] = 7;
    expect_error(q, len, 10, KP_ERR_TRUNCATED, "ProduceResponse.NodeEndpoints", V10_ENDPOINTS, "count 6");
    q[V10_ENDPOINTS] = 0;
    expect_error(q, len, 10, KP_ERR_NULL, "ProduceResponse.NodeEndpoints", V10_ENDPOINTS, "null array");
    q[V10_ENDPOINTS] = 4;
    expect_error(q, len, 10, KP_ERR_TRUNCATED, "NodeEndpoint.NodeId", len, "count 3");
    memcpy(q, p, len);
    q[V10_HOST] = 0;
    expect_error(q, len, 10, KP_ERR_NULL, "NodeEndpoint.Host", V10_HOST, "null host");
    q[V10_HOST] = 0x11;
    q[V10_HOST + 1] = 0xff;
    expect_error(q, len, 10, KP_ERR_UTF8, "NodeEndpoint.Host", V10_HOST + 1, "host not UTF-8");
    /* The same bytes at v9: nothing of it read. */
    {
        kp_produce_result res[16];
        size_t n;
        kp_error err;
        CHECK(read_v10(q, len, 9, res, &n, NULL, &err) == KP_OK, "v9 skips NodeEndpoints");
    }
}

static void test_utf8(void)
{
    static const struct { const char *s; size_t n; int ok; } cases[] = {
        {"", 0, 1}, {"plain ascii text, longer than eight", 35, 1},
        {"\xc3\xa9", 2, 1}, {"\xe2\x9c\x93", 3, 1}, {"\xf0\x9f\x98\x80", 4, 1}, {"\xf4\x8f\xbf\xbf", 4, 1},
        {"\xc0\x80", 2, 0},            /* overlong NUL */
        {"\xe0\x80\x80", 3, 0},        /* overlong */
        {"\xed\xa0\x80", 3, 0},        /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0},    /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0}, {"\x80", 1, 0}, {"\xc3", 1, 0}, {"\xe2\x9c", 2, 0},
        {"abcdefgh\xc3", 9, 0}, {"\xc3\x28", 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(kp_utf8_valid((const uint8_t *)cases[i].s, cases[i].n) == cases[i].ok, "utf8 case %zu", i);
}

static void test_mutations(void)
{
    uint8_t base9[256], base10[256];
    size_t len9 = unhex(RESPONSE_V9, base9), len10 = unhex(RESPONSE_V10, base10);
    static const int versions[] = {3, 8, 9, 11, 9, 10, 11, 11};
    for (int round = 0; round < 200000; round++) {
        /* Versions 3-11 on the v9 response, 9-11 on the v10 one (its tags). */
        int pick = (int)(rnd32() % 8);
        int version = versions[pick];
        const uint8_t *base = pick < 4 ? base9 : base10;
        /* Each mutated payload in a heap block of its exact size: a read past it is an
         * ASan error, not a silent one. */
        size_t len = pick < 4 ? len9 : len10;
        uint8_t *p = malloc(len + 8);
        memcpy(p, base, len);
        int edits = 1 + (int)(rnd32() % 4);
        for (int e = 0; e < edits; e++) {
            size_t i = rnd32() % len;
            switch (rnd32() % 3) {
            case 0: p[i] = (uint8_t)rnd32(); break;
            case 1: len = i ? i : 1; break;                     /* truncate */
            default: memmove(p + i + 1, p + i, len - i); p[i] = (uint8_t)rnd32(); len++; break;
            }
        }
        uint8_t *exact = malloc(len);
        memcpy(exact, p, len);
        free(p);
        kp_produce_result res[24];
        size_t n = 0;
        int32_t cid, throttle;
        size_t trailing = 0;
        kp_produce_endpoints where;
        kp_error err = {0};
        kp_status st = kp_produce_response_read(exact, len, version, &cid, res, len / KP_PRODUCE_MIN_PARTITION_BYTES + 1,
                                                &n, &throttle, &trailing, &where, &err);
        if (st == KP_OK) {
            CHECK(trailing < len, "round %d: %zu trailing of %zu", round, trailing, len);
            for (size_t i = 0; i < n; i++) {
                CHECK(res[i].topic_off + res[i].topic_len <= len, "topic outside the input");
                CHECK(res[i].message_len < 0 || res[i].message_off + (size_t)res[i].message_len <= len,
                      "message outside the input");
            }
            CHECK(where.off + where.len <= len && where.count <= len / KP_PRODUCE_MIN_ENDPOINT_BYTES,
                  "round %d: endpoints outside the input", round);
            kp_produce_endpoint eps[24];
            size_t n_eps = 99;
            st = kp_produce_endpoints_read(exact, len, &where, eps, 24, &n_eps, &err);
            CHECK(st == KP_OK && n_eps == where.count, "round %d: endpoints read %d", round, st);
            for (size_t i = 0; st == KP_OK && i < n_eps; i++)
                CHECK(eps[i].host_off + eps[i].host_len <= len
                      && (eps[i].rack_len < 0 || eps[i].rack_off + (size_t)eps[i].rack_len <= len),
                      "round %d: endpoint outside the input", round);
        } else {
            CHECK(st != KP_ERR_FULL && err.field != NULL && err.offset <= len, "round %d: status %d", round, st);
        }
        free(exact);
    }
}

int main(void)
{
    test_requests();
    test_response();
    test_throttle_every_version();
    test_leader_hints();
    test_utf8();
    test_mutations();
    printf("test_produce: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
