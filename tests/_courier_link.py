"""The courier tests' link: a selector connection to a plain socket that the test reads
Produce requests from (tests/unit/test_courier.py, tests/broker/test_pacing.py)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from kproducer._net import Selector


@pytest.fixture
def link():
    """(selector, server side socket): connection 0 of the selector, connected."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    sel = Selector(max_connections=4)
    sel.connect(0, "127.0.0.1", srv.getsockname()[1])
    deadline = time.monotonic() + 10
    while not sel.is_connected(0):
        assert time.monotonic() < deadline, "the selector did not connect"
        sel.poll(50)
    conn, _ = srv.accept()
    conn.settimeout(10)
    yield sel, conn
    conn.close()
    sel.close_all()
    srv.close()


def recv_frame(conn) -> bytes:
    """One size-prefixed frame read whole from ``conn``."""
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            assert chunk, "the peer closed"
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", exact(4))
    return exact(size)
