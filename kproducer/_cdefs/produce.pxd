# Declarations of csrc/kp_produce.h.
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t
from kproducer._cdefs.common cimport kp_status, kp_error

cdef extern from "kp_produce.h" nogil:
    enum:
        KP_PRODUCE_MIN_VERSION
        KP_PRODUCE_MAX_VERSION
        KP_PRODUCE_FIRST_FLEXIBLE_VERSION
        KP_PRODUCE_FIRST_LEADER_HINT_VERSION
        KP_PRODUCE_MAX_STRING
        KP_PRODUCE_MIN_PARTITION_BYTES
        KP_PRODUCE_MIN_ENDPOINT_BYTES
    ctypedef struct kp_produce_partition:
        int32_t index
        const uint8_t *records
        int64_t records_len
    ctypedef struct kp_produce_topic:
        const uint8_t *name
        size_t name_len
        const kp_produce_partition *partitions
        size_t n_partitions
    ctypedef struct kp_produce_request:
        int version
        int32_t correlation_id
        const uint8_t *client_id
        size_t client_id_len
        const uint8_t *transactional_id
        size_t transactional_id_len
        int16_t acks
        int32_t timeout_ms
        const kp_produce_topic *topics
        size_t n_topics
    ctypedef struct kp_produce_result:
        size_t topic_off
        size_t topic_len
        int32_t partition
        int16_t error_code
        int64_t base_offset
        int64_t log_append_time_ms
        size_t message_off
        int64_t message_len
        int32_t current_leader_id
        int32_t current_leader_epoch
    ctypedef struct kp_produce_endpoints:
        size_t off
        size_t len
        size_t count
    ctypedef struct kp_produce_endpoint:
        int32_t node_id
        int32_t port
        size_t host_off
        size_t host_len
        size_t rack_off
        int64_t rack_len
    kp_status kp_produce_request_size(const kp_produce_request *r, size_t *size)
    kp_status kp_produce_request_write(const kp_produce_request *r, uint8_t *out, size_t cap,
                                       size_t *written)
    kp_status kp_produce_response_read(const uint8_t *p, size_t len, int version,
                                       int32_t *correlation_id, kp_produce_result *out,
                                       size_t cap, size_t *n, int32_t *throttle_time_ms,
                                       size_t *trailing, kp_produce_endpoints *endpoints,
                                       kp_error *err)
    kp_status kp_produce_endpoints_read(const uint8_t *p, size_t len,
                                        const kp_produce_endpoints *where,
                                        kp_produce_endpoint *out, size_t cap, size_t *n,
                                        kp_error *err)
    int kp_utf8_valid(const uint8_t *p, size_t len)
