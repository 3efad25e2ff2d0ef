"""Choosing the wheel of a wheelhouse that an interpreter can load (PEP 425 tags).

:func:`kproducer.spark.ship` given a folder of wheels asks the executors what they run
(:func:`executor_platforms`) and ships the one wheel that fits (:func:`pick`): the
release set holds a wheel per CPython version (or one ``abi3`` wheel) for each machine and
C library, and an executor on Python 3.12 on Graviton needs a different file than the
driver on Python 3.11 on x86-64.

The rules are pip's for the tags kproducer's wheels carry:

- interpreter: ``cpXY-cpXY`` for CPython X.Y exactly; ``cpXY-abi3`` for CPython X.Y or
  later (the Limited API);
- platform: ``manylinux_2_N_<arch>`` (``manylinux2014`` is ``manylinux_2_17``) on a glibc of
  at least 2.N; ``musllinux_1_N_<arch>`` on a musl of at least 1.N; ``linux_<arch>`` (a
  local build) on the same machine type and C library family, glibc assumed.

Among the wheels that fit, a per-version wheel is preferred to an abi3 one, then the
newest C library tag (the most specific build), then the newest kproducer version.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, NamedTuple

__all__ = ["Platform", "describe_this_python", "executor_platforms", "pick", "wheel_tags"]


class Platform(NamedTuple):
    """What decides which wheel an interpreter loads."""

    implementation: str            # sys.implementation.name: "cpython", "pypy", ...
    version: tuple                 # (3, 12)
    machine: str                   # "x86_64", "aarch64"
    libc: str                      # "glibc", "musl", or "" when neither was found
    libc_version: tuple            # (2, 36), (1, 2), or ()

    def __str__(self) -> str:
        impl = {"cpython": "CPython"}.get(self.implementation, self.implementation)
        libc = f"{self.libc} {'.'.join(map(str, self.libc_version))}" if self.libc else "an unknown C library"
        return f"{impl} {self.version[0]}.{self.version[1]} on {self.machine} with {libc}"


def describe_this_python() -> Platform:
    """This interpreter's :class:`Platform`. Standard library only: it runs on executors
    before kproducer can be imported there."""
    import os as _os
    import platform as _platform
    import re as _re
    import subprocess as _subprocess
    import sys as _sys

    libc, libc_version = "", ()
    try:
        glibc = _os.confstr("CS_GNU_LIBC_VERSION") or ""     # "glibc 2.36"; absent on musl
    except (ValueError, OSError, AttributeError):
        glibc = ""
    m = _re.match(r"glibc (\d+)\.(\d+)", glibc)
    if m:
        libc, libc_version = "glibc", (int(m.group(1)), int(m.group(2)))
    else:
        # musl's dynamic loader prints its version when run without arguments (as pip's
        # `packaging` reads it).
        loaders = [n for n in (_os.listdir("/lib") if _os.path.isdir("/lib") else [])
                   if n.startswith("ld-musl-") and n.endswith(".so.1")]
        if loaders:
            try:
                out = _subprocess.run(["/lib/" + loaders[0]], capture_output=True, text=True,
                                      timeout=10).stderr
            except (OSError, _subprocess.SubprocessError):
                out = ""
            m = _re.search(r"Version (\d+)\.(\d+)", out)
            libc, libc_version = "musl", ((int(m.group(1)), int(m.group(2))) if m else ())
    return Platform(_sys.implementation.name, tuple(_sys.version_info[:2]), _platform.machine(),
                    libc, libc_version)


def executor_platforms(sc) -> set:
    """The :class:`Platform` of the executors of SparkContext ``sc``, from one small job
    with a task per default parallelism slot. This module travels by value (PySpark's
    cloudpickle): kproducer is not importable there yet."""
    import sys

    from pyspark import cloudpickle

    slots = max(1, int(getattr(sc, "defaultParallelism", 1) or 1))
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        found = sc.parallelize(range(slots), slots).mapPartitions(_probe).collect()
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    return {Platform(p[0], tuple(p[1]), p[2], p[3], tuple(p[4])) for p in found}


def _probe(_):
    return [tuple(describe_this_python())]


_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def wheel_tags(filename: str):
    """(distribution, version, {(python, abi, platform)}) of a wheel's file name, or None
    when it is not a wheel's name. Compressed tag sets (``a.b``) are expanded."""
    m = _WHEEL.match(os.path.basename(filename))
    if not m:
        return None
    tags = {(py, abi, plat) for py in m["py"].split(".") for abi in m["abi"].split(".")
            for plat in m["plat"].split(".")}
    return m["name"], m["version"], tags


