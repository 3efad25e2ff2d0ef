# Declarations of csrc/kp_common.h.
from libc.stdint cimport int64_t

cdef extern from "kp_common.h" nogil:
    void KP_PREFETCH(const void *p)
    ctypedef enum kp_status:
        KP_OK
        KP_ERR_NOMEM
        KP_ERR_TRUNCATED
        KP_ERR_VARINT
        KP_ERR_INVALID
        KP_ERR_MAGIC
        KP_ERR_CRC
        KP_ERR_FRAME_SIZE
        KP_ERR_OVERFLOW
        KP_ERR_TRAILING
        KP_ERR_SYS
        KP_ERR_BUSY
        KP_ERR_NOT_FOUND
        KP_ERR_IN_USE
        KP_ERR_ADDRESS
        KP_ERR_EOF
        KP_ERR_FULL
        KP_ERR_TLS
        KP_ERR_NULL
        KP_ERR_UTF8
        KP_ERR_CODEC

    ctypedef struct kp_error:
        const char *field
        size_t offset
        int64_t value
