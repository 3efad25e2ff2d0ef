"""TLS test helpers: throwaway certificates (``openssl`` CLI) and a TLS terminator.

Tansu has no TLS listener, so TLS tests put a TLS terminator in front of it: it accepts TLS
on a free 127.0.0.1 port and forwards the decrypted bytes to the broker's plaintext port;
the broker advertises the terminator's port, so every connection a client makes goes through
TLS::

    pki = TestPki(tmp_path)                      # CA, server cert for localhost/127.0.0.1, client cert
    tls_port = free_port()
    broker = TansuBroker(port=free_port(), advertised_port=tls_port).start()
    with TlsTerminator(pki, broker.port, port=tls_port) as tunnel:
        ... Producer(bootstrap_servers=tunnel.bootstrap, security_protocol="SSL",
                     ssl_truststore_location=pki.ca_file) ...

Certificates are made with the ``openssl`` command (Debian's ``openssl`` package), EC P-256
keys, valid for two days. The terminator is :mod:`kproducer.testing.tls_terminator`, Python's
``ssl`` module in a child process (not a system TLS proxy such as stunnel, which a fresh machine
does not have: the README's test command must pass with what pip installs). It is stopped by PID
(SIGTERM, then SIGKILL after a deadline; ``kill=True`` resets its connections as a crashed
server would) and logs to a file in its directory (:meth:`TlsTerminator.log_text`). Readiness
is its own listening socket on the port (``/proc``), never a sleep.
"""

from __future__ import annotations

import atexit
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from .broker import _pid_listens_on, free_port

__all__ = ["TestPki", "TlsTerminator", "TlsTerminatorError"]

_DAYS = "2"


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("kproducer.testing.tls makes its certificates with the openssl command, "
                           "which is not on PATH: install it (Debian/Ubuntu: apt-get install "
                           "openssl; RHEL: dnf install openssl)")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")


