# Declarations of csrc/kp_frame.h.
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from kproducer._cdefs.common cimport kp_status, kp_error
from kproducer._cdefs.buf cimport kp_buf

cdef extern from "kp_frame.h" nogil:
    enum: KP_FRAME_DEFAULT_MAX_SIZE
    ctypedef struct kp_frame_rx:
        uint32_t size_have
        int32_t max_size
        int32_t body_size
        kp_buf body
        uint64_t stream_pos
    void kp_frame_rx_init(kp_frame_rx *rx, int32_t max_size)
    void kp_frame_rx_free(kp_frame_rx *rx)
    kp_status kp_frame_rx_feed(kp_frame_rx *rx, const uint8_t *data, size_t len, size_t *consumed,
                               int *complete, kp_error *err)
    void kp_frame_rx_take(kp_frame_rx *rx, uint8_t **body, size_t *body_len)
    kp_status kp_frame_put_size(uint8_t *out, size_t size)
