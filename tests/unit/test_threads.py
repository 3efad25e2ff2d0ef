"""The C core's own threads (csrc/kp_thread.h): the turn's watcher asks the scheduler for a
100 us slice, so that as it wakes (a response arrived, a deadline passed) it may preempt an
application thread that keeps the CPU busy in Python, rather than wait out that thread's
slice. The courier keeps the default (preempting a sending application at each write cost it
throughput), and so do the threads that start them."""

import os
import re
import threading
import time

import pytest

from kproducer._core import RecordAccumulator, SenderTurn

SLICE_NS = 100_000


def _slice_ns(tid) -> int | None:
    """The thread's scheduler slice as /proc/<tid>/sched reports it (None: not reported)."""
    with open(f"/proc/self/task/{tid}/sched") as f:
        for line in f:
            if line.startswith("se.slice"):
                return int(line.split(":")[1])
    return None


def _timer_slack(tid) -> str:
    """The thread's timer slack in ns ("1" once the C thread has set it up; root can read
    another thread's, else "1" is assumed)."""
    try:
        with open(f"/proc/{tid}/timerslack_ns") as f:
            return f.read().strip()
    except PermissionError:
        return "1"


def _kernel_takes_a_slice() -> bool:
    """Linux 6.12 and later take sched_runtime as a SCHED_OTHER thread's slice."""
    major, minor = re.match(r"(\d+)\.(\d+)", os.uname().release).groups()   # "7.0-rc1" too
    return (int(major), int(minor)) >= (6, 12)


def _new_threads(before: set) -> set:
    """The threads started since ``before`` (waiting up to 10 s for one)."""
    deadline = time.monotonic() + 10
    while True:
        new = set(os.listdir("/proc/self/task")) - before
        if new or time.monotonic() > deadline:
            return new
        time.sleep(0.001)


@pytest.mark.parametrize("which", ["turn watcher", "courier"])
def test_the_watcher_alone_asks_for_a_short_slice(pipe, which):
    me = threading.get_native_id()
    own = _slice_ns(me)
    before = set(os.listdir("/proc/self/task"))
    obj = SenderTurn(pipe[0]) if which == "turn watcher" else RecordAccumulator()
    try:
        new = _new_threads(before)
        assert len(new) == 1, new
        (tid,) = new
        want = SLICE_NS if which == "turn watcher" and _kernel_takes_a_slice() else own
        # The thread sets itself up as it starts: wait for its timer slack and slice, with a
        # deadline (before 6.12 the kernel keeps its own slice for every thread).
        deadline = time.monotonic() + 10
        while (_slice_ns(tid) != want or _timer_slack(tid) != "1") and time.monotonic() < deadline:
            time.sleep(0.001)
        got = _slice_ns(tid)
        if own is None:         # a kernel without EEVDF reports no slice
            assert got is None
        else:
            assert got == want, f"{which} thread {tid}: {got} ns"
        assert _slice_ns(me) == own
    finally:
        if isinstance(obj, SenderTurn):
            obj.close()
