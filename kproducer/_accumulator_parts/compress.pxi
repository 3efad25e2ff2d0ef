# Part of the kproducer._accumulator extension (included by _accumulator.pyx): the C codecs
# (csrc/kp_compress.h) with which the courier compresses a batch without the GIL. The steps
# compress with kproducer.compression (cramjam); these are the system's libraries, linked
# when the build found them (setup.py).
from kproducer._cdefs.compress cimport *


def courier_codecs():
    """The codec names this build can compress in C, so the courier sends their batches."""
    return frozenset(name for name, codec in _compression.CODEC_IDS.items()
                     if codec != 0 and kp_compress_available(codec))


def c_compress(str name, data, level=None):
    """Compresses ``data`` as the courier does (the C codec ``name`` at ``level``, resolved
    as the producer resolves ``compression.<codec>.level``): the Records section a courier
    sends. For tests and the benchmark's comparison with the Python codecs."""
    cdef int codec = _compression.codec_id(name)
    cdef int lvl = _compression.resolve_level(name, level) or 0
    cdef kp_compressor *z = NULL
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
    st = kp_compressor_new(&z)
    if st != KP_OK:
        raise_kp_error(st, NULL, f"compress {name}")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        err.field = NULL
        err.offset = 0
        err.value = 0
        with nogil:
            st = kp_compress(z, codec, lvl, <const uint8_t *>view.buf, <size_t>view.len,
                             &out, &out_len, &err.value)
        if st != KP_OK:
            raise_kp_error(st, &err, f"compress {name}", None, 0, None, "the library failed")
        return PyBytes_FromStringAndSize(<const char *>out, <Py_ssize_t>out_len)
    finally:
        PyBuffer_Release(&view)
        kp_compressor_free(z)
