"""What a process holds on its heaps, for the leak and lifecycle tests: a leak shows there
exactly, where the resident size (``procfs.rss_kib``) also moves with what the allocator
keeps: glibc holds freed memory in its arenas, and on a machine up for hours the arenas a
new thread is given, and how much of them is resident, vary run to run (megabytes over 200
producer lifecycles that leaked nothing)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2            # glibc 2.33 and later
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _mallinfo2()


def malloc_in_use_kib() -> int | None:
    """KiB that C code holds from malloc now, in every arena and in mmap'd blocks (glibc's
    mallinfo2: uordblks + hblkhd); None where the C library cannot say."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return (info.uordblks + info.hblkhd) // 1024


def python_blocks() -> int:
    """Blocks the interpreter's allocator holds now: objects, not the arenas they sit in."""
    return sys.getallocatedblocks()
