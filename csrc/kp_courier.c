/* kp_courier.c - see kp_courier.h. */
#define _GNU_SOURCE
#include "kp_courier.h"
#include "kp_clock.h"
#include "kp_thread.h"
#include "kp_compress.h"
#include "kp_endian.h"
#include "kp_produce.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define SEQ_MASK 0x7FFFFFFF     /* BaseSequence wraps at Integer.MAX_VALUE */

struct kp_courier {
    pthread_mutex_t mu;         /* the accumulator's lock */
    pthread_t thread;
    pid_t pid;                  /* the process that started the thread */
    int wake_fd;                /* eventfd: armed, an offer, or stop, while it sleeps */
    int sleeping;               /* in ppoll(2), without mu: a kick writes wake_fd */
    int64_t sleep_until;        /* until when (CLOCK_MONOTONIC µs, -1: until woken) */
    int64_t wait_cap_us;        /* the longest wait the last look allowed itself */
    int stop;
    int armed;
    kp_courier_plan plan;
    kp_courier_node *nodes;
    size_t n_nodes, cap_nodes;
    kp_courier_prior *priors;
    size_t n_priors, cap_priors;
    kp_courier_request *requests;
    size_t n_requests, cap_requests;
    kp_courier_part *parts;
    size_t n_parts, cap_parts;
    kp_courier_batch *batches;
    size_t n_batches, cap_batches;
    /* Scratch for one request, n_parts entries each: the chosen batches and the request's
     * partition and topic arrays; and the results of one response. */
    int32_t *chosen;
    kp_produce_partition *req_parts;
    kp_produce_topic *req_topics;
    size_t cap_scratch;
    kp_produce_result *results;
    size_t cap_results;
    kp_compressor *z;           /* the plan's codec's contexts (NULL until a plan has one) */
    kp_buf plain;               /* a copy of the Records section it compresses without mu */
    uint64_t generation;        /* plans reset: a step that began while it compressed */
    struct pollfd *pfds;        /* the wake_fd, then a node's connection each; the thread's
                                   own (it sleeps in ppoll on them without mu) */
    size_t cap_pfds;
    uint64_t sent;              /* requests written (atomics) */
    uint64_t answered;          /* responses read and found good (atomics) */
    uint64_t looks;             /* looks at the plan (atomics) */
    uint64_t seen_activity;     /* the application's sends at the courier's last look */
    int64_t deferred_us;        /* the last wait left to that application (0: it had not sent) */
};

static void wake(kp_courier *c)
{
    uint64_t one = 1;
    ssize_t w = write(c->wake_fd, &one, sizeof one);
    (void)w;        /* EAGAIN: a wakeup is pending already */
}

/* With mu held: wakes the thread for a new plan or offer, unless it looks again within the
 * longest wait its last look allowed itself anyway (wait_cap_us: it leaves the reading to a
 * sending application in such sleeps, and each step arms it: a write(2) and a wake-up per
 * step would be spent). */
static void kick(kp_courier *c)
{
    if (c->sleeping && (c->sleep_until < 0 || c->sleep_until > kp_mono_us() + c->wait_cap_us))
        wake(c);
}

/* Room for item n of an array of `size`-byte items with *cap of them (doubling from
 * `first`; indexes stay int32): 0, or -1 (no memory, or too many). */
static int make_room(void **items, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : first;
    if (want > INT32_MAX)
        return -1;
    void *p = realloc(*items, want * size);
    if (!p)
        return -1;
    *items = p;
    *cap = want;
    return 0;
}

/* ---- sending ------------------------------------------------------------------ */

/* The node's last request, or NULL. */
static kp_courier_request *last_request(kp_courier *c, int32_t n)
{
    for (size_t i = c->n_requests; i-- > 0;)
        if (c->requests[i].node == n)
            return &c->requests[i];
    return NULL;
}

/* With mu held: node's requests in flight: the step's and the courier's own, less those
 * answered; with acks=0 its own are done once written (no response comes; it reads nothing). */
static int32_t in_flight(const kp_courier *c, const kp_courier_node *node)
{
    int32_t own = c->plan.acks != 0 ? node->n_requests : 0;
    return node->n_prior + own - node->n_answered;
}

/* With mu held: whether node n may take a request now. 0: not now (its last request is
 * still being written: *writing is set), 1: yes; a node that never will is stopped. */
