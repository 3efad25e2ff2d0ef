/* kp_courier.h - the courier: a plain C thread that sends a lingering batch when its linger.ms
 * is over, without the GIL.
 *
 * Why: the Sender's step runs under the interpreter lock. While the application computes in
 * Python without sending (no send() runs the step for it, kp_turn.h), a batch whose linger.ms
 * is over waits for the I/O thread to get the GIL: the interpreter's switch interval, 5 ms.
 * The courier writes that batch's Produce request itself, so the request leaves at its
 * deadline; the step that follows, whenever it gets the GIL, only does the bookkeeping.
 *
 * Contract (the steady state between two steps, set up by the step that ended last)
 * - The courier's mutex is the accumulator's lock: appends hold it, and so does the courier
 *   from sealing a batch to writing its request, so no record is appended to a batch being
 *   sent.
 * - A step *arms* the courier as it ends (kp_courier_reset, add_node, add_part, offer,
 *   kp_courier_arm, all with the lock held) and takes what it sent as the next step begins
 *   (kp_courier_nodes / kp_courier_parts, then kp_courier_reset). Between reset and arm the
 *   courier does nothing: only an armed courier touches the selector, and the step owns it
 *   from its first reset to its arm.
 * - Per arming, each node gets at most one request (with the correlation id the step
 *   reserved, the Produce version it chose) and each partition at most one batch (with the
 *   BaseSequence the step gave it). A node whose connection is not connected or still
 *   writing an earlier request gets none; its batches wait for a step.
 * - A batch is offered (kp_courier_offer) when it is its partition's only queued batch and
 *   a first attempt; it is sent once its deadline (created + linger.ms, CLOCK_MONOTONIC µs)
 *   passes, unless an application thread is sending: the turn raised `pending` at the same
 *   deadline and that thread runs the step at its next send, so the courier first waits twice
 *   its interval between sends (KP_COURIER_WAIT_MIN_US..KP_COURIER_WAIT_MAX_US) and sends
 *   only if no step came and no send happened meanwhile (a busy application sending 50,000
 *   records/s: p99 5.6 -> 6.8 ms when the courier and the step both sent). Sending seals it (kp_batch_writer.sealed: appends start a new batch) and
 *   finishes it (producer id, epoch, BaseSequence, CRC).
 * - A request the selector takes is written at once (kp_selector_fns.flush); whatever the
 *   socket does not take, and a failed write, is left to the next step's poll, which reports
 *   it (sent, or disconnected) as for any request.
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

/* A node of the plan: the connection and request the step chose for it. */
typedef struct kp_courier_node {
    int32_t node_id;
    int32_t conn_id;            /* the selector's id for the node's connection */
    int version;                /* Produce version */
    int32_t correlation_id;     /* reserved by the step for this request */
    int used;                   /* 1: the request went out (send_ms); -1: the node could not
                                   take one; 0: not yet */
    int64_t send_ms;            /* CLOCK_MONOTONIC ms when it went out */
} kp_courier_node;

/* A partition of the plan, and the batch offered for it. */
typedef struct kp_courier_part {
    const uint8_t *topic;       /* UTF-8, borrowed: the accumulator keeps the topic's name */
    size_t topic_len;
    int32_t partition;
    int32_t node;               /* index into the nodes */
    int32_t base_sequence;      /* the step's next sequence for the partition, -1: none */
    kp_batch_writer *batch;     /* the offered batch (borrowed: its partition's queue keeps it),
                                   NULL: none */
    void *owner;                /* the object that owns it (the accumulator's ProducerBatch) */
    int64_t due_us;             /* CLOCK_MONOTONIC µs at which it is sendable */
    int sent;                   /* 1: sealed, finished and sent in its node's request */
} kp_courier_part;

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
 * to get it back (10,000 and 50,000 sends/s from a busy loop: p99 5.2 -> 6.7 ms and
 * 6.4 -> 8.9 ms when it let go at once). */
int kp_courier_trylock_spin(kp_courier *c, int64_t spin_us);
void kp_courier_unlock(kp_courier *c);

/* With the lock held. Disarms the courier and forgets the plan. */
void kp_courier_reset(kp_courier *c);
/* Adds a node / a partition to the next plan: its index, or -1 (no memory: the plan is
 * smaller, nothing else changes). */
int32_t kp_courier_add_node(kp_courier *c, int32_t node_id, int32_t conn_id, int version,
                            int32_t correlation_id);
int32_t kp_courier_add_part(kp_courier *c, int32_t node, const uint8_t *topic, size_t topic_len,
                            int32_t partition, int32_t base_sequence);
/* Offers part's batch, sendable at due_us; ignored for a part not in the plan or one that
 * has a batch (or had one sent) already. The accumulator offers only while the courier is
 * armed, or while the step builds the plan. */
void kp_courier_offer(kp_courier *c, int32_t part, kp_batch_writer *batch, void *owner,
                      int64_t due_us);
/* Arms the courier with the plan built since the last reset (and the offers made). */
kp_status kp_courier_arm(kp_courier *c, const kp_courier_plan *plan);
/* 1 while armed. */
int kp_courier_armed(const kp_courier *c);

/* With the lock held, after the courier was armed: the plan's nodes and parts (the step
 * reads what was sent), valid until the next reset. */
const kp_courier_node *kp_courier_nodes(const kp_courier *c, size_t *n);
const kp_courier_part *kp_courier_parts(const kp_courier *c, size_t *n);
/* The plan the courier was last armed with (its producer id and epoch finished the batches). */
const kp_courier_plan *kp_courier_current_plan(const kp_courier *c);

/* Requests the courier sent (for metrics and tests; read without the lock). */
uint64_t kp_courier_sent(const kp_courier *c);

#endif /* KP_COURIER_H */
