/* test_leaks.c - every allocation of the batch writer/reader, the buffer and the frame
 * receiver is freed, on success and on every error path (no Python, no framework).
 *
 * Meant for LeakSanitizer: build with -fsanitize=address (LSan is on by default) and run;
 * a lost buffer makes the process exit non-zero with its allocation stack:
 *   gcc -g -std=c11 -fsanitize=address,undefined -Icsrc csrc/kp_buf.c csrc/kp_crc32c.c \
 *       csrc/kp_batch.c csrc/kp_frame.c csrc/tests/test_leaks.c -pthread -o t && ./t
 * The cycles also check the results, so a plain build is a functional test too.
 */
#include "kp_batch.h"
#include "kp_frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            if (failures++ < 20) fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                    \
    } while (0)

static const uint8_t KEY[] = "key";
static uint8_t value[5000];

/* Writes a batch of n records (growing the buffer several times), optionally swaps in a
 * fake "compressed" section, reads it back; or abandons it half-written. */
static void batch_cycle(int n, int abandon, int replace)
{
    kp_batch_writer w;
    kp_header hdr = {(const uint8_t *)"h", 1, (const uint8_t *)"v", 1};
    CHECK(kp_batch_init(&w, 64) == KP_OK);
    for (int i = 0; i < n; i++)
        CHECK(kp_batch_append(&w, 1000 + i, KEY, 3, value, (int64_t)(i * 37 % sizeof value), &hdr, 1) == KP_OK);
    if (abandon) {                       /* an encode that failed midway */
        kp_batch_free(&w);
        return;
    }
    if (replace)
        CHECK(kp_batch_replace_records(&w, value, 100) == KP_OK);
    CHECK(kp_batch_finish(&w, 0, 7, 0, 0) == KP_OK);
    kp_batch_info info;
    kp_error err;
    CHECK(kp_batch_read_header(w.buf.data, w.buf.len, &info, &err) == KP_OK);
    if (!replace) {
        size_t pos = 0;
        kp_record_view rv;
        for (int i = 0; i < n; i++)
            CHECK(kp_record_read(info.records, info.records_len, &pos, &rv, &err, KP_BATCH_HEADER_SIZE) == KP_OK);
        CHECK(pos == info.records_len);
    }
    kp_batch_free(&w);
    kp_batch_free(&w);                   /* freeing twice is harmless (the Cython code may) */
}

/* A batch written into caller memory and grown out of it. */
static void external_cycle(void)
{
    uint8_t room[256];
    kp_batch_writer w;
    CHECK(kp_batch_init_external(&w, room, sizeof room) == KP_OK);
    kp_status st = kp_batch_append(&w, 1, KEY, 3, value, 1000, NULL, 0);
    CHECK(st == KP_OK || st == KP_ERR_FULL);
    kp_batch_free(&w);
}

/* Frames fed in pieces: completed bodies taken and freed, a partial body abandoned,
 * an oversized size refused mid-stream. */
static void frame_cycle(size_t split)
{
    uint8_t stream[3 * (4 + 3000)];
    size_t len = 0;
    for (int f = 0; f < 3; f++) {
        CHECK(kp_frame_put_size(stream + len, 3000) == KP_OK);
        memset(stream + len + 4, 'a' + f, 3000);
        len += 4 + 3000;
    }
    kp_frame_rx rx;
    kp_frame_rx_init(&rx, 1 << 20);
    size_t fed = 0, frames = 0;
    while (fed < len - 100) {            /* stop inside the last frame: it stays partial */
        size_t n = len - 100 - fed < split ? len - 100 - fed : split;
        size_t pos = 0;
        while (pos < n) {
            size_t used;
            int complete;
            kp_error err;
            CHECK(kp_frame_rx_feed(&rx, stream + fed + pos, n - pos, &used, &complete, &err) == KP_OK);
            pos += used;
            if (complete) {
                uint8_t *body;
                size_t blen;
                kp_frame_rx_take(&rx, &body, &blen);
                CHECK(blen == 3000 && body[0] == 'a' + (int)frames);
                free(body);
                frames++;
            }
        }
        fed += n;
    }
    CHECK(frames == 2);
    kp_frame_rx_free(&rx);

    kp_frame_rx_init(&rx, 10);
    size_t used;
    int complete;
    kp_error err;
    CHECK(kp_frame_rx_feed(&rx, stream, len, &used, &complete, &err) == KP_ERR_FRAME_SIZE);
    kp_frame_rx_free(&rx);
}

int main(void)
{
    for (size_t i = 0; i < sizeof value; i++) value[i] = (uint8_t)(i * 7);
    for (int round = 0; round < 200; round++) {
        batch_cycle(1 + round % 50, 0, 0);
        batch_cycle(1 + round % 50, 1, 0);
        batch_cycle(5, 0, 1);
        external_cycle();
        frame_cycle(1 + (size_t)round * 13 % 4000);
    }
    printf("%d failures\n", failures);
    return failures != 0;
}
