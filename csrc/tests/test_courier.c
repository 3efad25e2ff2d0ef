/* test_courier.c - standalone test for kp_courier (no Python, no framework).
 *
 * Build and run from the repo root:
 *   gcc -O2 -Wall -Wextra -std=c11 -Icsrc -DKP_HAVE_ZLIB=1 csrc/kp_courier.c csrc/kp_produce.c \
 *       csrc/kp_batch.c csrc/kp_buf.c csrc/kp_crc32c.c csrc/kp_turn.c csrc/kp_compress.c \
 *       csrc/tests/test_courier.c -pthread -lz -Wl,--wrap=kp_compress -o test_courier \
 *   && ./test_courier
 * (add -fsanitize=address,undefined -g for the sanitizer run, as tests/test_build.py does)
 *
 * The selector is a fake behind kp_selector_fns that keeps what the courier stages and hands
 * it responses. Checks: an offered batch is sent once its deadline passes and not before, as
 * one Produce request with the plan's correlation id, client id, acks and timeout, the batch
 * finished with the plan's producer id, epoch and sequence (CRC valid) and sealed; a
 * transactional plan's request and batch; a response read and settled makes room for the
 * next request, an error response is left to the step, and so is a throttled one
 * (ThrottleTimeMs > 0), after which nothing more is written to the node, while an
 * acknowledgement with bytes after its last field is settled; with acks=0 a request is done once
 * written and nothing is read; a compressing plan compresses a batch once, even across a
 * failed send, and drops what it compressed when a step begins meanwhile (gzip, when built
 * with zlib); beside an application that keeps sending, a due batch is written at its
 * deadline and the reading is left to that application, with fewer and fewer looks, until it
 * stops, and fewer still while the node's window is full (the step's arms do not wake it
 * then); a node that is not connected or still writing gets nothing and is not looked at
 * again (no spin); a plan reset before the deadline sends nothing; the spinning trylock gives
 * up on a held lock after its time.
 */
#define _GNU_SOURCE
#include "kp_courier.h"
#include "kp_clock.h"
#include "kp_compress.h"
#include "kp_test.h"

#if KP_HAVE_ZLIB
#include <zlib.h>
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_mutex_t mu;
    int connected, sending, sends, flushes, settles, wakeups;
    int fail_sends;             /* send fails (KP_ERR_NOMEM), as with no memory for the frame */
    int32_t conn_id;
    uint8_t frame[4096];        /* the last request staged */
    size_t len;
    /* Frames the connection holds for the reader (responses), and a pipe that turns readable
     * when one is pushed (the connection's descriptor). */
    uint8_t kept[4][256];
    size_t kept_len[4];
    int n_kept;
    int pipe[2];
} fake = {PTHREAD_MUTEX_INITIALIZER, 1, 0, 0, 0, 0, 0, 0, -1, {0}, 0, {{0}}, {0}, 0, {-1, -1}};

