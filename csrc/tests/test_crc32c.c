/* test_crc32c.c - standalone test for kp_crc32c (no Python, no framework).
 *
 * Build and run from the repo root:
 *   gcc -O2 -Wall -Wextra -Wshadow -std=c11 -Icsrc csrc/kp_crc32c.c \
 *       csrc/tests/test_crc32c.c -o test_crc32c -pthread && ./test_crc32c
 * (add -fsanitize=address,undefined -g for the sanitizer run)
 *
 * Checks: known-answer vectors (check value, RFC 3720 B.4), sw == hw ==
 * dispatch == bitwise reference on random data for every length 0..5000,
 * lengths around the 3x256 / 3x8192 three-stream boundaries and ~1 MiB, at
 * misaligned offsets 0..7, and that incremental updates equal one-shot.
 */
#include "kp_crc32c.h"
#include "kp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bit-at-a-time reference: independent of every table in the library. */
static uint32_t ref_crc32c(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

typedef uint32_t (*crc_fn)(uint32_t, const uint8_t *, size_t);

static int hw;  /* kp_crc32c_hw_available() */

static void check_vector(const char *name, const uint8_t *data, size_t len,
                         uint32_t want)
{
    uint32_t sw = kp_crc32c_update_sw(0, data, len);
    uint32_t dp = kp_crc32c_update(0, data, len);
    CHECK(sw == want, "%s sw: got %08x want %08x", name, sw, want);
    CHECK(dp == want, "%s dispatch: got %08x want %08x", name, dp, want);
    if (hw) {
        uint32_t h = kp_crc32c_update_hw(0, data, len);
        CHECK(h == want, "%s hw: got %08x want %08x", name, h, want);
    }
    CHECK(ref_crc32c(0, data, len) == want, "%s reference", name);
}

static void test_vectors(void)
{
    uint8_t buf[32];

    check_vector("123456789", (const uint8_t *)"123456789", 9, 0xE3069283u);
    memset(buf, 0x00, sizeof(buf));
    check_vector("32x00", buf, 32, 0x8A9136AAu);
    memset(buf, 0xFF, sizeof(buf));
    check_vector("32xFF", buf, 32, 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    check_vector("0..31", buf, 32, 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    check_vector("31..0", buf, 32, 0x113FDB5Cu);

    /* Empty input leaves the running value unchanged. */
    CHECK(kp_crc32c_update_sw(0, NULL, 0) == 0, "empty sw");
    CHECK(kp_crc32c_update(0x12345678u, buf, 0) == 0x12345678u, "empty dispatch");
    if (hw)
        CHECK(kp_crc32c_update_hw(0xDEADBEEFu, buf, 0) == 0xDEADBEEFu, "empty hw");
}

/* Compare all implementations (and optionally the bitwise reference). */
static void compare_one(const uint8_t *p, size_t len, uint32_t seed, int use_ref)
{
    uint32_t sw = kp_crc32c_update_sw(seed, p, len);
    uint32_t dp = kp_crc32c_update(seed, p, len);
    CHECK(sw == dp, "len %zu align %u: sw %08x != dispatch %08x",
          len, (unsigned)((uintptr_t)p & 7), sw, dp);
    if (hw) {
        uint32_t h = kp_crc32c_update_hw(seed, p, len);
        CHECK(sw == h, "len %zu align %u: sw %08x != hw %08x",
              len, (unsigned)((uintptr_t)p & 7), sw, h);
    }
    if (use_ref) {
        uint32_t r = ref_crc32c(seed, p, len);
        CHECK(sw == r, "len %zu: sw %08x != ref %08x", len, sw, r);
    }
}

/* Exact-size heap copy so ASan flags any read past data+len. */
static void compare_exact(const uint8_t *src, size_t len, size_t off,
                          uint32_t seed, int use_ref)
{
    uint8_t *blk = malloc(off + len ? off + len : 1);
    if (!blk) {
        CHECK(0, "malloc");
        return;
    }
    memcpy(blk + off, src, len);
    /* malloc returns >= 8-aligned memory, so blk+off is misaligned by off
     * and the block ends exactly at data+len. */
    compare_one(blk + off, len, seed, use_ref);
    free(blk);
}

static void test_random(void)
{
    const size_t big = (1u << 20) + 13;  /* ~1 MiB, deliberately odd */
    uint8_t *src = malloc(big + 8);
    if (!src) {
        CHECK(0, "malloc");
        return;
    }
    for (size_t i = 0; i < big + 8; i++)
        src[i] = rnd8();

    /* Every length 0..5000 at every misalignment 0..7 (reference too). */
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 5000; len++)
            compare_one(src + off, len, 0, len <= 2000 || (len % 97) == 0);

    /* Boundaries of the short (3x256) and long (3x8192) three-stream
     * blocks and their multiples, +-16 bytes, with nonzero seed. */
    static const size_t centers[] = {
        256 * 3, 256 * 6, 256 * 9, 8192 * 3, 8192 * 3 + 256 * 3,
        8192 * 6, 8192 * 6 + 256 * 3 * 2, 8192 * 9,
    };
    for (size_t c = 0; c < sizeof(centers) / sizeof(centers[0]); c++)
        for (size_t len = centers[c] - 16; len <= centers[c] + 16; len++)
            for (size_t off = 0; off < 8; off++)
                compare_one(src + off, len, 0xA5A5A5A5u, 1);

    /* ~1 MiB and exact 1 MiB at every misalignment, plus the exact-size heap
     * copies (ASan catches overreads there). */
    for (size_t off = 0; off < 8; off++) {
        compare_one(src + off, big, 0, off == 0);
        compare_one(src + off, 1u << 20, 0, 0);
        compare_exact(src, big - off, off, 7, 0);
    }
    for (size_t len = 0; len <= 64; len++)
        for (size_t off = 0; off < 8; off++)
            compare_exact(src + 100, len, off, 0, 1);
    compare_exact(src, 8192 * 3 + 7, 3, 0, 1);

    free(src);
}

/* update(update(0, a), b) == update(0, a + b) for many split points. */
static void test_incremental(void)
{
    const size_t n = 8192 * 3 * 2 + 1000;
    uint8_t *src = malloc(n);
    if (!src) {
        CHECK(0, "malloc");
        return;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = rnd8();

    crc_fn fns[3] = {kp_crc32c_update_sw, kp_crc32c_update, kp_crc32c_update_hw};
    const char *names[3] = {"sw", "dispatch", "hw"};
    int nfn = hw ? 3 : 2;
    uint32_t whole = kp_crc32c_update_sw(0, src, n);

    for (int f = 0; f < nfn; f++) {
        /* two-way splits: dense at the start, sparse later */
        for (size_t cut = 0; cut <= n; cut += (cut < 1024 ? 1 : 251)) {
            uint32_t c = fns[f](0, src, cut);
            c = fns[f](c, src + cut, n - cut);
            CHECK(c == whole, "%s split at %zu: %08x != %08x", names[f], cut, c, whole);
        }
        /* many random-sized chunks, mixing implementations chunk by chunk */
        uint32_t c = 0;
        size_t pos = 0;
        int k = 0;
        while (pos < n) {
            size_t step = (size_t)rnd8() * (rnd8() & 7) + (rnd8() & 15);
            if (step > n - pos)
                step = n - pos;
            c = fns[(f + k++) % nfn](c, src + pos, step);
            pos += step;
        }
        CHECK(c == whole, "%s chunked: %08x != %08x", names[f], c, whole);
    }
    free(src);
}

int main(void)
{
    hw = kp_crc32c_hw_available();
    test_vectors();
    test_random();
    test_incremental();
    printf("test_crc32c: %ld checks, %d failures (hw path %s)\n", checks,
           failures, hw ? "tested" : "unavailable, sw only");
    return failures ? 1 : 0;
}
