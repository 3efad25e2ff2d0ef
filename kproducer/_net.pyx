# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled network selector: a thin binding over csrc/kp_selector.{h,c}.

:class:`Selector` is Java's ``org.apache.kafka.common.network.Selector`` over
epoll: connections named by small integer ids, one staged send per
connection, and :meth:`Selector.poll` doing all socket I/O with the GIL
released. It resolves no names (give it numeric addresses from
``socket.getaddrinfo``) and knows nothing about requests: the network client
above it matches responses to requests.

Status codes from the C selector become exceptions in kproducer._codec's
``raise_kp_error`` (the one mapping of every C status), with the connection id
and the errno text in the message; a lost connection is reported as a
:class:`~kproducer._disconnect.Disconnect` whose kind ``disconnect_info``
(beside it) derives from the status, so callers never parse its text.

TLS: a :class:`TlsContext` (OpenSSL, csrc/kp_tls.c) passed to
:meth:`Selector.connect` makes that connection run the TLS handshake inside
:meth:`Selector.poll`; it is reported connected once the handshake is done.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int32_t, uint8_t, uint64_t, INT32_MAX
from libc.limits cimport INT_MAX

from kproducer._cdefs.common cimport *
from kproducer._cdefs.selector cimport *
from kproducer._cdefs.tls cimport *
from kproducer._cdefs.frame cimport KP_FRAME_DEFAULT_MAX_SIZE
from kproducer._codec cimport disconnect_info, kp_exception, raise_kp_error

import math as _math
import os as _os
from collections import namedtuple

from kproducer._disconnect import Disconnect, DisconnectKind
from kproducer.errors import ConfigError, NetworkError, TlsConfigError

# Largest frame a Selector accepts by default (Kafka's socket.request.max.bytes).
DEFAULT_MAX_FRAME_SIZE = KP_FRAME_DEFAULT_MAX_SIZE
# Bytes read from one connection per poll at most, and per recv(2) call.
READ_BUDGET = KP_SEL_READ_BUDGET
READ_CHUNK = KP_SEL_READ_CHUNK
MAX_CONNECTIONS = KP_SEL_MAX_CONNECTIONS
# Plaintext bytes written to one TLS connection per poll at most.
TLS_WRITE_BUDGET = KP_SEL_TLS_WRITE_BUDGET

# Sends up to this size are copied with the GIL held (cheaper than releasing it).
cdef size_t _NOGIL_COPY_MIN = 64 * 1024

PollResult = namedtuple("PollResult",
                        "connected disconnected sent received woken received_us sent_us")
PollResult.__doc__ = """What one :meth:`Selector.poll` observed.

``connected``: ids whose connect (and TLS handshake) completed.
``disconnected``: :class:`~kproducer._disconnect.Disconnect` ``(id, kind,
detail)`` triples (the id is free again): ``kind`` a
:class:`~kproducer._disconnect.DisconnectKind` (CONNECT_FAILED, IO_ERROR,
PEER_CLOSED, TLS_HANDSHAKE...) for code to decide on, ``detail`` the
human-readable reason such as ``"connect failed: Connection refused
(ECONNREFUSED)"`` or ``"TLS handshake failed: certificate verify failed:
hostname mismatch (...)"``. ``sent``: ids whose staged send was fully
written. ``received``: ``(id, frame_body)`` pairs in arrival order (size
prefix stripped). ``received_us``: for each of them, the ``time.monotonic``
instant in microseconds at which its last byte was read (a frame read earlier
by the courier keeps its instant). ``sent_us``: for each of ``sent``, the
instant its last byte was written.
``woken``: :meth:`Selector.wakeup` was called. Each id
appears at most once in ``connected``, ``sent`` and ``disconnected``; frames
received before a disconnect in the same poll are complete and are listed in
``received``.
"""

ConnectionStats = namedtuple("ConnectionStats", "bytes_sent bytes_received send_remaining send_total")
ConnectionStats.__doc__ = """Counters of one connection (bytes over its life; the staged send's
remaining and total bytes, 0 when none is staged)."""

_STATE_NAMES = {KP_SEL_FREE: "disconnected", KP_SEL_CONNECTING: "connecting",
                KP_SEL_CONNECTED: "connected"}


_TLS_INPUTS = {KP_TLS_INPUT_CA: "cafile", KP_TLS_INPUT_CERT: "certfile", KP_TLS_INPUT_KEY: "keyfile",
               KP_TLS_INPUT_KEY_PASSWORD: "keyfile"}


