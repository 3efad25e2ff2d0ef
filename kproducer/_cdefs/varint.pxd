# Declarations of csrc/kp_varint.h.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from kproducer._cdefs.common cimport kp_status

cdef extern from "kp_varint.h" nogil:
    size_t kp_varint_size(int32_t v)
    size_t kp_varlong_size(int64_t v)
    size_t kp_varint_put(uint8_t *p, int32_t v)
    size_t kp_varlong_put(uint8_t *p, int64_t v)
    kp_status kp_varint_read(const uint8_t *buf, size_t len, size_t *pos, int32_t *out)
    kp_status kp_varlong_read(const uint8_t *buf, size_t len, size_t *pos, int64_t *out)
