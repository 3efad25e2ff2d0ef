"""The Sender's turn outside one process's unit tests (those are tests/unit/test_turn.py):
a forked child drops its copy of the watcher without touching the parent's, and a Producer
against the broker whose busy application thread runs the wanted steps (and so the delivery
callbacks) itself while an idle one leaves them to the I/O thread."""

import os
import threading
import time

import pytest

from kproducer._core import SenderTurn


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


@pytest.mark.timeout(120)
def test_a_sending_application_runs_steps_and_callbacks_itself_an_idle_one_leaves_them(broker):
    """The producer's side of the turn: a thread busy sending runs the wanted steps (and so
    the delivery callbacks) itself; one that waits leaves them to the I/O thread. metrics()
    counts both, and how long a wanted step waited for a thread with the GIL."""
    from kproducer import Producer

    broker.create_topic("turn-app", 4)
    main = threading.get_ident()
    on_main = [0, 0]

    def cb(err, meta):
        assert err is None
        on_main[threading.get_ident() == main] += 1

    n = 200_000
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(n):
            p.send("turn-app", b"v", key=b"%d" % (i % 100), on_delivery=cb)
        p.flush()
        m = p.metrics()
    assert m["records_acked"] == n and sum(on_main) == n
    assert m["steps_by_application"] > 0 and on_main[True] > 0, (m, on_main)
    assert 0 <= m["step_wait_us_max"] <= m["step_wait_us_total"]

    with Producer(bootstrap_servers=broker.bootstrap) as p:
        p.send("turn-app", b"x").result(30)
        m = p.metrics()
    assert m["steps_by_io_thread"] > 0 and m["records_acked"] == 1, m