class TestPki:
    """A CA and certificates it signed, as PEM files in ``directory``.

    ``ca_file``: the CA certificate. ``server_cert`` / ``server_key``: for ``localhost`` and
    ``127.0.0.1`` (subjectAltName DNS and IP). ``client_cert`` / ``client_key``: a client
    certificate (``CN=kproducer-client``); ``client_keystore``: both in one file (Kafka's
    ``ssl.keystore.location``). More with :meth:`issue`, :meth:`encrypted_key`,
    :meth:`other_ca`.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, directory, *, ca_name: str = "kproducer test CA"):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        stem = ca_name.replace(" ", "-")
        self.ca_file = str(self.dir / f"{stem}.pem")
        self.ca_key = str(self.dir / f"{stem}.key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", self.ca_key, "-out", self.ca_file, "-days", _DAYS, "-subj", f"/CN={ca_name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)
        self.server_cert, self.server_key = self.issue("server", dns=["localhost"], ips=["127.0.0.1"])
        self.client_cert, self.client_key = self.issue("client", common_name="kproducer-client",
                                                       client=True)
        self.client_keystore = str(self.dir / "client.keystore.pem")
        with open(self.client_keystore, "w") as out:
            out.write(Path(self.client_cert).read_text() + Path(self.client_key).read_text())

    def issue(self, name: str, *, dns: Sequence[str] = (), ips: Sequence[str] = (),
              common_name: str | None = None, client: bool = False) -> tuple[str, str]:
        """A certificate signed by this CA: ``(cert_path, key_path)``."""
        key = str(self.dir / f"{name}.key")
        csr = str(self.dir / f"{name}.csr")
        cert = str(self.dir / f"{name}.pem")
        ext = self.dir / f"{name}.ext"
        san = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        lines = ["basicConstraints=CA:FALSE",
                 f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}"]
        if san:
            lines.append("subjectAltName=" + ",".join(san))
        ext.write_text("\n".join(lines) + "\n")
        cn = common_name or (dns[0] if dns else name)
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", f"/CN={cn}", cwd=self.dir)
        _openssl("x509", "-req", "-in", csr, "-CA", self.ca_file, "-CAkey", self.ca_key,
                 "-CAcreateserial", "-out", cert, "-days", _DAYS, "-extfile", str(ext), cwd=self.dir)
        return cert, key

    def encrypted_key(self, key_path: str, password: str) -> str:
        """``key_path`` encrypted with AES-256 under ``password`` (a new file)."""
        out = str(Path(key_path).with_suffix(".enc.key"))
        _openssl("pkey", "-in", key_path, "-aes256", "-passout", f"pass:{password}", "-out", out,
                 cwd=self.dir)
        return out

    def other_ca(self) -> TestPki:
        """An unrelated CA (with its own certificates), for "unknown CA" tests."""
        return TestPki(self.dir / "other", ca_name="unrelated test CA")


class TlsTerminatorError(RuntimeError):
    """The terminator exited, or did not listen within the deadline."""


_LIVE: weakref.WeakSet[TlsTerminator] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for t in list(_LIVE):
        try:
            t.stop()
        except Exception:
            pass


class TlsTerminator:
    """A TLS server on 127.0.0.1 forwarding to ``127.0.0.1:target_port``.

    ``cert``/``key`` default to the PKI's server certificate. ``require_client_cert``:
    only clients with a certificate signed by the PKI's CA get through (mutual TLS).
    ``port``: the port to listen on (default: a free one). Start with :meth:`start` or
    ``with``; :meth:`stop` is idempotent and :meth:`restart` comes back on the same port.
    """

    host = "127.0.0.1"

    def __init__(self, pki: TestPki, target_port: int, *, port: int | None = None,
                 cert: str | None = None, key: str | None = None,
                 require_client_cert: bool = False, startup_timeout: float = 10.0,
                 directory: str | None = None):
        self.pki = pki
        self.target_port = target_port
        self.port = port or free_port(self.host)
        self.cert = cert or pki.server_cert
        self.key = key or pki.server_key
        self.require_client_cert = require_client_cert
        self.startup_timeout = startup_timeout
        self._own_dir = directory is None
        self.dir = Path(directory or tempfile.mkdtemp(prefix="kproducer-tls-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf_path = self.dir / "terminator.json"
        self.log_path = self.dir / "terminator.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _config(self) -> str:
        return json.dumps({"host": self.host, "port": self.port, "target_port": self.target_port,
                           "cert": str(self.cert), "key": str(self.key), "ca_file": str(self.pki.ca_file),
                           "require_client_cert": self.require_client_cert, "log": str(self.log_path)})

    def start(self) -> TlsTerminator:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"TLS terminator already running (pid {self.proc.pid})")
        self.conf_path.write_text(self._config())
        self.proc = subprocess.Popen([sys.executable, "-m", "kproducer.testing.tls_terminator",
                                      str(self.conf_path)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir / "stderr.log", "ab"))
        _LIVE.add(self)
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.005
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise TlsTerminatorError(
                    f"TLS terminator exited with status {code} before listening on port {self.port}: "
                    f"{self.log_text()[-2000:]}{(self.dir / 'stderr.log').read_text(errors='replace')[-2000:]}")
            if _pid_listens_on(self.proc.pid, self.port):
                return self
            if time.monotonic() >= deadline:
                self.stop()
                raise TlsTerminatorError(f"TLS terminator did not listen on port {self.port} within "
                                         f"{self.startup_timeout}s: {self.log_text()[-2000:]}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def stop(self, *, kill: bool = False) -> None:
        """Stops the terminator: SIGTERM (``kill``: SIGKILL at once, connections reset), then
        SIGKILL if it has not exited within 5 s."""
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        except ProcessLookupError:
            pass

    def restart(self, *, kill: bool = False) -> TlsTerminator:
        """Stops and starts again on the same port."""
        self.stop(kill=kill)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                return self.start()
            except TlsTerminatorError:
                # The old listening socket may not be released yet.
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def cleanup(self) -> None:
        """Stops the terminator and removes its directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> TlsTerminator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
