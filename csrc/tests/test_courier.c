/* test_courier.c - standalone test for kp_courier (no Python, no framework).
 *
 * Build and run from the repo root:
 *   gcc -O2 -Wall -Wextra -std=c11 -Icsrc csrc/kp_courier.c csrc/kp_produce.c csrc/kp_batch.c \
 *       csrc/kp_buf.c csrc/kp_crc32c.c csrc/kp_turn.c csrc/tests/test_courier.c -pthread \
 *       -o /tmp/test_courier && /tmp/test_courier
 * (add -fsanitize=address,undefined -g for the sanitizer run, as tests/test_build.py does)
 *
 * The selector is a fake behind kp_selector_fns that keeps what the courier stages. Checks:
 * an offered batch is sent once its deadline passes and not before, as one Produce request
 * with the plan's correlation id, client id, acks and timeout, the batch finished with the
 * plan's producer id, epoch and sequence (CRC valid) and sealed; a node that is not connected
 * or still writing gets nothing and is not looked at again (no spin); a plan reset before the
 * deadline sends nothing; the spinning trylock gives up on a held lock after its time.
 */
#define _GNU_SOURCE
#include "kp_courier.h"
#include "kp_test.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_mutex_t mu;
    int connected, sending, sends, flushes;
    int32_t conn_id;
    uint8_t frame[4096];
    size_t len;
} fake = {PTHREAD_MUTEX_INITIALIZER, 1, 0, 0, 0, -1, {0}, 0};

static kp_status fake_send(kp_selector *s, int32_t id, const uint8_t *data, size_t len)
{
    (void)s;
    pthread_mutex_lock(&fake.mu);
    kp_status st = KP_OK;
    if (fake.sending) st = KP_ERR_BUSY;
    else if (len > sizeof fake.frame) st = KP_ERR_NOMEM;
    else {
        memcpy(fake.frame, data, len);
        fake.len = len;
        fake.conn_id = id;
        fake.sends++;
        fake.sending = 1;
    }
    pthread_mutex_unlock(&fake.mu);
    return st;
}

static int fake_flush(kp_selector *s, int32_t id)
{
    (void)s; (void)id;
    pthread_mutex_lock(&fake.mu);
    fake.flushes++;
    int n = (int)fake.len;
    pthread_mutex_unlock(&fake.mu);
    return n;
}

static int fake_get(const int *field)
{
    pthread_mutex_lock(&fake.mu);
    int r = *field;
    pthread_mutex_unlock(&fake.mu);
    return r;
}

static int fake_is_connected(const kp_selector *s, int32_t id)
{
    (void)s; (void)id;
    return fake_get(&fake.connected);
}

static int fake_is_sending(const kp_selector *s, int32_t id)
{
    (void)s; (void)id;
    return fake_get(&fake.sending);
}

static const kp_selector_fns fns = {fake_send, fake_flush, fake_is_connected, fake_is_sending};

static void fake_reset(int connected, int sending)
{
    pthread_mutex_lock(&fake.mu);
    fake.connected = connected;
    fake.sending = sending;
    fake.sends = fake.flushes = 0;
    fake.len = 0;
    fake.conn_id = -1;
    pthread_mutex_unlock(&fake.mu);
}

