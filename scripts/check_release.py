#!/usr/bin/env python3
"""The release check: every wheel of a folder runs where it would run.

    scripts/check_release.sh [WHEELHOUSE] [--interpreters bookworm-amd64,trixie-arm64]
                             [--records N] [--no-probe] [--markdown FILE] [--cache DIR] [--refresh]

For every ``kproducer-*.whl`` in WHEELHOUSE (default ``wheelhouse/``) and every interpreter
here that the wheel's tags fit, it imports the wheel and sends records over TLS with
``send()`` and ``send_many()``, then reads them back on the host; it prints a table (wheel,
interpreter, result, seconds) and writes it as Markdown to WHEELHOUSE/release-check.md (the
README shows the last run). Every wheel also goes through scripts/check_wheel.py. Exit
status 1 if any row failed. Nothing is installed on the machine:

- Interpreters are Debian's CPython packages, never installed: CPython 3.11 of bookworm,
  3.13 of trixie and 3.14 of forky, for amd64 and arm64. ``apt-get download`` fetches
  ``python3.X`` and its dependency closure (read from ``apt-cache depends``) through a
  private apt configuration (its own sources, lists, cache and an empty dpkg status under
  the cache directory: the machine's apt state is untouched), ``dpkg -x`` unpacks them into
  a sysroot per suite and architecture. amd64 programs run through the sysroot's own loader
  (``ld-linux-x86-64.so.2 --inhibit-cache --library-path ...``: trixie's glibc is newer than
  the host's), arm64 ones under ``qemu-aarch64-static -L SYSROOT``, from Debian's
  ``qemu-user-static`` fetched and unpacked the same way. ``PYTHONHOME`` is the sysroot's
  ``/usr``; the stdlib's bytecode is written into the sysroot on first use (Debian compiles
  it in a postinst that ``dpkg -x`` does not run), so later starts are quick.
- The wheel is unpacked (it is a zip) into a folder on that interpreter's ``PYTHONPATH``
  with the wheels of its runtime requirements (``Requires-Dist`` without an extra: cramjam),
  fetched for the interpreter's platform by the host's pip (``pip download --only-binary
  :all: --platform ... --python-version ... --abi ...``). No pip runs in the foreign
  interpreter.
- The broker side runs on the host in this Python (the dev venv, ``pip install -e .[test]``):
  a Tansu broker behind the tests' TLS terminator with a throwaway CA
  (kproducer.testing.tls), a topic per run; the foreign interpreter sends N keyed records
  with ``send()`` and N with ``send_many()`` (zstd batches), flushes and prints what was
  acknowledged as JSON; the host reads the topic back with confluent-kafka
  (kproducer.testing.readback: CRCs checked) and checks that every record arrived once, with
  its key and value, at the partition and offset its acknowledgement named. The run also
  checks that kproducer and its compiled modules were loaded from the unpacked wheel, that
  the process is the wheel's architecture, and that every shared object it mapped came from
  the sysroot or the wheel folder (none from the host).
- CPython 3.10 and 3.12, which no Debian suite ships, are the machine's own where pyenv has
  them (``$PYENV_ROOT``, ``pyenv root`` or ``~/.pyenv``: ``versions/3.10.*/bin/python3.10``,
  the newest patch release), for x86_64 wheels on an x86_64 host: run natively with their own
  prefix (no ``PYTHONHOME``), the same runs and checks, except that the shared objects mapped
  may also be the system's libraries that interpreter itself links (``ldd`` of its program and
  its ``lib-dynload`` modules: libc, libssl, ...) and those PEP 599 lets a manylinux wheel take
  from the system (libgcc_s, libpthread, ...). One not here is not probed.
- Wheels no interpreter here fits (musllinux; aarch64 3.10 and 3.12; 3.10 and 3.12 without
  pyenv's) are reported as "checked, not run" with the reason.
- An interpreter that no wheel of the folder fits (arm64 before there are aarch64 wheels) is
  probed instead (unless ``--no-probe``): it starts, loads its stdlib's compiled modules (ssl,
  zlib, lzma, ctypes) and kproducer's requirements from their wheels for its platform, and
  talks TLS to the broker (an ApiVersions round trip), all with the same checks of what it
  ran and mapped; the row says that no kproducer wheel ran there.

The cache (default ``.release-check/`` in the checkout, git-ignored) keeps the apt lists
(refreshed after a day), the sysroots, qemu and the requirement wheels; ``--refresh``
fetches everything again.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRROR = os.environ.get("KPRODUCER_DEBIAN_MIRROR", "http://deb.debian.org")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LISTS_MAX_AGE = 24 * 3600
# Packages a dependency names that only maintainer scripts use (debconf prompts, dpkg and
# install-info for readline-common's info page): dpkg -x runs no maintainer script, and the
# interpreter never loads them.
SKIP_PACKAGES = {"debconf", "cdebconf", "debconf-2.0", "dpkg", "install-info"}


def log(msg: str) -> None:
    print(f"check_release: {msg}", file=sys.stderr, flush=True)


def run(cmd, *, timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


# -- interpreters --------------------------------------------------------------------------

@dataclass(frozen=True)
class Interpreter:
    suite: str
    arch: str            # Debian's name: amd64, arm64
    version: str         # "3.11"
    glibc: tuple         # the suite's glibc (a local one: the host's), for manylinux tags
    kind: str = "debian"     # or "local": the machine's own CPython under pyenv

    @property
    def key(self) -> str:
        return f"{self.suite}-{self.arch}" if self.kind == "debian" else f"{self.suite}-{self.version}-{self.arch}"

    @property
    def machine(self) -> str:
        return {"amd64": "x86_64", "arm64": "aarch64"}[self.arch]

    @property
    def triplet(self) -> str:
        return f"{self.machine}-linux-gnu"

    @property
    def loader(self) -> str:
        return {"amd64": "ld-linux-x86-64.so.2", "arm64": "ld-linux-aarch64.so.1"}[self.arch]

    @property
    def tag(self) -> str:
        return "cp" + self.version.replace(".", "")

    @property
    def emulated(self) -> bool:
        return self.machine != platform.machine()

    def label(self) -> str:
        how = "qemu-aarch64-static" if self.emulated else "native"
        where = "pyenv" if self.kind == "local" else f"Debian {self.suite}"
        return f"CPython {self.version} ({where}, {self.arch}, {how})"

    def available(self) -> bool:
        """Debian's are fetched when needed; a local one is there or not."""
        return self.kind == "debian" or (not self.emulated and local_python(self.version) is not None)


