# Part of the kproducer._core extension (included by _core.pyx): the C codecs
# (csrc/kp_compress.h), the system's libraries linked when the build found them (setup.py).
# The courier compresses with them without the GIL, and so does a step closing a batch: the
# application's thread goes on meanwhile. A codec this build lacks is cramjam's
# (kproducer.compression), called with the GIL, as before.
from kproducer._cdefs.compress cimport *


cdef class Compressor:
    """A C codec's contexts and output buffer, kept between batches (a zstd or lz4 context,
    zlib's window: hundreds of KiB to set up): one per producer, lent to one close() at a
    time. Lending needs no lock: the GIL is held while the flag is read and set."""
    cdef kp_compressor *z
    cdef bint lent

    def __cinit__(self):
        cdef kp_status st = kp_compressor_new(&self.z)
        if st != KP_OK:
            raise_kp_error(st, NULL, "compressor")

    def __dealloc__(self):
        kp_compressor_free(self.z)


cdef kp_status compress_records(kp_batch_writer *w, int codec, int level, Compressor owner,
                                int64_t *lib_code) noexcept:
    """Compresses w's Records section in place with the C codec, the GIL released: with
    ``owner``'s compressor when it is free, else (another thread's close() has it, or no
    owner) with one of its own. ``w`` must be out of every queue: nothing appends to it."""
    cdef kp_compressor *temp = NULL
    cdef kp_compressor *z
    cdef const uint8_t *out = NULL
    cdef size_t out_len = 0
    cdef kp_status st
    if owner is not None and not owner.lent:
        owner.lent = True
        z = owner.z
    else:
        st = kp_compressor_new(&temp)
        if st != KP_OK:
            return st
        z = temp
    with nogil:
        st = kp_compress(z, codec, level, w.buf.data + KP_BATCH_HEADER_SIZE,
                         w.buf.len - KP_BATCH_HEADER_SIZE, &out, &out_len, lib_code)
        if st == KP_OK:
            st = kp_batch_replace_records(w, out, out_len)
    if temp != NULL:
        kp_compressor_free(temp)
    else:
        owner.lent = False
    return st


def courier_codecs():
    """The codec names this build can compress in C, so the courier sends their batches."""
    return frozenset(name for name, codec in _compression.CODEC_IDS.items()
                     if codec != 0 and kp_compress_available(codec))


def c_compress(str name, data, level=None):
    """Compresses ``data`` as the courier and the steps do (the C codec ``name`` at ``level``,
    resolved as the producer resolves ``compression.<codec>.level``): a batch's Records
    section. For tests and the benchmark's comparison with the Python codecs."""
    cdef int codec = _compression.codec_id(name)
    cdef int lvl = _compression.resolve_level(name, level) or 0
    cdef Compressor comp
    cdef const uint8_t *out = NULL
    cdef size_t out_len = 0
    cdef kp_error err
    cdef kp_status st
    cdef Py_buffer view
    if codec == 0:
        raise ValueError("compression: 'none' is not a codec")
    if not kp_compress_available(codec):
        raise_kp_error(KP_ERR_CODEC, NULL, f"compress {name}", None, 0, None,
                       "this build has no C codec for it (setup.py found no library)")
    comp = Compressor()
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        err.field = NULL
        err.offset = 0
        err.value = 0
        with nogil:
            st = kp_compress(comp.z, codec, lvl, <const uint8_t *>view.buf, <size_t>view.len,
                             &out, &out_len, &err.value)
        if st != KP_OK:
            raise_kp_error(st, &err, f"compress {name}", None, 0, None, "the library failed")
        return PyBytes_FromStringAndSize(<const char *>out, <Py_ssize_t>out_len)
    finally:
        PyBuffer_Release(&view)