static int node_can_send(kp_courier *c, int32_t n, int *writing)
{
    kp_courier_node *node = &c->nodes[n];
    const kp_courier_plan *pl = &c->plan;
    if (node->stopped || node->n_requests >= node->max_requests ||
        in_flight(c, node) >= node->max_in_flight)
        return 0;
    if (!pl->io->is_connected(pl->selector, node->conn_id)) {
        node->stopped = 1;      /* unchanged until the next step's poll: do not look again */
        return 0;
    }
    if (!pl->io->is_sending(pl->selector, node->conn_id))
        return 1;
    kp_courier_request *last = last_request(c, n);
    if (last == NULL) {
        node->stopped = 1;      /* a step's request is being written */
        return 0;
    }
    /* Its own last request: once whole, another may be staged. */
    (void)pl->io->flush(pl->selector, node->conn_id);
    if (pl->io->settle(pl->selector, node->conn_id)) {
        last->whole = 1;
        return 1;
    }
    *writing = 1;
    return 0;
}

/* With mu held, let go while compressing: the Records section of each chosen batch compressed
 * with the plan's codec, once. 1 if the request may go on; 0 if it may not (the codec failed,
 * or no memory); -1 if a step began meanwhile: the plan is gone (and maybe another armed).
 * Why without mu: lz4's and gzip's default levels take hundreds of µs for a 16 KiB batch, and
 * an application thread that waits that long for the accumulator's lock lets the GIL go
 * (LOCK_SPIN_US), which costs it a switch interval to get back. So the batches are sealed
 * (no append touches them), and each section is copied under mu and compressed from the
 * copy: a step that begins meanwhile does not wait for the courier, and owns the batches at
 * once (it may compress, send and free them); the courier then drops what it compressed. */
static int compress_chosen(kp_courier *c, size_t n_chosen)
{
    int codec = c->plan.codec, level = c->plan.level;
    for (size_t k = 0; k < n_chosen; k++)
        c->batches[c->chosen[k]].batch->sealed = 1;
    for (size_t k = 0; k < n_chosen; k++) {
        kp_batch_writer *w = c->batches[c->chosen[k]].batch;
        if (w->compressed || w->count == 0)
            continue;
        size_t n = w->buf.len - KP_BATCH_HEADER_SIZE;
        c->plain.len = 0;
        if (kp_buf_append(&c->plain, w->buf.data + KP_BATCH_HEADER_SIZE, n) != KP_OK)
            return 0;
        uint64_t generation = c->generation;
        const uint8_t *out = NULL;
        size_t len = 0;
        int64_t lib_code = 0;
        pthread_mutex_unlock(&c->mu);
        kp_status st = kp_compress(c->z, codec, level, c->plain.data, n, &out, &len, &lib_code);
        pthread_mutex_lock(&c->mu);
        if (c->generation != generation || c->stop)
            return -1;
        /* Incompressible records gain the codec's framing: the section may outgrow what the
         * pool was charged for, and grows uncharged, as when a step closes the batch. */
        w->buf.fixed = 0;
        if (st != KP_OK || kp_batch_replace_records(w, out, len) != KP_OK)
            return 0;
        w->compressed = 1;
    }
    return 1;
}

/* With mu held: one Produce request to node n holding the next batch of each of its
 * partitions whose deadline passed (up to max_request_size). Parts are added topic by topic
 * (the accumulator's order), so one pass groups them. Returns 1 if it wrote one, 0 if not,
 * -1 if the plan is gone (a step began while it compressed: nothing of it may be touched). */
