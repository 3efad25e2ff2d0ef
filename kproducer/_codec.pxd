# Cross-module declarations of kproducer._codec, cimported by the accumulator.
from kproducer._cdefs.common cimport kp_status, kp_error
from kproducer._cdefs.batch cimport kp_header


cdef int raise_kp_error(kp_status st, const kp_error *err, str what, type exc=*) except -1


cdef class _HeaderScratch:
    cdef kp_header *items
    cdef Py_ssize_t cap
    cdef list keep

    cdef int fill(self, object headers, Py_ssize_t index) except -1
