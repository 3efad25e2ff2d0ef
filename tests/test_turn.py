"""The Sender's turn (csrc/kp_turn.c through kproducer._accumulator.SenderTurn): a C watcher
thread raises ``pending`` when the watched descriptor is readable or a deadline passes, and
watches again only after a step says it is done."""

import gc
import os
import threading
import time

import pytest

from kproducer._accumulator import SenderTurn

now_ms = SenderTurn.now_ms


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_now_ms_is_time_monotonic():
    a = int(time.monotonic() * 1000)
    b = now_ms()
    c = int(time.monotonic() * 1000)
    assert a <= b <= c + 1


def test_a_readable_descriptor_raises_pending_until_a_step_is_done(pipe):
    r, w = pipe
    t = SenderTurn(r)
    try:
        assert not t.pending and t.raised == 0
        assert not t.wait(30)            # nothing readable, no deadline
        os.write(w, b"x")
        assert t.wait(5000) and t.pending
        assert t.raised == 1
        # A step that did not consume the readiness: the watcher raises again at once.
        t.done(-1)
        assert t.wait(5000) and t.raised == 2
        os.read(r, 1)                     # the step's poll consumes it
        t.done(-1)
        assert not t.wait(50) and not t.pending and t.raised == 2
    finally:
        t.close()


def test_the_deadline_of_a_step_raises_pending_when_it_passes(pipe):
    t = SenderTurn(pipe[0])
    try:
        due = now_ms() + 40
        t.done(due)
        assert t.wait(5000)
        assert now_ms() >= due
    finally:
        t.close()


def test_an_earlier_deadline_between_steps_rearms_a_sleeping_watcher(pipe):
    t = SenderTurn(pipe[0])
    try:
        t.done(now_ms() + 60_000)
        assert not t.wait(20)             # the watcher sleeps towards the 60 s deadline
        due = now_ms() + 30
        t.due_by(due)                     # a batch sendable in 30 ms
        assert t.wait(5000)
        assert due <= now_ms() < due + 30_000
        # A step (which sees that batch), then a later deadline than its own: nothing.
        t.begin()
        t.done(now_ms() + 60_000)
        t.due_by(now_ms() + 120_000)
        assert not t.wait(50)
    finally:
        t.close()


def test_a_step_that_begins_sees_the_deadlines_named_before_it(pipe):
    t = SenderTurn(pipe[0])
    try:
        t.due_by(now_ms() + 30)
        t.begin()                         # the step sees that batch: its own deadline counts
        t.done(now_ms() + 60_000)
        assert not t.wait(200)
        t.begin()
        t.due_by(now_ms() + 30)           # named during the step: survives its done()
        t.done(now_ms() + 60_000)
        assert t.wait(5000)
    finally:
        t.close()


def test_wait_clear_returns_when_another_thread_finishes_the_step(pipe):
    t = SenderTurn(pipe[0])
    try:
        t.wake()
        assert t.pending and t.raised == 1
        assert not t.wait_clear(20)
        threading.Timer(0.02, t.done, args=(-1,)).start()
        assert t.wait_clear(5000) and not t.pending
    finally:
        t.close()


def test_close_stops_the_watcher_and_leaves_a_harmless_object(pipe):
    before = threading.active_count()
    turns = [SenderTurn(pipe[0]) for _ in range(20)]
    for t in turns:
        t.close()
        t.close()                         # twice is fine
        assert not t.pending and not t.wait(0) and t.wait_clear(0)
        t.done(-1)
        t.due_by(0)
        t.wake()
    del turns
    gc.collect()
    assert threading.active_count() == before   # the watchers are C threads: none left over


def test_a_forked_child_drops_its_copy_without_touching_the_parents_watcher(pipe):
    r, w = pipe
    t = SenderTurn(r)
    pid = os.fork()
    if pid == 0:                          # the child: no watcher thread exists here
        try:
            t.close()                     # must not join a thread that is not there
            os._exit(0)
        except BaseException:
            os._exit(1)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        assert time.monotonic() < deadline, "the child hung closing its copy of the turn"
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    os.write(w, b"x")                     # the parent's watcher still works
    assert t.wait(5000)
    t.close()