static int send_node(kp_courier *c, int32_t n, int64_t now)
{
    kp_courier_node *node = &c->nodes[n];
    const kp_courier_plan *pl = &c->plan;
    size_t n_chosen = 0, total = 0;
    for (size_t i = 0; i < c->n_parts; i++) {
        kp_courier_part *p = &c->parts[i];
        if (p->node != n || p->head < 0)
            continue;
        kp_courier_batch *b = &c->batches[p->head];
        if (b->due_us > now)
            continue;
        size_t len = b->batch->buf.len;
        if (n_chosen && total + len > pl->max_request_size)
            continue;
        c->chosen[n_chosen++] = p->head;
        total += len;
    }
    if (n_chosen == 0)
        return 0;
    if (make_room((void **)&c->requests, &c->cap_requests, c->n_requests, sizeof *c->requests, 8)) {
        node->stopped = 1;
        return 0;
    }
    if (pl->codec != KP_CODEC_NONE) {
        int r = compress_chosen(c, n_chosen);
        if (r < 0)
            return r;
        if (r == 0) {
            node->stopped = 1;      /* the step compresses them, and reports what is wrong */
            return 0;
        }
    }
    /* From here on a failure leaves the node to the next step, which finishes the batches
     * again and reports what is wrong; the courier sends it nothing more. */
    node->stopped = 1;
    size_t n_topics = 0;
    for (size_t k = 0; k < n_chosen; k++) {
        kp_courier_batch *b = &c->batches[c->chosen[k]];
        kp_courier_part *p = &c->parts[b->part];
        int32_t seq = pl->producer_id >= 0 ? p->next_sequence : -1;
        int16_t attributes = (int16_t)(pl->codec | (pl->transactional_id != NULL ? KP_ATTR_TRANSACTIONAL : 0));
        if (kp_batch_finish(b->batch, attributes, pl->producer_id, pl->producer_epoch, seq) != KP_OK)
            return 0;
        b->base_sequence = seq;
        c->req_parts[k].index = p->partition;
        c->req_parts[k].records = b->batch->buf.data;
        c->req_parts[k].records_len = (int64_t)b->batch->buf.len;
        kp_produce_topic *t = n_topics ? &c->req_topics[n_topics - 1] : NULL;
        if (t == NULL || t->name != p->topic) {
            t = &c->req_topics[n_topics++];
            t->name = p->topic;
            t->name_len = p->topic_len;
            t->partitions = &c->req_parts[k];
            t->n_partitions = 0;
        }
        t->n_partitions++;
    }
    int32_t cid = node->first_correlation_id + node->n_requests;
    kp_produce_request r = {
        .version = node->version, .correlation_id = cid,
        .client_id = pl->client_id, .client_id_len = pl->client_id_len,
        .transactional_id = pl->transactional_id, .transactional_id_len = pl->transactional_id_len,
        .acks = pl->acks, .timeout_ms = pl->timeout_ms,
        .topics = c->req_topics, .n_topics = n_topics,
    };
    size_t size = 0, written = 0;
    if (kp_produce_request_size(&r, &size) != KP_OK)
        return 0;
    uint8_t *frame = malloc(size);
    if (frame == NULL)
        return 0;
    kp_status st = kp_produce_request_write(&r, frame, size, &written);
    if (st == KP_OK)
        st = pl->io->send(pl->selector, node->conn_id, frame, written);
    free(frame);
    if (st != KP_OK)
        return 0;
    (void)pl->io->flush(pl->selector, node->conn_id);
    int32_t ri = (int32_t)c->n_requests++;
    c->requests[ri] = (kp_courier_request){
        .node = n, .correlation_id = cid, .send_us = kp_mono_us(), .answer_us = -1, .whole = 0,
        .answered = 0,
    };
    for (size_t k = 0; k < n_chosen; k++) {
        kp_courier_batch *b = &c->batches[c->chosen[k]];
        kp_courier_part *p = &c->parts[b->part];
        b->request = ri;
        b->batch->sealed = 1;
        p->head = b->next;
        if (pl->producer_id >= 0)
            p->next_sequence = (int32_t)(((int64_t)p->next_sequence + b->batch->count) & SEQ_MASK);
    }
    node->n_requests++;
    node->stopped = 0;
    __atomic_add_fetch(&c->sent, 1, __ATOMIC_RELAXED);
    return 1;
}

/* With mu held: the soonest deadline of a batch that node n could send next (-1: none). */
static int64_t node_next_due(const kp_courier *c, int32_t n)
{
    int64_t due = -1;
    for (size_t i = 0; i < c->n_parts; i++) {
        const kp_courier_part *p = &c->parts[i];
        if (p->node != n || p->head < 0)
            continue;
        int64_t d = c->batches[p->head].due_us;
        if (due < 0 || d < due)
            due = d;
    }
    return due;
}

/* With mu held: until when node n's next request waits for its batches to fill (kp_courier.h,
 * Pacing), or -1 when it need not wait: not paced, nothing in flight, or the time is up. */
static int64_t paced_until(kp_courier *c, int32_t n, int64_t now)
{
    kp_courier_node *node = &c->nodes[n];
    if (node->pace_us <= 0 || in_flight(c, node) <= 0)
        return -1;
    int64_t last = node->last_send_us;
    kp_courier_request *own = last_request(c, n);
    if (own != NULL && own->send_us > last)
        last = own->send_us;
    if (last < 0 || last + node->pace_us <= now)
        return -1;
    return last + node->pace_us;
}

/* With mu held: whether node n's next request would be as full as it can get: every batch it
 * would take (its parts' heads due by now) takes no more records, or they fill
 * max_request_size between them. */
