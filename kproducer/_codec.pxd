# Cross-module declarations of kproducer._codec, cimported by the accumulator and the selector.
from libc.stdint cimport int32_t, int64_t
from kproducer._cdefs.common cimport kp_status, kp_error
from kproducer._cdefs.batch cimport kp_header


# The one mapping from C status codes to exceptions, and from disconnect reasons to kinds.
cdef str errno_text(int e)
cdef object kp_exception(kp_status st, const kp_error *err, str what, type exc=*,
                         int sys_errno=*, object conn_id=*, str detail=*)
cdef int raise_kp_error(kp_status st, const kp_error *err, str what, type exc=*,
                        int sys_errno=*, object conn_id=*, str detail=*) except -1
cdef tuple disconnect_info(kp_status st, bint was_connected, int sys_errno, int64_t value,
                           const char *detail, int32_t max_frame)


cdef class _HeaderScratch:
    cdef kp_header *items
    cdef Py_ssize_t cap
    cdef list keep

    cdef int fill(self, object headers, Py_ssize_t index) except -1
