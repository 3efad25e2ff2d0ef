"""The release wheel (scripts/build_wheel.sh): built once for this module (or reused from
wheelhouse/ when it is newer than every source file), then checked from outside:

- its tag is manylinux2014 / manylinux_2_17 and ``auditwheel show`` agrees; its compiled
  modules need no OpenSSL (nor anything else) from outside the wheel (scripts/check_wheel.py);
  it carries the licences of the vendored codecs and of the OpenSSL and zlib linked into it;
- that guard fails on the regressions it exists for (a module linked to the system's
  libssl, one importing OpenSSL unversioned, one needing a newer glibc, one exporting its
  internals, a wrong tag, another architecture's tag, a musllinux tag on a glibc build, a
  Python tag its modules' suffix does not load);
- installed alone into a fresh venv with no compiler on the path, it imports from that venv,
  loads no system OpenSSL, and passes the end-to-end, TLS and Spark ``ship(spark, wheel)``
  tests (this directory's, run by that venv's interpreter where the source tree is not
  importable), and finds a RHEL-layout CA bundle (/etc/pki/tls/certs/ca-bundle.crt);
- the sdist it was built from holds what a source build needs, and a source build without
  OpenSSL headers stops with a message naming them.

The first build on a machine takes about 4 minutes (OpenSSL is compiled once and cached in
~/.cache/kproducer-build); installing the wheel's [test] extra and the tests about 5 more.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

# The first test builds the wheel (OpenSSL too, on a new machine), the first installed-wheel
# test installs the [test] extra: more than pyproject's 600 s on a slow day.
pytestmark = pytest.mark.timeout(2400)

ROOT = Path(__file__).resolve().parents[2]
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
PLATFORMS = {"manylinux2014_x86_64", "manylinux_2_17_x86_64"}
# What goes into the wheel: a wheel older than any of these is rebuilt.
SOURCES = ("csrc", "kproducer", "scripts", "setup.py", "pyproject.toml", "MANIFEST.in", "README.md")
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-gcc-12")


def _run(cmd, *, timeout=600, check=True, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    return proc


def _source_files() -> list[Path]:
    proc = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *SOURCES], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode == 0:
        files = [ROOT / f for f in proc.stdout.splitlines()]
    else:   # not a git checkout: all but compiled modules and generated C
        files = [p for s in SOURCES for p in ([ROOT / s] if (ROOT / s).is_file() else (ROOT / s).rglob("*"))
                 if "__pycache__" not in p.parts and p.suffix != ".so"
                 and not (p.suffix == ".c" and p.parent.name == "kproducer")]
    return [f for f in files if f.is_file()]


@pytest.fixture(scope="module")
def release() -> tuple[Path, Path]:
    """(wheel, sdist) in wheelhouse/: reused when newer than every source file, else built."""
    house = ROOT / "wheelhouse"
    # This cell only: wheelhouse/ may hold the whole release set (build_wheel.sh --all).
    wheels = sorted(house.glob(f"kproducer-*-{TAG}-{TAG}-manylinux2014_x86_64*.whl"))
    sdists = sorted(house.glob("kproducer-*.tar.gz"))
    newest_source = max(f.stat().st_mtime for f in _source_files())
    if len(wheels) == 1 and len(sdists) == 1 and \
            min(wheels[0].stat().st_mtime, sdists[0].stat().st_mtime) > newest_source:
        return wheels[0], sdists[0]
    proc = _run(["bash", ROOT / "scripts/build_wheel.sh", sys.executable], timeout=2400)
    wheel = Path(proc.stdout.strip().splitlines()[-1])
    assert wheel.parent == house and wheel.is_file(), proc.stdout
    sdists = sorted(house.glob("kproducer-*.tar.gz"))
    assert len(sdists) == 1, sdists
    return wheel, sdists[0]


@pytest.fixture(scope="module")
def tools() -> Path:
    """The build script's tools venv (auditwheel)."""
    proc = _run(["bash", ROOT / "scripts/build_wheel.sh", "--tools", sys.executable], timeout=900)
    return Path(proc.stdout.strip().splitlines()[-1])