static int request_full(const kp_courier *c, int32_t n, int64_t now)
{
    size_t total = 0;
    int any = 0;
    for (size_t i = 0; i < c->n_parts; i++) {
        const kp_courier_part *p = &c->parts[i];
        if (p->node != n || p->head < 0)
            continue;
        const kp_courier_batch *b = &c->batches[p->head];
        if (b->due_us > now)
            continue;
        total += b->batch->buf.len;
        if (total >= c->plan.max_request_size)
            return 1;
        if (!b->batch->full && b->next < 0)
            return 0;
        any = 1;
    }
    return any;
}

/* ---- responses ------------------------------------------------------------------ */

/* The node's k-th request (in the order written), or NULL. */
static kp_courier_request *nth_request(kp_courier *c, int32_t n, int32_t k, int32_t *index)
{
    for (size_t i = 0; i < c->n_requests; i++) {
        if (c->requests[i].node != n)
            continue;
        if (k-- == 0) {
            *index = (int32_t)i;
            return &c->requests[i];
        }
    }
    return NULL;
}

/* With mu held: frame[0, len) decoded as a Produce response of `version` into c->results
 * (*n of them); whether it decodes, answers `cid`, says no throttle, and every partition
 * succeeded. Bytes after the fields known are ignored (kp_produce_response_read): an
 * acknowledgement with some is still one. A throttled answer (ThrottleTimeMs > 0) is not a
 * plain acknowledgement: the step is to mute the connection for that long (KIP-219), so it
 * is left to the step like an error, and the courier writes nothing more to the node. */
static int produce_ok(kp_courier *c, const uint8_t *frame, size_t len, int version, int32_t cid,
                      size_t *n)
{
    size_t cap = len / KP_PRODUCE_MIN_PARTITION_BYTES + 1;
    if (cap > c->cap_results) {
        kp_produce_result *r = realloc(c->results, cap * sizeof *r);
        if (r == NULL)
            return 0;
        c->results = r;
        c->cap_results = cap;
    }
    int32_t got = 0, throttle_ms = 0;
    kp_error err;
    if (kp_produce_response_read(frame, len, version, &got, c->results, cap, n, &throttle_ms, NULL,
                                 NULL, &err) != KP_OK ||
        got != cid || throttle_ms > 0)
        return 0;
    for (size_t k = 0; k < *n; k++)
        if (c->results[k].error_code != 0)
            return 0;
    return 1;
}

/* With mu held: request ri's batch answered by result r, or NULL. */
static kp_courier_batch *batch_for(kp_courier *c, int32_t ri, const kp_produce_result *r,
                                   const uint8_t *frame)
{
    for (size_t i = 0; i < c->n_batches; i++) {
        kp_courier_batch *b = &c->batches[i];
        const kp_courier_part *p = &c->parts[b->part];
        if (b->request == ri && p->partition == r->partition && p->topic_len == r->topic_len &&
            memcmp(p->topic, frame + r->topic_off, r->topic_len) == 0)
            return b;
    }
    return NULL;
}

/* With mu held: whether frame[0, len) answers request ri by acknowledging its every batch,
 * each once; if so the batches get their offsets. */
static int settle_response(kp_courier *c, int32_t ri, const uint8_t *frame, size_t len)
{
    kp_courier_request *req = &c->requests[ri];
    size_t n = 0, expected = 0;
    if (!produce_ok(c, frame, len, c->nodes[req->node].version, req->correlation_id, &n))
        return 0;
    for (size_t i = 0; i < c->n_batches; i++)
        expected += c->batches[i].request == ri;
    if (n != expected)
        return 0;
    /* n results for n batches, each naming a different one: every batch is acknowledged.
     * (A failed check leaves offsets on some of the batches; nothing reads them unless the
     * request is answered.) */
    for (size_t k = 0; k < n; k++) {
        kp_courier_batch *b = batch_for(c, ri, &c->results[k], frame);
        if (b == NULL || b->base_offset != -1)
            return 0;       /* not one of its batches, or one named twice */
        b->base_offset = c->results[k].base_offset;
        b->log_append_time_ms = c->results[k].log_append_time_ms;
    }
    req->answered = 1;
    req->answer_us = kp_mono_us();  /* the read was just now (read_node): its round trip ends */
    return 1;
}

/* With mu held: whether frame[0, len) is a good answer to the step's request `pr`. */
static int prior_ok(kp_courier *c, const kp_courier_prior *pr, const uint8_t *frame, size_t len)
{
    size_t n = 0;
    if (pr->api_key == 0)       /* Produce */
        return produce_ok(c, frame, len, pr->version, pr->correlation_id, &n);
    /* Another request's answer settles nothing of the courier's: its correlation id is all
     * the courier checks. */
    return len >= 4 && (int32_t)kp_load_be32(frame) == pr->correlation_id;
}

