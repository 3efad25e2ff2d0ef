"""Which thread runs the Sender's next step: the *turn*.

The Sender's step (:meth:`kproducer.sender.Sender.run_once`) runs under the GIL, one at a
time, on whichever thread gets there first:

- an application thread that holds the GIL already: ``send()``, ``send_many()`` and
  ``Producer.poll()`` read ``watcher.pending`` (one load) and run the wanted step
  themselves (:meth:`StepTurn.step_from_app`), so an acknowledgement never waits for the
  I/O thread to get the GIL from a busy application (the interpreter's switch interval);
- a thread that waits for what the steps settle (``flush()``, a transaction's commit,
  ``poll(timeout)``, a send waiting for buffer memory) runs them until it is settled
  (:meth:`StepTurn.run_steps_until`);
- the I/O thread, which sleeps without the GIL until the watcher hands it a step that no
  sending thread ran within its grace (:meth:`StepTurn.io_turn`).

The watcher is :class:`kproducer._core.SenderTurn`: a plain C thread (csrc/kp_turn.h)
asleep in poll(2) on the selector's descriptor and the next deadline, which raises
``pending`` when a step is wanted. This module holds the rest: the step lock, who holds it,
and the counters of who ran the steps.

Built before the accumulator, which takes the watcher, :meth:`StepTurn.step_from_app` and
:meth:`StepTurn.run_steps_until` in its constructor; the Sender then binds itself to it
(:meth:`StepTurn.bind`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from kproducer._core import SenderTurn

log = logging.getLogger(__name__)

# How long, at least, the I/O thread leaves a wanted step to an application thread that is
# sending (it runs the step at its next send) before it queues for the GIL itself; the
# watcher stretches it to twice that thread's mean interval between sends when that is under
# KP_TURN_GRACE_MAX_US (kp_turn_grace_us), and ends it at once when that thread is asleep in
# a system call (it holds no GIL then).
APP_GRACE_MS = 1
# After a step that raised: the next one waits this long (the I/O thread must not spin).
_AFTER_ERROR_US = 10_000


class StepTurn:
    """The step lock and the thread that runs the next step; see the module docstring.

    ``watcher``: the C watcher (:class:`~kproducer._core.SenderTurn`) of the
    selector's descriptor ``selector_fd``. ``lock`` is held by the thread running a step
    (``owner``); the I/O thread only ever *tries* it: a thread that held it while waiting
    for the GIL would keep every other thread from stepping for a switch interval."""

    def __init__(self, selector_fd: int):
        self.watcher = SenderTurn(selector_fd)
        self.lock = threading.Lock()
        self.owner = None               # the thread id running a step, None between steps
        self._log = log                 # bind() gives the producer's
        # The running step asked for the next at once (set by next_at_once, cleared as each
        # step begins): a thread in run_steps_until runs it without waiting for the watcher.
        self.again = False
        # Threads in run_steps_until: a step that wants the next at once tells the watcher
        # that they look again (next_at_once).
        self._waiting_threads: set = set()
        # kproducer.aio: called on the I/O thread before it runs a step that an attached
        # event loop left past its grace, so that a loop that stopped can be let go.
        self.before_io_step = None
        self._sender = None             # whose steps these are (bind)
        self._stats = None              # its counters

    def bind(self, sender) -> None:
        """The Sender whose steps this turn runs: its ``run_once()`` does one step's work
        and returns ``(due_us, at_once)``, when the next step is due (``SenderTurn.now_us()``'s
        clock) and whether it is wanted at once; its ``running`` goes False as it closes; its
        ``stats`` take the counters ``steps_by_application``, ``steps_by_io_thread``,
        ``step_wait_us_total`` and ``step_wait_us_max``; its ``log`` (the producer's logger,
        if it has one) is where an error of a step is logged."""
        self._sender = sender
        self._stats = sender.stats
        self._log = getattr(sender, "log", log)

    def close(self) -> None:
        """Stops the watcher (before the selector's descriptor closes)."""
        self.watcher.close()

    # -- one step ----------------------------------------------------------------------

    def step(self) -> None:
        """One step on this thread, which holds ``lock`` (or drives the Sender in a test):
        the watcher learns it began (it sees the deadlines named so far) and when the next
        is due."""
        watcher = self.watcher
        watcher.begin()
        self.again = False
        due_us, at_once = self._sender.run_once()
        if at_once:
            self.next_at_once()
        watcher.done(due_us)

    def step_safely(self) -> None:
        """:meth:`step`, counting how long the wanted step waited for a thread with the GIL
        (metrics(): what the GIL costs this application's acknowledgements); an error is
        logged, never raised: the I/O thread must not die."""
        watcher = self.watcher
        raised = watcher.raised_at_us
        if raised and watcher.pending:
            waited = SenderTurn.now_us() - raised
            stats = self._stats
            stats["step_wait_us_total"] += waited
            if waited > stats["step_wait_us_max"]:
                stats["step_wait_us_max"] = waited
        try:
            self.step()
        except Exception:
            self._log.exception("unexpected error in the kproducer network thread")
            watcher.done(SenderTurn.now_us() + _AFTER_ERROR_US)

    def next_at_once(self) -> None:
        """The running step asks for the next at once. A thread in run_steps_until runs it
        itself; the watcher is told so before the step ends, as send() tells it before it
        looks at ``pending``: otherwise the watcher, which raises that step as this one ends,
        sees no look since its last and hands the step to the I/O thread, which takes it (the
        response, its callbacks) from the thread waiting for it."""
        self.again = True
        if self.owner in self._waiting_threads:
            self.watcher.sent()

    @contextlib.contextmanager
    def held(self):
        """The step lock, held by this thread (it waits for a running step to end)."""
        with self.lock:
            self.owner = threading.get_ident()
            try:
                yield
            finally:
                self.owner = None

    def in_step(self) -> bool:
        """True on the thread running a step (e.g. in a delivery callback)."""
        return self.owner == threading.get_ident()

    # -- whose turn --------------------------------------------------------------------

    def io_turn(self) -> None:
        """One turn of the I/O thread: wait, without the GIL, until the watcher hands it a
        wanted step (a socket is ready, the selector was woken, a deadline passed) that no
        sending application thread ran within its grace (APP_GRACE_MS), then run it.
        Queueing for the GIL while the application runs Python would cost that thread a
        switch interval each time it releases the GIL (an event loop's every select())."""
        self.watcher.wait_io(APP_GRACE_MS)
        lock = self.lock
        if not lock.acquire(False):
            self.watcher.wait_clear(10)   # an application thread is stepping
            return
        try:
            if self.watcher.pending:
                self.owner = threading.get_ident()
                self._stats["steps_by_io_thread"] += 1
                hook = self.before_io_step
                if hook is not None:
                    hook()
                self.step_safely()
        finally:
            self.owner = None
            lock.release()

    def step_from_app(self) -> bool:
        """Runs the step the watcher asked for, from a thread that holds the GIL already
        (``send()``), instead of leaving it to the I/O thread, which would wait up to a
        switch interval for the GIL; does nothing (False) when another thread is stepping,
        or (True) when this one is (a delivery callback that sends).
        Callbacks of the batches it completes run on this thread."""
        lock = self.lock
        if not lock.acquire(False):
            return self.owner == threading.get_ident()
        try:
            self.owner = threading.get_ident()
            self._stats["steps_by_application"] += 1
            self.step_safely()
        finally:
            self.owner = None
            lock.release()
        return True

    def run_steps_until(self, done, deadline: float | None, step_first: bool = False) -> bool:
        """Runs the wanted steps on this thread, which holds the GIL and waits for what they
        settle (flush(), a transaction's commit, poll() with a timeout, memory), until
        ``done()`` or ``deadline`` (time.monotonic(); None: none); returns ``done()``.
        Waiting without the GIL instead, this thread would leave each step to the watcher's
        grace for a thread that had just sent (it waits in a futex, as one queued for the
        GIL does) and then to the I/O thread. Returns at once when the Sender is closing
        (``running`` is False: its own thread steps then; the caller waits as it would
        otherwise), or from a delivery callback (the step it runs in is this thread's: a
        send there that waits for memory can only wait). ``step_first``: the caller made
        batches sendable (flush()): the first step runs at once, without waiting to be
        wanted."""
        if self.in_step():
            return done()
        watcher = self.watcher
        me = threading.get_ident()
        # Not nested on one thread: a delivery callback (the only code run inside the loop's
        # steps) returned above.
        self._waiting_threads.add(me)
        sender = self._sender
        try:
            while sender.running:
                watcher.sent()          # this thread looks again: the watcher leaves it the steps
                elsewhere = (step_first or watcher.pending or self.again) and not self.step_from_app()
                step_first = False
                # Read before done(): a step another thread ends after this wakes the wait below.
                seen = watcher.steps_ended
                if done():
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                if elsewhere:
                    # Another thread is mid-step, and needs the GIL back to finish it: wait
                    # without it until that step is done, never spin.
                    watcher.wait_clear(1)
                else:
                    watcher.wait_step(seen, 100 if left is None else max(1, min(100, int(left * 1000))))
            return done()
        finally:
            self._waiting_threads.discard(me)
