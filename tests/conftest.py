"""Shared fixtures.

``broker``: a fresh Tansu broker per test (it starts in milliseconds and
memory storage makes state leak between tests otherwise). After the test the
broker is stopped and its stderr checked: a CRC error or a panic logged by the
broker fails the test even if the client side looked fine.
"""

from __future__ import annotations

import pytest

from kproducer.testing import TansuBroker


@pytest.fixture
def broker():
    b = TansuBroker()
    b.start()
    try:
        yield b
    finally:
        b.stop()
    b.check_log()
    b.cleanup()