/* With mu held: reads node n's responses. Returns 1 if it read anything (a frame, or the
 * connection's loss): a step is wanted. */
static int read_node(kp_courier *c, int32_t n)
{
    kp_courier_node *node = &c->nodes[n];
    const kp_courier_plan *pl = &c->plan;
    int got = pl->io->read(pl->selector, node->conn_id);
    int any = got > node->n_kept || got < 0;
    for (;;) {
        size_t len = 0;
        const uint8_t *frame = pl->io->kept(pl->selector, node->conn_id, (size_t)node->n_kept, &len);
        if (frame == NULL)
            break;
        int good;
        if (node->n_answered < node->n_prior) {
            good = prior_ok(c, &c->priors[node->prior + node->n_answered], frame, len);
            if (good)
                node->n_kept++;         /* the step's: the poll reports it */
        } else {
            int32_t ri = -1;
            kp_courier_request *req = nth_request(c, n, node->n_answered - node->n_prior, &ri);
            good = req != NULL && settle_response(c, ri, frame, len);
            if (good)
                pl->io->drop_kept(pl->selector, node->conn_id, (size_t)node->n_kept);
        }
        if (!good) {
            node->reads = 0;            /* this frame and the rest are the step's */
            node->stopped = 1;
            return 1;
        }
        node->n_answered++;
        __atomic_add_fetch(&c->answered, 1, __ATOMIC_RELAXED);
    }
    if (got < 0) {
        node->reads = 0;                /* its disconnect is kept for the poll */
        node->stopped = 1;
    }
    return any;
}

/* ---- the thread ------------------------------------------------------------------- */

/* With mu held: whether node n waits for responses the courier may read. */
static int awaits(const kp_courier_node *node)
{
    return node->reads && node->n_answered < node->n_prior + node->n_requests;
}

/* With mu held: whether every node that leads a part of the plan has max_in_flight requests
 * out (and there is one), so that no batch can go before an answer is read. A node that
 * leads none takes no batch whatever its room: the bootstrap connection, idle once the
 * metadata named the brokers, kept this false for a single broker's producer. */
static int windows_full(const kp_courier *c)
{
    int any = 0;
    for (size_t n = 0; n < c->n_nodes; n++) {
        if (!c->nodes[n].leads)
            continue;
        if (in_flight(c, &c->nodes[n]) < c->nodes[n].max_in_flight)
            return 0;
        any = 1;
    }
    return any;
}

/* With mu held: when an application thread sent since the last look, it runs the step
 * itself at its next send, so the courier leaves the reading to it for two of its intervals
 * between sends, and twice its last wait when it found that thread still sending then (a
 * send() loop runs every step itself: looking every KP_COURIER_WAIT_MIN_US, the courier
 * would wake thousands of times a second for nothing); at most
 * KP_COURIER_WAIT_MAX_US either way, or KP_COURIER_WAIT_FULL_US while every node leading a
 * part has its window full (nothing to write before an answer is read: kp_courier.h). Returns
 * when to look again, or -1 to read now. */
static int64_t defer_to_sender(kp_courier *c, int64_t now)
{
    const kp_turn *turn = c->plan.turn;
    if (turn == NULL)
        return -1;
    uint64_t a = kp_turn_activity(turn);
    if (a == c->seen_activity) {
        c->deferred_us = 0;
        return -1;
    }
    c->seen_activity = a;
    int64_t wait = 2 * kp_turn_send_interval_us(turn);
    if (wait < 2 * c->deferred_us) wait = 2 * c->deferred_us;
    if (wait < KP_COURIER_WAIT_MIN_US) wait = KP_COURIER_WAIT_MIN_US;
    int64_t cap = windows_full(c) ? KP_COURIER_WAIT_FULL_US : KP_COURIER_WAIT_MAX_US;
    c->wait_cap_us = cap;
    if (wait > cap) wait = cap;
    c->deferred_us = wait;
    return now + wait;
}

/* With mu held: one look at the plan. Reads what arrived, sends what is due, and returns
 * when to look again (CLOCK_MONOTONIC µs, -1: only when woken); *npfds: the descriptors to
 * wake for (c->pfds[1..]). */
