"""kproducer imported from a zip archive: extract it once so the compiled modules can load.

Spark's ``--py-files``, ``SparkContext.addPyFile`` and :func:`kproducer.spark.ship` put a
zip (a wheel is a zip with ``kproducer/`` at its root) on the executors' ``sys.path``.
Python's zipimport then reads ``kproducer/__init__.py`` and the other pure-Python modules
from it, but it cannot load extension modules: ``dlopen`` needs a file on disk (zipimport
documentation, "ZIP import of dynamic modules (.pyd, .so) is disallowed"). So when
``kproducer/__init__.py`` finds it was loaded by a ``zipimporter`` it calls
:func:`extract_package`, which unpacks the archive's ``kproducer/`` tree once into a
per-user cache keyed by the archive's content, and points the package's ``__path__`` there.

The cache directory is ``$KPRODUCER_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kproducer``
(``~/.cache/kproducer``), else ``<tmp>/kproducer-<uid>``. It must allow ``mmap`` with
``PROT_EXEC`` (not a ``noexec`` mount) for the compiled modules to load.

This module runs before the package exists: it imports nothing from kproducer and raises
ImportError (what an import statement is expected to raise) for every failure.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import os
import shutil
import stat
import sys
import tempfile
import zipfile

__all__ = ["COMPILED", "cache_root", "check_compatible", "extract_package", "interpreter_description", "suffix"]

_PACKAGE = "kproducer"
# Suffixes of compiled modules on any platform; the ones this interpreter loads are
# importlib.machinery.EXTENSION_SUFFIXES.
COMPILED = (".so", ".pyd")


def cache_root() -> str:
    """The directory holding extracted archives (created, owned by this user)."""
    configured = os.environ.get("KPRODUCER_CACHE_DIR")
    if configured:
        return _usable_dir(configured, strict=True)
    candidates = [os.path.join(tempfile.gettempdir(), f"{_PACKAGE}-{os.getuid()}")]
    home = os.path.expanduser("~")   # stays "~" when there is no HOME and no passwd entry
    base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(home, ".cache") if os.path.isabs(home) else None)
    if base:
        candidates.insert(0, os.path.join(base, _PACKAGE))
    tried = []
    for candidate in candidates:
        try:
            return _usable_dir(candidate, strict=False)
        except ImportError as exc:
            tried.append(str(exc))
    raise ImportError("kproducer: no usable cache directory to extract the compiled modules "
                      "into (set KPRODUCER_CACHE_DIR): " + "; ".join(tried))


def _usable_dir(path: str, *, strict: bool) -> str:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        raise ImportError(f"kproducer: cannot create the cache directory {path!r}: {exc}") from exc
    # A directory someone else controls could hold planted shared objects. An explicit
    # KPRODUCER_CACHE_DIR is the user's choice (a shared, read-only pre-extracted cache is fine).
    if not strict and (st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        raise ImportError(f"kproducer: cache directory {path!r} is not private to this user")
    if not strict and not os.access(path, os.W_OK | os.X_OK):
        raise ImportError(f"kproducer: cache directory {path!r} is not writable")
    return path


def interpreter_description() -> str:
    """This Python and what it loads, for error messages."""
    version = ".".join(map(str, sys.version_info[:3]))
    return (f"Python {version} ({sys.implementation.name}) at {sys.executable}, which loads "
            f"compiled modules named *{importlib.machinery.EXTENSION_SUFFIXES[0]}")


def _wheel_tag(zf: zipfile.ZipFile) -> str | None:
    """The ``Tag:`` of the archive's ``*.dist-info/WHEEL``, if it has one."""
    for name in zf.namelist():
        parts = name.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "WHEEL":
            for line in zf.read(name).decode("utf-8", "replace").splitlines():
                if line.startswith("Tag:"):
                    return line[4:].strip()
    return None


def suffix(name: str) -> str:
    """The extension suffix of a compiled module's file name: ".cpython-311-x86_64-linux-gnu.so"."""
    base = name.rsplit("/", 1)[-1]
    return base[base.index("."):]


def check_compatible(zf: zipfile.ZipFile, archive: str, members: list[str]) -> None:
    """Raises ImportError if the archive's compiled modules are not loadable by this Python
    (another Python version, implementation or platform), naming both sides."""
    compiled = [m for m in members if m.endswith(COMPILED)]
    if not compiled:
        raise ImportError(f"kproducer: {archive} holds no compiled modules under "
                          f"{_PACKAGE}/ (a source archive? ship a built wheel)")
    # Exact suffix match: ".so" is in EXTENSION_SUFFIXES too, but a module tagged for another
    # interpreter (.cpython-39-...so) is never loaded by this one.
    suffixes = set(importlib.machinery.EXTENSION_SUFFIXES)
    foreign = [m for m in compiled if suffix(m) not in suffixes]
    if foreign:
        tag = _wheel_tag(zf)
        built_for = f"wheel tag {tag}" if tag else "another Python"
        raise ImportError(
            f"kproducer: {archive} was built for {built_for} ({os.path.basename(foreign[0])}), "
            f"but this is {interpreter_description()}: ship a wheel built for this Python")


def _digest(archive: str) -> str:
    h = hashlib.sha256()
    with open(archive, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:20]


def extract_package(archive: str, prefix: str = "") -> str:
    """The directory holding ``kproducer/`` of ``archive`` extracted (the new ``__path__``).

    Extraction happens once per archive content: into a temporary directory next to the
    final one, then ``os.rename``, which is atomic; when several Python workers race, one
    rename wins and the others discard their copy and use the winner's.
    """
    try:
        digest = _digest(archive)
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ImportError(f"kproducer: cannot read the archive it was imported from "
                          f"({archive}): {exc}") from exc
    with zf:
        top = prefix + _PACKAGE + "/"
        members = [m for m in zf.namelist() if m.startswith(top) and not m.endswith("/")]
        check_compatible(zf, archive, members)
        root = cache_root()
        target = os.path.join(root, f"{_PACKAGE}-{digest}")
        package_dir = os.path.join(target, prefix, _PACKAGE)
        if os.path.isdir(package_dir):
            return package_dir
        tmp = None
        try:
            tmp = tempfile.mkdtemp(prefix=f".{_PACKAGE}-{digest}-", dir=root)
            for member in members:
                zf.extract(member, tmp)   # drops absolute paths and ".." (nothing escapes tmp)
            os.rename(tmp, target)
        except OSError as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) and os.path.isdir(package_dir):
                return package_dir   # another worker extracted the same archive first
            raise ImportError(f"kproducer: cannot extract {archive} into {root}: {exc}") from exc
        return package_dir
