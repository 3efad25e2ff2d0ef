# Included by kproducer/_codec.pyx and kproducer/_core.pyx: what both compiled record
# modules need per record. Compiled into each (inline, no cross-module call on the hot path);
# the declarations and the code live here once.

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t
from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME

cdef extern from "Python.h":
    # Borrowed-pointer forms of the macros, for the per-record loops.
    bint _bytes_check_exact "PyBytes_CheckExact"(PyObject *o)
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *o)
    Py_ssize_t _bytes_size "PyBytes_GET_SIZE"(PyObject *o)
    object PySequence_Fast(object o, const char *m)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject **PySequence_Fast_ITEMS(object o)


cdef inline int64_t now_ms() noexcept nogil:
    """The clock record timestamps use: ms since the epoch (CLOCK_REALTIME)."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline bint _exact_int64(PyObject *o, int64_t *out) noexcept:
    """An int to int64 through Cython's conversion, which reads small ints' digits inline
    (PyLong_AsLong's generic loop was a tenth of encode_batch's per-record time). False,
    with no exception set, when it does not fit."""
    try:
        out[0] = <int64_t><object>o
        return True
    except OverflowError:
        return False