static int64_t look(kp_courier *c, size_t *npfds)
{
    const kp_courier_plan *pl = &c->plan;
    int64_t now = kp_mono_us(), next = -1;
    *npfds = 0;
    c->wait_cap_us = KP_COURIER_WAIT_MAX_US;
    __atomic_add_fetch(&c->looks, 1, __ATOMIC_RELAXED);
    int work = 0;
    for (size_t n = 0; n < c->n_nodes && !work; n++) {
        int64_t due = node_next_due(c, (int32_t)n);
        work = awaits(&c->nodes[n]) || (due >= 0 && due <= now && !c->nodes[n].stopped);
    }
    /* Due batches are written even then (kp_courier.h): only the reading is deferred. */
    int64_t deferred = work ? defer_to_sender(c, now) : -1;

    int read_any = 0;
    for (size_t n = 0; n < c->n_nodes && deferred < 0; n++)
        if (awaits(&c->nodes[n]))
            read_any |= read_node(c, (int32_t)n);
    if (read_any)
        /* A step is wanted to settle what it read. Through the selector's wakeup, which
         * keeps the epoll descriptor readable until the next poll: the turn's watcher sees
         * it whenever it watches again (a raise of the turn would be lost when it came as
         * the step that armed the courier ended, since kp_turn_done clears pending). */
        (void)pl->io->wakeup(pl->selector);

    now = kp_mono_us();
    size_t k = 1;
    if (c->cap_pfds < c->n_nodes + 1) {
        struct pollfd *p = realloc(c->pfds, (c->n_nodes + 1) * sizeof *p);
        if (p) {
            c->pfds = p;
            c->cap_pfds = c->n_nodes + 1;
        }
    }
    int read_to_write = 0;
    for (size_t n = 0; n < c->n_nodes; n++) {
        kp_courier_node *node = &c->nodes[n];
        int writing = 0;
        for (;;) {
            int64_t due = node_next_due(c, (int32_t)n);
            if (due < 0 || node->stopped)
                break;
            if (due > now) {
                if (next < 0 || due < next) next = due;
                break;
            }
            if (deferred >= 0 && awaits(node)) {
                /* The reading is the steps', but before another request on this connection
                 * what arrived on it is read: an answer that is not an acknowledgement (a
                 * batch refused, which the step retries) stops the node here, so that no
                 * later batch of a refused partition is written behind it. A broker that
                 * checks sequences would refuse that batch too; one that does not would
                 * store it first. */
                read_to_write |= read_node(c, (int32_t)n);
                if (node->stopped)
                    break;
            }
            if (!node_can_send(c, (int32_t)n, &writing))
                break;
            int64_t until = paced_until(c, (int32_t)n, now);
            if (until >= 0 && !request_full(c, (int32_t)n, now)) {
                /* Its batches take records until then (or until they fill: the append that
                 * starts the next batch offers it, which wakes the courier). */
                if (next < 0 || until < next) next = until;
                break;
            }
            int sent = send_node(c, (int32_t)n, now);
            if (sent < 0)
                return 0;   /* the plan it looked at is gone: look again, at once */
            if (!sent)
                break;
        }
        /* Wake for its responses, and for room to write its next request. */
        short events = (short)((awaits(node) && deferred < 0 ? POLLIN : 0) | (writing ? POLLOUT : 0));
        int fd = events ? pl->io->conn_fd(pl->selector, node->conn_id) : -1;
        if (fd >= 0 && k < c->cap_pfds) {       /* no memory for it: woken by the turn */
            c->pfds[k].fd = fd;
            c->pfds[k].events = events;
            k++;
        }
    }
    *npfds = k - 1;
    if (read_to_write)
        (void)pl->io->wakeup(pl->selector);     /* what it read is the next step's */
    if (deferred >= 0 && (next < 0 || deferred < next))
        next = deferred;
    return next;
}

