"""TLS in the C selector (csrc/kp_tls.c, csrc/kp_selector.c): the handshake inside poll,
large frames both ways, certificate and host name failures as disconnect reasons, and
TlsContext's errors. The servers are Python ``ssl`` servers in threads on loopback, with
certificates made by ``openssl`` (kproducer.testing.tls.TestPki); the TLS terminator + broker
tests are in test_tls.py. No broker or terminator here, so this file also runs under
ASan/UBSan (test_build.py).
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import struct
import threading
import time

import pytest
from test_selector import DEADLINE, poll_until

from kproducer import _net
from kproducer._disconnect import DisconnectKind as K
from kproducer.errors import ConfigError, NetworkError, TlsConfigError
from kproducer.testing.tls import TestPki

Selector = _net.Selector
TlsContext = _net.TlsContext


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return TestPki(tmp_path_factory.mktemp("pki"))


def _recv_exact(conn, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _recv_frame(conn) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(conn, 4))
    return _recv_exact(conn, size)


class TlsServer:
    """A one-connection TLS server on 127.0.0.1; ``handler(tls_conn)`` runs in a thread
    after the handshake. Handshake failures on the server side are kept in
    ``handshake_error`` (expected in failure tests); handler exceptions are re-raised by
    :meth:`close`."""

    def __init__(self, pki: TestPki, handler, *, cert=None, key=None, require_client_cert=False):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert or pki.server_cert, key or pki.server_key)
        if require_client_cert:
            self.ctx.verify_mode = ssl.CERT_REQUIRED
            self.ctx.load_verify_locations(pki.ca_file)
        self.handler = handler
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.sock.settimeout(DEADLINE)
        self.port = self.sock.getsockname()[1]
        self.errors: list[BaseException] = []
        self.handshake_error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            raw, _ = self.sock.accept()
            raw.settimeout(DEADLINE)
            try:
                conn = self.ctx.wrap_socket(raw, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                self.handshake_error = exc
                raw.close()
                return
            with conn:
                self.handler(conn)
        except BaseException as exc:  # noqa: BLE001 - re-raised in close()
            self.errors.append(exc)

    def close(self):
        self.sock.close()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "TLS server thread did not finish"
        if self.errors:
            raise self.errors[0]


def test_handshake_then_large_frames_both_ways(pki):
    """A 4 MiB + 1 frame goes out through SSL_write across polls and an answer of 5 MiB
    comes back through SSL_read (many 16 KiB records, several read budgets); both arrive
    intact. "connected" is reported only once the handshake is done."""
    big = os.urandom(4 * 1024 * 1024 + 1)
    reply = os.urandom(5 * 1024 * 1024)

    def handler(conn):
        body = _recv_frame(conn)
        digest = hashlib.sha256(body).digest()
        conn.sendall(struct.pack(">i", 32 + len(reply)) + digest + reply)
        _recv_frame(conn)  # wait for the client's goodbye before closing

    server = TlsServer(pki, handler)
    sel = Selector()
    try:
        sel.connect(3, "127.0.0.1", server.port, tls=TlsContext(pki.ca_file), server_hostname="localhost")
        assert sel.state(3) == "connecting"
        # Staged before the handshake ends: written once it is done.
        sel.send_frame(3, big)
        seen = poll_until(sel, lambda s: s.connected or s.disconnected)
        assert seen.connected == [3] and not seen.disconnected, seen
        seen = poll_until(sel, lambda s: s.received or s.disconnected, seen, timeout=60)
        assert not seen.disconnected, seen
        assert seen.sent == [3]
        assert seen.polls > 3  # the frame and the reply took several polls (budgets)
        (cid, body), = seen.received
        assert cid == 3 and body[:32] == hashlib.sha256(big).digest() and body[32:] == reply
        stats = sel.stats(3)
        assert stats.bytes_sent == len(big) + 4
        assert stats.bytes_received == len(reply) + 32 + 4
        sel.send_frame(3, b"bye")
        poll_until(sel, lambda s: 3 in s.sent and s.sent.count(3) == 2, seen)
    finally:
        sel.close_all()
        server.close()


def test_server_closing_mid_frame_is_a_disconnect_with_the_partial_count(pki):
    def handler(conn):
        _recv_frame(conn)
        conn.sendall(struct.pack(">i", 100) + b"x" * 40)
        try:
            conn.unwrap()  # close_notify; the client answers by closing without its own
        except (ssl.SSLError, OSError):
            pass

    server = TlsServer(pki, handler)
    sel = Selector()
    try:
        sel.connect(0, "127.0.0.1", server.port, tls=TlsContext(pki.ca_file))
        sel.send_frame(0, b"hello")
        seen = poll_until(sel, lambda s: s.disconnected)
        assert seen.disconnected == [(0, K.PEER_CLOSED_MID_FRAME,
                                      "connection closed by peer mid-frame (44 bytes of an incomplete frame received)")]
        assert not seen.disconnected[0].kind.is_tls
    finally:
        sel.close_all()
        server.close()


@pytest.mark.parametrize("case", ["dns-name", "ip-address", "unknown-ca"])
def test_certificate_failures_are_tls_disconnects_with_the_reason(pki, case):
    server = TlsServer(pki, lambda conn: None)
    ca = pki.other_ca().ca_file if case == "unknown-ca" else pki.ca_file
    name = {"dns-name": "wrong.example", "ip-address": "127.0.0.2", "unknown-ca": "localhost"}[case]
    sel = Selector()
    try:
        sel.connect(1, "127.0.0.1", server.port, tls=TlsContext(ca), server_hostname=name)
        seen = poll_until(sel, lambda s: s.disconnected or s.connected)
        assert not seen.connected
        ((cid, kind, reason),) = seen.disconnected
        assert cid == 1 and kind == K.TLS_HANDSHAKE
        assert reason.startswith("TLS handshake failed: certificate verify failed: ")
        if case == "dns-name":
            assert "hostname mismatch (the server's certificate does not name wrong.example)" in reason
        elif case == "ip-address":
            assert "IP address mismatch (the server's certificate does not name 127.0.0.2)" in reason
        else:
            assert "unable to get local issuer certificate" in reason
        assert sel.state(1) == "disconnected"
    finally:
        sel.close_all()
        server.close()
    assert server.handshake_error is not None  # the server saw the client's alert


def test_the_kind_tells_tls_failures_from_network_ones(pki):
    server = TlsServer(pki, lambda conn: None)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    ctx = TlsContext(pki.ca_file)
    sel = Selector()
    try:
        sel.connect(0, "127.0.0.1", server.port, tls=ctx, server_hostname="nope.example")
        sel.connect(1, "127.0.0.1", dead_port, tls=ctx)
        reasons, kinds = {}, {}
        deadline = time.monotonic() + DEADLINE
        while len(reasons) < 2:
            assert time.monotonic() < deadline, reasons
            r = sel.poll(100)
            for cid, kind, detail in r.disconnected:
                reasons[cid], kinds[cid] = detail, kind
    finally:
        sel.close_all()
        server.close()
    assert kinds == {0: K.TLS_HANDSHAKE, 1: K.CONNECT_FAILED}
    assert [cid for cid, kind in kinds.items() if kind.is_tls] == [0]
    assert reasons[0].startswith("TLS handshake failed: certificate verify failed: hostname mismatch")
    assert reasons[1] == "connect failed: Connection refused (ECONNREFUSED)"


def test_verify_off_and_hostname_check_off(pki):
    """check_hostname=False accepts a certificate for another name, verify=False one from an
    unknown CA; each then carries frames."""
    for ctx, name in ((TlsContext(pki.ca_file, check_hostname=False), "wrong.example"),
                      (TlsContext(pki.other_ca().ca_file, verify=False), "localhost")):
        server = TlsServer(pki, lambda conn: conn.sendall(struct.pack(">i", 2) + _recv_frame(conn)[:2]))
        sel = Selector()
        try:
            sel.connect(0, "127.0.0.1", server.port, tls=ctx, server_hostname=name)
            sel.send_frame(0, b"ok!")
            seen = poll_until(sel, lambda s: s.received or s.disconnected)
            assert seen.received == [(0, b"ok")], seen
        finally:
            sel.close_all()
            server.close()


def test_mutual_tls_client_certificate(pki, tmp_path):
    """With a client certificate (and an encrypted key) the server's CERT_REQUIRED check
    passes; without one the server's alert ends the connection with its reason."""
    enc_key = pki.encrypted_key(pki.client_key, "s3cret-pass")

    def echo(conn):
        conn.sendall(struct.pack(">i", 4) + conn.getpeercert()["subject"][0][0][1][:4].encode())

    server = TlsServer(pki, echo, require_client_cert=True)
    sel = Selector()
    try:
        sel.connect(0, "127.0.0.1", server.port,
                    tls=TlsContext(pki.ca_file, pki.client_cert, enc_key, "s3cret-pass"))
        seen = poll_until(sel, lambda s: s.received or s.disconnected)
        assert seen.received == [(0, b"kpro")], seen  # CN=kproducer-client
    finally:
        sel.close_all()
        server.close()

    server = TlsServer(pki, lambda conn: conn.recv(1), require_client_cert=True)
    sel = Selector()
    try:
        # Nothing is sent: unread client bytes at the server's close would turn its FIN
        # into a reset that can overtake the alert (seen under the sanitizer build).
        sel.connect(0, "127.0.0.1", server.port, tls=TlsContext(pki.ca_file))
        seen = poll_until(sel, lambda s: s.disconnected)
        _, kind, reason = seen.disconnected[0]
        # TLS 1.3: the client finishes its side first, so the server's alert arrives after.
        assert kind.is_tls and reason.startswith("TLS ") and "certificate required" in reason, reason
    finally:
        sel.close_all()
        server.close()


