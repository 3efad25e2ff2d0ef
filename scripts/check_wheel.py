#!/usr/bin/env python3
"""Checks kproducer release wheels: the tags they claim and what their compiled modules need
from the machine they are loaded on (read from their ELF headers and dynamic sections with
``readelf``, from binutils, which reads every architecture's ELF files).

    python scripts/check_wheel.py wheelhouse/kproducer-*.whl

Wheels of x86_64 and aarch64, manylinux (glibc <= 2.17: manylinux2014, manylinux_2_17 or
older) and musllinux (musllinux_1_2 or older, PEP 656), per CPython version (``cpXY-cpXY``)
or abi3 (``cpXY-abi3``). Fails (exit 1, one line per problem) when

- the file name's platform tags are not all manylinux tags of glibc <= 2.17 or all musllinux
  tags of musl <= 1.2, of one architecture; or the WHEEL file's tags differ from the name's;
  or the Python and ABI tags are not ``cpXY-cpXY`` or ``cpXY-abi3``;
- a compiled module of kproducer (``_codec``, ``_core``, ``_net``) is missing, or its
  file name's suffix is not the one its tags load (``.cpython-XY-<arch>-linux-gnu.so``,
  ``...-linux-musl.so`` for musllinux, ``.abi3.so`` for abi3);
- an ELF file of the wheel is not a 64-bit ELF of the tag's architecture (e_machine);
- a compiled module needs a shared library that is neither the platform's (manylinux2014's
  set: libc, libpthread, libdl, libm, ... and the architecture's loader; musllinux: musl's
  libc, ``libc.so``, ``libc.musl-<arch>.so.1``, ``ld-musl-<arch>.so.1``) nor shipped inside the
  wheel: above all ``libssl`` or ``libcrypto``, since OpenSSL is linked statically into
  ``_net``;
- manylinux: it needs a symbol version above GLIBC_2.17 (or the manylinux2014 limits of
  libgcc_s and libstdc++), or imports a symbol without a version that is not Python's
  (``Py*``/``_Py*``) and not weak: such a symbol comes from whatever library the process has
  loaded (an OpenSSL function would bind to the interpreter's OpenSSL, of whatever version);
- musllinux: it needs any symbol version (musl has none), or imports a symbol that is neither
  Python's nor musl's (musl's symbols: zig's musl stub ``lib/libc/musl/libc.S`` when the
  ``ziglang`` package is importable, else the names of what is linked in statically:
  OpenSSL's, zlib's, the codecs' and kproducer's own C);
- abi3: it imports a ``_Py*`` symbol outside the stable ABI's ABI-only names
  (``Misc/stable_abi.toml``);
- it exports anything but its ``PyInit_*`` function (the static OpenSSL must stay private
  to the module, whatever other OpenSSL the process loads).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MAX_GLIBC = (2, 17)
MAX_MUSL = (1, 2)
# e_machine as readelf names it, and the glibc loader, per architecture of the tags.
MACHINES = {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}
GLIBC_LOADERS = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}
# PEP 599 (manylinux2014): the libraries a wheel may expect on the system, and the newest
# symbol versions it may use from them.
MANYLINUX_LIBS = {"libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libc.so.6",
                  "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libresolv.so.2", "libcrypt.so.1"}
MAX_VERSIONS = {"GLIBC": MAX_GLIBC, "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7), "GCC": (4, 8, 0)}
EXTENSIONS = ("kproducer/_codec", "kproducer/_core", "kproducer/_net")
# What is linked statically into the modules (OpenSSL, zlib, the vendored codecs, our C): an
# unresolved import of one of these names would bind to any library of the process.
STATIC_PREFIXES = ("SSL_", "SSL", "TLS_", "EVP_", "CRYPTO_", "OPENSSL_", "OSSL_", "BIO_", "X509", "ERR_", "PEM_",
                   "RAND_", "BN_", "EC_", "RSA_", "deflate", "inflate", "crc32", "adler32", "zlib", "compress",
                   "uncompress", "ZSTD_", "LZ4", "XXH", "snappy", "rd_kafka", "kp_")
# The stable ABI's ABI-only names (CPython's Misc/stable_abi.toml, abi_only = true): what
# Limited-API code imports through macros (Py_None, Py_DECREF, Py_BuildValue with
# PY_SSIZE_T_CLEAN, PyObject_GC_New, ...). Any other _Py* import is outside the stable ABI.
ABI3_PRIVATE_OK = {
    "_Py_Dealloc", "_Py_NoneStruct", "_Py_TrueStruct", "_Py_FalseStruct", "_Py_NotImplementedStruct",
    "_Py_EllipsisObject", "_Py_IncRef", "_Py_DecRef", "_Py_SwappedOp", "_Py_CheckRecursiveCall",
    "_PyObject_New", "_PyObject_NewVar", "_PyObject_GC_New", "_PyObject_GC_NewVar", "_PyObject_GC_Resize",
    "_PyObject_CallFunction_SizeT", "_PyObject_CallMethod_SizeT", "_Py_BuildValue_SizeT",
    "_Py_VaBuildValue_SizeT", "_PyArg_Parse_SizeT", "_PyArg_ParseTuple_SizeT",
    "_PyArg_ParseTupleAndKeywords_SizeT", "_PyArg_VaParse_SizeT", "_PyArg_VaParseTupleAndKeywords_SizeT",
    "_PyErr_BadInternalCall", "_PyWeakref_RefType", "_PyWeakref_ProxyType", "_PyWeakref_CallableProxyType",
    "_Py_RefTotal", "_Py_NegativeRefcount", "_PyArg_NoKeywords",
}
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


@dataclass(frozen=True)
class Platform:
    kind: str              # "manylinux" or "musllinux"
    arch: str              # "x86_64", "aarch64"
    version: tuple         # glibc or musl (major, minor)


def parse_platform(tag: str) -> Platform | None:
    """A manylinux or musllinux platform tag of a known architecture, or None."""
    for arch in MACHINES:
        if not tag.endswith("_" + arch):
            continue
        stem = tag[: -len(arch) - 1]
        if stem in _LEGACY:
            return Platform("manylinux", arch, _LEGACY[stem])
        if m := re.fullmatch(r"(manylinux|musllinux)_(\d+)_(\d+)", stem):
            return Platform(m.group(1), arch, (int(m.group(2)), int(m.group(3))))
    return None


def _readelf(*args: str) -> str:
    proc = subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"readelf {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


@lru_cache(maxsize=None)
def musl_symbols() -> frozenset | None:
    """musl's exported names from zig's musl stub (lib/libc/musl/libc.S), or None without the
    ziglang package."""
    try:
        import ziglang
    except ImportError:
        return None
    stub = Path(ziglang.__file__).parent / "lib/libc/musl/libc.S"
    if not stub.is_file():
        return None
    return frozenset(re.findall(r"^([A-Za-z_][\w.]*):$", stub.read_text(), re.M))


@dataclass
class Tags:
    platform: Platform | None
    python: str | None     # "cp311"
    abi3: bool


def check_tags(wheel: Path, wheel_file: str) -> tuple[list[str], Tags]:
    problems: list[str] = []
    parts = wheel.name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        return [f"{wheel.name}: not a wheel file name"], Tags(None, None, False)
    py, abi, plat = parts[-3:]
    platforms = set()
    for tag in plat.split("."):
        p = parse_platform(tag)
        if p is None:
            problems.append(f"platform tag {tag}: not a manylinux or musllinux tag of "
                            f"{' or '.join(MACHINES)}")
            continue
        platforms.add((p.kind, p.arch))
        if p.kind == "manylinux" and p.version > MAX_GLIBC:
            problems.append(f"platform tag {tag}: needs glibc {p.version[0]}.{p.version[1]}, above 2.17")
        if p.kind == "musllinux" and p.version > MAX_MUSL:
            problems.append(f"platform tag {tag}: needs musl {p.version[0]}.{p.version[1]}, above 1.2")
    if len(platforms) > 1:
        problems.append(f"platform tags of more than one libc or architecture: {sorted(platforms)}")
    platform = None
    if len(platforms) == 1:
        kind, arch = next(iter(platforms))
        platform = Platform(kind, arch, MAX_GLIBC if kind == "manylinux" else MAX_MUSL)
    named = {f"{p}-{a}-{t}" for p in py.split(".") for a in abi.split(".") for t in plat.split(".")}
    declared = {line.split(":", 1)[1].strip() for line in wheel_file.splitlines() if line.startswith("Tag:")}
    if declared != named:
        problems.append(f"WHEEL says {sorted(declared)}, the file name {sorted(named)}")
    python = py if re.fullmatch(r"cp3\d+", py) else None
    if python is None or abi not in (py, "abi3"):
        problems.append(f"python and abi tags {py}-{abi}: not cpXY-cpXY or cpXY-abi3")
    return problems, Tags(platform, python, abi == "abi3")


def expected_suffix(tags: Tags) -> str | None:
    if tags.platform is None or tags.python is None:
        return None
    if tags.abi3:
        return ".abi3.so"
    libc = "gnu" if tags.platform.kind == "manylinux" else "musl"
    return f".cpython-{tags.python[2:]}-{tags.platform.arch}-linux-{libc}.so"


def check_elf_header(so: Path, name: str, platform: Platform | None) -> list[str]:
    header = _readelf("-h", str(so))
    cls = re.search(r"Class:\s+(\S+)", header)
    machine = re.search(r"Machine:\s+(.+)", header)
    problems = []
    if not cls or cls.group(1) != "ELF64":
        problems.append(f"{name}: {cls.group(1) if cls else 'no ELF class'}, not ELF64")
    if platform is not None and (not machine or machine.group(1).strip() != MACHINES[platform.arch]):
        problems.append(f"{name}: e_machine {machine.group(1).strip() if machine else '?'}, "
                        f"not {MACHINES[platform.arch]} ({platform.arch}, the tag's)")
    return problems


def check_module(so: Path, name: str, bundled: set[str], platform: Platform | None = None,
                 abi3: bool = False) -> list[str]:
    platform = platform or Platform("manylinux", "x86_64", MAX_GLIBC)
    musl = platform.kind == "musllinux"
    if musl:
        system = {"libc.so", f"libc.musl-{platform.arch}.so.1", f"ld-musl-{platform.arch}.so.1"}
        what = "a musllinux system library"
    else:
        system = MANYLINUX_LIBS | {GLIBC_LOADERS[platform.arch]}
        what = "a manylinux2014 system library"
    problems = check_elf_header(so, name, platform)
    dynamic = _readelf("-d", str(so))
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic):
        if lib in bundled:
            continue
        if re.match(r"lib(ssl|crypto)\b", lib):
            problems.append(f"{name}: needs {lib}, an OpenSSL outside the wheel")
        elif lib not in system:
            problems.append(f"{name}: needs {lib}, neither {what} nor in the wheel")

    # Version needs: "File: libc.so.6 ..." then "Name: GLIBC_2.14 ..." lines.
    current = None
    for line in _readelf("-V", str(so)).splitlines():
        if m := re.search(r"File: (\S+)", line):
            current = m.group(1)
        elif (m := re.search(r"Name: (\S+)", line)) and current is not None and current not in bundled:
            if musl:
                problems.append(f"{name}: needs symbol version {m.group(1)} from {current} (musl has none: "
                                f"built against glibc?)")
                continue
            ns, _, ver = m.group(1).partition("_")
            limit = MAX_VERSIONS.get(ns)
            if limit is None:
                problems.append(f"{name}: needs symbol version {m.group(1)} from {current}")
            elif _version(ver) > limit:
                problems.append(f"{name}: needs {m.group(1)} from {current}, above {ns}_{'.'.join(map(str, limit))}")

    musl_names = musl_symbols() if musl else None
    for line in _readelf("--dyn-syms", str(so)).splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name [(version index)]
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        kind, bind, ndx, symbol = fields[3], fields[4], fields[6], fields[7]
        if ndx == "UND":
            plain = symbol.split("@")[0]
            python = plain.startswith(("Py", "_Py"))
            if abi3 and plain.startswith("_Py") and plain not in ABI3_PRIVATE_OK:
                problems.append(f"{name}: imports {plain}, outside the stable ABI (an abi3 wheel)")
            if python or bind == "WEAK" or "@" in symbol:
                continue
            if not musl:
                problems.append(f"{name}: imports {plain} without a version (would bind to any library "
                                f"in the process)")
            elif musl_names is not None and plain not in musl_names:
                problems.append(f"{name}: imports {plain}, which musl does not have (would bind to any "
                                f"library in the process)")
            elif musl_names is None and plain.startswith(STATIC_PREFIXES):
                problems.append(f"{name}: imports {plain}, which should be linked in (would bind to any "
                                f"library in the process)")
        elif bind in ("GLOBAL", "WEAK", "UNIQUE") and kind != "SECTION" and not symbol.startswith("PyInit_"):
            problems.append(f"{name}: exports {symbol.split('@')[0]} (only PyInit_* may be visible)")
    return problems


def _is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def check_wheel(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        names = zf.namelist()
        wheel_files = [n for n in names if n.endswith(".dist-info/WHEEL")]
        if len(wheel_files) != 1:
            return [f"{wheel.name}: {len(wheel_files)} .dist-info/WHEEL files"]
        problems, tags = check_tags(wheel, zf.read(wheel_files[0]).decode())
        modules = [n for n in names if n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1]]
        suffix = expected_suffix(tags)
        for ext in EXTENSIONS:
            found = [n for n in modules if n.startswith(ext + ".") and n.endswith(".so")]
            if not found:
                problems.append(f"{ext}: no compiled module in the wheel")
            elif suffix and [n for n in found if not n.endswith(suffix)]:
                problems.append(f"{ext}: {', '.join(found)}: not the suffix {suffix} that the tags load")
        # Libraries auditwheel grafted into the wheel (<package>.libs/) resolve inside it.
        bundled = {n.rsplit("/", 1)[-1] for n in modules if ".libs/" in n}
        for n in modules:
            path = Path(zf.extract(n, tmp))
            problems += check_module(path, n, bundled, tags.platform, tags.abi3)
        # Every other ELF file (an executable, a library not named .so) is of the tag's machine.
        for n in names:
            if n in modules or n.endswith("/"):
                continue
            with zf.open(n) as f:
                if _is_elf(f.read(4)):
                    problems += check_elf_header(Path(zf.extract(n, tmp)), n, tags.platform)
        return problems


def describe(wheel: Path) -> str:
    parts = wheel.name[: -len(".whl")].split("-")
    plat = parse_platform(parts[-1].split(".")[0]) if len(parts) >= 5 else None
    if plat is None:
        return "ok"
    libc = (f"glibc <= {MAX_GLIBC[0]}.{MAX_GLIBC[1]}" if plat.kind == "manylinux"
            else f"musl <= {MAX_MUSL[0]}.{MAX_MUSL[1]}")
    return (f"ok ({plat.kind} {plat.arch}, {libc}, every ELF file {plat.arch}, no OpenSSL or other library "
            f"from outside the wheel, exports only PyInit_*)")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    status = 0
    for arg in argv[1:]:
        wheel = Path(arg)
        problems = check_wheel(wheel)
        for p in problems:
            print(f"check_wheel: {wheel.name}: {p}", file=sys.stderr)
        if problems:
            status = 1
        else:
            print(f"check_wheel: {wheel.name}: {describe(wheel)}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