cdef bytes _path_arg(object path, str name):
    if path is None:
        return None
    p = _os.fsencode(path)
    if not p or b"\0" in p:
        raise ValueError(f"TlsContext: {name} must be a non-empty path without NUL bytes")
    return p


cdef class TlsContext:
    """Client-side TLS settings (an OpenSSL ``SSL_CTX``) for :meth:`Selector.connect`.

    ``TlsContext(cafile=None, certfile=None, keyfile=None, password=None, *,
    verify=True, check_hostname=True)``: ``cafile`` is a PEM bundle of the CA
    certificates that may sign brokers (None: the system's store);
    ``certfile`` a PEM client certificate chain for mutual TLS, with its
    private key in ``keyfile`` or, when that is None, in ``certfile`` too;
    ``password`` decrypts an encrypted key and is not kept. ``verify=False``
    accepts any server certificate (tests only). ``check_hostname`` checks
    the server's certificate against the name given to
    :meth:`Selector.connect` (DNS or IP subjectAltName). TLS 1.2 or later.

    Unusable files raise :class:`~kproducer.errors.TlsConfigError` (a
    ConfigError) with OpenSSL's reason; its ``tls_input`` says which argument was
    at fault (``"cafile"``, ``"certfile"``, ``"keyfile"`` or None), and
    ``key_password_failed`` is True when the key is encrypted and could not be
    decrypted (no ``password``, or a wrong one). A context can be
    shared by any number of connections and selectors; connections keep
    working after it is garbage collected.
    """
    cdef kp_tls_ctx *ctx
    cdef readonly object cafile
    cdef readonly object certfile
    cdef readonly object keyfile
    cdef readonly bint verify
    cdef readonly bint check_hostname

    def __cinit__(self, cafile=None, certfile=None, keyfile=None, password=None, *,
                  bint verify=True, bint check_hostname=True):
        cdef kp_tls_config cfg
        cdef kp_tls_input what = KP_TLS_INPUT_NONE
        cdef char err[KP_TLS_ERROR_MAX]
        cdef kp_status st
        cdef bytes ca = _path_arg(cafile, "cafile")
        cdef bytes cert = _path_arg(certfile, "certfile")
        cdef bytes key = _path_arg(keyfile, "keyfile")
        cdef bytes pw = None
        if password is not None:
            pw = password.encode("utf-8") if isinstance(password, str) else bytes(password)
            if b"\0" in pw:
                raise ValueError("TlsContext: the key password must not contain NUL bytes")
        if key is not None and cert is None:
            raise ValueError("TlsContext: keyfile needs certfile (the client certificate)")
        cfg.ca_file = <const char *>ca if ca is not None else NULL
        cfg.cert_file = <const char *>cert if cert is not None else NULL
        cfg.key_file = <const char *>key if key is not None else NULL
        cfg.key_password = <const char *>pw if pw is not None else NULL
        cfg.verify_peer = verify
        cfg.verify_hostname = check_hostname
        err[0] = 0
        # No nogil: loading files is quick, and the GIL guards nothing OpenSSL touches here.
        st = kp_tls_ctx_new(&self.ctx, &cfg, &what, err, sizeof(err))
        pw = None
        if st != KP_OK:
            exc = kp_exception(st, NULL, "TlsContext" if st == KP_ERR_NOMEM else "", ConfigError, 0,
                               None, err.decode("utf-8", "replace"))
            if isinstance(exc, ConfigError):
                # OpenSSL refused an input: the TLS error names which (the key's password
                # counts as the key file).
                exc = TlsConfigError(str(exc), tls_input=_TLS_INPUTS.get(what),
                                     key_password_failed=what == KP_TLS_INPUT_KEY_PASSWORD)
            raise exc
        self.cafile, self.certfile, self.keyfile = cafile, certfile, keyfile
        self.verify, self.check_hostname = verify, check_hostname

    def __dealloc__(self):
        if self.ctx != NULL:
            kp_tls_ctx_free(self.ctx)
            self.ctx = NULL

    def __reduce__(self):
        raise TypeError("TlsContext cannot be pickled (it holds an OpenSSL context)")

    def __repr__(self):
        # Never the password (it is not even kept).
        return (f"TlsContext(cafile={self.cafile!r}, certfile={self.certfile!r}, "
                f"keyfile={self.keyfile!r}, verify={self.verify}, "
                f"check_hostname={self.check_hostname})")


