# Declarations of csrc/kp_murmur2.h.
from libc.stdint cimport int32_t, uint8_t

cdef extern from "kp_murmur2.h" nogil:
    int32_t kp_murmur2_hash(const uint8_t *data, size_t len)
    int32_t kp_murmur2_partition(const uint8_t *key, size_t len, int32_t num_partitions)
