# Declarations of csrc/kp_courier.h.
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t
from kproducer._cdefs.common cimport kp_status
from kproducer._cdefs.batch cimport kp_batch_writer
from kproducer._cdefs.turn cimport kp_turn

cdef extern from "kp_courier.h" nogil:
    ctypedef struct kp_selector:
        pass
    ctypedef struct kp_selector_fns:
        pass
    ctypedef struct kp_courier:
        pass

    ctypedef struct kp_courier_node:
        int32_t node_id
        int32_t conn_id
        int version
        int32_t first_correlation_id
        int32_t max_requests
        int32_t max_in_flight
        int32_t n_prior
        int32_t prior
        int32_t n_requests
        int32_t n_answered
        int32_t n_kept
        int reads
        int stopped
        int leads
        int64_t pace_us
        int64_t last_send_us

    ctypedef struct kp_courier_request:
        int32_t node
        int32_t correlation_id
        int64_t send_us
        int64_t answer_us
        int whole
        int answered

    ctypedef struct kp_courier_part:
        const uint8_t *topic
        size_t topic_len
        int32_t partition
        int32_t node
        int32_t next_sequence
        int32_t head
        int32_t tail

    ctypedef struct kp_courier_batch:
        int32_t part
        int32_t next
        kp_batch_writer *batch
        void *owner
        int64_t due_us
        int32_t request
        int32_t base_sequence
        int64_t base_offset
        int64_t log_append_time_ms

    ctypedef struct kp_courier_plan:
        const kp_selector_fns *io
        kp_selector *selector
        const kp_turn *turn
        int64_t producer_id
        int16_t producer_epoch
        int16_t acks
        int32_t timeout_ms
        const uint8_t *client_id
        size_t client_id_len
        const uint8_t *transactional_id
        size_t transactional_id_len
        size_t max_request_size
        int codec
        int level

    kp_status kp_courier_new(kp_courier **out, int *sys_errno)
    void kp_courier_free(kp_courier *c)
    void kp_courier_lock(kp_courier *c)
    int kp_courier_trylock_spin(kp_courier *c, int64_t spin_us)
    void kp_courier_unlock(kp_courier *c)
    void kp_courier_reset(kp_courier *c)
    int32_t kp_courier_add_node(kp_courier *c, int32_t node_id, int32_t conn_id, int version,
                                int32_t first_correlation_id, int32_t max_requests,
                                int32_t max_in_flight)
    void kp_courier_pace_node(kp_courier *c, int32_t node, int64_t pace_us, int64_t last_send_us)
    int kp_courier_add_prior(kp_courier *c, int32_t node, int32_t correlation_id, int16_t api_key,
                             int version)
    int32_t kp_courier_add_part(kp_courier *c, int32_t node, const uint8_t *topic, size_t topic_len,
                                int32_t partition, int32_t base_sequence)
    void kp_courier_offer(kp_courier *c, int32_t part, kp_batch_writer *batch, void *owner,
                          int64_t due_us)
    kp_status kp_courier_arm(kp_courier *c, const kp_courier_plan *plan)
    int kp_courier_armed(const kp_courier *c)
    const kp_courier_node *kp_courier_nodes(const kp_courier *c, size_t *n)
    const kp_courier_request *kp_courier_requests(const kp_courier *c, size_t *n)
    const kp_courier_part *kp_courier_parts(const kp_courier *c, size_t *n)
    const kp_courier_batch *kp_courier_batches(const kp_courier *c, size_t *n)
    const kp_courier_plan *kp_courier_current_plan(const kp_courier *c)
    uint64_t kp_courier_sent(const kp_courier *c)
    uint64_t kp_courier_answered(const kp_courier *c)
