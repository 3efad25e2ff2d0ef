#!/usr/bin/env python3
"""Checks a kproducer release wheel: the platform tag it claims and what its compiled
modules need from the machine they are loaded on (read from their ELF dynamic sections
with ``readelf``, from binutils).

    python scripts/check_wheel.py dist/kproducer-*.whl

Fails (exit 1, one line per problem) when

- the file name's platform tags are not all manylinux tags of glibc <= 2.17 (manylinux2014,
  manylinux_2_17 or older), or the WHEEL file's tags differ from the name's;
- a compiled module of kproducer (``_codec``, ``_accumulator``, ``_net``) is missing;
- a compiled module needs a shared library that is neither in the manylinux2014 set (libc,
  libpthread, libdl, libm, ...) nor shipped inside the wheel: above all ``libssl`` or
  ``libcrypto``, since OpenSSL is linked statically into ``_net``;
- it needs a symbol version above GLIBC_2.17 (or the manylinux2014 limits of libgcc_s and
  libstdc++);
- it imports a symbol without a version that is not Python's (``Py*``/``_Py*``) and not
  weak: such a symbol comes from whatever library the process has loaded (an OpenSSL
  function would bind to the interpreter's OpenSSL, of whatever version);
- it exports anything but its ``PyInit_*`` function (the static OpenSSL must stay private
  to the module, whatever other OpenSSL the process loads).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MAX_GLIBC = (2, 17)
# PEP 599 (manylinux2014): the libraries a wheel may expect on the system, and the newest
# symbol versions it may use from them.
SYSTEM_LIBS = {"libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libc.so.6",
               "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libresolv.so.2", "libcrypt.so.1",
               "ld-linux-x86-64.so.2"}
MAX_VERSIONS = {"GLIBC": MAX_GLIBC, "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7), "GCC": (4, 8, 0)}
EXTENSIONS = ("kproducer/_codec", "kproducer/_accumulator", "kproducer/_net")
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_x86_64$")
_LEGACY = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}


def _readelf(*args: str) -> str:
    proc = subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"readelf {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def check_tags(wheel: Path, wheel_file: str) -> list[str]:
    problems = []
    parts = wheel.name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        return [f"{wheel.name}: not a wheel file name"]
    py, abi, plat = parts[-3:]
    for tag in plat.split("."):
        glibc = _LEGACY.get(tag) or (tuple(map(int, m.groups())) if (m := _MANYLINUX.match(tag)) else None)
        if glibc is None:
            problems.append(f"platform tag {tag}: not a manylinux x86_64 tag")
        elif glibc > MAX_GLIBC:
            problems.append(f"platform tag {tag}: needs glibc {glibc[0]}.{glibc[1]}, above 2.17")
    named = {f"{p}-{a}-{t}" for p in py.split(".") for a in abi.split(".") for t in plat.split(".")}
    declared = {line.split(":", 1)[1].strip() for line in wheel_file.splitlines() if line.startswith("Tag:")}
    if declared != named:
        problems.append(f"WHEEL says {sorted(declared)}, the file name {sorted(named)}")
    return problems


def check_module(so: Path, name: str, bundled: set[str]) -> list[str]:
    problems = []
    dynamic = _readelf("-d", str(so))
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic):
        if lib in bundled:
            continue
        if re.match(r"lib(ssl|crypto)\b", lib):
            problems.append(f"{name}: needs {lib}, an OpenSSL outside the wheel")
        elif lib not in SYSTEM_LIBS:
            problems.append(f"{name}: needs {lib}, neither a manylinux2014 system library nor in the wheel")

    # Version needs: "File: libc.so.6 ..." then "Name: GLIBC_2.14 ..." lines.
    current = None
    for line in _readelf("-V", str(so)).splitlines():
        if m := re.search(r"File: (\S+)", line):
            current = m.group(1)
        elif (m := re.search(r"Name: (\S+)", line)) and current is not None and current not in bundled:
            ns, _, ver = m.group(1).partition("_")
            limit = MAX_VERSIONS.get(ns)
            if limit is None:
                problems.append(f"{name}: needs symbol version {m.group(1)} from {current}")
            elif _version(ver) > limit:
                problems.append(f"{name}: needs {m.group(1)} from {current}, above {ns}_{'.'.join(map(str, limit))}")

    for line in _readelf("--dyn-syms", str(so)).splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name [(version index)]
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        kind, bind, ndx, symbol = fields[3], fields[4], fields[6], fields[7]
        if ndx == "UND":
            plain = symbol.split("@")[0]
            if "@" not in symbol and bind != "WEAK" and not plain.startswith(("Py", "_Py")):
                problems.append(f"{name}: imports {plain} without a version (would bind to any library "
                                f"in the process)")
        elif bind in ("GLOBAL", "WEAK", "UNIQUE") and kind != "SECTION" and not symbol.startswith("PyInit_"):
            problems.append(f"{name}: exports {symbol.split('@')[0]} (only PyInit_* may be visible)")
    return problems


def check_wheel(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        names = zf.namelist()
        wheel_files = [n for n in names if n.endswith(".dist-info/WHEEL")]
        if len(wheel_files) != 1:
            return [f"{wheel.name}: {len(wheel_files)} .dist-info/WHEEL files"]
        problems = check_tags(wheel, zf.read(wheel_files[0]).decode())
        modules = [n for n in names if n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1]]
        for ext in EXTENSIONS:
            if not any(n.startswith(ext + ".") and n.endswith(".so") for n in modules):
                problems.append(f"{ext}: no compiled module in the wheel")
        # Libraries auditwheel grafted into the wheel (<package>.libs/) resolve inside it.
        bundled = {n.rsplit("/", 1)[-1] for n in modules if ".libs/" in n}
        for n in modules:
            path = Path(zf.extract(n, tmp))
            problems += check_module(path, n, bundled)
        return problems


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
            print(f"check_wheel: {wheel.name}: ok (manylinux glibc <= 2.17, no OpenSSL or other "
                  f"library from outside the wheel, exports only PyInit_*)")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