static int fake_sends(void)
{
    return fake_get(&fake.sends);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* Arms c with one node (id 5, connection 3, Produce v3, correlation id 77) and partition 2 of
 * topic "t" (sequence 9), offering w due at due_us; txn_id: the transactional id, or NULL. */
static void arm_txn(kp_courier *c, kp_batch_writer *w, int64_t due_us, const char *txn_id)
{
    static kp_selector *not_used;   /* the fake ignores it */
    kp_courier_plan plan = {
        .io = &fns, .selector = not_used, .turn = NULL, .producer_id = 1000,
        .producer_epoch = 2, .acks = -1, .timeout_ms = 30000,
        .client_id = (const uint8_t *)"cid", .client_id_len = 3,
        .transactional_id = (const uint8_t *)txn_id, .transactional_id_len = txn_id ? strlen(txn_id) : 0,
        .max_request_size = 1 << 20,
    };
    kp_courier_lock(c);
    kp_courier_reset(c);
    int32_t n = kp_courier_add_node(c, 5, 3, 3, 77);
    int32_t p = kp_courier_add_part(c, n, (const uint8_t *)"t", 1, 2, 9);
    CHECK(n == 0 && p == 0, "plan indexes %d %d", n, p);
    kp_courier_offer(c, p, w, w, due_us);
    CHECK(kp_courier_arm(c, &plan) == KP_OK && kp_courier_armed(c), "arm");
    kp_courier_unlock(c);
}

static void arm_one(kp_courier *c, kp_batch_writer *w, int64_t due_us)
{
    arm_txn(c, w, due_us, NULL);
}

static void new_batch(kp_batch_writer *w)
{
    CHECK(kp_batch_init(w, 256) == KP_OK, "batch init");
    CHECK(kp_batch_append(w, 1700000000000, (const uint8_t *)"k", 1, (const uint8_t *)"v", 1, NULL, 0)
          == KP_OK, "append");
}

/* The node's `used` once the courier looked (0 when it did not within 5 s). */
static int wait_used(kp_courier *c)
{
    int64_t deadline = now_us() + 5000000;
    for (;;) {
        size_t nn;
        kp_courier_lock(c);
        int used = kp_courier_nodes(c, &nn)[0].used;
        kp_courier_unlock(c);
        if (used != 0 || now_us() > deadline)
            return used;
        usleep(1000);
    }
}

static void test_sent_at_the_deadline(void)
{
    kp_courier *c;
    kp_batch_writer w;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    new_batch(&w);
    fake_reset(1, 0);
    int64_t t0 = now_us();
    arm_one(c, &w, t0 + 30000);
    CHECK(wait_used(c) == 1, "the courier did not send");
    CHECK(now_us() - t0 >= 30000, "sent %lld us after arming, before its deadline",
          (long long)(now_us() - t0));
    CHECK(fake_sends() == 1 && fake.flushes == 1 && fake.conn_id == 3, "one send, flushed, to connection 3");
    CHECK(kp_courier_sent(c) == 1, "counted");
    /* Frame: size | api key 0 | version 3 | correlation id 77 | client id "cid" | txn id null
     * | acks -1 | timeout 30000 | 1 topic "t" | 1 partition 2 | records. */
    const uint8_t *f = fake.frame;
    CHECK(be32(f) == fake.len - 4, "size prefix");
    CHECK(be16(f + 4) == 0 && be16(f + 6) == 3 && be32(f + 8) == 77, "header");
    CHECK(be16(f + 12) == 3 && memcmp(f + 14, "cid", 3) == 0, "client id");
    CHECK(be16(f + 17) == 0xFFFF && be16(f + 19) == 0xFFFF && be32(f + 21) == 30000, "txn id, acks, timeout");
    CHECK(be32(f + 25) == 1 && be16(f + 29) == 1 && f[31] == 't', "topic");
    CHECK(be32(f + 32) == 1 && be32(f + 36) == 2 && be32(f + 40) == w.buf.len, "partition");
    CHECK(memcmp(f + 44, w.buf.data, w.buf.len) == 0 && 44 + w.buf.len == fake.len, "records");
    kp_batch_info info;
    kp_error err;
    CHECK(kp_batch_read_header(f + 44, w.buf.len, &info, &err) == KP_OK, "batch header (CRC)");
    CHECK(info.producer_id == 1000 && info.producer_epoch == 2 && info.base_sequence == 9
          && info.records_count == 1, "finished with the plan's producer id, epoch and sequence");
    CHECK(w.sealed == 1, "sealed");
    size_t np;
    kp_courier_lock(c);
    const kp_courier_part *parts = kp_courier_parts(c, &np);
    CHECK(np == 1 && parts[0].sent == 1 && parts[0].owner == &w, "the part says sent");
    kp_courier_reset(c);
    CHECK(!kp_courier_armed(c), "reset disarms");
    kp_courier_unlock(c);
    kp_courier_free(c);
    kp_batch_free(&w);
}

/* A transactional plan: the request names the transactional id and the batch carries the
 * transactional bit, under the same CRC. */
static void test_transactional(void)
{
    kp_courier *c;
    kp_batch_writer w;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    new_batch(&w);
    fake_reset(1, 0);
    arm_txn(c, &w, now_us(), "tx-1");
    CHECK(wait_used(c) == 1, "the courier did not send");
    const uint8_t *f = fake.frame;
    /* size | api key | version | correlation id | "cid" | txn id "tx-1" | acks | timeout ... */
    CHECK(be16(f + 17) == 4 && memcmp(f + 19, "tx-1", 4) == 0, "transactional id");
    CHECK(be16(f + 23) == 0xFFFF && be32(f + 25) == 30000, "acks, timeout");
    CHECK(be32(f + 44) == w.buf.len && 48 + w.buf.len == fake.len, "records");
    kp_batch_info info;
    kp_error err;
    CHECK(kp_batch_read_header(f + 48, w.buf.len, &info, &err) == KP_OK, "batch header (CRC)");
    CHECK((info.attributes & KP_ATTR_TRANSACTIONAL) != 0 && info.producer_id == 1000
          && info.base_sequence == 9, "transactional bit, producer id and sequence");
    kp_courier_lock(c);
    kp_courier_reset(c);
    kp_courier_unlock(c);
    kp_courier_free(c);
    kp_batch_free(&w);
}

static void test_a_node_that_cannot_take_it(int connected, int sending)
{
    kp_courier *c;
    kp_batch_writer w;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    new_batch(&w);
    fake_reset(connected, sending);
    arm_one(c, &w, now_us());
    CHECK(wait_used(c) == -1, "connected %d sending %d: not marked", connected, sending);
    usleep(20000);      /* were it looked at again and again, the next check would not tell */
    CHECK(fake_sends() == 0 && w.sealed == 0 && kp_courier_sent(c) == 0,
          "connected %d sending %d: sent anyway", connected, sending);
    kp_courier_free(c);
    kp_batch_free(&w);
}

static void test_reset_before_the_deadline(void)
{
    kp_courier *c;
    kp_batch_writer w;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    new_batch(&w);
    fake_reset(1, 0);
    arm_one(c, &w, now_us() + 20000);
    kp_courier_lock(c);
    kp_courier_reset(c);      /* a step began */
    kp_courier_unlock(c);
    usleep(60000);
    CHECK(fake_sends() == 0 && w.sealed == 0, "sent after its plan was reset");
    kp_courier_free(c);
    kp_batch_free(&w);
}

static void test_trylock_spin(void)
{
    kp_courier *c;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    CHECK(kp_courier_trylock_spin(c, 100) == 1, "free lock");
    int64_t t0 = now_us();
    CHECK(kp_courier_trylock_spin(c, 2000) == 0, "held lock taken");
    CHECK(now_us() - t0 >= 2000, "gave up before its time");
    kp_courier_unlock(c);
    kp_courier_free(c);
}

int main(void)
{
    test_sent_at_the_deadline();
    test_transactional();
    test_a_node_that_cannot_take_it(0, 0);
    test_a_node_that_cannot_take_it(1, 1);
    test_reset_before_the_deadline();
    test_trylock_spin();
    printf("test_courier: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
