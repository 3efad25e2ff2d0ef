# Declarations of csrc/kp_compress.h.
from libc.stdint cimport int64_t, uint8_t

from kproducer._cdefs.common cimport kp_status

cdef extern from "kp_compress.h" nogil:
    ctypedef struct kp_compressor:
        pass

    int kp_compress_available(int codec)
    kp_status kp_compressor_new(kp_compressor **out)
    void kp_compressor_free(kp_compressor *z)
    kp_status kp_compress(kp_compressor *z, int codec, int level, const uint8_t *src, size_t n,
                          const uint8_t **out, size_t *out_len, int64_t *lib_code)