def test_close_during_handshake_reports_nothing(pki):
    gate = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    sel = Selector()
    try:
        sel.connect(0, "127.0.0.1", server.getsockname()[1], tls=TlsContext(pki.ca_file))
        conn, _ = server.accept()
        with conn:
            # The TCP connect completes; the ClientHello is never answered.
            r = sel.poll(200)
            assert not r.connected and not r.disconnected
            assert sel.state(0) == "connecting"
            assert sel.close(0) is True
            r = sel.poll(50)
            assert not r.connected and not r.disconnected
            assert conn.recv(1 << 16)[:1] == b"\x16"  # a TLS handshake record arrived
    finally:
        gate.set()
        server.close()
        sel.close_all()


def test_tls_context_errors_name_the_input(pki, tmp_path):
    with pytest.raises(TlsConfigError) as exc:
        TlsContext(str(tmp_path / "missing.pem"))
    assert isinstance(exc.value, ConfigError)
    assert exc.value.tls_input == "cafile" and "cannot load the CA file" in str(exc.value)
    assert "No such file or directory" in str(exc.value)

    notpem = tmp_path / "not.pem"
    notpem.write_text("hello\n")
    with pytest.raises(ConfigError) as exc:
        TlsContext(pki.ca_file, str(notpem))
    assert exc.value.tls_input == "certfile"

    with pytest.raises(ConfigError) as exc:
        TlsContext(pki.ca_file, pki.client_cert, pki.server_key)  # someone else's key
    assert exc.value.tls_input == "keyfile" and "key values mismatch" in str(exc.value)
    assert not exc.value.key_password_failed

    enc = pki.encrypted_key(pki.client_key, "right-password")
    for password in (None, "wrong-password"):
        with pytest.raises(ConfigError) as exc:
            TlsContext(pki.ca_file, pki.client_cert, enc, password)
        assert exc.value.tls_input == "keyfile" and exc.value.key_password_failed
        assert "wrong-password" not in str(exc.value) and "right-password" not in str(exc.value)
    ctx = TlsContext(pki.ca_file, pki.client_cert, enc, "right-password")
    assert "right-password" not in repr(ctx)

    with pytest.raises(ValueError):
        TlsContext(pki.ca_file, None, pki.client_key)  # a key without its certificate


def test_the_tls_error_takes_its_fields_in_its_constructor():
    exc = TlsConfigError("TLS: bad", key="ssl.key.location", tls_input="keyfile",
                         key_password_failed=True)
    assert (str(exc), exc.key, exc.tls_input, exc.key_password_failed) == \
        ("TLS: bad", "ssl.key.location", "keyfile", True)
    plain = TlsConfigError("TLS: bad")
    assert (plain.key, plain.tls_input, plain.key_password_failed) == (None, None, False)


def test_connect_tls_argument_errors(pki):
    sel = Selector(max_connections=2)
    ctx = TlsContext(pki.ca_file)
    with pytest.raises(ValueError, match="numeric"):
        sel.connect(0, "localhost", 9092, tls=ctx)
    with pytest.raises(ValueError, match="server_hostname"):
        sel.connect(0, "127.0.0.1", 9092, tls=ctx, server_hostname="")
    with pytest.raises(TypeError):
        sel.connect(0, "127.0.0.1", 9092, tls="not a context")
    sel.connect(0, "127.0.0.1", 9, tls=ctx)
    with pytest.raises(NetworkError, match="already has a connection"):
        sel.connect(0, "127.0.0.1", 9, tls=ctx)
    sel.close_all()
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(ctx)
