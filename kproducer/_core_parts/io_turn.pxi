# Part of the kproducer._core extension (included by _core.pyx): SenderTurn, the
# C watcher that raises ``pending`` when the Sender's step is wanted (csrc/kp_turn.h says why
# and how). Which thread then runs the step is kproducer.turn's StepTurn.

from kproducer._cdefs.turn cimport *


cdef class SenderTurn:
    """The watcher of the Sender's turn. A C thread (no GIL, ever) raises ``pending`` when
    the selector's epoll descriptor ``fd`` is readable or a deadline (:meth:`done`,
    :meth:`due_by`) passes; a thread that holds the GIL reads ``pending`` for the cost of a
    load and runs the step itself; the I/O thread sleeps in :meth:`wait_io` without the GIL.
    The thread that ran a step calls :meth:`done` after its poll (kproducer.turn.StepTurn
    does all of this for the Sender)."""
    cdef kp_turn *t

    def __cinit__(self, int fd):
        cdef int err = 0
        cdef kp_status st = kp_turn_new(&self.t, fd, &err)
        if st != KP_OK:
            raise_kp_error(st, NULL, "starting the Sender's watcher thread", None, err)

    def __dealloc__(self):
        kp_turn_free(self.t)
        self.t = NULL

    def close(self):
        """Stops the watcher thread (the selector's descriptor may close after this)."""
        kp_turn_free(self.t)
        self.t = NULL

    cdef inline bint wanted(self) noexcept:
        return self.t != NULL and kp_turn_pending(self.t) != 0

    cdef inline void touch(self) noexcept:
        # An application thread sent: it holds the GIL and will look at ``pending`` again.
        if self.t != NULL:
            kp_turn_touch(self.t)

    def sent(self):
        """An application thread sent (what send() tells the turn, for tests)."""
        self.touch()

    @property
    def activity(self):
        """How many times application threads said they sent or look again (:meth:`sent`)."""
        return 0 if self.t == NULL else kp_turn_activity(self.t)

    @property
    def send_interval_us(self):
        """The application's mean interval between sends, as the steps see it (0: unknown)."""
        return 0 if self.t == NULL else kp_turn_send_interval_us(self.t)

    def grace_us(self, int floor_ms):
        """How long :meth:`wait_io` (``grace_ms=floor_ms``) now leaves a wanted step to an
        application thread that sent: about its interval between sends (see kp_turn.h)."""
        return 0 if self.t == NULL else kp_turn_grace_us(self.t, floor_ms)

    @property
    def pending(self):
        return self.wanted()

    @property
    def watcher_timer_slack_ns(self):
        """The watcher thread's timer slack (kp_turn.h): 1 once it runs, 0 before."""
        return 0 if self.t == NULL else kp_turn_watcher_slack_ns(self.t)

    @property
    def raised(self):
        """How many times the watcher asked for a step."""
        return 0 if self.t == NULL else kp_turn_raised(self.t)

    @property
    def asleep_steps(self):
        """How many graces :meth:`wait_io` cut short because the thread that sent last was
        asleep in the kernel (it holds no GIL: the I/O thread steps at once)."""
        return 0 if self.t == NULL else kp_turn_asleep_steps(self.t)

    @property
    def raised_at_us(self):
        """When a step was last asked for (``now_us()``'s clock; 0: never)."""
        return 0 if self.t == NULL else kp_turn_raised_at_us(self.t)

    def wake(self):
        """Asks for a step at once."""
        if self.t != NULL:
            kp_turn_raise(self.t)

    def begin(self):
        """A step begins: it sees the deadlines named so far."""
        if self.t != NULL:
            kp_turn_begin(self.t)

    def done(self, int64_t due_us):
        """A step ran its poll; the next is due at ``due_us`` (``now_us()``'s clock, -1:
        none). The watcher watches again."""
        if self.t != NULL:
            kp_turn_done(self.t, due_us)

    cdef inline void due_at_wall(self, int64_t wall_ms) noexcept:
        # A batch sendable when the wall clock (its created_ms's) reaches wall_ms.
        if self.t != NULL:
            kp_turn_due_by(self.t, kp_turn_wall_to_mono_us(wall_ms))

    def due_by(self, int64_t due_us):
        """A step is due at ``due_us`` at the latest (between steps: a batch's deadline)."""
        if self.t != NULL:
            kp_turn_due_by(self.t, due_us)

    def wait(self, int timeout_ms=-1):
        """Waits without the GIL up to ``timeout_ms`` (-1: no limit) for a step to be wanted;
        True if one is."""
        cdef int r
        if self.t == NULL:
            return False
        with nogil:
            r = kp_turn_wait(self.t, timeout_ms)
        return r != 0

    def wait_io(self, int grace_ms):
        """The I/O thread's wait (see kp_turn_wait_io): without the GIL until a step is
        wanted that no application thread that sent ran within its grace (:meth:`grace_us`,
        at least ``grace_ms``); False once closed."""
        cdef int r
        if self.t == NULL:
            return False
        with nogil:
            r = kp_turn_wait_io(self.t, grace_ms)
        return r != 0

    @property
    def steps_ended(self):
        """How many steps have ended (read before looking at what a wait_step waits for)."""
        return 0 if self.t == NULL else kp_turn_steps_ended(self.t)

    def wait_step(self, uint64_t seen, int timeout_ms=-1):
        """Waits without the GIL up to ``timeout_ms`` (-1: no limit) until a step is wanted
        or one ends after ``steps_ended`` read ``seen``; True if one is wanted."""
        cdef int r
        if self.t == NULL:
            return False
        with nogil:
            r = kp_turn_wait_step(self.t, seen, timeout_ms)
        return r != 0

    def wait_clear(self, int timeout_ms=-1):
        """Waits without the GIL up to ``timeout_ms`` (-1: no limit) until no step is wanted
        (another thread ran it); True if none is."""
        cdef int r
        if self.t == NULL:
            return True
        with nogil:
            r = kp_turn_wait_clear(self.t, timeout_ms)
        return r != 0

    def loop_fd(self):
        """An eventfd that becomes readable as a step is wanted while an event loop is
        attached (:meth:`attach_loop`); owned by the turn (watch a dup of it)."""
        cdef int fd = -1, err = 0
        if self.t == NULL:
            raise KafkaError("the producer is closed")
        cdef kp_status st = kp_turn_loop_fd(self.t, &fd, &err)
        if st != KP_OK:
            raise_kp_error(st, NULL, "making the Sender's loop descriptor", None, err)
        return fd

    def attach_loop(self, int delta, int grace_ms=-1):
        """``delta`` (+1/-1) event loops that watch :meth:`loop_fd` and run the wanted steps;
        while any is attached the I/O thread leaves a wanted step to them for ``grace_ms``."""
        if self.t != NULL:
            kp_turn_attach_loop(self.t, delta, grace_ms)

    @staticmethod
    def now_ms():
        """CLOCK_MONOTONIC in ms: time.monotonic()'s clock on Linux."""
        return kp_turn_now_ms()

    @staticmethod
    def now_us():
        """CLOCK_MONOTONIC in µs: the clock of the deadlines."""
        return kp_turn_now_us()

    @staticmethod
    def wall_to_mono_us(int64_t wall_ms):
        """The ``now_us()`` instant at which the wall clock reaches ``wall_ms``."""
        return kp_turn_wall_to_mono_us(wall_ms)
