"""Figures of a process from ``/proc`` (Linux). Memory, for the leak, lifecycle and soak
tests: ``VmRSS`` (resident now) and ``VmHWM`` (the resident peak, which belongs to the
process image, unlike ``ru_maxrss`` which a child inherits across fork+exec). CPU wait, for
the asyncio tests and benchmark: how long a thread waited for a CPU while runnable."""

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


def runqueue_clock():
    """Seconds the calling thread has waited for a CPU while runnable (the second field of
    /proc/thread-self/schedstat), as a function; None where the kernel does not say."""
    try:
        f = open("/proc/thread-self/schedstat")
    except OSError:
        return None

    def waited() -> float:
        f.seek(0)
        return int(f.read().split()[1]) / 1e9
    return waited
