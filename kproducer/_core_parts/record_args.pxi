# Part of the kproducer._core extension (included by _core.pyx): checks and sizes of one record's arguments, shared by send() and send_many().

cdef inline bint _field_bytes(object obj, Py_buffer *view, const uint8_t **ptr, int64_t *length,
                              str what) except -1:
    """A key or value of send(): its bytes (``length`` -1 for None). Returns True when a
    buffer ``view`` was taken (the caller releases it): bytes need none."""
    if obj is None:
        ptr[0] = NULL
        length[0] = -1
        return False
    if PyBytes_CheckExact(obj):
        ptr[0] = <uint8_t *>PyBytes_AS_STRING(obj)
        length[0] = PyBytes_GET_SIZE(obj)
        return False
    if PyUnicode_Check(obj):
        raise TypeError(f"{what} must be bytes-like or None, not str (set {what}_serializer)")
    try:
        PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like or None, not {type(obj).__name__} "
                        f"(set {what}_serializer)") from None
    ptr[0] = <const uint8_t *>view.buf
    length[0] = view.len
    return True


cdef Py_ssize_t _headers_size(_HeaderScratch scratch, Py_ssize_t nh):
    """Upper bound of the encoded size of the ``nh`` headers held in ``scratch``."""
    cdef Py_ssize_t i, size = 0
    for i in range(nh):
        size += <Py_ssize_t>scratch.items[i].key_len + KP_HEADER_MAX_FRAMING
        if scratch.items[i].value_len > 0:
            size += <Py_ssize_t>scratch.items[i].value_len
    return size


cdef inline Py_ssize_t _record_need(int64_t klen, int64_t vlen, Py_ssize_t headers_size):
    """Upper bound of one record's size in a batch of its own (what max.request.size and
    buffer.memory are checked against)."""
    return (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) + RECORD_OVERHEAD + headers_size


cdef inline int64_t _index_arg(object v, str name, str what) except? -1:
    """An integer argument (an int or anything with __index__, such as a NumPy integer;
    never a bool or a float, which Python would silently truncate) as int64."""
    cdef int64_t r
    if not PyLong_CheckExact(v):
        if isinstance(v, bool) or not PyIndex_Check(v):
            raise TypeError(f"{name} must be {what}, not {type(v).__name__}")
        v = v.__index__()
    if not _exact_int64(<PyObject *>v, &r):
        raise ValueError(f"{name} {v} is out of range")
    return r


cdef inline int32_t _partition_in_range(int64_t partition, int32_t n, str topic) except -1:
    if partition < 0 or partition >= n:
        raise ValueError(f"partition {partition} is not in the range [0...{n - 1}] of topic {topic!r}")
    return <int32_t>partition