static kp_status fake_send(kp_selector *s, int32_t id, const uint8_t *data, size_t len)
{
    (void)s;
    pthread_mutex_lock(&fake.mu);
    kp_status st = KP_OK;
    if (fake.sending) st = KP_ERR_BUSY;
    else if (len > sizeof fake.frame || fake.fail_sends) st = KP_ERR_NOMEM;
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

/* Every staged send is written whole at once. */
static int fake_settle(kp_selector *s, int32_t id)
{
    (void)s; (void)id;
    pthread_mutex_lock(&fake.mu);
    int r = fake.sending;
    fake.sending = 0;
    fake.settles += r;
    pthread_mutex_unlock(&fake.mu);
    return r;
}

static int fake_conn_fd(const kp_selector *s, int32_t id)
{
    (void)s; (void)id;
    return fake.pipe[0];
}

static int fake_read(kp_selector *s, int32_t id)
{
    (void)s; (void)id;
    char buf[16];
    while (read(fake.pipe[0], buf, sizeof buf) > 0) {}
    return fake_get(&fake.n_kept);
}

static const uint8_t *fake_kept(const kp_selector *s, int32_t id, size_t index, size_t *len)
{
    (void)s; (void)id;
    pthread_mutex_lock(&fake.mu);
    const uint8_t *f = (int)index < fake.n_kept ? fake.kept[index] : NULL;
    *len = f ? fake.kept_len[index] : 0;
    pthread_mutex_unlock(&fake.mu);
    return f;
}

static void fake_drop_kept(kp_selector *s, int32_t id, size_t index)
{
    (void)s; (void)id;
    pthread_mutex_lock(&fake.mu);
    if ((int)index < fake.n_kept) {
        for (int i = (int)index; i + 1 < fake.n_kept; i++) {
            memcpy(fake.kept[i], fake.kept[i + 1], sizeof fake.kept[0]);
            fake.kept_len[i] = fake.kept_len[i + 1];
        }
        fake.n_kept--;
    }
    pthread_mutex_unlock(&fake.mu);
}

static int fake_wakeup(kp_selector *s)
{
    (void)s;
    pthread_mutex_lock(&fake.mu);
    fake.wakeups++;
    pthread_mutex_unlock(&fake.mu);
    return 0;
}

static const kp_selector_fns fns = {fake_send, fake_flush, fake_is_connected, fake_is_sending,
                                    fake_settle, fake_conn_fd, fake_read, fake_kept,
                                    fake_drop_kept, fake_wakeup};

static void fake_reset(int connected, int sending)
{
    pthread_mutex_lock(&fake.mu);
    fake.connected = connected;
    fake.sending = sending;
    fake.sends = fake.flushes = fake.settles = fake.wakeups = fake.fail_sends = 0;
    fake.len = 0;
    fake.conn_id = -1;
    fake.n_kept = 0;
    if (fake.pipe[0] < 0 && pipe2(fake.pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        fake.pipe[0] = fake.pipe[1] = -1;
    pthread_mutex_unlock(&fake.mu);
}

/* With fake.mu held: the connection holds a Produce v3 response for the reader: correlation
 * id, topic "t", partition 2, the error code and base offset, ThrottleTimeMs, then `extra`
 * bytes after the last field (a broker of another implementation may add some). */
static void fake_keep(int32_t cid, int16_t code, int64_t offset, int32_t throttle_ms, size_t extra)
{
    uint8_t *r = fake.kept[fake.n_kept];
    size_t n = 0;
#define PUT32(v) do { uint32_t x_ = (uint32_t)(v); r[n++] = x_ >> 24; r[n++] = x_ >> 16; \
                      r[n++] = x_ >> 8; r[n++] = x_; } while (0)
    PUT32(cid);
    PUT32(1);                                   /* one topic */
    r[n++] = 0; r[n++] = 1; r[n++] = 't';
    PUT32(1);                                   /* one partition */
    PUT32(2);
    r[n++] = (uint8_t)((uint16_t)code >> 8); r[n++] = (uint8_t)code;
    PUT32((uint64_t)offset >> 32); PUT32(offset);
    PUT32(-1); PUT32(-1);                       /* log append time -1 */
    PUT32(throttle_ms);                         /* ThrottleTimeMs */
#undef PUT32
    for (size_t i = 0; i < extra; i++)
        r[n++] = 0xEE;
    fake.kept_len[fake.n_kept++] = n;
}

/* The connection turns readable. */
static void fake_readable(void)
{
    ssize_t w = write(fake.pipe[1], "x", 1);
    (void)w;
}

/* The connection receives a Produce v3 response: correlation id, topic "t", partition 2, the
 * error code and base offset (no throttle). */
static void fake_respond(int32_t cid, int16_t code, int64_t offset)
{
    pthread_mutex_lock(&fake.mu);
    fake_keep(cid, code, offset, 0, 0);
    pthread_mutex_unlock(&fake.mu);
    fake_readable();
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

static const kp_turn *plan_turn;   /* the plan's turn (an application that sends), or NULL */
static int plan_codec;              /* the plan's codec (KP_CODEC_NONE but in one test) */
static int plan_idle_node;          /* 1: a second node (id -1, connection 4) that leads no part,
                                       as the bootstrap connection does */

/* Arms c with one node (id 5, connection 3, Produce v3, correlation ids from 77,
 * max_in_flight, and the step's Produce v3 request prior_cid in flight unless it is -1) and
 * partition 2 of topic "t" (sequence 9), offering w[0..n) due at due_us; txn_id: the
 * transactional id, or NULL; acks: the plan's (-1 for arm_plan); the turn: plan_turn; and,
 * with plan_idle_node, a node that leads nothing and has nothing in flight. */
static void arm_acks(kp_courier *c, kp_batch_writer *w, int n_batches, int64_t due_us,
                     const char *txn_id, int32_t max_in_flight, int32_t prior_cid, int16_t acks)
{
    static kp_selector *not_used;   /* the fake ignores it */
    kp_courier_plan plan = {
        .io = &fns, .selector = not_used, .turn = plan_turn, .producer_id = 1000,
        .producer_epoch = 2, .acks = acks, .timeout_ms = 30000,
        .client_id = (const uint8_t *)"cid", .client_id_len = 3,
        .transactional_id = (const uint8_t *)txn_id, .transactional_id_len = txn_id ? strlen(txn_id) : 0,
        .max_request_size = 1 << 20, .codec = plan_codec, .level = 6,
    };
    kp_courier_lock(c);
    kp_courier_reset(c);
    int32_t n = kp_courier_add_node(c, 5, 3, 3, 77, 4 * max_in_flight, max_in_flight);
    if (prior_cid >= 0)
        CHECK(kp_courier_add_prior(c, n, prior_cid, 0, 3) == 0, "prior");
    int32_t p = kp_courier_add_part(c, n, (const uint8_t *)"t", 1, 2, 9);
    CHECK(n == 0 && p == 0, "plan indexes %d %d", n, p);
    if (plan_idle_node)
        CHECK(kp_courier_add_node(c, -1, 4, 3, 77 + 4 * max_in_flight, 4, max_in_flight) == 1,
              "idle node");
    for (int i = 0; i < n_batches; i++)
        kp_courier_offer(c, p, &w[i], &w[i], due_us);
    CHECK(kp_courier_arm(c, &plan) == KP_OK && kp_courier_armed(c), "arm");
    kp_courier_unlock(c);
}

static void arm_plan(kp_courier *c, kp_batch_writer *w, int n_batches, int64_t due_us,
                     const char *txn_id, int32_t max_in_flight, int32_t prior_cid)
{
    arm_acks(c, w, n_batches, due_us, txn_id, max_in_flight, prior_cid, -1);
}

static void arm_txn(kp_courier *c, kp_batch_writer *w, int64_t due_us, const char *txn_id)
{
    arm_plan(c, w, 1, due_us, txn_id, 1, -1);
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

/* Once the courier looked at the node: 1 when it sent a request, -1 when it stopped without
 * (0 when neither within 5 s). */
static int wait_used(kp_courier *c)
{
    int64_t deadline = now_us() + 5000000;
    for (;;) {
        size_t nn;
        kp_courier_lock(c);
        const kp_courier_node *node = &kp_courier_nodes(c, &nn)[0];
        int used = node->n_requests > 0 ? 1 : node->stopped ? -1 : 0;
        kp_courier_unlock(c);
        if (used != 0 || now_us() > deadline)
            return used;
        usleep(1000);
    }
}

/* Until cond(c) holds (with the lock), for up to 5 s: whether it did. */
static int wait_for(kp_courier *c, int (*cond)(kp_courier *))
{
    int64_t deadline = now_us() + 5000000;
    for (;;) {
        kp_courier_lock(c);
        int ok = cond(c);
        kp_courier_unlock(c);
        if (ok || now_us() > deadline)
            return ok;
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
    const kp_courier_batch *batches = kp_courier_batches(c, &np);
    size_t nr;
    const kp_courier_request *reqs = kp_courier_requests(c, &nr);
    CHECK(np == 1 && batches[0].request == 0 && batches[0].owner == &w && batches[0].base_sequence == 9,
          "the batch says sent, in request 0, with sequence 9");
    CHECK(nr == 1 && reqs[0].correlation_id == 77 && !reqs[0].answered, "the request");
    CHECK(reqs[0].send_us > 0 && reqs[0].send_us <= kp_mono_us() && reqs[0].answer_us == -1,
          "sent at a monotonic instant, not answered");
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

static int answered_one(kp_courier *c)
{
    size_t n;
    return kp_courier_nodes(c, &n)[0].n_answered == 2 && kp_courier_nodes(c, &n)[0].n_requests == 2;
}

static int answered_first(kp_courier *c)
{
    size_t n;
    return kp_courier_nodes(c, &n)[0].n_answered == 1;
}

static int stopped(kp_courier *c)
{
    size_t n;
    return kp_courier_nodes(c, &n)[0].stopped;
}

/* Room for one request in flight, the step's in it, three batches queued: the first goes once
 * the step's answer is read (and kept for the poll), the second waits for the first's
 * acknowledgement, which the courier reads and settles (offset kept, frame dropped) and then
 * sends it with the next sequence and correlation id. An error answer is left to the step:
 * kept, and the node stopped. */
static int32_t requests_wanted;

static int sent_wanted(kp_courier *c)
{
    size_t n;
    return kp_courier_nodes(c, &n)[0].n_requests == requests_wanted;
}

/* Until the courier wrote n requests, for up to 5 s: whether it did. */
static int wait_requests(kp_courier *c, int32_t n)
{
    requests_wanted = n;
    return wait_for(c, sent_wanted);
}

/* Three batches of one record each, a new courier, a connected fake selector. */
static kp_batch_writer w_three[3];

static kp_courier *new_with_batches(kp_batch_writer *w)
{
    kp_courier *c;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    for (int i = 0; i < 3; i++)
        new_batch(&w[i]);
    fake_reset(1, 0);
    return c;
}

static void free_with_batches(kp_courier *c, kp_batch_writer *w)
{
    kp_courier_free(c);
    for (int i = 0; i < 3; i++)
        kp_batch_free(&w[i]);
}

static void test_reads_and_goes_on(void)
{
    kp_courier *c = new_with_batches(w_three);
    kp_batch_writer *w = w_three;
    /* The step's request 76 fills the room: its answer is read and kept, then the courier
     * sends. */
    arm_plan(c, w, 3, now_us(), NULL, 1, 76);
    usleep(20000);
    CHECK(fake_sends() == 0, "sent with no room in flight");
    fake_respond(76, 0, 499);
    CHECK(wait_requests(c, 1), "the courier did not send after the step's answer");
    CHECK(fake_get(&fake.n_kept) == 1, "the step's answer is kept for the poll");
    CHECK(fake_get(&fake.wakeups) >= 1, "the selector woken for a step to settle it");
    usleep(20000);
    CHECK(fake_sends() == 1, "room for one: %d sent before an answer", fake_sends());
    CHECK(be32(fake.frame + 8) == 77, "the first correlation id");
    fake_respond(77, 0, 500);
    CHECK(wait_for(c, answered_one), "the answer was not settled, or nothing followed it");
    CHECK(fake_sends() == 2 && fake_get(&fake.settles) == 1, "the second request, after a settle");
    CHECK(be32(fake.frame + 8) == 78, "the next correlation id");
    kp_batch_info info;
    kp_error err;
    CHECK(kp_batch_read_header(fake.frame + 44, w[1].buf.len, &info, &err) == KP_OK
          && info.base_sequence == 10, "the second batch's sequence follows the first's record");
    CHECK(fake_get(&fake.n_kept) == 1 && kp_courier_answered(c) == 2, "the answer dropped, counted");
    fake_respond(78, 6, -1);                    /* NOT_LEADER_OR_FOLLOWER */
    CHECK(wait_for(c, stopped), "an error answer did not stop the node");
    CHECK(fake_get(&fake.n_kept) == 2 && kp_courier_answered(c) == 2 && fake_sends() == 2,
          "the error answer is the step's: kept, nothing more sent");
    size_t nb, nr;
    kp_courier_lock(c);
    const kp_courier_batch *b = kp_courier_batches(c, &nb);
    const kp_courier_request *r = kp_courier_requests(c, &nr);
    CHECK(nb == 3 && b[0].request == 0 && b[0].base_offset == 500 && b[1].request == 1
          && b[2].request == -1, "offsets and requests by batch");
    CHECK(nr == 2 && r[0].answered && r[0].whole && !r[1].answered && !r[1].whole,
          "the first answered and settled, the second neither");
    CHECK(r[0].answer_us >= r[0].send_us && r[0].send_us > 0 && r[1].answer_us == -1,
          "the answer's read instant ends the first's round trip; the second has none");
    kp_courier_reset(c);
    kp_courier_unlock(c);
    free_with_batches(c, w);
}

static int node_stopped_unread(kp_courier *c)
{
    size_t n;
    const kp_courier_node *node = kp_courier_nodes(c, &n);
    return node[0].stopped && !node[0].reads;
}

/* Room for two requests in flight, three batches due: 77 and 78 go. Their answers arrive
 * together: 77's acknowledges its batch, with bytes after ThrottleTimeMs (ignored: settled
 * and dropped); 78's acknowledges its batch too, but asks for a throttle (ThrottleTimeMs
 * 100): not a plain acknowledgement, so it is the step's (kept, the node stopped, reading
 * nothing more), since the step must mute the connection that long (KIP-219); and with room
 * for one more, the courier writes nothing to the node until it is armed again. Then the
 * same for an answer to the step's own request: throttled, it is kept and stops the node,
 * which sends nothing although its batch is due. */
static void test_a_throttled_answer_is_left_to_the_step(void)
{
    kp_courier *c = new_with_batches(w_three);
    kp_batch_writer *w = w_three;
    arm_plan(c, w, 3, now_us(), NULL, 2, -1);
    CHECK(wait_requests(c, 2), "the courier did not send two requests");
    usleep(20000);
    CHECK(fake_sends() == 2 && be32(fake.frame + 8) == 78, "two requests, window full");
    pthread_mutex_lock(&fake.mu);       /* both at once: the courier reads them in one go */
    fake_keep(77, 0, 500, 0, 3);
    fake_keep(78, 0, 501, 100, 0);
    pthread_mutex_unlock(&fake.mu);
    fake_readable();
    CHECK(wait_for(c, node_stopped_unread), "a throttled answer did not stop the node");
    usleep(50000);                      /* were it to write the third batch, it would by now */
    CHECK(fake_sends() == 2 && kp_courier_sent(c) == 2, "wrote %d requests after the throttle",
          fake_sends());
    CHECK(fake_get(&fake.n_kept) == 1 && kp_courier_answered(c) == 1,
          "the acknowledgement with trailing bytes settled and dropped, the throttled one kept "
          "(%d kept, %llu answered)", fake_get(&fake.n_kept), (unsigned long long)kp_courier_answered(c));
    size_t nb, nr, nn;
    kp_courier_lock(c);
    const kp_courier_batch *b = kp_courier_batches(c, &nb);
    const kp_courier_request *r = kp_courier_requests(c, &nr);
    const kp_courier_node *node = kp_courier_nodes(c, &nn);
    CHECK(nb == 3 && b[0].base_offset == 500 && b[1].base_offset == -1 && b[2].request == -1,
          "offsets: the first batch's only; the third not sent");
    CHECK(nr == 2 && r[0].answered && !r[1].answered && node[0].n_answered == 1,
          "the first request answered, the throttled one left to the step");
    kp_courier_reset(c);
    kp_courier_unlock(c);
    free_with_batches(c, w);

    /* The step's request 76 in flight, room for two: 77 goes; 76's answer is throttled. */
    c = new_with_batches(w_three);
    arm_plan(c, w, 3, now_us(), NULL, 2, 76);
    CHECK(wait_requests(c, 1), "the courier did not send beside the step's request");
    usleep(20000);
    CHECK(fake_sends() == 1, "%d requests with room for one beside the step's", fake_sends());
    pthread_mutex_lock(&fake.mu);
    fake_keep(76, 0, 499, 1, 0);
    pthread_mutex_unlock(&fake.mu);
    fake_readable();
    CHECK(wait_for(c, node_stopped_unread), "a throttled answer to the step's request did not stop the node");
    usleep(50000);
    CHECK(fake_sends() == 1 && fake_get(&fake.n_kept) == 1 && kp_courier_answered(c) == 0,
          "the step's throttled answer kept, counted as unanswered, nothing more written");
    kp_courier_lock(c);
    kp_courier_reset(c);
    kp_courier_unlock(c);
    free_with_batches(c, w);
}

/* acks=0, room for one request in flight: a request is done once written, so the three due
 * batches go in three requests one after another, with acks 0. The courier reads nothing:
 * a frame on the connection (Tansu answers acks=0 anyway) stays for the poll. */
static void test_acks0(void)
{
    kp_courier *c = new_with_batches(w_three);
    kp_batch_writer *w = w_three;
    fake_respond(4, 0, 0);          /* an answer to an earlier acks=0 request of the step's */
    arm_acks(c, w, 3, now_us(), NULL, 1, -1, 0);
    CHECK(wait_requests(c, 3), "three requests with room for one in flight");
    CHECK(be32(fake.frame + 8) == 79 && be16(fake.frame + 19) == 0, "the third, with acks 0");
    usleep(20000);
    CHECK(fake_get(&fake.n_kept) == 1 && kp_courier_answered(c) == 0 && fake_get(&fake.wakeups) == 0,
          "it read the connection");
    size_t nr, nn;
    kp_courier_lock(c);
    const kp_courier_request *r = kp_courier_requests(c, &nr);
    const kp_courier_node *node = kp_courier_nodes(c, &nn);
    CHECK(nr == 3 && r[0].whole && r[1].whole && !r[2].whole && !r[0].answered,
          "the first two settled to stage the next, none answered");
    CHECK(!node[0].stopped && !node[0].reads, "the node can take more, reads nothing");
    kp_courier_reset(c);
    kp_courier_unlock(c);
    free_with_batches(c, w);
}

/* gzip (when the build has zlib): the courier compresses the batch as it sends it, once. A
 * send that fails leaves it compressed and closed to appends; the next arming sends it as it
 * is, with the codec's bits. Without zlib, a gzip plan is refused. */
static void test_compressed_once(void)
{
    kp_courier *c;
    kp_batch_writer w;
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    CHECK(kp_batch_init(&w, 256) == KP_OK, "batch init");
    for (int i = 0; i < 20; i++)
        CHECK(kp_batch_append(&w, 1700000000000, (const uint8_t *)"k", 1,
                              (const uint8_t *)"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv", 40, NULL, 0)
              == KP_OK, "append");
    fake_reset(1, 0);
    plan_codec = KP_CODEC_GZIP;
#if KP_HAVE_ZLIB
    size_t plain_len = w.buf.len - KP_BATCH_HEADER_SIZE;
    uint8_t plain[2048];
    CHECK(plain_len <= sizeof plain, "the records fit the test's buffer");
    memcpy(plain, w.buf.data + KP_BATCH_HEADER_SIZE, plain_len);
    pthread_mutex_lock(&fake.mu);
    fake.fail_sends = 1;
    pthread_mutex_unlock(&fake.mu);
    arm_one(c, &w, now_us());
    CHECK(wait_used(c) == -1 && fake_sends() == 0, "a failed send stops the node");
    CHECK(w.compressed && w.sealed && w.buf.len - KP_BATCH_HEADER_SIZE < plain_len,
          "compressed (%zu of %zu bytes), closed to appends", w.buf.len - KP_BATCH_HEADER_SIZE, plain_len);
    size_t packed_len = w.buf.len - KP_BATCH_HEADER_SIZE;
    uint8_t packed[2048];
    memcpy(packed, w.buf.data + KP_BATCH_HEADER_SIZE, packed_len);
    kp_courier_lock(c);
    kp_courier_reset(c);
    kp_courier_unlock(c);
    pthread_mutex_lock(&fake.mu);
    fake.fail_sends = 0;
    pthread_mutex_unlock(&fake.mu);
    arm_one(c, &w, now_us());
    CHECK(wait_used(c) == 1 && w.sealed, "sent the second time");
    CHECK(w.buf.len - KP_BATCH_HEADER_SIZE == packed_len &&
          memcmp(w.buf.data + KP_BATCH_HEADER_SIZE, packed, packed_len) == 0, "not compressed again");
    kp_batch_info info;
    kp_error err;
    CHECK(kp_batch_read_header(fake.frame + 44, w.buf.len, &info, &err) == KP_OK
          && (info.attributes & KP_ATTR_COMPRESSION_MASK) == KP_CODEC_GZIP && info.records_count == 20,
          "the batch as sent: gzip's bits, under its CRC");
    uint8_t back[2048];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "inflate init");
    zs.next_in = (Bytef *)(uintptr_t)info.records;
    zs.avail_in = (uInt)info.records_len;
    zs.next_out = back;
    zs.avail_out = sizeof back;
    CHECK(inflate(&zs, Z_FINISH) == Z_STREAM_END && zs.total_out == plain_len &&
          memcmp(back, plain, plain_len) == 0, "a gzip member of the records");
    inflateEnd(&zs);
    kp_courier_lock(c);
    kp_courier_reset(c);
    kp_courier_unlock(c);
#else
    kp_courier_plan plan = {.io = &fns, .codec = KP_CODEC_GZIP, .level = 6, .acks = -1};
    kp_courier_lock(c);
    kp_courier_reset(c);
    CHECK(kp_courier_arm(c, &plan) == KP_ERR_CODEC && !kp_courier_armed(c), "a codec not built in");
    kp_courier_unlock(c);
#endif
    plan_codec = KP_CODEC_NONE;
    kp_courier_free(c);
    kp_batch_free(&w);
}

/* The courier's calls of kp_compress, through the linker (-Wl,--wrap=kp_compress, as
 * tests/test_build.py links this test): while the gate is shut, a call says it has begun and
 * waits until the test opens it, so the test catches the courier compressing every time, not
 * only when the scheduler lets it look within the few milliseconds gzip takes. */
kp_status __real_kp_compress(kp_compressor *z, int codec, int level, const uint8_t *src, size_t n,
                             const uint8_t **out, size_t *out_len, int64_t *lib_code);

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int shut, begun, returned;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

kp_status __wrap_kp_compress(kp_compressor *z, int codec, int level, const uint8_t *src, size_t n,
                             const uint8_t **out, size_t *out_len, int64_t *lib_code)
{
    pthread_mutex_lock(&gate.mu);
    gate.begun++;
    pthread_cond_broadcast(&gate.cv);
    while (gate.shut)
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
    kp_status st = __real_kp_compress(z, codec, level, src, n, out, out_len, lib_code);
    pthread_mutex_lock(&gate.mu);
    gate.returned++;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    return st;
}

/* Waits up to timeout_us for *counter to reach want (1: it did). */
static int gate_wait(int *counter, int want, int64_t timeout_us)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(timeout_us / 1000000);
    until.tv_nsec += (long)(timeout_us % 1000000) * 1000;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&gate.mu);
    int rc = 0;
    while (*counter < want && rc == 0)
        rc = pthread_cond_timedwait(&gate.cv, &gate.mu, &until);
    int reached = *counter >= want;
    pthread_mutex_unlock(&gate.mu);
    return reached;
}

static void gate_set(int shut)
{
    pthread_mutex_lock(&gate.mu);
    gate.shut = shut;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

/* A step that begins while the courier compresses (a copy, without the lock) owns the batch at
 * once: the reset does not wait, and the courier drops what it compressed and writes nothing
 * (the step's take had not seen a request). The gate holds the courier inside kp_compress
 * while the step begins, and lets it finish afterwards. */
static void test_a_step_that_begins_owns_the_batch_being_compressed(void)
{
#if KP_HAVE_ZLIB
    kp_courier *c;
    kp_batch_writer w;
    static uint8_t value[1000];
    memset(value, 'v', sizeof value);
    CHECK(kp_courier_new(&c, NULL) == KP_OK, "new");
    CHECK(kp_batch_init(&w, 256) == KP_OK, "batch init");
    kp_status st = KP_OK;
    for (int i = 0; i < 2000 && st == KP_OK; i++)
        st = kp_batch_append(&w, 1700000000000, (const uint8_t *)"k", 1, value, sizeof value, NULL, 0);
    CHECK(st == KP_OK, "append");
    size_t plain_len = w.buf.len;
    fake_reset(1, 0);
    plan_codec = KP_CODEC_GZIP;
    int begun = gate.begun, returned = gate.returned;
    gate_set(1);
    arm_one(c, &w, now_us());
    CHECK(gate_wait(&gate.begun, begun + 1, 5000000), "the courier never began compressing");
    kp_courier_lock(c);
    CHECK(w.sealed && !w.compressed, "sealed for the compression (sealed %d, compressed %d)",
          (int)w.sealed, (int)w.compressed);
    /* The courier is held inside kp_compress until the gate opens below: a reset that waited
     * for it would never return. */
    kp_courier_reset(c);
    CHECK(!w.compressed && !kp_courier_armed(c), "reset while the courier compresses");
    kp_courier_unlock(c);
    gate_set(0);
    CHECK(gate_wait(&gate.returned, returned + 1, 5000000), "the compression never returned");
    /* After kp_compress returns, the courier takes the lock, finds the plan gone and drops
     * what it compressed. A wait for nothing to happen: 100 ms is many times what that takes. */
    usleep(100000);
    kp_courier_lock(c);
    CHECK(!w.compressed && w.buf.len == plain_len, "the batch the step owns was changed");
    kp_courier_unlock(c);
    CHECK(fake_sends() == 0 && kp_courier_sent(c) == 0, "it wrote the request after the reset");
    pthread_mutex_lock(&gate.mu);
    int times = gate.begun - begun;
    pthread_mutex_unlock(&gate.mu);
    CHECK(times == 1, "compressed %d times, not once", times);
    plan_codec = KP_CODEC_NONE;
    kp_courier_free(c);
    kp_batch_free(&w);
#endif
}

static volatile int touching;

static void *touch_turn(void *arg)
{
    while (touching) {          /* a send every 2 µs: one between any two looks */
        kp_turn_touch(arg);
        int64_t next = now_us() + 2;
        while (now_us() < next) {}
    }
    return NULL;
}

/* A courier beside an application that keeps sending (a thread that touches the turn every
 * 2 µs), the turn watching a descriptor that never turns readable. */
typedef struct sending_app {
    kp_courier *c;
    kp_turn *t;
    int never[2];
    pthread_t app;
} sending_app;

static void sending_app_start(sending_app *s)
{
    CHECK(pipe2(s->never, O_NONBLOCK | O_CLOEXEC) == 0, "pipe");
    CHECK(kp_turn_new(&s->t, s->never[0], NULL) == KP_OK, "turn");
    CHECK(kp_courier_new(&s->c, NULL) == KP_OK, "new");
    fake_reset(1, 0);
    touching = 1;
    kp_turn_touch(s->t);
    CHECK(pthread_create(&s->app, NULL, touch_turn, s->t) == 0, "thread");
    plan_turn = s->t;
}

/* The application stops sending: the answer to the first request in flight (given already)
 * is read then. Frees it all. */
static void sending_app_stop(sending_app *s)
{
    touching = 0;
    pthread_join(s->app, NULL);
    CHECK(wait_for(s->c, answered_first), "the answer was not read once the application stopped");
    plan_turn = NULL;
    kp_courier_lock(s->c);
    kp_courier_reset(s->c);
    kp_courier_unlock(s->c);
    kp_courier_free(s->c);
    kp_turn_free(s->t);
    close(s->never[0]);
    close(s->never[1]);
}

/* An application that keeps sending runs the steps itself, and they read and settle the
 * responses: the courier leaves the reading to it, and each look that finds it still
 * sending doubles the wait, up to KP_COURIER_WAIT_MAX_US. A batch whose deadline passes it writes all the same, at
 * the deadline: a step would write it only after its first poll and drain (hundreds of µs of
 * Python). Once the application stops, the courier reads the answer within that wait. */
static void test_a_sending_application_is_left_the_reading(void)
{
    sending_app s;
    kp_batch_writer w;
    new_batch(&w);
    sending_app_start(&s);
    kp_courier *c = s.c;
    int64_t t0 = now_us();
    arm_one(c, &w, t0 + 20000);
    CHECK(wait_used(c) == 1, "the due batch was not written beside the sending application");
    int64_t sent_after = now_us() - t0;
    CHECK(sent_after >= 20000, "sent %lld us after arming, before its deadline", (long long)sent_after);
    /* Not held back until the sending thread happens to be descheduled. */
    CHECK(sent_after < 20000 + 500000, "sent %lld us after arming: held back for the steps",
          (long long)sent_after);
    CHECK(fake_sends() == 1 && be32(fake.frame + 8) == 77, "one request, correlation id 77");
    fake_respond(77, 0, 500);
    usleep(200000);
    /* (Whether it read the answer meanwhile is the scheduler's: a touching thread descheduled
     * for longer than the wait looks like one that stopped. Either way the looks are few.) */
    uint64_t looks = kp_courier_looks(c);
    CHECK(looks >= 2 && looks <= 200000 / KP_COURIER_WAIT_MAX_US + 40,
          "%llu looks in 200 ms", (unsigned long long)looks);
    sending_app_stop(&s);
    kp_batch_free(&w);
}

/* Beside a sending application the courier leaves the reading to the steps, but before it
 * writes another request on a connection it reads what arrived there: an answer that is not
 * an acknowledgement (the batch refused: the step retries it) stops the node, and the
 * partition's next batch, due later, is not written behind the refused one (a broker that
 * checks no sequence would store it first). */
static void test_before_writing_beside_a_sending_application_it_reads_the_answers(void)
{
    sending_app s;
    kp_batch_writer w[2];
    new_batch(&w[0]);
    new_batch(&w[1]);
    sending_app_start(&s);
    kp_courier *c = s.c;
    arm_plan(c, w, 1, now_us(), NULL, 2, -1);
    CHECK(wait_requests(c, 1), "the due batch was not written beside the sending application");
    fake_respond(77, 6, -1);                    /* NOT_LEADER_OR_FOLLOWER */
    kp_courier_lock(c);
    kp_courier_offer(c, 0, &w[1], &w[1], now_us() + 30000);
    kp_courier_unlock(c);
    CHECK(wait_for(c, node_stopped_unread), "the refusal did not stop the node");
    usleep(60000);                              /* the second batch is due by now */
    CHECK(fake_sends() == 1 && kp_courier_sent(c) == 1,
          "wrote %d requests behind a refused one", fake_sends());
    CHECK(fake_get(&fake.n_kept) == 1 && kp_courier_answered(c) == 0,
          "the refusal kept for the step, unanswered");
    touching = 0;
    pthread_join(s.app, NULL);
    plan_turn = NULL;
    kp_courier_lock(c);
    kp_courier_reset(c);
    kp_courier_unlock(c);
    kp_courier_free(c);
    kp_turn_free(s.t);
    close(s.never[0]);
    close(s.never[1]);
    kp_batch_free(&w[0]);
    kp_batch_free(&w[1]);
}

/* Beside that application, a node whose window is full (the step's request in flight,
 * max_in_flight 1) can take nothing before an answer is read: the courier's waits grow to
 * KP_COURIER_WAIT_FULL_US, and the step's arms do not wake it meanwhile. Once the
 * application stops, the answer is read. Only upper bounds: an application thread that the
 * scheduler holds back looks like one that stopped, and the courier then reads (and sleeps
 * until woken), which gives fewer looks, never more. Beside it in the plan, a node that leads
 * no part and has nothing in flight (the bootstrap connection) takes no batch, so it changes
 * nothing. */
static void test_a_full_window_beside_a_sending_application_is_looked_at_less(void)
{
    sending_app s;
    sending_app_start(&s);
    plan_idle_node = 1;
    kp_courier *c = s.c;
    kp_turn *t = s.t;
    arm_plan(c, NULL, 0, 0, NULL, 1, 76);
    uint64_t before = kp_courier_looks(c);
    usleep(200000);
    uint64_t looks = kp_courier_looks(c) - before;
    CHECK(looks >= 1 && looks <= 200000 / KP_COURIER_WAIT_FULL_US + 40,
          "%llu looks in 200 ms with the window full", (unsigned long long)looks);
    /* The application sends and runs a step that arms it, every millisecond. */
    before = kp_courier_looks(c);
    for (int i = 0; i < 100; i++) {
        kp_turn_touch(t);
        arm_plan(c, NULL, 0, 0, NULL, 1, 76);
        usleep(1000);
    }
    looks = kp_courier_looks(c) - before;
    CHECK(looks <= 100000 / KP_COURIER_WAIT_FULL_US + 50, "%llu looks over 100 arms",
          (unsigned long long)looks);
    CHECK(fake_sends() == 0, "wrote with no room in flight");
    plan_idle_node = 0;
    fake_respond(76, 0, 500);
    sending_app_stop(&s);
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
    /* (200 ms: a test thread descheduled between the arm and the reset for longer than the
     * deadline would see the courier send, rightly.) */
    int64_t deadline = now_us() + 200000;
    arm_one(c, &w, deadline);
    kp_courier_lock(c);
    int in_time = now_us() < deadline;
    kp_courier_reset(c);      /* a step began */
    kp_courier_unlock(c);
    CHECK(in_time, "the reset came after the deadline");
    usleep(300000);
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
    test_reads_and_goes_on();
    test_a_throttled_answer_is_left_to_the_step();
    test_acks0();
    test_compressed_once();
    test_a_step_that_begins_owns_the_batch_being_compressed();
    test_a_sending_application_is_left_the_reading();
    test_before_writing_beside_a_sending_application_it_reads_the_answers();
    test_a_full_window_beside_a_sending_application_is_looked_at_less();
    test_a_node_that_cannot_take_it(0, 0);
    test_a_node_that_cannot_take_it(1, 1);
    test_reset_before_the_deadline();
    test_trylock_spin();
    printf("test_courier: %ld checks, %d failures\n", checks, failures);
    return failures != 0;
}