def _host_glibc() -> tuple:
    try:
        return tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    except (ValueError, OSError, AttributeError, IndexError):      # not glibc
        return (0, 0)


@functools.lru_cache(maxsize=None)
def local_python(version: str) -> Path | None:
    """The newest CPython VERSION.N under pyenv here ($PYENV_ROOT, ``pyenv root``, ~/.pyenv):
    its ``bin/pythonVERSION``, or None."""
    roots = [os.environ.get("PYENV_ROOT")]
    if shutil.which("pyenv"):
        roots.append(run(["pyenv", "root"], check=False, timeout=60).stdout.strip())
    roots.append(str(Path.home() / ".pyenv"))
    found = []
    for root in dict.fromkeys(filter(None, roots)):
        for prefix in Path(root).glob(f"versions/{version}.*"):
            python = prefix / "bin" / f"python{version}"
            if re.fullmatch(re.escape(version) + r"\.\d+", prefix.name) and os.access(python, os.X_OK):
                found.append((int(prefix.name.rsplit(".", 1)[1]), str(python)))
    return Path(max(found)[1]) if found else None


@functools.lru_cache(maxsize=None)
def manylinux_libs() -> frozenset:
    """PEP 599's libraries that a manylinux wheel may take from the system (libgcc_s,
    libpthread, ...): scripts/check_wheel.py's list."""
    spec = importlib.util.spec_from_file_location("check_wheel", ROOT / "scripts/check_wheel.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return frozenset(module.MANYLINUX_LIBS)


@functools.lru_cache(maxsize=None)
def system_libraries(python: Path) -> frozenset:
    """The system's shared objects that a local interpreter may map, resolved: what its
    program and its lib-dynload modules link (``ldd``: libc, libssl, ...), and the libraries
    a manylinux wheel may take from the system, from the folder of that libc."""
    prefix = python.resolve().parent.parent
    objects = [python, *sorted(prefix.glob("lib/python*/lib-dynload/*.so"))]
    out = run(["ldd", *objects], check=False, timeout=120).stdout
    found = set()
    for m in re.finditer(r"(?:=>\s*)?(/\S+) \(0x", out):
        path = os.path.realpath(m.group(1))
        if not path.startswith(str(prefix) + os.sep):
            found.add(path)
    for folder in {os.path.dirname(p) for p in found if os.path.basename(p) == "libc.so.6"}:
        found |= {os.path.realpath(os.path.join(folder, name)) for name in manylinux_libs()
                  if os.path.exists(os.path.join(folder, name))}
    return frozenset(found)


# Debian ships one CPython per release: 3.11 in bookworm (glibc 2.36), 3.13 in trixie (glibc
# 2.41), 3.14 in forky, the testing suite (glibc 2.43 today). 3.10 and 3.12 are in no Debian
# suite: they run under the machine's own CPython from pyenv if it is there, natively (x86_64
# only), else their wheels are checked, not run (issue 40).
INTERPRETERS = [Interpreter(suite, arch, version, glibc)
                for suite, version, glibc in (("bookworm", "3.11", (2, 36)), ("trixie", "3.13", (2, 41)),
                                              ("forky", "3.14", (2, 43)))
                for arch in ("amd64", "arm64")]
INTERPRETERS += [Interpreter("pyenv", "amd64", version, _host_glibc(), kind="local") for version in ("3.10", "3.12")]


class Apt:
    """apt-get and apt-cache for one suite and architecture with a private configuration
    under ``directory``: its own sources, lists, archive cache and an empty dpkg status (so
    dependencies are resolved as for an empty system), no lock on the machine's apt."""

    def __init__(self, directory: Path, suite: str, arch: str):
        self.dir, self.suite, self.arch = directory, suite, arch
        for d in ("etc/sources.list.d", "etc/preferences.d", "state/lists/partial", "cache/archives/partial"):
            (directory / d).mkdir(parents=True, exist_ok=True)
        (directory / "state/status").touch()
        sources = "".join(
            f"deb [signed-by={KEYRING}] {MIRROR}/{path} {dist} main\n"
            for path, dist in (("debian", suite), ("debian", f"{suite}-updates"),
                               ("debian-security", f"{suite}-security")))
        (directory / "etc/sources.list").write_text(sources)
        self.options = []
        for k, v in (("Dir::Etc::sourcelist", directory / "etc/sources.list"),
                     ("Dir::Etc::sourceparts", directory / "etc/sources.list.d"),
                     ("Dir::Etc::preferencesparts", directory / "etc/preferences.d"),
                     ("Dir::State", directory / "state"),
                     ("Dir::State::status", directory / "state/status"),
                     ("Dir::Cache", directory / "cache"),
                     ("APT::Architecture", arch), ("APT::Architectures::", arch),
                     ("Acquire::Languages", "none"), ("Debug::NoLocking", "1")):
            self.options += ["-o", f"{k}={v}"]
        if os.geteuid() == 0:
            # As root apt downloads as its _apt user, who may not write our directories.
            self.options += ["-o", "APT::Sandbox::User=root"]

    def update(self, *, force: bool = False) -> None:
        stamp = self.dir / "state/updated"
        if not force and stamp.exists() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE:
            return
        log(f"apt-get update ({self.suite}, {self.arch}; private lists in {self.dir})")
        run(["apt-get", *self.options, "-q", "update"], timeout=900)
        stamp.touch()

    def closure(self, package: str) -> list[str]:
        """``package`` and what it Depends/Pre-Depends on, recursively: the first alternative
        of each ``a | b`` that is a real package (a virtual one by its first provider),
        without SKIP_PACKAGES."""
        out = run(["apt-cache", *self.options, "depends", "--recurse", "--no-recommends", "--no-suggests",
                   "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", package]).stdout
        graph: dict[str, list[list[str]]] = {}
        providers: dict[str, list[str]] = {}
        current, group, last_virtual = None, [], None
        for line in out.splitlines():
            if not line.startswith(" "):
                current = line.strip()
                graph.setdefault(current, [])
                group, last_virtual = [], None
            elif line.startswith("    ") and last_virtual:      # a provider of a virtual package
                providers.setdefault(last_virtual, []).append(line.strip())
            elif m := re.match(r" ([ |])(PreDepends|Depends): (\S+)", line):
                name = m.group(3)
                last_virtual = name.strip("<>") if name.startswith("<") else None
                group.append(name.strip("<>"))
                if m.group(1) == " ":         # the group's last alternative
                    graph[current].append(group)
                    group = []
        wanted, todo = [], [package]
        while todo:
            name = todo.pop()
            if name in wanted:
                continue
            wanted.append(name)
            for alternatives in graph.get(name, []):
                for alt in alternatives:
                    if alt in SKIP_PACKAGES:
                        continue
                    real = alt if alt in graph and alt not in providers else \
                        next((p for p in providers.get(alt, []) if p not in SKIP_PACKAGES), None)
                    if real:
                        todo.append(real)
                        break
        return sorted(wanted)

    def download(self, packages: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        before = set(dest.glob("*.deb"))
        try:
            run(["apt-get", *self.options, "-q", "download", *packages], cwd=dest, timeout=1200)
        except RuntimeError:
            # Lists older than the mirror (a superseded version is gone): once more, fresh.
            self.update(force=True)
            run(["apt-get", *self.options, "-q", "download", *packages], cwd=dest, timeout=1200)
        return sorted(set(dest.glob("*.deb")) - before)


def _relative_links(root: Path) -> None:
    """Absolute symlinks inside ``root`` (libc6's /lib64/ld-linux-x86-64.so.2, say) made
    relative, so they resolve inside the sysroot and not on the host."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            link = Path(dirpath) / name
            if link.is_symlink() and os.readlink(link).startswith("/"):
                target = root / os.readlink(link).lstrip("/")
                link.unlink()
                link.symlink_to(os.path.relpath(target, link.parent))


def unpack_debs(debs: list[Path], dest: Path, keep: tuple[str, ...] = ()) -> None:
    """``dpkg -x`` of every package into ``dest`` (made afresh), laid out as a merged-/usr
    system: /bin, /sbin, /lib and /lib64 link into /usr where a package put nothing there
    (trixie's packages ship only /usr; on an installed system base-files makes the links).
    With ``keep``, only those files (paths relative to ``dest``) stay."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for deb in debs:
        run(["dpkg", "-x", deb, tmp])
    if keep:
        pruned = tmp.with_name(tmp.name + ".keep")
        shutil.rmtree(pruned, ignore_errors=True)
        for path in keep:
            (pruned / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp / path).rename(pruned / path)
        shutil.rmtree(tmp)
        pruned.rename(tmp)
    for d in ("bin", "sbin", "lib", "lib64"):
        if not os.path.lexists(tmp / d) and (tmp / "usr" / d).is_dir():
            (tmp / d).symlink_to(f"usr/{d}")
    _relative_links(tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


class Sysroots:
    """The unpacked interpreters and qemu, cached under ``cache``."""

    def __init__(self, cache: Path, refresh: bool):
        self.cache, self.refresh = cache, refresh
        self._apts: dict[tuple[str, str], Apt] = {}
        self.made: set[str] = set()      # fetched and unpacked in this run

    def apt(self, suite: str, arch: str) -> Apt:
        if (suite, arch) not in self._apts:
            a = Apt(self.cache / "apt" / f"{suite}-{arch}", suite, arch)
            a.update(force=self.refresh)
            self._apts[suite, arch] = a
        return self._apts[suite, arch]

    def _unpacked(self, name: str, make, keep: tuple[str, ...] = ()) -> Path:
        dest = self.cache / "sysroots" / name
        stamp = dest / ".release-check-packages"
        if stamp.exists() and (not self.refresh or name in self.made):
            return dest
        debs = make()
        unpack_debs(debs, dest, keep)
        stamp.write_text("".join(f"{d.name}\n" for d in debs))
        for folder in {d.parent for d in debs}:       # unpacked: the packages are not needed
            shutil.rmtree(folder, ignore_errors=True)
        self.made.add(name)
        return dest

    def interpreter(self, interp: Interpreter) -> Path:
        def make():
            apt = self.apt(interp.suite, interp.arch)
            packages = apt.closure(f"python{interp.version}")
            log(f"{interp.key}: downloading python{interp.version} and its closure ({len(packages)} "
                f"packages: {' '.join(packages)})")
            debdir = self.cache / "debs" / interp.key
            shutil.rmtree(debdir, ignore_errors=True)
            return apt.download(packages, debdir)
        return self._unpacked(interp.key, make)

    def qemu(self) -> Path:
        """qemu-aarch64-static from Debian bookworm's qemu-user-static (amd64), unpacked."""
        def make():
            log("downloading qemu-user-static (bookworm, amd64)")
            return self.apt("bookworm", "amd64").download(["qemu-user-static"], self.cache / "debs" / "qemu")
        # The package holds every target's emulator (some 370 MB unpacked): one is kept.
        return self._unpacked("qemu", make, keep=("usr/bin/qemu-aarch64-static",)) / "usr/bin/qemu-aarch64-static"

    def command(self, interp: Interpreter) -> tuple[list[str], Path]:
        """(the command prefix that runs the interpreter, its sysroot; a local one's prefix)."""
        if interp.kind == "local":
            python = local_python(interp.version)
            if python is None or interp.emulated:
                raise RuntimeError(f"no CPython {interp.version} here")
            return [str(python)], python.resolve().parent.parent
        root = self.interpreter(interp)
        python = root / f"usr/bin/python{interp.version}"
        if interp.emulated:
            if interp.arch != "arm64":
                raise RuntimeError(f"no emulator for {interp.arch} here")
            return [str(self.qemu()), "-L", str(root), str(python)], root
        # Natively through the sysroot's loader: its libc, not the host's (trixie's glibc is
        # newer than bookworm's), and no host library from /etc/ld.so.cache.
        libs = [root / f"lib/{interp.triplet}", root / f"usr/lib/{interp.triplet}"]
        loaders = [d / interp.loader for d in libs if (d / interp.loader).exists()]
        if not loaders:
            raise RuntimeError(f"{root}: no {interp.loader} (libc6 not unpacked?)")
        return [str(loaders[0]), "--inhibit-cache", "--library-path", ":".join(map(str, libs)),
                str(python)], root


# -- wheels --------------------------------------------------------------------------------

@dataclass
class Wheel:
    path: Path
    tags: set = field(default_factory=set)   # {(python, abi, platform)}

    @classmethod
    def parse(cls, path: Path) -> Wheel:
        parts = path.name[:-len(".whl")].split("-")
        if len(parts) not in (5, 6):
            raise ValueError(f"{path.name}: not a wheel file name")
        py, abi, plat = parts[-3:]
        return cls(path, {(p, a, t) for p in py.split(".") for a in abi.split(".") for t in plat.split(".")})

    @property
    def name(self) -> str:
        return self.path.name


_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _platform_fits(tag: str, interp: Interpreter) -> bool:
    if tag == "any":
        return True
    if tag == f"linux_{interp.machine}":             # a local build: this machine's kind
        return True
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if m:
        return m.group(3) == interp.machine and (int(m.group(1)), int(m.group(2))) <= interp.glibc
    legacy, _, arch = tag.partition("_")
    return legacy in _LEGACY and arch == interp.machine and _LEGACY[legacy] <= interp.glibc


def _python_fits(py: str, abi: str, interp: Interpreter) -> bool:
    minor = int(interp.version.split(".")[1])
    if abi == interp.tag and py == interp.tag:
        return True
    if abi == "abi3" and (m := re.fullmatch(r"cp3(\d+)", py)):
        return int(m.group(1)) <= minor
    return abi == "none" and py in ("py3", f"py3{minor}", interp.tag)


def fits(wheel: Wheel, interp: Interpreter) -> bool:
    return any(_python_fits(py, abi, interp) and _platform_fits(plat, interp) for py, abi, plat in wheel.tags)


def why_not_run(wheel: Wheel) -> str:
    plats = {p for _, _, p in wheel.tags}
    pys = sorted({py for py, _, _ in wheel.tags})
    if any(p.startswith("musllinux") for p in plats):
        return ("no musl CPython here: Alpine's packages are in no registry reachable from this "
                "machine, and Debian's CPython is built for glibc")
    machines = {m for p in plats for m in ("x86_64", "aarch64") if p.endswith(m)}
    if machines and not machines & {i.machine for i in INTERPRETERS}:
        return f"no interpreter for {', '.join(sorted(machines))} here"
    shipped = ", ".join(f"{i.version} ({i.suite})" for i in INTERPRETERS if i.kind == "debian" and i.arch == "amd64")
    debian = f"Debian's packages hold CPython {shipped} only"
    local = [i for i in INTERPRETERS if i.kind == "local"]
    absent = [i.version for i in local if fits(wheel, i) and not i.available()]
    if absent:
        return f"no CPython {'/'.join(absent)} here: none under pyenv, and {debian}"
    other = [i for i in local if i.available() and any(_python_fits(py, abi, i) for py, abi, _ in wheel.tags)]
    return f"no CPython for {'/'.join(pys)} here: {debian}" + \
        "".join(f"; pyenv's CPython {i.version} here is {i.machine} only" for i in other)


def requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist entries that no extra gates."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


_FETCHED: set[Path] = set()     # requirement folders fetched in this run


def requirement_wheels(reqs: list[str], interp: Interpreter, cache: Path, refresh: bool) -> list[Path]:
    """Wheels of ``reqs`` (and their requirements) for the interpreter's platform, from PyPI
    through this Python's pip, cached by requirement set and platform."""
    if not reqs:
        return []
    platforms = [f"manylinux_2_{m}_{interp.machine}" for m in range(interp.glibc[1], 16, -1)]
    platforms += [f"manylinux2014_{interp.machine}"]
    key = hashlib.sha256(json.dumps([reqs, platforms, interp.tag]).encode()).hexdigest()[:12]
    dest = cache / "requirements" / f"{interp.tag}-{interp.machine}-{key}"
    if (dest / ".complete").exists() and (not refresh or dest in _FETCHED):
        return sorted(dest.glob("*.whl"))
    shutil.rmtree(dest, ignore_errors=True)
    log(f"pip download {' '.join(reqs)} for {interp.tag} {interp.machine}")
    run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
         *(a for p in platforms for a in ("--platform", p)), "--python-version", interp.version,
         "--implementation", "cp", "--abi", interp.tag, "-d", dest, *reqs], timeout=900)
    (dest / ".complete").touch()
    _FETCHED.add(dest)
    return sorted(dest.glob("*.whl"))


# -- the runs ------------------------------------------------------------------------------

def record(kind: str, i: int) -> tuple[bytes, bytes]:
    """The key and value of record ``i`` of ``kind`` (send or many): compressible text and
    every byte value."""
    key = f"{kind}-{i}".encode()
    value = (f"{kind} record {i};" * 8).encode() + bytes((i + j) % 256 for j in range(64))
    return key, value


# What every foreign run reports besides its own results: the programs and shared objects it
# mapped (the host checks where they came from).
MAPS = r'''
def mapped_files():
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/"):
                found.add(fields[5].strip())
    return sorted(found)
'''

PRODUCER = textwrap.dedent(inspect.getsource(record)) + MAPS + r'''
import json, platform, sys, time

cfg = json.loads(sys.argv[1])
started = time.monotonic()
import kproducer, kproducer._core, kproducer._codec, kproducer._net
from kproducer import Producer
imported = time.monotonic() - started
n, topic = cfg["records"], cfg["topic"]
producer = Producer({"bootstrap.servers": cfg["bootstrap"], "security.protocol": "SSL",
                     "ssl.truststore.location": cfg["ca"], "compression.type": cfg["compression"],
                     "max.block.ms": 60000})
try:
    futures = [producer.send(topic, value=v, key=k) for k, v in (record("send", i) for i in range(n))]
    columns = [record("many", i) for i in range(n)]
    many = producer.send_many(topic, [v for _, v in columns], keys=[k for k, _ in columns], futures=True)
    producer.flush(120)
    many.raise_for_errors()
    acked = {kind: [[md.partition, md.offset] for md in (f.result(0) for f in fs)]
             for kind, fs in (("send", futures), ("many", many.futures))}
finally:
    producer.close(30)
print(json.dumps({
    "python": platform.python_version(), "machine": platform.machine(), "libc": platform.libc_ver(),
    "modules": {m.__name__: m.__file__ for m in (kproducer, kproducer._core, kproducer._codec,
                                                  kproducer._net)},
    "c_codecs": sorted(kproducer._core.courier_codecs()),
    "import_seconds": round(imported, 2), "acked": acked, "maps": mapped_files()}))
'''

# For an interpreter no wheel of the folder fits (an aarch64 one before aarch64 wheels exist):
# the interpreter, its stdlib's compiled modules, kproducer's runtime requirements for its
# platform, and a TLS round trip (ApiVersions v0) with the broker, without kproducer.
PROBE = MAPS + r'''
import bz2, ctypes, hashlib, json, lzma, platform, socket, ssl, struct, sys, time, zlib

cfg = json.loads(sys.argv[1])
started = time.monotonic()
imported = {}
for name in cfg["imports"]:
    module = __import__(name)
    imported[name] = module.__file__
import cramjam
data = b"kproducer " * 1000
assert bytes(cramjam.zstd.decompress(cramjam.zstd.compress(data))) == data
assert zlib.decompress(zlib.compress(data)) == data and lzma.decompress(lzma.compress(data)) == data
assert ctypes.sizeof(ctypes.c_void_p) == 8
host, port = cfg["bootstrap"].rsplit(":", 1)
context = ssl.create_default_context(cafile=cfg["ca"])
with socket.create_connection((host, int(port)), timeout=30) as raw, \
        context.wrap_socket(raw, server_hostname=host) as tls:
    client = b"release-check-probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client)) + client    # ApiVersions v0, correlation 7
    tls.sendall(struct.pack(">i", len(body)) + body)
    def read(n):
        buf = b""
        while len(buf) < n:
            chunk = tls.recv(n - len(buf))
            if not chunk:
                raise EOFError("the broker closed the connection")
            buf += chunk
        return buf
    size, = struct.unpack(">i", read(4))
    payload = read(size)
    correlation, error, count = struct.unpack(">ihi", payload[:10])
    apis = [struct.unpack(">hhh", payload[10 + 6 * i:16 + 6 * i]) for i in range(count)]
    tls_version = tls.version()
print(json.dumps({
    "python": platform.python_version(), "machine": platform.machine(), "libc": platform.libc_ver(),
    "openssl": ssl.OPENSSL_VERSION, "tls": tls_version, "correlation": correlation, "error": error,
    "produce": [a for a in apis if a[0] == 0], "modules": imported,
    "seconds": round(time.monotonic() - started, 2), "maps": mapped_files()}))
'''


@dataclass
class Row:
    wheel: str
    interpreter: str
    ok: bool
    result: str
    seconds: float | None = None


class Broker:
    """Tansu behind the TLS terminator, on the host, for the whole check."""

    def __init__(self, directory: Path):
        from kproducer.testing import TansuBroker
        from kproducer.testing.broker import free_port
        from kproducer.testing.tls import TestPki, TlsTerminator

        directory.mkdir(parents=True)
        self.pki = TestPki(directory / "pki")
        tls_port = free_port()
        self.broker = TansuBroker(port=free_port(), advertised_port=tls_port, log_dir=str(directory)).start()
        self.tunnel = TlsTerminator(self.pki, self.broker.port, port=tls_port, directory=str(directory / "tls"))
        try:
            self.tunnel.start()
        except BaseException:
            self.broker.stop()
            raise

    @property
    def bootstrap(self) -> str:
        return self.tunnel.bootstrap

    def close(self) -> None:
        try:
            self.tunnel.stop()
        finally:
            self.broker.stop()


@dataclass
class Check:
    """What the release check shares between runs."""
    sysroots: Sysroots
    cache: Path
    records: int
    refresh: bool
    _broker: Broker | None = None
    runs: int = 0

    def __post_init__(self):
        # This check's own folder (broker, runs): another check may run beside it. Those of
        # checks that are gone are removed; this one is removed at the end unless a run failed.
        for old in self.cache.glob("work-*"):
            pid = old.name.split("-", 1)[1]
            if not (pid.isdigit() and Path(f"/proc/{pid}").exists()):
                shutil.rmtree(old, ignore_errors=True)
        self.work = self.cache / f"work-{os.getpid()}"
        self.work.mkdir()

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = Broker(self.work / "broker")
        return self._broker

    def close(self) -> list[Row]:
        """Stops the broker; a row if it logged a CRC error or a panic."""
        if self._broker is None:
            return []
        self._broker.close()
        try:
            self._broker.broker.check_log()
        except AssertionError as exc:
            return [Row("(broker)", "Tansu", False, f"FAILED: {exc}".replace("\n", " ")[:600])]
        return []

    def run_foreign(self, interp: Interpreter, name: str, archives: list[Path], script: str,
                    cfg: dict) -> tuple[dict, Path, Path]:
        """Runs ``script`` under the interpreter with the ``archives`` (wheels) unpacked onto its
        PYTHONPATH, in a fresh folder NAME of this check's: (its JSON output, its sysroot, the
        site folder). Checks that it is the interpreter's machine and Python, and that every
        program and shared object it mapped came from the sysroot or the site folder."""
        prefix, sysroot = self.sysroots.command(interp)
        work = self.work / name
        site = work / "site"
        for archive in archives:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(site)
        (work / "script.py").write_text(script)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work),
               "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
        if interp.kind == "debian":
            env["PYTHONHOME"] = str(sysroot / "usr")
        proc = subprocess.run([*prefix, "-s", str(work / "script.py"), json.dumps(cfg)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        (work / "stdout").write_text(proc.stdout)
        (work / "stderr").write_text(proc.stderr)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise AssertionError(f"exited with {proc.returncode}: {tail} (log: {work}/stderr)")
        out = json.loads(lines[-1])
        assert out["machine"] == interp.machine, f"ran as {out['machine']}, not {interp.machine}"
        assert out["python"].startswith(interp.version + "."), f"Python {out['python']}"
        # The loader falls back to the host's /lib for a library missing from both folders:
        # that must not happen. (Data files such as the host's locale archive do not count.)
        # A local interpreter runs with the system's libraries it links itself (libc, libssl)
        # and those a manylinux wheel may take from the system (libgcc_s, libpthread).
        allowed = (str(sysroot.resolve()) + os.sep, str(site.resolve()) + os.sep)
        system = system_libraries(Path(prefix[0])) if interp.kind == "local" else frozenset()
        objects = [m for m in out["maps"] if re.search(r"\.so(\.|$)", m) or "/bin/" in m]
        foreign = [m for m in objects if not os.path.realpath(m).startswith(allowed)
                   and os.path.realpath(m) not in system]
        where = "the interpreter's prefix, the system libraries it and manylinux may use" if system \
            else "the sysroot"
        assert not foreign, f"loaded from outside {where} and the wheel: {foreign[:5]}"
        for module, path in out["modules"].items():
            if module in cfg.get("from_site", ()):
                assert path and os.path.realpath(path).startswith(allowed[1]), \
                    f"{module} was loaded from {path}, not from the unpacked wheels"
        return out, sysroot, site

    def run_wheel(self, wheel: Wheel, interp: Interpreter) -> Row:
        from kproducer.testing.readback import read_back

        started = time.monotonic()
        try:
            deps = requirement_wheels(requirements(wheel.path), interp, self.cache, self.refresh)
            self.runs += 1
            topic = f"release-check-{self.runs}-{interp.key}"
            self.broker.broker.create_topic(topic, 3)
            log(f"{wheel.name} under {interp.label()}")
            modules = ["kproducer", "kproducer._core", "kproducer._codec", "kproducer._net"]
            cfg = {"bootstrap": self.broker.bootstrap, "ca": self.broker.pki.ca_file, "topic": topic,
                   "records": self.records, "compression": "zstd", "from_site": modules}
            out, _, _ = self.run_foreign(interp, f"{wheel.path.stem}--{interp.key}", [wheel.path, *deps],
                                         PRODUCER, cfg)
            assert any("/kproducer/_net." in m for m in out["maps"]), "kproducer._net is not mapped"

            got = read_back(self.broker.bootstrap, topic, timeout=120,
                            consumer_config={"security.protocol": "SSL", "ssl.ca.location": self.broker.pki.ca_file})
            where: dict[tuple, list] = {}
            for msgs in got.values():
                for m in msgs:
                    where.setdefault((m.key, m.value), []).append([m.partition, m.offset])
            total = sum(len(msgs) for msgs in got.values())
            assert total == 2 * self.records, f"read back {total} records, sent {2 * self.records}"
            for kind in ("send", "many"):
                acked = out["acked"][kind]
                assert len(acked) == self.records, f"{kind}: {len(acked)} acknowledged of {self.records}"
                for i, position in enumerate(acked):
                    seen = where.get(record(kind, i), [])
                    assert seen == [position], \
                        f"{kind} record {i}: acknowledged at {position}, read back at {seen or 'nowhere'}"
            result = (f"ok: Python {out['python']}, {out['libc'][0]} {out['libc'][1]}; {self.records} send() + "
                      f"{self.records} send_many() over TLS (zstd), each read back once where acknowledged; "
                      f"C codecs: {', '.join(out['c_codecs']) or 'none'}; import {out['import_seconds']:.1f} s")
            return Row(wheel.name, interp.label(), True, result, time.monotonic() - started)
        except Exception as exc:       # one wheel's failure is a row of the table, not the end
            return Row(wheel.name, interp.label(), False, _failure(exc), time.monotonic() - started)

    def run_probe(self, interp: Interpreter) -> Row:
        started = time.monotonic()
        what = "— (no wheel for it: interpreter probe)"
        try:
            reqs = project_requirements()
            deps = requirement_wheels(reqs, interp, self.cache, self.refresh)
            log(f"probe of {interp.label()} (no wheel for it)")
            imports = [r.split(">")[0].split("=")[0].split("<")[0].strip() for r in reqs]
            cfg = {"bootstrap": self.broker.bootstrap, "ca": self.broker.pki.ca_file, "imports": imports,
                   "from_site": imports}
            out, _, _ = self.run_foreign(interp, f"probe--{interp.key}", deps, PROBE, cfg)
            assert out["correlation"] == 7 and out["error"] == 0, f"ApiVersions answered {out}"
            assert out["produce"], "ApiVersions lists no Produce"
            result = (f"interpreter ok, no kproducer wheel run: Python {out['python']}, {out['libc'][0]} "
                      f"{out['libc'][1]}, {out['openssl']}; {', '.join(imports)} from its "
                      f"{interp.machine} wheel; ssl, zlib, lzma, ctypes; ApiVersions over {out['tls']} "
                      f"to the broker; {out['seconds']:.1f} s in the interpreter")
            return Row(what, interp.label(), True, result, time.monotonic() - started)
        except Exception as exc:
            return Row(what, interp.label(), False, _failure(exc), time.monotonic() - started)


def _failure(exc: BaseException) -> str:
    return f"FAILED: {type(exc).__name__}: {exc}".replace("\n", " ")[:600]


def project_requirements() -> list[str]:
    """pyproject.toml's runtime dependencies (what a wheel's Requires-Dist holds)."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"].get("dependencies", []))


def check_wheel(wheel: Path) -> tuple[bool, str]:
    proc = run([sys.executable, ROOT / "scripts/check_wheel.py", wheel], check=False, timeout=600)
    if proc.returncode == 0:
        return True, "check_wheel ok"
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    # "check_wheel: NAME: problem" lines, else (it crashed) the exception's line.
    problems = [ln.split(": ", 2)[-1] for ln in lines if ln.startswith("check_wheel:")] or lines[-1:]
    return False, "check_wheel FAILED: " + "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else "")


def table(rows: list[Row]) -> str:
    lines = ["| wheel | interpreter | result | seconds |", "|---|---|---|---|"]
    for r in rows:
        secs = "" if r.seconds is None else f"{r.seconds:.1f}"
        wheel = r.wheel if r.wheel.startswith(("—", "(")) else f"`{r.wheel}`"
        cells = [c.replace("|", "\\|") for c in (wheel, r.interpreter, r.result, secs)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check_release", description=__doc__.split("\n\n")[0])
    parser.add_argument("wheelhouse", nargs="?", default=str(ROOT / "wheelhouse"))
    keys = [i.key for i in INTERPRETERS]
    parser.add_argument("--interpreters", default=",".join(keys), help=f"a comma-separated subset of {keys}")
    parser.add_argument("--records", type=int, default=1000, help="records sent with send() and again with "
                        "send_many() per run (default 1000)")
    parser.add_argument("--no-probe", action="store_true", help="skip the probe of interpreters that no "
                        "wheel of the folder fits")
    parser.add_argument("--markdown", help="default: WHEELHOUSE/release-check.md")
    parser.add_argument("--cache", default=os.environ.get("KPRODUCER_RELEASE_CHECK_CACHE",
                                                          str(ROOT / ".release-check")))
    parser.add_argument("--refresh", action="store_true", help="fetch apt lists, packages and wheels again")
    args = parser.parse_args(argv)

    unknown = set(args.interpreters.split(",")) - set(keys)
    if unknown:
        parser.error(f"unknown interpreters {sorted(unknown)}; known: {keys}")
    selected = [i for i in INTERPRETERS if i.key in args.interpreters.split(",")]
    house, cache = Path(args.wheelhouse), Path(args.cache).resolve()
    wheels = [Wheel.parse(p) for p in sorted(house.glob("kproducer-*.whl"))]
    if not wheels:
        log(f"no kproducer-*.whl in {house}")
        return 2
    for tool in ("apt-get", "apt-cache", "dpkg"):
        if shutil.which(tool) is None:
            log(f"{tool} not found: the interpreters come from Debian's packages (a Debian or Ubuntu host)")
            return 2
    cache.mkdir(parents=True, exist_ok=True)
    # One check at a time per cache: they would fetch into the same sysroots.
    lock = open(cache / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"waiting for another release check using {cache}")
        fcntl.flock(lock, fcntl.LOCK_EX)
    check = Check(Sysroots(cache, args.refresh), cache, args.records, args.refresh)
    rows: list[Row] = []
    ready: dict[str, float] = {}
    used: set[Interpreter] = set()
    started = time.monotonic()

    def prepare(interp: Interpreter) -> None:
        if interp.key not in ready:
            t0 = time.monotonic()
            try:
                check.sysroots.command(interp)
            except Exception as exc:    # the runs report it
                log(f"{interp.key}: {exc}")
            ready[interp.key] = time.monotonic() - t0

    try:
        for wheel in wheels:
            checked, verdict = check_wheel(wheel.path)
            targets = [i for i in INTERPRETERS if fits(wheel, i) and i.available()]
            if not targets:
                rows.append(Row(wheel.name, "—", checked, f"checked, not run: {verdict}; {why_not_run(wheel)}"))
            for interp in targets:
                if interp not in selected:
                    rows.append(Row(wheel.name, interp.label(), checked,
                                    f"not run: interpreter not selected (--interpreters); {verdict}"))
                    continue
                used.add(interp)
                prepare(interp)
                row = check.run_wheel(wheel, interp)
                row.ok = row.ok and checked
                row.result += f"; {verdict}"
                rows.append(row)
        if not args.no_probe:
            for interp in selected:
                if interp not in used and interp.available():
                    prepare(interp)
                    rows.append(check.run_probe(interp))
    finally:
        rows += check.close()

    md = table(rows)
    total = time.monotonic() - started
    local = {i.key: local_python(i.version) for i in INTERPRETERS if i.kind == "local"}
    notes = [f"- {key}: interpreter ready in {secs:.1f} s ("
             + (f"pyenv's {local[key]}" if key in local else
                "apt-get download + dpkg -x" if key in check.sysroots.made else "from the cache") + ")"
             for key, secs in ready.items()]
    report = (f"# Release check\n\n`scripts/check_release.sh` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
              f", host {platform.machine()} {platform.platform(terse=True)}: {len(wheels)} wheel(s), "
              f"{total:.0f} s.\n\n{md}\n\n" + "\n".join(notes) + "\n")
    out = Path(args.markdown) if args.markdown else house / "release-check.md"
    out.write_text(report)
    if all(r.ok for r in rows):
        shutil.rmtree(check.work, ignore_errors=True)
    else:
        log(f"the runs' folders, with their logs, are kept in {check.work}")
    print(md)
    print("\n".join(notes))
    log(f"{sum(r.ok for r in rows)} of {len(rows)} rows ok in {total:.0f} s; written to {out}")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    # The host side imports kproducer.testing from this checkout; its helpers start
    # `python -m kproducer.testing.tls_terminator`, which must find it too.
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    sys.exit(main(sys.argv[1:]))
