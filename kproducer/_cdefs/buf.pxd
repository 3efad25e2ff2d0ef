# Declarations of csrc/kp_buf.h.
from libc.stdint cimport uint8_t
from kproducer._cdefs.common cimport kp_status

cdef extern from "kp_buf.h" nogil:
    ctypedef struct kp_buf:
        uint8_t *data
        size_t len
        size_t cap
        int external
        int fixed
    void kp_buf_init(kp_buf *b)
    void kp_buf_init_external(kp_buf *b, uint8_t *data, size_t cap)
    void kp_buf_rebase(kp_buf *b, uint8_t *data, size_t cap)
    void kp_buf_free(kp_buf *b)
    kp_status kp_buf_reserve(kp_buf *b, size_t extra)
    kp_status kp_buf_append(kp_buf *b, const uint8_t *src, size_t n)
    kp_status kp_buf_resize(kp_buf *b, size_t cap)
