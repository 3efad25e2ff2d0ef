"""An application that keeps the GIL: what the courier (csrc/kp_courier.h) is for.

    with gil_held():                    # no other Python thread runs meanwhile
        wait_courier_armed(producer)
        producer.send(...)
        assert compute_until(lambda: producer._acc.courier_sent > sent, timeout=2.0)
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["gil_held", "compute_until", "wait_courier_armed"]


@contextlib.contextmanager
def gil_held(switch_interval: float = 5.0):
    """A long switch interval: while this thread computes, no other Python thread runs (the
    producer's I/O thread included) until it sleeps or waits."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def compute_until(cond, timeout: float) -> bool:
    """Pure Python work (the GIL stays with this thread) until cond() or the deadline:
    whether cond() came true."""
    deadline = time.monotonic() + timeout
    x = 0
    while not cond():
        for k in range(100):
            x += k * k
        if time.monotonic() > deadline:
            return False
    return True


def wait_courier_armed(producer, timeout: float = 10.0) -> None:
    """Until no step runs and the producer's courier is armed, sleeping meanwhile (the GIL is
    free). A step that the I/O thread began and the application interrupted (it took the GIL
    back while the step polled) would keep the courier disarmed until the I/O thread gets the
    GIL again: a switch interval, which gil_held() makes long."""
    deadline = time.monotonic() + timeout
    while not (producer._acc.courier_armed and producer._turn.owner is None):
        if time.monotonic() > deadline:
            raise AssertionError("the courier was not armed")
        time.sleep(0.001)