def _platform_rank(plat: str, p: Platform):
    """How specific ``plat`` is for ``p`` (larger is more), or None if ``p`` cannot load it."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", plat)
    if plat.startswith("manylinux2014_"):
        m = re.fullmatch(r"manylinux2014_(\w+)", plat)
        need, arch = (2, 17), m.group(1)
        family = "glibc"
    elif m:
        need, arch, family = (int(m.group(1)), int(m.group(2))), m.group(3), "glibc"
    elif (m := re.fullmatch(r"musllinux_(\d+)_(\d+)_(\w+)", plat)):
        need, arch, family = (int(m.group(1)), int(m.group(2))), m.group(3), "musl"
    elif (m := re.fullmatch(r"linux_(\w+)", plat)):
        # A local build: made on some glibc system; trusted on the same machine type.
        return (0, ()) if m.group(1) == p.machine and p.libc in ("glibc", "") else None
    else:
        return None
    if arch != p.machine or family != p.libc or p.libc_version < need:
        return None
    return (1, need)


def _python_rank(py: str, abi: str, p: Platform):
    if p.implementation != "cpython":
        return None
    m = re.fullmatch(r"cp(\d)(\d+)", py)
    if not m:
        return None
    version = (int(m.group(1)), int(m.group(2)))
    if abi == "abi3":
        return 0 if version[0] == p.version[0] and version <= p.version else None
    return 1 if version == p.version and abi.startswith(py) else None


def pick(wheels: Iterable[str], platform: Platform, version: str | None = None) -> str:
    """The wheel of ``wheels`` (paths) that ``platform`` loads best; with ``version``,
    only among that kproducer version's wheels when there are any. Raises ValueError
    naming what was needed and what was found."""
    wheels = sorted(wheels)
    candidates = []
    for path in wheels:
        parsed = wheel_tags(path)
        if not parsed or parsed[0] != "kproducer":
            continue
        _, wheel_version, tags = parsed
        best = None
        for py, abi, plat in tags:
            pr, lr = _python_rank(py, abi, platform), _platform_rank(plat, platform)
            if pr is not None and lr is not None:
                best = max(best or (pr, lr), (pr, lr))
        if best is not None:
            candidates.append((wheel_version == version, best, _version_key(wheel_version), path))
    if version is not None and any(c[0] for c in candidates):
        candidates = [c for c in candidates if c[0]]
    if not candidates:
        found = ", ".join(os.path.basename(w) for w in wheels if w.endswith(".whl")) or "no wheels"
        v = f"{platform.version[0]}{platform.version[1]}"
        raise ValueError(
            f"no kproducer wheel for {platform}: it needs cp{v}-cp{v} (or cp3N-abi3 with N <= "
            f"{platform.version[1]}) for {_needed_platform(platform)}; found: {found}")
    return max(candidates)[3]


def _needed_platform(p: Platform) -> str:
    if p.libc == "musl":
        return f"musllinux_1_N_{p.machine} (N <= {p.libc_version[1] if p.libc_version else '?'})"
    if p.libc == "glibc":
        return f"manylinux_2_N_{p.machine} (N <= {p.libc_version[1]}) or linux_{p.machine}"
    return f"linux_{p.machine}"


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.+-]", v))
