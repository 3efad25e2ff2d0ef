# Part of the kproducer._core extension (included by _core.pyx): the event loop
# turn's slice as every send and settled await sees it, read without a Python call
# (kproducer.aio keeps the waiters and says why there is a slice).

from cpython.pystate cimport PyThreadState_GetDict
from cpython.dict cimport PyDict_GetItem
from cpython.set cimport PySet_Contains


cdef class LoopSlice:
    """One event loop's slice: kproducer.aio's queue for the loop owns it and keeps it
    current; :func:`bind_slice` makes it the one of the loop's thread."""
    cdef public double end      # time.monotonic() at which the slice ends; 0.0: none begun
    cdef public bint waiting    # tasks wait for a later turn: others go behind them
    cdef public object loop
    cdef public set woken       # the tasks let go this turn (they do not wait behind)
    cdef int unclocked          # checks left before slice_check reads the clock again


cdef str _SLICE_KEY = "kproducer.loop_slice"
cdef int _SLICE_CLOCK_EVERY = 8
# asyncio's {loop: its running task} (asyncio.tasks._current_tasks), from kproducer.aio.
cdef dict _current_tasks = None


# kproducer.aio once imported (it imports this module): the loop's slices and queues.
cdef object _aio = None


cdef object _aio_module():
    global _aio
    if _aio is None:
        import kproducer.aio
        _aio = kproducer.aio
    return _aio


def _bind_aio(module, dict current_tasks):
    """kproducer.aio, at its import (with asyncio's {loop: running task}): settled futures
    awaited in a loop take part in its slices."""
    global _aio, _current_tasks
    _aio = module
    _current_tasks = current_tasks


def bind_slice(LoopSlice s):
    """Makes ``s`` the slice of the calling thread (the thread of its loop)."""
    (<dict><object>PyThreadState_GetDict())[_SLICE_KEY] = s


def bound_loop():
    """The loop whose slice the calling thread's sends and awaits last took part in (the
    running one, once one of them ran in it), or None."""
    cdef LoopSlice s = current_slice()
    return None if s is None else s.loop


cdef inline LoopSlice current_slice():
    """The calling thread's slice (bind_slice), or None."""
    cdef PyObject *d = PyThreadState_GetDict()
    cdef PyObject *o
    if d != NULL:
        o = PyDict_GetItem(<object>d, _SLICE_KEY)
        if o != NULL:
            return <LoopSlice>o
    return None


cdef object turn_check():
    """None when the caller goes on at once: its thread's loop has a slice under way and
    nobody waits behind it, or the caller was let go this turn. Otherwise what
    ``kproducer.aio.turn_waiter()`` answers (it begins slices, finds the loop, makes
    waiters)."""
    return slice_check(current_slice())


cdef object slice_check(LoopSlice s):
    """:func:`turn_check` for the calling thread's slice ``s`` (current_slice())."""
    cdef PyObject *o
    if s is not None and _current_tasks is not None and s.end != 0.0:
        # The clock once every _SLICE_CLOCK_EVERY checks: a check costs less than the read
        # of the clock (tens of ns here), and a few sends more overrun a 2 ms slice by
        # microseconds.
        if s.unclocked > 0:
            s.unclocked -= 1
        elif <double>kp_turn_now_us() * 1e-6 < s.end:
            s.unclocked = _SLICE_CLOCK_EVERY - 1
        else:
            return _aio_module().turn_waiter()
        if not s.waiting:
            return None
        o = PyDict_GetItem(_current_tasks, s.loop)
        if o != NULL and PySet_Contains(s.woken, <object>o):
            return None
    return _aio_module().turn_waiter()


def turn_waiter():
    """:func:`turn_check` for Python (AIOProducer.send): None, or a future to await first."""
    return turn_check()
