"""Shared fixtures.

``broker``: a fresh Tansu broker per test (it starts in milliseconds and
memory storage makes state leak between tests otherwise). After the test the
broker is stopped and its stderr checked: a CRC error or a panic logged by the
broker fails the test even if the client side looked fine.
"""

from __future__ import annotations

import pytest

from kproducer.testing import FaultProxy, TansuBroker
from kproducer.testing.broker import free_port


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


@pytest.fixture
def proxied_broker(tmp_path):
    """``(broker, proxy)``: a broker behind a FaultProxy. The broker advertises the proxy's
    port, so clients bootstrapped at ``proxy.bootstrap`` reach it only through the proxy."""
    port = free_port()
    proxy = FaultProxy("127.0.0.1", port).start()
    broker = TansuBroker(port=port, advertised_port=proxy.port, log_dir=tmp_path).start()
    try:
        yield broker, proxy
    finally:
        proxy.stop()
        broker.stop()
    broker.check_log()
