# Declarations of csrc/kp_batch.h.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t
from kproducer._cdefs.common cimport kp_status, kp_error
from kproducer._cdefs.buf cimport kp_buf

cdef extern from "kp_batch.h" nogil:
    enum: KP_BATCH_HEADER_SIZE
    enum: KP_RECORD_MAX_FRAMING
    enum: KP_HEADER_MAX_FRAMING
    enum: KP_ATTR_COMPRESSION_MASK
    enum: KP_ATTR_TIMESTAMP_TYPE
    enum: KP_ATTR_TRANSACTIONAL
    enum: KP_ATTR_CONTROL

    ctypedef struct kp_header:
        const uint8_t *key
        size_t key_len
        const uint8_t *value
        int64_t value_len

    ctypedef struct kp_batch_writer:
        kp_buf buf
        int64_t base_timestamp
        int64_t max_timestamp
        int32_t count
        int32_t sealed
        int32_t compressed
        int32_t full

    kp_status kp_batch_init(kp_batch_writer *w, size_t initial_cap)
    kp_status kp_batch_init_external(kp_batch_writer *w, uint8_t *data, size_t cap)
    void kp_batch_free(kp_batch_writer *w)
    size_t kp_batch_record_size(int64_t timestamp_delta, int32_t offset_delta, int64_t key_len,
                                int64_t value_len, const kp_header *headers, size_t n_headers)
    kp_status kp_batch_append(kp_batch_writer *w, int64_t timestamp,
                              const uint8_t *key, int64_t key_len,
                              const uint8_t *value, int64_t value_len,
                              const kp_header *headers, size_t n_headers)
    kp_status kp_batch_append_limited(kp_batch_writer *w, size_t limit, int64_t timestamp,
                                      const uint8_t *key, int64_t key_len,
                                      const uint8_t *value, int64_t value_len,
                                      const kp_header *headers, size_t n_headers, int *appended)
    kp_status kp_batch_append_inline(kp_batch_writer *w, size_t limit, int64_t timestamp,
                                     const uint8_t *key, int64_t key_len,
                                     const uint8_t *value, int64_t value_len,
                                     const kp_header *headers, size_t n_headers, int *appended)
    kp_status kp_batch_replace_records(kp_batch_writer *w, const uint8_t *data, size_t len)
    kp_status kp_batch_finish(kp_batch_writer *w, int16_t attributes, int64_t producer_id,
                              int16_t producer_epoch, int32_t base_sequence)

    ctypedef struct kp_batch_info:
        int64_t base_offset
        int32_t length
        int32_t partition_leader_epoch
        int8_t magic
        uint32_t crc
        int16_t attributes
        int32_t last_offset_delta
        int64_t base_timestamp
        int64_t max_timestamp
        int64_t producer_id
        int16_t producer_epoch
        int32_t base_sequence
        int32_t records_count
        const uint8_t *records
        size_t records_len

    kp_status kp_batch_read_header(const uint8_t *data, size_t len, kp_batch_info *out, kp_error *err)

    ctypedef struct kp_record_view:
        int8_t attributes
        int64_t timestamp_delta
        int32_t offset_delta
        const uint8_t *key
        int32_t key_len
        const uint8_t *value
        int32_t value_len
        int32_t headers_count
        const uint8_t *headers
        size_t headers_len

    kp_status kp_record_read(const uint8_t *buf, size_t len, size_t *pos, kp_record_view *out,
                             kp_error *err, size_t base)
    kp_status kp_record_read_header(const kp_record_view *rec, size_t *hpos, kp_header *out,
                                    kp_error *err, size_t base)
