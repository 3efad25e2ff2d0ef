/* kp_courier.h - the courier: a plain C thread that runs the producer's steady state between
 * two Sender steps, without the GIL: it sends the batches that are due, reads the responses
 * and marks the batches they acknowledge.
 *
 * Why: the Sender's step runs under the interpreter lock. While the application computes in
 * Python without sending (no send() runs the step for it, kp_turn.h), a batch whose linger.ms
 * is over waits for the I/O thread to get the GIL: the interpreter's switch interval, 5 ms,
 * and so does every batch behind it that waits for a response to make room in flight. The
 * courier writes those requests itself, at their deadlines, and reads their responses; the
 * step that follows, whenever it gets the GIL, settles what was acknowledged (the futures
 * and callbacks, which need Python) and takes the rest over.
 *
 * Contract (the steady state between two steps, set up by the step that ended last)
 * - The courier's mutex is the accumulator's lock: appends hold it, and so does the courier
 *   from sealing a batch to writing its request, so no record is appended to a batch being
 *   sent; except while it compresses a copy of a sealed batch's records (a step that begins
 *   meanwhile owns the batch at once, and the courier drops what it compressed).
 * - A step *arms* the courier as it ends (kp_courier_reset, add_node, add_part, offer,
 *   kp_courier_arm, all with the lock held) and takes what it did as the next step begins
 *   (kp_courier_nodes / requests / parts / batches, then kp_courier_reset). Between reset and
 *   arm the courier does nothing: only an armed courier touches the selector, and the step
 *   owns it from its first reset to its arm.
 * - Nodes. Each node gets requests from a block of `max_requests` correlation ids the step
 *   reserved (first_correlation_id + i for the i-th request), with the Produce version it
 *   chose, while fewer than `max_in_flight` requests are in flight to it: the step's own
 *   (kp_courier_add_prior, in the order written) and the courier's, less those answered. One
 *   request at a time on the connection: the next is staged once the last is written whole
 *   (kp_selector_fns.settle). A node whose connection is not connected, or is still writing
 *   a step's request, gets none.
 * - Responses. Every frame on a node's connection answers the next of those requests, in
 *   order: the courier reads them (kp_selector_fns.read) and decodes each. One that answers
 *   a step's request is kept for the next poll (the step settles it) and counts as answered
 *   when every partition of it succeeded and it asks for no throttle (or it is not a Produce
 *   response). One that answers the courier's own request and acknowledges its every batch,
 *   with no throttle, is dropped from the selector and its batches get their base offsets:
 *   the step settles the request in its turn, after the responses ahead of it. Bytes after
 *   the fields a Produce response's version defines are ignored (kp_produce.h). The first
 *   frame that is anything else (an error code, a ThrottleTimeMs above 0, which the step
 *   must see to mute the connection for that long, KIP-219; a partition missing or extra, a
 *   correlation id out of order, a frame that does not decode, a lost connection) is kept
 *   for the next poll with everything after it, and the courier stops there: it neither
 *   reads nor sends to that node again until the next arming. Every frame read wakes the
 *   selector (kp_selector_fns.wakeup): the turn's watcher then wants a step, to settle it.
 * - acks=0. A request is done once written: it takes no room in flight, and the courier
 *   reads nothing (every node as if `reads` were 0). The step's requests in flight still
 *   count; the poll reads their answers, and drops those a broker gives to acks=0 requests
 *   anyway (Kafka gives none; Tansu does).
 * - Batches. Offers form a chain per partition in queue order (a partition's whole queue,
 *   first attempts only; later batches are offered by append as they start). Each request
 *   takes at most one batch per partition, its chain's next one once its deadline passes
 *   (created + linger.ms, or 0 for a batch that is full or behind another; CLOCK_MONOTONIC
 *   µs), with the partition's next BaseSequence (the step's, then counted on). Sending seals
 *   it (kp_batch_writer.sealed: appends start a new batch), compresses its Records section
 *   with the plan's codec (kp_compress.h; kp_batch_writer.compressed, so that nothing
 *   compresses it twice) and finishes it (producer id, epoch, BaseSequence, the codec and
 *   transactional bits, CRC).
 * - Beside a sending application it writes, and leaves the reading. That thread runs the
 *   step at its next send (the turn raised `pending`), and the step reads and settles the
 *   responses, so the courier reads nothing for twice its interval between sends
 *   (KP_COURIER_WAIT_MIN_US..KP_COURIER_WAIT_MAX_US) after it saw it send; each look that
 *   finds it still sending doubles that wait, up to KP_COURIER_WAIT_MAX_US (a send() loop
 *   would wake it every 50 µs otherwise). A batch whose deadline passes it writes all the
 *   same, at the deadline: the step would write it only after its first poll, the metadata
 *   check and the drain, hundreds of microseconds of Python later.
 *   While every node that leads a part of the plan has max_in_flight requests out (a node
 *   that leads none, the bootstrap connection, takes no batch), it can write nothing before
 *   an answer is read, and the waits grow to KP_COURIER_WAIT_FULL_US (the longest the turn
 *   leaves a wanted step to that application before the I/O thread runs it); an arm or an
 *   offer meanwhile wakes it only when it would sleep past that (kick).
 * - Pacing. While a node has requests in flight, its next request waits until every batch
 *   it would take is full (kp_batch_writer.full, or a batch queued behind it: either way it
 *   takes no more records) or until pace_us has passed since the node's last request
 *   (kp_courier_pace_node: the step's, then the courier's own): pace_us is the node's
 *   smoothed round trip over max_in_flight, so the requests of a full window spread over the
 *   round trip instead of leaving in a burst as the answers of the last burst come back,
 *   each slot taking whatever few records had arrived since the previous one. With nothing
 *   in flight a request goes at once (no wait at low rates); pace_us 0 (flush, close, no
 *   round trip measured yet) paces nothing.
 * - A request is written at once (kp_selector_fns.flush); whatever the socket does not take,
 *   and a failed write, is left to the next step's poll, which reports it (sent, or
 *   disconnected) as for any request.
 * - kp_courier_free stops and joins the thread; in a forked child (the thread does not exist
 *   there) it frees nothing that the parent's thread might use, and leaks the rest.
 */