static void *run(void *arg)
{
    kp_courier *c = arg;
    (void)kp_thread_begin(0);
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        size_t npfds = 0;
        int64_t next = c->armed ? look(c, &npfds) : -1;
        struct timespec ts, *timeout = NULL;
        if (next >= 0) {
            int64_t left = next - kp_mono_us();
            if (left <= 0)
                continue;
            ts.tv_sec = (time_t)(left / 1000000);
            ts.tv_nsec = (long)(left % 1000000) * 1000L;
            timeout = &ts;
        }
        c->pfds[0].fd = c->wake_fd;
        c->pfds[0].events = POLLIN;
        c->sleeping = 1;
        c->sleep_until = next;
        pthread_mutex_unlock(&c->mu);
        /* ppoll: deadlines to the microsecond (poll(2) counts whole milliseconds). */
        int r = ppoll(c->pfds, 1 + npfds, timeout, NULL);
        if (r > 0 && (c->pfds[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t rd = read(c->wake_fd, &v, sizeof v);
            (void)rd;
        }
        pthread_mutex_lock(&c->mu);
        c->sleeping = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

kp_status kp_courier_new(kp_courier **out, int *sys_errno)
{
    *out = NULL;
    if (sys_errno) *sys_errno = 0;
    kp_courier *c = calloc(1, sizeof *c);
    if (!c)
        return KP_ERR_NOMEM;
    c->pfds = calloc(1, sizeof *c->pfds);
    if (!c->pfds) {
        free(c);
        return KP_ERR_NOMEM;
    }
    c->cap_pfds = 1;
    c->wait_cap_us = KP_COURIER_WAIT_MAX_US;
    c->pid = getpid();
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd < 0) {
        if (sys_errno) *sys_errno = errno;
        free(c->pfds);
        free(c);
        return KP_ERR_SYS;
    }
    pthread_mutex_init(&c->mu, NULL);
    kp_buf_init(&c->plain);
    int rc = pthread_create(&c->thread, NULL, run, c);
    if (rc != 0) {
        if (sys_errno) *sys_errno = rc;
        pthread_mutex_destroy(&c->mu);
        close(c->wake_fd);
        free(c->pfds);
        free(c);
        return KP_ERR_SYS;
    }
    *out = c;
    return KP_OK;
}

void kp_courier_free(kp_courier *c)
{
    if (!c)
        return;
    if (getpid() != c->pid)
        return;     /* a forked child: the thread is the parent's */
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    wake(c);                /* whatever it is doing: it looks at stop before it sleeps */
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->mu);
    close(c->wake_fd);
    free(c->nodes);
    free(c->priors);
    free(c->requests);
    free(c->parts);
    free(c->batches);
    free(c->chosen);
    free(c->req_parts);
    free(c->req_topics);
    free(c->results);
    kp_compressor_free(c->z);
    kp_buf_free(&c->plain);
    free(c->pfds);
    free(c);
}

void kp_courier_lock(kp_courier *c) { pthread_mutex_lock(&c->mu); }
void kp_courier_unlock(kp_courier *c) { pthread_mutex_unlock(&c->mu); }

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int kp_courier_trylock_spin(kp_courier *c, int64_t spin_us)
{
    if (pthread_mutex_trylock(&c->mu) == 0)
        return 1;
    int64_t until = kp_mono_us() + spin_us;
    do {
        for (int i = 0; i < 64; i++) {
            cpu_relax();
            if (pthread_mutex_trylock(&c->mu) == 0)
                return 1;
        }
    } while (kp_mono_us() < until);
    return 0;
}

void kp_courier_reset(kp_courier *c)
{
    c->armed = 0;
    c->generation++;            /* the courier drops what it compresses meanwhile */
    c->n_nodes = 0;
    c->n_priors = 0;
    c->n_requests = 0;
    c->n_parts = 0;
    c->n_batches = 0;
}

int32_t kp_courier_add_node(kp_courier *c, int32_t node_id, int32_t conn_id, int version,
                            int32_t first_correlation_id, int32_t max_requests,
                            int32_t max_in_flight)
{
    if (max_requests < 1 || max_in_flight < 1 || first_correlation_id < 0 ||
        (int64_t)first_correlation_id + max_requests - 1 > INT32_MAX)
        return -1;
    if (make_room((void **)&c->nodes, &c->cap_nodes, c->n_nodes, sizeof *c->nodes, 8) != 0)
        return -1;
    c->nodes[c->n_nodes] = (kp_courier_node){
        .node_id = node_id, .conn_id = conn_id, .version = version,
        .first_correlation_id = first_correlation_id, .max_requests = max_requests,
        .max_in_flight = max_in_flight, .prior = (int32_t)c->n_priors, .reads = 1,
        .pace_us = 0, .last_send_us = -1,
    };
    return (int32_t)c->n_nodes++;
}

void kp_courier_pace_node(kp_courier *c, int32_t node, int64_t pace_us, int64_t last_send_us)
{
    if (node < 0 || (size_t)node >= c->n_nodes)
        return;
    c->nodes[node].pace_us = pace_us > 0 ? pace_us : 0;
    c->nodes[node].last_send_us = last_send_us;
}

int kp_courier_add_prior(kp_courier *c, int32_t node, int32_t correlation_id, int16_t api_key,
                         int version)
{
    if (node < 0 || (size_t)node >= c->n_nodes)
        return -1;
    kp_courier_node *nd = &c->nodes[node];
    if ((size_t)(nd->prior + nd->n_prior) != c->n_priors ||
        make_room((void **)&c->priors, &c->cap_priors, c->n_priors, sizeof *c->priors, 8) != 0) {
        nd->reads = 0;      /* the priors must be the node's, whole and in order: without */
        nd->stopped = 1;    /* them neither its responses nor its room are known */
        return -1;
    }
    c->priors[c->n_priors++] = (kp_courier_prior){
        .correlation_id = correlation_id, .api_key = api_key, .version = version,
    };
    nd->n_prior++;
    return 0;
}

int32_t kp_courier_add_part(kp_courier *c, int32_t node, const uint8_t *topic, size_t topic_len,
                            int32_t partition, int32_t base_sequence)
{
    if (node < 0 || (size_t)node >= c->n_nodes)
        return -1;
    if (make_room((void **)&c->parts, &c->cap_parts, c->n_parts, sizeof *c->parts, 16) != 0)
        return -1;
    c->parts[c->n_parts] = (kp_courier_part){
        .topic = topic, .topic_len = topic_len, .partition = partition, .node = node,
        .next_sequence = base_sequence, .head = -1, .tail = -1,
    };
    c->nodes[node].leads = 1;
    return (int32_t)c->n_parts++;
}

void kp_courier_offer(kp_courier *c, int32_t part, kp_batch_writer *batch, void *owner,
                      int64_t due_us)
{
    if (part < 0 || (size_t)part >= c->n_parts)
        return;
    kp_courier_part *p = &c->parts[part];
    if (make_room((void **)&c->batches, &c->cap_batches, c->n_batches, sizeof *c->batches, 16) != 0) {
        /* The chain must hold the whole queue: without this batch, the part sends no more. */
        p->head = -1;
        return;
    }
    int32_t bi = (int32_t)c->n_batches++;
    c->batches[bi] = (kp_courier_batch){
        .part = part, .next = -1, .batch = batch, .owner = owner, .due_us = due_us,
        .request = -1, .base_sequence = -1, .base_offset = -1, .log_append_time_ms = -1,
    };
    if (p->tail >= 0)
        c->batches[p->tail].next = bi;
    p->tail = bi;
    if (p->head < 0)
        p->head = bi;
    if (c->armed)
        kick(c);
}

kp_status kp_courier_arm(kp_courier *c, const kp_courier_plan *plan)
{
    if (c->cap_scratch < c->n_parts) {
        int32_t *ch = realloc(c->chosen, c->n_parts * sizeof *ch);
        if (ch) c->chosen = ch;
        kp_produce_partition *rp = realloc(c->req_parts, c->n_parts * sizeof *rp);
        if (rp) c->req_parts = rp;
        kp_produce_topic *rt = realloc(c->req_topics, c->n_parts * sizeof *rt);
        if (rt) c->req_topics = rt;
        if (!ch || !rp || !rt)
            return KP_ERR_NOMEM;
        c->cap_scratch = c->n_parts;
    }
    if (plan->codec != KP_CODEC_NONE) {
        if (!kp_compress_available(plan->codec))
            return KP_ERR_CODEC;
        if (c->z == NULL && kp_compressor_new(&c->z) != KP_OK)
            return KP_ERR_NOMEM;
    }
    c->plan = *plan;
    if (plan->acks == 0)
        /* Kafka answers no acks=0 request, and a broker that does (Tansu) answers after the
         * step's requests in flight: the poll reads them all and drops those answers. */
        for (size_t n = 0; n < c->n_nodes; n++)
            c->nodes[n].reads = 0;
    c->armed = 1;
    kick(c);
    return KP_OK;
}

int kp_courier_armed(const kp_courier *c) { return c->armed; }

const kp_courier_node *kp_courier_nodes(const kp_courier *c, size_t *n)
{
    *n = c->n_nodes;
    return c->nodes;
}

const kp_courier_request *kp_courier_requests(const kp_courier *c, size_t *n)
{
    *n = c->n_requests;
    return c->requests;
}

const kp_courier_part *kp_courier_parts(const kp_courier *c, size_t *n)
{
    *n = c->n_parts;
    return c->parts;
}

const kp_courier_batch *kp_courier_batches(const kp_courier *c, size_t *n)
{
    *n = c->n_batches;
    return c->batches;
}

const kp_courier_plan *kp_courier_current_plan(const kp_courier *c)
{
    return &c->plan;
}

uint64_t kp_courier_sent(const kp_courier *c)
{
    return __atomic_load_n(&c->sent, __ATOMIC_RELAXED);
}

uint64_t kp_courier_answered(const kp_courier *c)
{
    return __atomic_load_n(&c->answered, __ATOMIC_RELAXED);
}

uint64_t kp_courier_looks(const kp_courier *c)
{
    return __atomic_load_n(&c->looks, __ATOMIC_RELAXED);
}
