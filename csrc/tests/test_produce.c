/* test_produce.c - standalone test for kp_produce (no Python, no framework).
 *
 * Build and run from the repo root:
 *   gcc -O2 -Wall -Wextra -std=c11 -Icsrc csrc/kp_produce.c csrc/tests/test_produce.c \
 *       -o /tmp/test_produce && /tmp/test_produce
 * (add -fsanitize=address,undefined -g for the sanitizer run, as tests/test_build.py does)
 *
 * Checks: the v3 and v9 request frames byte for byte; a request's size equals what is
 * written and a short buffer is refused; a v9 response with an error message, a record
 * error and tagged fields decodes to its values; every truncation of it fails with a
 * field and an offset inside the input, and bytes after its last field are ignored and
 * counted; ThrottleTimeMs is returned at every version 3-11, with or without bytes after
 * it, and the optional outputs may be NULL; the UTF-8 check against hand-picked
 * sequences; random mutations of v3/v8/v9/v11 responses never read outside the input (the
 * sanitizer run is what sees that) and, when they decode, give results that lie inside it.
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
    kp_status st = kp_produce_response_read(p, len, 9, &cid, res, 16, &n, &throttle, &trailing, &err);
    CHECK(st == KP_OK, "v9 decode status %d (%s at %zu)", st, err.field ? err.field : "-", err.offset);
    if (st != KP_OK) return;
    CHECK(cid == 42 && n == 2, "cid %d n %zu", cid, n);
    CHECK(throttle == 0 && trailing == 0, "throttle %d trailing %zu", (int)throttle, trailing);
    CHECK(res[0].topic_len == 2 && memcmp(p + res[0].topic_off, "tp", 2) == 0, "topic name");
    CHECK(res[0].partition == 0 && res[0].error_code == 0 && res[0].base_offset == 42
          && res[0].log_append_time_ms == 7 && res[0].message_len == -1, "partition 0");
    CHECK(res[1].partition == 3 && res[1].error_code == 10 && res[1].base_offset == -1
          && res[1].message_len == 3 && memcmp(p + res[1].message_off, "bad", 3) == 0, "partition 3");
    /* Every truncation fails with a field, at an offset inside what was given. */
    for (size_t cut = 0; cut < len; cut++) {
        kp_error e = {0};
        st = kp_produce_response_read(p, cut, 9, &cid, res, 16, &n, &throttle, &trailing, &e);
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
        st = kp_produce_response_read(p, len + extra, 9, &cid, res, 16, &n, &throttle, &trailing, &err);
        CHECK(st == KP_OK && cid == 42 && n == 2 && throttle == 0 && trailing == extra
              && res[1].partition == 3 && res[1].message_len == 3,
              "%zu trailing: status %d, cid %d, n %zu, trailing %zu", extra, st, (int)cid, n, trailing);
    }
    /* The optional outputs may be NULL. */
    CHECK(kp_produce_response_read(p, len + 1, 9, &cid, res, 16, &n, NULL, NULL, &err) == KP_OK,
          "NULL throttle and trailing");
    /* A null topic name: the byte after the array count. */
    uint8_t q[256];
    memcpy(q, p, len);
    q[6] = 0;
    st = kp_produce_response_read(q, len, 9, &cid, res, 16, &n, NULL, NULL, &err);
    CHECK(st == KP_ERR_NULL && err.offset == 6 && strcmp(err.field, "TopicProduceResponse.Name") == 0,
          "null name: %d %s at %zu", st, err.field, err.offset);
    /* Not UTF-8 in the error message: at its first byte. */
    memcpy(q, p, len);
    size_t msg = 0;
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(q + i, "bad", 3) == 0) msg = i;
    q[msg + 1] = 0xC0;
    st = kp_produce_response_read(q, len, 9, &cid, res, 16, &n, NULL, NULL, &err);
    CHECK(st == KP_ERR_UTF8 && err.offset == msg && strcmp(err.field, "PartitionProduceResponse.ErrorMessage") == 0,
          "utf8: %d at %zu", st, err.offset);
    /* The result array's bound holds: cap len/22 + 1 is enough, fewer is refused. */
    st = kp_produce_response_read(p, len, 9, &cid, res, 1, &n, NULL, NULL, &err);
    CHECK(st == KP_ERR_FULL, "cap 1 gave %d", st);
    CHECK(kp_produce_response_read(p, len, 2, &cid, res, 16, &n, NULL, NULL, &err) == KP_ERR_INVALID,
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
                                                        &throttle, &trailing, &err);
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
            kp_status st = kp_produce_response_read(p, at + 2, version, &cid, res, 4, &n, NULL, NULL, &err);
            CHECK(st == KP_ERR_TRUNCATED && err.offset == at && err.field != NULL
                  && strcmp(err.field, "ProduceResponse.ThrottleTimeMs") == 0,
                  "v%d cut in ThrottleTimeMs: status %d at %zu", version, st, err.offset);
        }
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
    uint8_t base[256];
    size_t base_len = unhex(RESPONSE_V9, base);
    static const int versions[] = {3, 8, 9, 11};
    for (int round = 0; round < 200000; round++) {
        /* Each mutated payload in a heap block of its exact size: a read past it is an
         * ASan error, not a silent one. */
        size_t len = base_len;
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
        kp_produce_result res[16];
        size_t n = 0;
        int32_t cid, throttle;
        size_t trailing = 0;
        kp_error err = {0};
        int version = versions[rnd32() % 4];
        kp_status st = kp_produce_response_read(exact, len, version, &cid, res, len / KP_PRODUCE_MIN_PARTITION_BYTES + 1,
                                                &n, &throttle, &trailing, &err);
        if (st == KP_OK) {
            CHECK(trailing < len, "round %d: %zu trailing of %zu", round, trailing, len);
            for (size_t i = 0; i < n; i++) {
                CHECK(res[i].topic_off + res[i].topic_len <= len, "topic outside the input");
                CHECK(res[i].message_len < 0 || res[i].message_off + (size_t)res[i].message_len <= len,
                      "message outside the input");
            }
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
    test_utf8();
    test_mutations();
    printf("test_produce: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
