"""Memory figures of a process from ``/proc/<pid>/status`` (Linux), for the leak, lifecycle
and soak tests: ``VmRSS`` (resident now) and ``VmHWM`` (the resident peak, which belongs
to the process image, unlike ``ru_maxrss`` which a child inherits across fork+exec)."""

from __future__ import annotations


def status_kib(key: str, pid: int | str = "self") -> int:
    """The ``key`` line (e.g. ``"VmRSS"``, ``"VmHWM"``) of ``/proc/<pid>/status`` in KiB.
    Raises LookupError when the process or the line does not exist."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError as exc:
        raise LookupError(f"cannot read /proc/{pid}/status: {exc}") from None
    raise LookupError(f"no {key} in /proc/{pid}/status")


def rss_kib(pid: int | str = "self") -> int:
    return status_kib("VmRSS", pid)