#ifndef KP_COURIER_H
#define KP_COURIER_H

#include "kp_common.h"
#include "kp_batch.h"
#include "kp_selector.h"
#include "kp_turn.h"

typedef struct kp_courier kp_courier;

#define KP_COURIER_WAIT_MIN_US 50
#define KP_COURIER_WAIT_MAX_US 500
/* Why longer with the windows full: nothing can be written before an answer is read, and
 * beside a send() loop that outruns the broker each look and each wake-up for a step's arm
 * takes a CPU the broker needs on a small machine. */
#define KP_COURIER_WAIT_FULL_US KP_TURN_GRACE_MAX_US

/* A node of the plan: the connection and requests the step chose for it. */
typedef struct kp_courier_node {
    int32_t node_id;
    int32_t conn_id;            /* the selector's id for the node's connection */
    int version;                /* Produce version */
    int32_t first_correlation_id;   /* the block the step reserved */
    int32_t max_requests;       /* the block's size */
    int32_t max_in_flight;
    int32_t n_prior;            /* the step's requests in flight before the courier's */
    int32_t prior;              /* the first of them (index into the priors) */
    int32_t n_requests;         /* requests written (the plan's requests of this node) */
    int32_t n_answered;         /* responses read and found good, in order: the step's, then
                                   the courier's */
    int32_t n_kept;             /* of them, frames kept for the poll (the step's) */
    int reads;                  /* 0 once a frame was not good, or the connection was lost;
                                   0 from the start with acks=0 */
    int stopped;                /* 1: no more requests (it cannot take one, a failure, a frame
                                   left for the step) */
    int leads;                  /* 1: a part of the plan is its (kp_courier_add_part) */
    int64_t pace_us;            /* the least time between two requests while some are in
                                   flight, unless they are full (0: none) */
    int64_t last_send_us;       /* when the step's last request in flight went out (-1) */
} kp_courier_node;

/* A request the step had in flight to a node when it armed the courier. */
typedef struct kp_courier_prior {
    int32_t correlation_id;
    int16_t api_key;
    int version;
} kp_courier_prior;

/* A request the courier wrote. */
typedef struct kp_courier_request {
    int32_t node;               /* index into the nodes */
    int32_t correlation_id;
    int64_t send_us;            /* CLOCK_MONOTONIC µs (kp_clock.h) when it went out */
    int64_t answer_us;          /* when the courier read its answer, -1: not read */
    int whole;                  /* written whole and settled: the poll does not report it sent */
    int answered;               /* every batch acknowledged (the batches hold the offsets); its
                                   frame was dropped */
} kp_courier_request;

/* A partition of the plan. */
typedef struct kp_courier_part {
    const uint8_t *topic;       /* UTF-8, borrowed: the accumulator keeps the topic's name */
    size_t topic_len;
    int32_t partition;
    int32_t node;               /* index into the nodes */
    int32_t next_sequence;      /* BaseSequence of its next batch sent, -1: none */
    int32_t head;               /* its first batch not sent (index into the batches), -1 */
    int32_t tail;               /* its last batch offered, -1 */
} kp_courier_part;

/* A batch offered, in its partition's chain. */
typedef struct kp_courier_batch {
    int32_t part;               /* index into the parts */
    int32_t next;               /* the part's next batch offered, -1 */
    kp_batch_writer *batch;     /* borrowed: its partition's queue keeps it */
    void *owner;                /* the object that owns it (the accumulator's ProducerBatch) */
    int64_t due_us;             /* CLOCK_MONOTONIC µs at which it is sendable */
    int32_t request;            /* index into the requests, -1: not sent */
    int32_t base_sequence;      /* as sent (-1 without idempotence) */
    int64_t base_offset;        /* when its request was answered */
    int64_t log_append_time_ms;
} kp_courier_batch;

