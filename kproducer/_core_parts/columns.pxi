# Part of the kproducer._core extension (included by _core.pyx): the input columns of send_many (Python sequences, NumPy and Arrow arrays).

cdef enum ColumnKind:
    COL_NONE = 0       # every record null
    COL_OBJECTS = 1    # PyObject* per record: bytes or None
    COL_FIXED = 2      # NumPy "S" array: itemsize bytes each, trailing NULs stripped as NumPy does
    COL_ARROW32 = 3    # Arrow binary/string: int32 offsets, data, optional validity bitmap
    COL_ARROW64 = 4    # Arrow large_binary/large_string: int64 offsets


cdef struct Column:
    ColumnKind kind
    PyObject **items
    const uint8_t *data
    Py_ssize_t itemsize
    const int32_t *off32
    const int64_t *off64
    const uint8_t *validity
    Py_ssize_t start      # Arrow slice offset


cdef inline int column_get(const Column *c, Py_ssize_t i, const uint8_t **ptr, int64_t *length) except -1:
    """Record i of a column: its bytes and length (-1 for null)."""
    cdef PyObject *o
    cdef Py_ssize_t j, n
    if c.kind == COL_OBJECTS:
        o = c.items[i]
        if _bytes_check_exact(o):
            ptr[0] = <const uint8_t *>_bytes_data(o)
            length[0] = _bytes_size(o)
        elif o == <PyObject *>None:
            ptr[0] = NULL
            length[0] = -1
        else:
            raise TypeError(f"record {i}: expected bytes or None, not {type(<object>o).__name__}")
    elif c.kind == COL_FIXED:
        ptr[0] = c.data + i * c.itemsize
        n = c.itemsize
        while n > 0 and ptr[0][n - 1] == 0:
            n -= 1
        length[0] = n
    elif c.kind == COL_ARROW32 or c.kind == COL_ARROW64:
        j = c.start + i
        if c.validity != NULL and not (c.validity[j >> 3] >> (j & 7)) & 1:
            ptr[0] = NULL
            length[0] = -1
        elif c.kind == COL_ARROW32:
            ptr[0] = c.data + c.off32[j]
            length[0] = c.off32[j + 1] - c.off32[j]
        else:
            ptr[0] = c.data + c.off64[j]
            length[0] = c.off64[j + 1] - c.off64[j]
    else:
        ptr[0] = NULL
        length[0] = -1
    return 0


cdef class _ColumnSource:
    """Resolves one send_many column (values or keys) to a Column, keeping the Python
    objects and buffers it points into alive for the duration of the call."""
    cdef Column col
    cdef Py_ssize_t n
    cdef Py_ssize_t max_len   # longest record (0 when all null): sizes are checked before queueing
    cdef list keep
    cdef list views

    def __cinit__(self):
        self.keep = []
        self.views = []

    cdef int setup(self, object obj, str what) except -1:
        self.col.kind = COL_NONE
        self.max_len = 0
        if obj is None:
            self.n = -1
            return 0
        # Arrow arrays (pyarrow or anything shaped like it), read through their buffers.
        if hasattr(obj, "buffers") and hasattr(obj, "type") and hasattr(obj, "offset"):
            return self._arrow(obj, what)
        if hasattr(obj, "dtype") and hasattr(obj, "__array_interface__"):
            return self._numpy(obj, what)
        if isinstance(obj, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"{what} must be a sequence of records (a list of bytes, a NumPy or "
                            f"Arrow array), not a single {type(obj).__name__}")
        seq = PySequence_Fast(obj, b"send_many: values and keys must be sequences")
        self.keep.append(seq)
        self.n = PySequence_Fast_GET_SIZE(seq)
        self.col.kind = COL_OBJECTS
        self.col.items = PySequence_Fast_ITEMS(seq)
        # Check every element before anything is queued: a bad record must fail the
        # call, not leave part of it sent.
        cdef Py_ssize_t i
        cdef PyObject *o
        for i in range(self.n):
            o = self.col.items[i]
            if _bytes_check_exact(o):
                if _bytes_size(o) > self.max_len:
                    self.max_len = _bytes_size(o)
            elif o != <PyObject *>None:
                if isinstance(<object>o, str):
                    raise TypeError(f"{what}[{i}] is a str: send_many takes bytes (encode it first)")
                raise TypeError(f"{what}[{i}] must be bytes or None, not {type(<object>o).__name__}")
        return 0

    cdef int _numpy(self, object arr, str what) except -1:
        kind = arr.dtype.kind
        if arr.ndim != 1:
            raise ValueError(f"{what}: expected a 1-dimensional array, got {arr.ndim} dimensions")
        if kind == "O":
            lst = arr.tolist()      # one C-level call: a list of the same objects
            self.keep.append(lst)
            return self.setup(lst, what)
        if kind == "S":
            if not arr.flags["C_CONTIGUOUS"]:
                arr = arr.copy()
            self.keep.append(arr)
            self.n = arr.shape[0]
            self.col.kind = COL_FIXED
            self.col.itemsize = arr.dtype.itemsize
            self.max_len = self.col.itemsize
            self.col.data = <const uint8_t *><uintptr_t>arr.__array_interface__["data"][0]
            return 0
        if kind == "U":
            raise TypeError(f"{what}: NumPy unicode arrays need encoding: pass arr.astype('S') "
                            f"(or an object array of bytes)")
        raise TypeError(f"{what}: NumPy arrays of dtype {arr.dtype} are not bytes (use dtype 'S' or object)")

    cdef int _arrow(self, object arr, str what) except -1:
        tname = str(arr.type)
        if hasattr(arr, "chunks"):
            raise TypeError(f"{what}: a ChunkedArray is sent chunk by chunk; pass its chunks")
        if tname in ("binary", "string", "utf8"):
            self.col.kind = COL_ARROW32
        elif tname in ("large_binary", "large_string", "large_utf8"):
            self.col.kind = COL_ARROW64
        else:
            raise TypeError(f"{what}: Arrow arrays of type {tname} are not binary or string "
                            f"(cast to binary first)")
        bufs = arr.buffers()
        self.n = len(arr)
        self.col.start = arr.offset
        validity = self._pointer(bufs[0]) if bufs[0] is not None and arr.null_count else NULL
        self.col.validity = validity
        offsets = self._pointer(bufs[1])
        if self.col.kind == COL_ARROW32:
            self.col.off32 = <const int32_t *>offsets
        else:
            self.col.off64 = <const int64_t *>offsets
        self.col.data = self._pointer(bufs[2]) if bufs[2] is not None else <const uint8_t *>""
        self.keep.append(arr)
        cdef Py_ssize_t j, size
        for j in range(self.col.start, self.col.start + self.n):
            if self.col.kind == COL_ARROW32:
                size = self.col.off32[j + 1] - self.col.off32[j]
            else:
                size = self.col.off64[j + 1] - self.col.off64[j]
            if size > self.max_len:
                self.max_len = size
        return 0

    cdef const uint8_t *_pointer(self, object buf) except? NULL:
        view = memoryview(buf)
        self.views.append(view)
        cdef const unsigned char[::1] m = view.cast("B")
        if m.shape[0] == 0:
            return <const uint8_t *>""
        return &m[0]

    def release(self):
        for v in self.views:
            v.release()
        self.views.clear()
        self.keep.clear()