def _no_compiler_env(tmp: Path, venv: Path | None = None) -> dict:
    """This environment with no C compiler: CC/CXX are /bin/false and every compiler name on
    PATH is a stub that fails; no other venv, no PYTHONPATH."""
    stubs = tmp / "no-compiler"
    stubs.mkdir(exist_ok=True)
    for name in COMPILERS:
        stub = stubs / name
        stub.write_text('#!/bin/sh\necho "no compiler on this machine: $0" >&2\nexit 1\n')
        stub.chmod(0o755)
    other_venv = os.environ.get("VIRTUAL_ENV")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not (other_venv and p.startswith(other_venv)) and p != str(Path(sys.executable).parent)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CFLAGS", "LDFLAGS", "CPPFLAGS")
           and not k.startswith("KPRODUCER_")}
    env.update(CC="/bin/false", CXX="/bin/false",
               PATH=os.pathsep.join([str(stubs), *([str(venv / "bin")] if venv else []), *path]))
    if venv:
        env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture(scope="module")
def wheel_venv(release, tmp_path_factory) -> tuple[Path, dict]:
    """(venv, env): a fresh venv holding the wheel and its [test] extra, installed with no
    compiler on the path; env runs its interpreter the same way."""
    wheel, _ = release
    tmp = tmp_path_factory.mktemp("wheel-venv")
    venv = tmp / "venv"
    env = _no_compiler_env(tmp, venv)
    _run([sys.executable, "-m", "venv", venv], env=env)
    assert _run(["sh", "-c", "command -v gcc; command -v cc"], env=env).stdout.split() == \
        [str(tmp / "no-compiler" / "gcc"), str(tmp / "no-compiler" / "cc")]
    _run([venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[test]"],
         env=env, cwd=tmp, timeout=1800)
    return venv, env


# -- the wheel as built ---------------------------------------------------------------------

def test_tag_and_linkage(release, tools):
    wheel, _ = release
    name, version, py, abi, plat = wheel.name[:-len(".whl")].split("-")
    assert (py, abi) == (TAG, TAG)
    assert set(plat.split(".")) == PLATFORMS, wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        tags = {line.split(":", 1)[1].strip()
                for line in zf.read(f"kproducer-{version}.dist-info/WHEEL").decode().splitlines()
                if line.startswith("Tag:")}
    assert tags == {f"{TAG}-{TAG}-{p}" for p in PLATFORMS}
    assert "pyspark_kproducer/__init__.py" in names
    # No OpenSSL (or other library) grafted in either: it is inside _net.
    assert not [n for n in names if ".libs/" in n or re.search(r"lib(ssl|crypto)", n)], names

    show = " ".join(_run([tools / "bin/auditwheel", "show", wheel]).stdout.split())
    m = re.search(r'consistent with the following platform tag: "([^"]+)"', show)
    assert m and m.group(1) == "manylinux_2_17_x86_64", show
    assert "libssl" not in show and "libcrypto" not in show and "OPENSSL" not in show, show

    out = _run([sys.executable, ROOT / "scripts/check_wheel.py", wheel]).stdout
    assert "ok" in out


def test_wheel_carries_the_licences_of_what_is_linked_in(release):
    """PEP 639: the vendored codecs' notices (pyproject's license-files) and those of the
    OpenSSL and zlib that build_wheel.sh links in statically, in .dist-info/licenses/, each
    named by a License-File line of METADATA."""
    wheel, _ = release
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = zf.read(f"{dist_info}/METADATA").decode()
        declared = {ln.split(":", 1)[1].strip() for ln in meta.split("\n\n")[0].splitlines()
                    if ln.startswith("License-File:")}
        shipped = {n[len(f"{dist_info}/licenses/"):] for n in names if n.startswith(f"{dist_info}/licenses/")}
        vendored = {str(p.relative_to(ROOT)) for p in ROOT.glob("csrc/vendor/*/LICENSE*")} | {"csrc/vendor/zstd/COPYING"}
        expected = vendored | {"openssl/LICENSE.txt", "zlib/LICENSE"}
        assert declared == shipped == expected, (declared, shipped)
        assert "Apache License" in zf.read(f"{dist_info}/licenses/openssl/LICENSE.txt").decode()
        assert "Jean-loup Gailly" in zf.read(f"{dist_info}/licenses/zlib/LICENSE").decode()
        for path in vendored:
            assert zf.read(f"{dist_info}/licenses/{path}") == (ROOT / path).read_bytes(), path


BAD_SOURCES = {
    # Linked to this machine's libssl.so.3 (what a plain `pip wheel .` does).
    "system-libssl": ("#include <openssl/ssl.h>\nvoid *PyInit__net(void) { return SSL_CTX_new(TLS_client_method()); }\n",
                      ["-lssl", "-lcrypto"], "needs libssl.so.3, an OpenSSL outside the wheel"),
    # OpenSSL not linked at all: bound at load time to whatever OpenSSL the process has.
    "unversioned": ("#include <openssl/ssl.h>\nvoid *PyInit__net(void) { return SSL_CTX_new(TLS_client_method()); }\n",
                    [], "imports SSL_CTX_new without a version"),
    # Built against this machine's glibc: reallocarray is GLIBC_2.26.
    "new-glibc": ("#define _GNU_SOURCE\n#include <stdlib.h>\nvoid *PyInit__net(void) { return reallocarray(0, 4, 4); }\n",
                  [], "GLIBC_2.26"),
    # No version script: internals (an OpenSSL linked statically, say) visible to the process.
    "exports": ("int kp_internal(int x) { return x + 1; }\nint PyInit__net(void) { return kp_internal(1); }\n",
                [], "exports kp_internal"),
}


def _rewrite(wheel: Path, dest: Path, *, replace: dict | None = None, wheel_tag: str | None = None,
             python: str = TAG) -> Path:
    """A copy of ``wheel`` named ``dest`` with members replaced and the WHEEL file's tags set
    (platform tags ``wheel_tag``, python and abi tag ``python``)."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if replace and info.filename in replace:
                data = replace[info.filename]
            if wheel_tag and info.filename.endswith(".dist-info/WHEEL"):
                lines = [ln for ln in data.decode().splitlines() if not ln.startswith("Tag:")]
                data = "\n".join([*lines, *(f"Tag: {python}-{python}-{t}" for t in wheel_tag.split("."))]).encode() + b"\n"
            out.writestr(info, data)
    return dest


def test_guard_fails_on_regressions(release, tmp_path):
    wheel, _ = release
    guard = [sys.executable, ROOT / "scripts/check_wheel.py"]
    with zipfile.ZipFile(wheel) as zf:
        net = next(n for n in zf.namelist() if n.startswith("kproducer/_net.") and n.endswith(".so"))
    cases = []
    for label, (source, libs, expected) in BAD_SOURCES.items():
        c = tmp_path / f"{label}.c"
        c.write_text(source)
        so = tmp_path / f"{label}.so"
        _run(["gcc", "-shared", "-fPIC", "-O1", "-o", so, c, *libs])
        (tmp_path / label).mkdir()
        cases.append((label, _rewrite(wheel, tmp_path / label / wheel.name, replace={net: so.read_bytes()}),
                      expected))
    stem = wheel.name.split("-manylinux")[0]
    for label, plat, expected in (
            ("linux-tag", "linux_x86_64", "not a manylinux or musllinux tag"),
            ("newer-tag", "manylinux_2_34_x86_64", "needs glibc 2.34, above 2.17"),
            # x86_64 modules in a wheel that says aarch64.
            ("arch", "manylinux2014_aarch64", "e_machine Advanced Micro Devices X86-64, not AArch64"),
            # glibc-built modules (GLIBC_2.x symbol versions, .cpython-3X-x86_64-linux-gnu.so) as musllinux.
            ("musl", "musllinux_1_2_x86_64", "musl has none"),
            ("newer-musl", "musllinux_1_3_x86_64", "needs musl 1.3, above 1.2")):
        (tmp_path / label).mkdir()
        cases.append((label, _rewrite(wheel, tmp_path / label / f"{stem}-{plat}.whl", wheel_tag=plat), expected))
    # Tagged for another CPython: its modules' suffix (.cpython-311-...) would not load there.
    other = "cp399"
    (tmp_path / "python-tag").mkdir()
    renamed = wheel.name.replace(f"-{TAG}-{TAG}-", f"-{other}-{other}-")
    cases.append(("python-tag", _rewrite(wheel, tmp_path / "python-tag" / renamed,
                                         wheel_tag=wheel.name[:-4].split("-")[-1], python=other),
                  "not the suffix .cpython-399-x86_64-linux-gnu.so"))
    # The name claims manylinux2014, the WHEEL file says otherwise.
    (tmp_path / "mismatch").mkdir()
    cases.append(("mismatch", _rewrite(wheel, tmp_path / "mismatch" / wheel.name, wheel_tag="linux_x86_64"),
                  "WHEEL says"))
    for label, bad, expected in cases:
        proc = _run([*guard, bad], check=False)
        assert proc.returncode == 1 and expected in proc.stderr, (label, proc.stdout, proc.stderr)
    # The unmodified wheel passes.
    assert _run([*guard, wheel]).returncode == 0


# -- the sdist and source builds ------------------------------------------------------------

def test_sdist_holds_what_a_source_build_needs(release):
    _, sdist = release
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    needed = {"setup.py", "pyproject.toml", "MANIFEST.in", "README.md"}
    for pattern in ("csrc/*.c", "csrc/*.h", "kproducer/*.pyx", "kproducer/*.pxd", "kproducer/*.pxi",
                    "kproducer/*.pyi", "kproducer/_core_parts/*.pxi", "kproducer/_cdefs/*.pxd"):
        found = {str(p.relative_to(ROOT)) for p in ROOT.glob(pattern)}
        assert found, pattern
        needed |= found
    assert not needed - names, (top, sorted(needed - names))
    # No compiled module from the build tree.
    assert not [n for n in names if n.endswith(".so")], names


def _source_copy(dest: Path) -> Path:
    """The sdist's files from the tree, plus the C that Cython generated for the in-place
    build when it is there (cythonize skips up-to-date modules: the test stays quick)."""
    for f in _source_files():
        rel = f.relative_to(ROOT)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / rel)
    for c in ROOT.glob("kproducer/_*.c"):
        shutil.copy2(c, dest / "kproducer" / c.name)
    return dest


def _openssl_header_dirs() -> list[str]:
    """The folders named openssl/ that the C compiler reads <openssl/ssl.h> from (Debian:
    /usr/include/openssl and /usr/include/<triplet>/openssl)."""
    proc = subprocess.run(["cc", "-E", "-H", "-x", "c", "-o", os.devnull, "-"], input="#include <openssl/ssl.h>\n",
                          capture_output=True, text=True)
    headers = [line.lstrip(". ").strip() for line in proc.stderr.splitlines() if line.startswith(".")]
    return sorted({str(Path(h).resolve().parent) for h in headers if Path(h).resolve().parent.name == "openssl"})


def test_source_build_without_openssl_headers_names_them(tmp_path):
    src = _source_copy(tmp_path / "src")
    fake = tmp_path / "openssl-1.1" / "openssl"
    fake.mkdir(parents=True)
    (fake / "ssl.h").write_text("#define OPENSSL_VERSION_NUMBER 0x1010117fL\n")
    hidden = _openssl_header_dirs()
    assert hidden, "the compiler finds no openssl/ssl.h here"
    (tmp_path / "empty").mkdir()
    # No OpenSSL headers: an empty folder mounted over each openssl/ folder the compiler reads,
    # in a private mount namespace; zlib's headers (probed first) and the rest stay.
    hide = 'for d in "$@"; do mount --bind "$EMPTY" "$d"; done; exec "$PY" setup.py build_ext --build-temp "$BT" --build-lib "$BL"'
    build = [sys.executable, "setup.py", "build_ext", "--build-temp", tmp_path / "bt", "--build-lib", tmp_path / "bl"]
    for label, cmd, cflags, expected in (
            ("hidden", [*_unshare(), "sh", "-c", hide, "hide", *hidden], "",
             "openssl/ssl.h not found: install libssl-dev (Debian/Ubuntu) or openssl-devel (RHEL/Fedora)"),
            ("old", build, f"-I{fake.parent}", "older than 3.0")):
        env = dict(os.environ, CFLAGS=cflags, EMPTY=str(tmp_path / "empty"), PY=sys.executable,
                   BT=str(tmp_path / "bt"), BL=str(tmp_path / "bl"))
        env.pop("KPRODUCER_SANITIZE", None)
        proc = _run(cmd, cwd=src, env=env, check=False, timeout=600)
        assert proc.returncode != 0 and expected in proc.stderr, (label, proc.stdout[-3000:] + proc.stderr[-3000:])
        # Nothing was compiled before the check.
        assert not list((tmp_path / "bt").rglob("*.o")), label


# -- the wheel installed --------------------------------------------------------------------

PROBE = """
import os, sys
try:
    import _ssl
except ImportError:
    pass                        # this interpreter's own OpenSSL is gone...
else:
    raise AssertionError("the system OpenSSL is still there")
import kproducer, kproducer._net as net, kproducer._codec, kproducer._core
prefix = os.path.realpath(sys.prefix) + os.sep
for m in (kproducer, net, kproducer._codec, kproducer._core):
    assert os.path.realpath(m.__file__).startswith(prefix), m.__file__
net.TlsContext()                # ...and the system CA store loads through the OpenSSL inside _net
maps = open("/proc/self/maps").read()
assert "libssl" not in maps and "libcrypto" not in maps
print("ok", kproducer.__file__)
"""

SYSTEM_OPENSSL = """
import _ssl
print("\\n".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libssl" in l or "libcrypto" in l})))
"""


def _unshare() -> list[str]:
    """A command prefix running its command in a private mount namespace."""
    return ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--mount", "--map-root-user"]


INSTALLED_CHECK = '''"""Written by tests/broker/test_wheel.py: the tests run with it run against the installed wheel."""
import os
import sys

import kproducer
import kproducer._core
import kproducer._codec
import kproducer._net


def test_kproducer_is_the_installed_wheel():
    prefix = os.path.realpath(sys.prefix) + os.sep
    for module in (kproducer, kproducer._net, kproducer._codec, kproducer._core):
        assert os.path.realpath(module.__file__).startswith(prefix), module.__file__


def test_the_wheel_s_courier_compresses_with_the_codecs_inside_it():
    """scripts/build_wheel.sh links zlib, lz4, zstd and snappy (with zig's libc++)
    statically into _core."""
    from kproducer import compression
    assert kproducer._core.courier_codecs() == {"gzip", "lz4", "zstd", "snappy"}
    data = b"".join(b"%d:%x;" % (i % 64, i % 64 * 7919) for i in range(5000))
    for name in ("gzip", "lz4", "zstd", "snappy"):
        packed = kproducer._core.c_compress(name, data)
        assert len(packed) < len(data) // 4
        assert compression.decompress(compression.CODEC_IDS[name], packed) == data
'''


def test_installed_wheel_works_without_system_openssl(wheel_venv, tmp_path):
    """The installed wheel imports from its venv and makes a TLS context with the system's
    libssl and libcrypto hidden (/dev/null mounted over them in a private mount namespace)."""
    venv, env = wheel_venv
    libs = _run([venv / "bin/python", "-c", SYSTEM_OPENSSL], env=env).stdout.split()
    assert any("libssl" in lib for lib in libs) and any("libcrypto" in lib for lib in libs), libs
    hide = 'for f in "$@"; do mount --bind /dev/null "$f"; done; exec "$0" -c "$PROBE"'
    out = _run([*_unshare(), "sh", "-c", hide, venv / "bin/python", *libs], env=dict(env, PROBE=PROBE),
               cwd=tmp_path).stdout
    assert out.startswith("ok ")


@pytest.mark.slow
def test_installed_wheel_passes_end_to_end_tls_and_ship_tests(release, wheel_venv, tmp_path):
    wheel, _ = release
    venv, env = wheel_venv
    run = tmp_path / "run"       # the tests and pytest's settings, no kproducer source
    shutil.copytree(ROOT / "tests", run / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", run / "pyproject.toml")
    (run / "tests" / "unit" / "test_installed_wheel.py").write_text(INSTALLED_CHECK)
    env = dict(env, KPRODUCER_TEST_SHIP_WHEEL=str(wheel))
    proc = _run([venv / "bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs",
                 "--durations=0", "--durations-min=1000",     # the failures fill the tail
                 "tests/unit/test_installed_wheel.py", "tests/broker/test_end_to_end.py", "tests/broker/test_tls.py",
                 "tests/broker/test_spark.py::test_ship_to_local_cluster_executors_without_kproducer"],
                cwd=run, env=env, check=False, timeout=2300)
    out = proc.stdout + proc.stderr
    summary = out.strip().splitlines()[-1]
    assert proc.returncode == 0, out[-8000:]
    assert " passed" in summary and "skipped" not in summary and "deselected" not in summary, summary
    assert int(re.search(r"(\d+) passed", summary).group(1)) > 10, summary
    print("installed wheel:", summary)


RHEL_CLIENT = """
import sys
from kproducer import Producer
from kproducer.errors import KafkaError
p = Producer(bootstrap_servers=sys.argv[1], security_protocol="SSL", max_block_ms=20000)
try:
    md = p.send("rhel", b"v").result(timeout=30)
    print("ACKED", md.offset)
except KafkaError as exc:
    print("FAILED", exc)
finally:
    p.close(10)
"""

# In a private mount namespace: /etc laid out as on RHEL / Amazon Linux (/etc/ssl/certs a link
# to /etc/pki/tls/certs, the bundle in ca-bundle.crt, no /etc/ssl/cert.pem), the rest of /etc
# as it is. $1: a directory to see the real /etc through, $2: the CA bundle (or ""), then the
# command.
RHEL_ETC = r"""
set -e
real=$1; bundle=$2; shift 2
mount --rbind /etc "$real"
mount -t tmpfs tmpfs /etc
for e in $(ls -A "$real"); do
    case $e in ssl|pki) ;; *) ln -s "$real/$e" "/etc/$e" ;; esac
done
mkdir -p /etc/pki/tls/certs /etc/ssl
ln -s /etc/pki/tls/certs /etc/ssl/certs
[ -z "$bundle" ] || cp "$bundle" /etc/pki/tls/certs/ca-bundle.crt
exec "$@"
"""


def test_installed_wheel_trusts_the_rhel_ca_bundle(wheel_venv, tmp_path):
    """With no ssl.truststore.location the wheel's OpenSSL (OPENSSLDIR /etc/ssl) finds the CAs
    where RHEL-family systems keep them; without that bundle the same broker is untrusted."""
    from kproducer.testing import TansuBroker
    from kproducer.testing.broker import free_port
    from kproducer.testing.tls import TestPki, TlsTerminator

    venv, env = wheel_venv
    pki = TestPki(tmp_path / "pki")
    (tmp_path / "client.py").write_text(RHEL_CLIENT)
    (tmp_path / "rhel-etc.sh").write_text(RHEL_ETC)
    (tmp_path / "real-etc").mkdir()
    tls_port = free_port()
    broker = TansuBroker(port=free_port(), advertised_port=tls_port, log_dir=str(tmp_path)).start()
    tunnel = TlsTerminator(pki, broker.port, port=tls_port, directory=str(tmp_path / "tls"))
    try:
        tunnel.start()
        broker.create_topic("rhel", 1)
        results = {}
        # As on a RHEL machine: no SSL_CERT_FILE / SSL_CERT_DIR naming Debian's paths.
        env = {k: v for k, v in env.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        for label, bundle in (("rhel", str(pki.ca_file)), ("no-bundle", "")):
            proc = _run([*_unshare(), "sh", tmp_path / "rhel-etc.sh", tmp_path / "real-etc", bundle,
                         venv / "bin/python", tmp_path / "client.py", tunnel.bootstrap],
                        env=env, cwd=tmp_path, check=False, timeout=120)
            results[label] = proc.stdout.strip().splitlines()[-1:] or [proc.stderr[-2000:]]
    finally:
        tunnel.stop()
        broker.stop()
    broker.check_log()
    assert results["rhel"] == ["ACKED 0"], results
    assert "certificate verify failed" in results["no-bundle"][0], results