cdef class Selector:
    """Non-blocking TCP connections multiplexed over epoll.

    ``Selector(max_connections=1024, max_frame_size=100 MiB)``: connection ids
    are ``0 .. max_connections-1``; received frames above ``max_frame_size``
    (or negative) close their connection.

    All I/O happens in :meth:`poll`, which may block (GIL released) and is
    meant to be called from one network thread. Only :meth:`wakeup` may be
    called from other threads while a poll runs; other mutating calls made
    concurrently with a poll raise ``RuntimeError``.

    Contracts:

    - :meth:`connect` returns at once; its outcome arrives in a later poll as
      ``connected`` or ``disconnected`` (also when the connect failed
      immediately, e.g. refused on loopback). It raises only for bad
      arguments, an id in use, or when no socket can be created (EMFILE).
    - :meth:`send` copies the bytes (the caller may reuse its buffer at once)
      and stages them as the connection's one send in flight; a second send
      before poll reports the first in ``sent`` raises :class:`NetworkError`.
      Each poll writes a staged send with one ``send(2)`` call at most, so a
      slow peer never stalls the other connections.
    - Connected sockets are always read, up to ``READ_BUDGET`` (256 KiB) per
      connection per poll, even when nothing is expected.
    - :meth:`close` closes at once and reports nothing.
    """
    cdef kp_selector *sel
    cdef bint _busy

    def __cinit__(self, int max_connections=1024, max_frame_size=DEFAULT_MAX_FRAME_SIZE):
        cdef int err = 0
        cdef kp_status st
        if max_connections < 1 or max_connections > KP_SEL_MAX_CONNECTIONS:
            raise ValueError(f"max_connections must be 1..{KP_SEL_MAX_CONNECTIONS}, got {max_connections}")
        if not 0 <= max_frame_size <= INT32_MAX:
            raise ValueError(f"max_frame_size must be 0..{INT32_MAX}, got {max_frame_size}")
        st = kp_selector_new(&self.sel, max_connections, <int32_t>max_frame_size, &err)
        if st != KP_OK:
            raise_kp_error(st, NULL, "Selector: creating the epoll/eventfd pair", None, err)

    def __dealloc__(self):
        if self.sel != NULL:
            kp_selector_free(self.sel)
            self.sel = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close_all()

    # -- helpers ---------------------------------------------------------------
    cdef inline int _check_id(self, conn_id) except -1:
        if not 0 <= conn_id < kp_selector_max_connections(self.sel):
            raise ValueError(f"conn_id {conn_id} out of range 0..{kp_selector_max_connections(self.sel) - 1}")
        return 0

    cdef inline int _enter(self, str what) except -1:
        if self._busy:
            raise RuntimeError(f"Selector.{what}: poll() is running in another thread; "
                               f"only wakeup() may be called concurrently")
        return 0

    # -- properties --------------------------------------------------------------
    @property
    def max_connections(self):
        return kp_selector_max_connections(self.sel)

    @property
    def max_frame_size(self):
        return kp_selector_max_frame_size(self.sel)

    def __len__(self):
        """Number of ids in use (connecting or connected)."""
        return kp_selector_count(self.sel)

    def count(self):
        """Number of ids in use (connecting or connected)."""
        return kp_selector_count(self.sel)

    def fileno(self):
        """The epoll descriptor: readable when a poll has I/O to do or the selector was
        woken. Another thread may wait on it (poll(2)) while this selector's owner is busy;
        see :meth:`needs_poll`."""
        return kp_selector_fd(self.sel)

    def courier_io(self):
        """(selector, functions): capsules named "kproducer.kp_selector" and
        "kproducer.kp_selector_fns" for the accumulator's courier (csrc/kp_courier.h), which
        writes a lingering batch's request between two Sender steps, without the GIL. The
        first is valid while this Selector lives."""
        return (PyCapsule_New(<void *>self.sel, b"kproducer.kp_selector", NULL),
                PyCapsule_New(<void *>&kp_selector_functions, b"kproducer.kp_selector_fns", NULL))

    def needs_poll(self):
        """True when the next poll has work :meth:`fileno` does not show (a connect outcome
        known at once, a send staged since the last poll): poll(0) before waiting on it."""
        return kp_selector_needs_poll(self.sel) != 0

    # -- connections ---------------------------------------------------------------
    def connect(self, int conn_id, str host, int port, int send_buffer=-1,
                int receive_buffer=32768, *, TlsContext tls=None, str server_hostname=None):
        """Starts a non-blocking connect of ``conn_id`` to ``host:port``.

        ``host`` is a numeric IPv4 or IPv6 address (``"127.0.0.1"``,
        ``"::1"``, ``"fe80::1%eth0"``). ``send_buffer`` / ``receive_buffer``
        set SO_SNDBUF / SO_RCVBUF when > 0; ``-1`` keeps the OS default. The
        outcome is reported by a later :meth:`poll`.

        With ``tls`` the connection runs a TLS handshake after the TCP
        connect and is reported connected once it is done (a failure is a
        disconnect of kind ``TLS_HANDSHAKE``).
        ``server_hostname`` is the name the server's certificate must carry
        and the SNI sent (default: ``host``): pass the broker's host name as
        configured or advertised, not the address it resolved to.
        """
        cdef int err = 0
        cdef kp_status st
        cdef bytes h, sn
        cdef char tls_err[KP_TLS_ERROR_MAX]
        self._enter("connect")
        self._check_id(conn_id)
        if not 1 <= port <= 65535:
            raise ValueError(f"connection {conn_id}: port must be 1..65535, got {port}")
        try:
            h = host.encode("ascii")
        except UnicodeEncodeError:
            h = b""
        if not h or b"\0" in h:
            raise_kp_error(KP_ERR_ADDRESS, NULL, f"connect to {host!r}", None, 0, conn_id)
        if tls is None:
            st = kp_selector_connect(self.sel, conn_id, h, port, send_buffer, receive_buffer, &err)
        else:
            name = server_hostname if server_hostname is not None else host
            try:
                sn = name.encode("ascii")
            except UnicodeEncodeError:
                sn = name.encode("idna")  # an internationalised name, as certificates carry it
            if not sn or b"\0" in sn:
                raise ValueError(f"connection {conn_id}: server_hostname must be a non-empty name")
            tls_err[0] = 0
            st = kp_selector_connect_tls(self.sel, conn_id, h, port, send_buffer, receive_buffer,
                                         tls.ctx, sn, &err, tls_err, sizeof(tls_err))
        if st != KP_OK:
            raise_kp_error(st, NULL, f"connect to {host}:{port}", None, err, conn_id,
                           tls_err.decode("utf-8", "replace") if st == KP_ERR_TLS else None)

    def close(self, int conn_id):
        """Closes ``conn_id`` (no event is reported). Returns True if a
        connection was open, False if there was none (closing twice is fine)."""
        self._enter("close")
        self._check_id(conn_id)
        return kp_selector_close(self.sel, conn_id) == KP_OK

    def close_all(self):
        """Closes every connection (no events)."""
        self._enter("close_all")
        kp_selector_close_all(self.sel)

    def is_connected(self, int conn_id):
        """True from the poll that reports ``conn_id`` connected until it is
        reported disconnected or closed."""
        self._check_id(conn_id)
        return bool(kp_selector_is_connected(self.sel, conn_id))

    def is_sending(self, int conn_id):
        """True while ``conn_id`` has a staged send not yet fully written."""
        self._check_id(conn_id)
        return bool(kp_selector_is_sending(self.sel, conn_id))

    def state(self, int conn_id):
        """``"disconnected"``, ``"connecting"`` or ``"connected"``."""
        self._check_id(conn_id)
        return _STATE_NAMES[kp_selector_state(self.sel, conn_id)]

    def stats(self, int conn_id):
        """:class:`ConnectionStats` of an open connection."""
        cdef kp_sel_stats s
        cdef kp_status st
        self._check_id(conn_id)
        st = kp_selector_stats(self.sel, conn_id, &s)
        if st != KP_OK:
            raise_kp_error(st, NULL, "stats", None, 0, conn_id)
        return ConnectionStats(s.bytes_sent, s.bytes_received, s.send_remaining, s.send_total)

    def totals(self, int conn_id):
        """``(bytes_sent, bytes_received)`` over every connection made under ``conn_id``
        since the selector was made, open or closed now (the statistics' per-broker bytes)."""
        cdef uint64_t sent = 0, received = 0
        self._check_id(conn_id)
        kp_selector_totals(self.sel, conn_id, &sent, &received)
        return sent, received

    # -- I/O -----------------------------------------------------------------------
    cdef object _stage(self, int conn_id, object data, bint add_prefix, str what):
        cdef Py_buffer view
        cdef kp_status st
        self._enter(what)
        self._check_id(conn_id)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if not add_prefix and view.len == 0:
                raise ValueError(f"connection {conn_id}: {what}: empty data")
            if add_prefix and <size_t>view.len > <size_t>INT32_MAX:
                raise_kp_error(KP_ERR_OVERFLOW, NULL, what, None, 0, conn_id,
                               "payload exceeds the int32 frame Size field")
            if <size_t>view.len >= _NOGIL_COPY_MIN:
                # The poll thread cannot run meanwhile: _busy is checked above
                # and poll() checks it too, both with the GIL held.
                self._busy = True
                try:
                    with nogil:
                        if add_prefix:
                            st = kp_selector_send_frame(self.sel, conn_id, <const uint8_t *>view.buf, <size_t>view.len)
                        else:
                            st = kp_selector_send(self.sel, conn_id, <const uint8_t *>view.buf, <size_t>view.len)
                finally:
                    self._busy = False
            elif add_prefix:
                st = kp_selector_send_frame(self.sel, conn_id, <const uint8_t *>view.buf, <size_t>view.len)
            else:
                st = kp_selector_send(self.sel, conn_id, <const uint8_t *>view.buf, <size_t>view.len)
            if st != KP_OK:
                raise_kp_error(st, NULL, what, None, 0, conn_id)
        finally:
            PyBuffer_Release(&view)

    def send(self, int conn_id, data):
        """Stages ``data`` - whole frames, size prefix included (e.g.
        ``kproducer.codec.frame(request)``) - as ``conn_id``'s one send in
        flight. The bytes are copied. Allowed while connecting (written once
        connected). Raises :class:`NetworkError` if a send is already in
        flight or the id has no connection."""
        self._stage(conn_id, data, False, "send")

    def send_frame(self, int conn_id, payload):
        """Like :meth:`send` for a bare payload: the 4-byte size prefix is
        written by the selector (saves building the framed copy)."""
        self._stage(conn_id, payload, True, "send_frame")

    def poll(self, timeout_ms):
        """Waits up to ``timeout_ms`` milliseconds (0: do not wait; None: no
        limit) for I/O or :meth:`wakeup`, does the I/O and returns a
        :class:`PollResult`. The GIL is released while waiting and during the
        I/O. Does not wait when a connect outcome is already known."""
        cdef int t, err = 0
        cdef kp_status st
        cdef const kp_sel_results *res = NULL
        cdef const kp_sel_disconnect *d
        cdef kp_sel_receive *r
        cdef size_t i
        cdef int32_t max_frame
        if timeout_ms is None:
            t = -1
        else:
            if timeout_ms < 0:
                raise ValueError(f"poll: timeout_ms must be >= 0 or None, got {timeout_ms}")
            t = <int>min(_math.ceil(timeout_ms), INT_MAX)
        self._enter("poll")
        self._busy = True
        try:
            if t == 0:
                # A non-blocking poll keeps the GIL: its syscalls do not wait, and giving the
                # GIL up would cost the I/O thread up to a switch interval (5 ms) to get it
                # back from a thread busy calling send().
                st = kp_selector_poll(self.sel, t, &res, &err)
            else:
                with nogil:
                    st = kp_selector_poll(self.sel, t, &res, &err)
        finally:
            self._busy = False
        if st != KP_OK:
            raise_kp_error(st, NULL, "poll: epoll_wait", None, err)
        max_frame = kp_selector_max_frame_size(self.sel)
        try:
            connected = [res.connected[i] for i in range(res.n_connected)]
            sent = [res.sent[i] for i in range(res.n_sent)]
            sent_us = [res.sent_us[i] for i in range(res.n_sent)]
            disconnected = []
            for i in range(res.n_disconnected):
                d = &res.disconnected[i]
                kind, detail = disconnect_info(d.status, d.was_connected != 0, d.sys_errno, d.value,
                                               d.detail, max_frame)
                disconnected.append(Disconnect(d.id, kind, detail))
            received = []
            received_us = []
            for i in range(res.n_received):
                r = &res.received[i]
                received.append((r.id, PyBytes_FromStringAndSize(<char *>r.data, <Py_ssize_t>r.len)))
                received_us.append(r.read_us)
            woken = bool(res.woken)
        finally:
            # The frames are copied: free the C bodies now, not at the next poll.
            kp_selector_release_results(self.sel)
        return PollResult(connected, disconnected, sent, received, woken, received_us, sent_us)

    def wakeup(self):
        """Makes a poll running in another thread (or the next poll) return
        promptly with ``woken=True``. Cheap; safe from any thread."""
        cdef int e
        e = kp_selector_wakeup(self.sel)
        if e:
            raise_kp_error(KP_ERR_SYS, NULL, "wakeup", None, e)