/* What the courier sends with, for one arming (the struct is copied by kp_courier_arm). */
typedef struct kp_courier_plan {
    const kp_selector_fns *io;
    kp_selector *selector;
    const kp_turn *turn;        /* the Sender's turn (an application that sends), or NULL */
    int64_t producer_id;        /* -1 without idempotence */
    int16_t producer_epoch;
    int16_t acks;
    int32_t timeout_ms;
    const uint8_t *client_id;   /* NULL: a null ClientId; borrowed, kept by the caller while
                                   the courier is armed */
    size_t client_id_len;
    const uint8_t *transactional_id;    /* NULL: not transactional; else the batches carry the
                                           transactional bit (borrowed, as client_id) */
    size_t transactional_id_len;
    size_t max_request_size;
    int codec;                  /* KP_CODEC_*: the batches' Records sections are compressed as
                                   they are sent (kp_compress.h; the codec must be built in) */
    int level;                  /* the codec's level, resolved (compression.resolve_level) */
} kp_courier_plan;

/* Starts the courier's thread. KP_ERR_NOMEM, or KP_ERR_SYS with *sys_errno. */
kp_status kp_courier_new(kp_courier **out, int *sys_errno);
/* Stops and joins the thread, frees the courier (NULL is allowed). */
void kp_courier_free(kp_courier *c);

/* The accumulator's lock. */
void kp_courier_lock(kp_courier *c);
/* Tries for up to spin_us (1: taken). The courier holds the lock for microseconds at a time,
 * and a thread that holds the GIL spins this long before it waits without the GIL: letting
 * the GIL go while the I/O thread wants it costs the application a switch interval (5 ms)
 * to get it back, on the acknowledgements' tail. */
int kp_courier_trylock_spin(kp_courier *c, int64_t spin_us);
void kp_courier_unlock(kp_courier *c);

/* With the lock held. Disarms the courier and forgets the plan (if the courier is compressing
 * a batch of it, without the lock, it drops what it compressed: the batch is the step's). */
void kp_courier_reset(kp_courier *c);
/* Adds a node / a partition to the next plan: its index, or -1 (no memory, or arguments out
 * of range: the plan is smaller, nothing else changes). */
int32_t kp_courier_add_node(kp_courier *c, int32_t node_id, int32_t conn_id, int version,
                            int32_t first_correlation_id, int32_t max_requests,
                            int32_t max_in_flight);
/* Paces node's requests (kp_courier.h, Pacing): at most one not full per pace_us while it
 * has requests in flight; last_send_us: when the step's last request to it went out
 * (CLOCK_MONOTONIC µs, -1: none). Ignored for a node not in the plan. */
void kp_courier_pace_node(kp_courier *c, int32_t node, int64_t pace_us, int64_t last_send_us);
/* Adds the next request the step has in flight to node (before any part is added): 0, or -1
 * (no memory, or out of order: the node reads nothing then). */
int kp_courier_add_prior(kp_courier *c, int32_t node, int32_t correlation_id, int16_t api_key,
                         int version);
int32_t kp_courier_add_part(kp_courier *c, int32_t node, const uint8_t *topic, size_t topic_len,
                            int32_t partition, int32_t base_sequence);
/* Offers part's next batch (its chain's tail), sendable at due_us; ignored for a part not in
 * the plan (or no memory: the step sends it). The accumulator offers only while the courier
 * is armed, or while the step builds the plan. */
void kp_courier_offer(kp_courier *c, int32_t part, kp_batch_writer *batch, void *owner,
                      int64_t due_us);
/* Arms the courier with the plan built since the last reset (and the offers made). */
kp_status kp_courier_arm(kp_courier *c, const kp_courier_plan *plan);
/* 1 while armed. */
int kp_courier_armed(const kp_courier *c);

/* With the lock held, after the courier was armed: the plan (the step reads what was sent
 * and answered), valid until the next reset. */
const kp_courier_node *kp_courier_nodes(const kp_courier *c, size_t *n);
const kp_courier_request *kp_courier_requests(const kp_courier *c, size_t *n);
const kp_courier_part *kp_courier_parts(const kp_courier *c, size_t *n);
const kp_courier_batch *kp_courier_batches(const kp_courier *c, size_t *n);
/* The plan the courier was last armed with (its producer id and epoch finished the batches). */
const kp_courier_plan *kp_courier_current_plan(const kp_courier *c);

/* Requests the courier sent, and responses it read and found good, the step's and its own
 * (for metrics and tests; read without the lock). */
uint64_t kp_courier_sent(const kp_courier *c);
uint64_t kp_courier_answered(const kp_courier *c);
/* How many times it looked at its plan (tests: how often it wakes). */
uint64_t kp_courier_looks(const kp_courier *c);

#endif /* KP_COURIER_H */
