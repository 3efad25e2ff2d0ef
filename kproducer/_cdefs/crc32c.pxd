# Declarations of csrc/kp_crc32c.h.
from libc.stdint cimport uint8_t, uint32_t

cdef extern from "kp_crc32c.h" nogil:
    uint32_t kp_crc32c_update(uint32_t crc, const uint8_t *data, size_t len)
    uint32_t kp_crc32c_update_sw(uint32_t crc, const uint8_t *data, size_t len)
    uint32_t kp_crc32c_update_hw(uint32_t crc, const uint8_t *data, size_t len)
    int kp_crc32c_hw_available()
