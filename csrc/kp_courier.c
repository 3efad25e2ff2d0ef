/* kp_courier.c - see kp_courier.h. */
#define _GNU_SOURCE
#include "kp_courier.h"
#include "kp_produce.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

struct kp_courier {
    pthread_mutex_t mu;         /* the accumulator's lock */
    pthread_cond_t cv;          /* armed, an offer, or stop */
    pthread_t thread;
    pid_t pid;                  /* the process that started the thread */
    int stop;
    int armed;
    kp_courier_plan plan;
    kp_courier_node *nodes;
    size_t n_nodes, cap_nodes;
    kp_courier_part *parts;
    size_t n_parts, cap_parts;
    /* Scratch for one request, n_parts entries each: the chosen parts and the request's
     * partition and topic arrays. */
    int32_t *chosen;
    kp_produce_partition *req_parts;
    kp_produce_topic *req_topics;
    size_t cap_scratch;
    uint64_t sent;              /* requests written (atomics) */
    uint64_t seen_activity;     /* the application's sends at the courier's last look */
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* With mu held: the soonest deadline of an offered batch the courier could still send
 * (-1: none). */
static int64_t next_due(const kp_courier *c)
{
    int64_t due = -1;
    for (size_t i = 0; i < c->n_parts; i++) {
        const kp_courier_part *p = &c->parts[i];
        if (p->batch == NULL || p->sent || c->nodes[p->node].used != 0)
            continue;
        if (due < 0 || p->due_us < due)
            due = p->due_us;
    }
    return due;
}

/* With mu held: one Produce request to node n holding every batch of its partitions whose
 * deadline passed (up to max_request_size). Parts are added topic by topic (the
 * accumulator's order), so one pass groups them. */
static void send_node(kp_courier *c, int32_t n, int64_t now)
{
    kp_courier_node *node = &c->nodes[n];
    const kp_courier_plan *pl = &c->plan;
    if (!pl->io->is_connected(pl->selector, node->conn_id) ||
        pl->io->is_sending(pl->selector, node->conn_id)) {
        node->used = -1;    /* unchanged until the next step's poll: do not look again */
        return;
    }
    size_t n_chosen = 0, total = 0;
    for (size_t i = 0; i < c->n_parts; i++) {
        kp_courier_part *p = &c->parts[i];
        if (p->node != n || p->batch == NULL || p->sent || p->due_us > now)
            continue;
        size_t len = p->batch->buf.len;
        if (n_chosen && total + len > pl->max_request_size)
            continue;
        c->chosen[n_chosen++] = (int32_t)i;
        total += len;
    }
    if (n_chosen == 0)
        return;
    /* From here on a failure leaves the node to the next step, which finishes the batches
     * again and reports what is wrong; the courier does not look at it again (used = -1). */
    node->used = -1;
    size_t n_topics = 0;
    for (size_t k = 0; k < n_chosen; k++) {
        kp_courier_part *p = &c->parts[c->chosen[k]];
        int32_t seq = pl->producer_id >= 0 ? p->base_sequence : -1;
        int16_t attributes = pl->transactional_id != NULL ? KP_ATTR_TRANSACTIONAL : 0;
        if (kp_batch_finish(p->batch, attributes, pl->producer_id, pl->producer_epoch, seq) != KP_OK)
            return;
        c->req_parts[k].index = p->partition;
        c->req_parts[k].records = p->batch->buf.data;
        c->req_parts[k].records_len = (int64_t)p->batch->buf.len;
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
    kp_produce_request r = {
        .version = node->version, .correlation_id = node->correlation_id,
        .client_id = pl->client_id, .client_id_len = pl->client_id_len,
        .transactional_id = pl->transactional_id, .transactional_id_len = pl->transactional_id_len,
        .acks = pl->acks, .timeout_ms = pl->timeout_ms,
        .topics = c->req_topics, .n_topics = n_topics,
    };
    size_t size = 0, written = 0;
    if (kp_produce_request_size(&r, &size) != KP_OK)
        return;
    uint8_t *frame = malloc(size);
    if (frame == NULL)
        return;
    kp_status st = kp_produce_request_write(&r, frame, size, &written);
    if (st == KP_OK)
        st = pl->io->send(pl->selector, node->conn_id, frame, written);
    free(frame);
    if (st != KP_OK)
        return;
    (void)pl->io->flush(pl->selector, node->conn_id);
    for (size_t k = 0; k < n_chosen; k++) {
        kp_courier_part *p = &c->parts[c->chosen[k]];
        p->sent = 1;
        p->batch->sealed = 1;
    }
    node->used = 1;
    node->send_ms = now / 1000;
    __atomic_add_fetch(&c->sent, 1, __ATOMIC_RELAXED);
}

/* With mu held: waits until `until` (CLOCK_MONOTONIC µs), an offer, an arming or stop. */
static void wait_until(kp_courier *c, int64_t until)
{
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000),
                          .tv_nsec = (long)(until % 1000000) * 1000L};
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

static void *run(void *arg)
{
    kp_courier *c = arg;
    sigset_t all;
    /* Signals belong to the interpreter's threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    /* Deadlines to the microsecond, as the turn's watcher (kp_turn.c). */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        int64_t due = c->armed ? next_due(c) : -1;
        if (due < 0) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        int64_t now = now_us();
        if (now < due) {
            wait_until(c, due);
            continue;
        }
        if (c->plan.turn != NULL) {
            /* An application that sent since the last look runs the step itself at its next
             * send: leave the batch to it for two of its intervals, then look again. */
            uint64_t a = kp_turn_activity(c->plan.turn);
            if (a != c->seen_activity) {
                c->seen_activity = a;
                int64_t wait = 2 * kp_turn_send_interval_us(c->plan.turn);
                if (wait < KP_COURIER_WAIT_MIN_US) wait = KP_COURIER_WAIT_MIN_US;
                if (wait > KP_COURIER_WAIT_MAX_US) wait = KP_COURIER_WAIT_MAX_US;
                wait_until(c, now + wait);
                continue;
            }
        }
        for (size_t n = 0; n < c->n_nodes; n++)
            if (c->nodes[n].used == 0)
                send_node(c, (int32_t)n, now);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

kp_status kp_courier_new(kp_courier **out, int *sys_errno)
{
    pthread_condattr_t ca;
    *out = NULL;
    if (sys_errno) *sys_errno = 0;
    kp_courier *c = calloc(1, sizeof *c);
    if (!c)
        return KP_ERR_NOMEM;
    c->pid = getpid();
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&c->thread, NULL, run, c);
    if (rc != 0) {
        if (sys_errno) *sys_errno = rc;
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
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
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->nodes);
    free(c->parts);
    free(c->chosen);
    free(c->req_parts);
    free(c->req_topics);
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
    int64_t until = now_us() + spin_us;
    do {
        for (int i = 0; i < 64; i++) {
            cpu_relax();
            if (pthread_mutex_trylock(&c->mu) == 0)
                return 1;
        }
    } while (now_us() < until);
    return 0;
}

void kp_courier_reset(kp_courier *c)
{
    c->armed = 0;
    c->n_nodes = 0;
    c->n_parts = 0;
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

int32_t kp_courier_add_node(kp_courier *c, int32_t node_id, int32_t conn_id, int version,
                            int32_t correlation_id)
{
    if (make_room((void **)&c->nodes, &c->cap_nodes, c->n_nodes, sizeof *c->nodes, 8) != 0)
        return -1;
    kp_courier_node *n = &c->nodes[c->n_nodes];
    n->node_id = node_id;
    n->conn_id = conn_id;
    n->version = version;
    n->correlation_id = correlation_id;
    n->used = 0;
    n->send_ms = 0;
    return (int32_t)c->n_nodes++;
}

int32_t kp_courier_add_part(kp_courier *c, int32_t node, const uint8_t *topic, size_t topic_len,
                            int32_t partition, int32_t base_sequence)
{
    if (node < 0 || (size_t)node >= c->n_nodes)
        return -1;
    if (make_room((void **)&c->parts, &c->cap_parts, c->n_parts, sizeof *c->parts, 16) != 0)
        return -1;
    kp_courier_part *p = &c->parts[c->n_parts];
    p->topic = topic;
    p->topic_len = topic_len;
    p->partition = partition;
    p->node = node;
    p->base_sequence = base_sequence;
    p->batch = NULL;
    p->owner = NULL;
    p->due_us = 0;
    p->sent = 0;
    return (int32_t)c->n_parts++;
}

void kp_courier_offer(kp_courier *c, int32_t part, kp_batch_writer *batch, void *owner,
                      int64_t due_us)
{
    if (part < 0 || (size_t)part >= c->n_parts)
        return;
    kp_courier_part *p = &c->parts[part];
    if (p->batch != NULL)
        return;
    p->batch = batch;
    p->owner = owner;
    p->due_us = due_us;
    if (c->armed)
        pthread_cond_signal(&c->cv);
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
    c->plan = *plan;
    c->armed = 1;
    pthread_cond_signal(&c->cv);
    return KP_OK;
}

int kp_courier_armed(const kp_courier *c) { return c->armed; }

const kp_courier_node *kp_courier_nodes(const kp_courier *c, size_t *n)
{
    *n = c->n_nodes;
    return c->nodes;
}

const kp_courier_part *kp_courier_parts(const kp_courier *c, size_t *n)
{
    *n = c->n_parts;
    return c->parts;
}

const kp_courier_plan *kp_courier_current_plan(const kp_courier *c)
{
    return &c->plan;
}

uint64_t kp_courier_sent(const kp_courier *c)
{
    return __atomic_load_n(&c->sent, __ATOMIC_RELAXED);
}
