"""Build checks: the wheel works without the source tree, the sanitizer build runs the
codec tests clean, the plain-C tests in csrc/tests pass (also under sanitizers), and the
codecs compiled in are the ones vendored in csrc/vendor, whatever the machine has.

These build real artefacts, so they take a minute or two; they run in CI like the rest.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]


def _run(cmd, *, cwd=None, env=None, timeout=900):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _copy_source(dest: Path) -> Path:
    """The source tree as a fresh clone with the working tree's changes would have it: the
    files git tracks or would track (nothing it ignores: no build output, venv, wheelhouse or
    unpacked sysroots), or, outside a git checkout, the tree minus the usual build output."""
    src = dest / "src"
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "*.so", "_codec.c", "_net.c", "__pycache__",
            ".hypothesis", ".pytest_cache", "bench-results*", "wheelhouse", ".release-check"))
        return src
    for name in listed.stdout.split("\0"):
        path = ROOT / name
        if name and path.is_file():         # a tracked file deleted in the working tree is not
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    return src


@pytest.mark.timeout(900)
def test_wheel_installs_and_imports_in_clean_venv(tmp_path):
    src = _copy_source(tmp_path)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(dist), "--no-deps",
          "--no-build-isolation", "-q"])
    wheels = list(dist.glob("kproducer-*.whl"))
    assert len(wheels) == 1, wheels
    # The top-level module PySpark finds the data source by (kproducer/_spark_discovery).
    with zipfile.ZipFile(wheels[0]) as zf:
        assert "pyspark_kproducer/__init__.py" in zf.namelist()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", str(wheels[0])])
    shutil.rmtree(src)  # nothing may come from the source tree
    check = (
        "import kproducer, kproducer.codec as c, os, sys;"
        "assert os.path.realpath(kproducer.__file__).startswith(os.path.realpath(sys.prefix)), kproducer.__file__;"
        "assert c.crc32c(b'123456789') == 0xE3069283;"
        "b = c.encode_batch([(b'k', b'v', 1, [('h', None)])], compression='lz4');"
        "r = c.decode_batch(b).records[0];"
        "assert (r.key, r.value, r.timestamp, r.headers) == (b'k', b'v', 1, [('h', None)]);"
        "print('ok', kproducer.__file__)"
    )
    out = _run([str(py), "-c", check], cwd=tmp_path).stdout
    assert out.startswith("ok ")


def _asan_runtime() -> str:
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        assert os.path.isabs(path) and os.path.exists(path), f"gcc has no {name} (install libasan)"
        libs.append(path)
    return ":".join(libs)


@pytest.mark.timeout(1800)
def test_sanitizer_build_runs_codec_tests_clean(tmp_path):
    src = _copy_source(tmp_path)
    env = dict(os.environ, KPRODUCER_SANITIZE="1")
    _run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=src, env=env)
    env = dict(os.environ, PYTHONPATH=str(src), LD_PRELOAD=_asan_runtime(),
               # CPython's own allocations are not ours to judge; leaks are checked in C tests.
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    probe = _run([sys.executable, "-c", "import kproducer._codec as m, kproducer._net as n; print(m.__file__); print(n.__file__)"],
                 cwd=src, env=env)
    assert all(line.startswith(str(src)) for line in probe.stdout.split()), probe.stdout
    proc = subprocess.run(
        # No durations table (pyproject's addopts): the failure is what the tail must hold.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--durations=0",
         "--durations-min=1000",
         "tests/unit/test_codec.py", "tests/unit/test_differential.py", "tests/broker/test_selector.py",
         # The Produce request and response codec against the generic one and the broker.
         "tests/unit/test_produce_fast.py", "tests/broker/test_produce_fast_against_tansu.py",
         # TLS inside the selector (OpenSSL's buffers, the handshake in poll, 4 MiB frames).
         "tests/broker/test_selector_tls.py",
         # The accumulator and send_many (raw pointers into NumPy/Arrow buffers, batches
         # grown in place) against the real broker; the million-record test is too slow here.
         "tests/broker/test_send_many.py", "tests/broker/test_producer.py",
         "tests/unit/test_producer_without_a_broker.py",
         # The courier thread: batches sealed and sent beside appends, the selector shared.
         "tests/unit/test_courier.py", "tests/broker/test_courier_in_a_producer.py",
         # The C codecs, and a step's batch compressed in place without the GIL.
         "tests/unit/test_c_compress.py", "tests/broker/test_c_compress_read_by_librdkafka.py",
         # The network paths against hostile peers and the real broker, and the argument
         # checks of the public API (error paths release what they took).
         "tests/resilience/test_hostile.py", "tests/broker/test_end_to_end.py", "tests/unit/test_accumulator.py",
         "tests/broker/test_validation.py",
         # Not the million-record test (too slow here), nor one that times the GIL's hand-over.
         "-k", "not million and not without_the_gil"],
        cwd=src, env=env, capture_output=True, text=True, timeout=1100)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "runtime error" not in output and "AddressSanitizer" not in output, output[-6000:]
    assert " passed" in output
    # The fuzz corpora (seeds and regressions) through the C decoders under ASan/UBSan.
    # Only a replay: gcc's libasan provides the coverage symbols atheris needs, so fuzzing
    # proper runs on the plain build (tests/resilience/test_fuzz.py).
    for target, corpus in (("decode_batch", "decode_batch"), ("batch_differential", "decode_batch"),
                           ("frame_receiver", "frame_receiver"), ("varint", "varint"),
                           ("produce_response", "produce_response")):
        seeds = sorted(str(p) for p in (src / "tests/fuzz/corpus" / corpus).iterdir())
        replay = subprocess.run([sys.executable, f"tests/fuzz/fuzz_{target}.py", *seeds],
                                cwd=src, env=dict(env, KPRODUCER_FUZZ_ROOT=str(src)),
                                capture_output=True, text=True, timeout=300, check=False)
        output = replay.stdout + replay.stderr
        assert replay.returncode == 0 and f"Executed {seeds[-1]}" in output, output[-4000:]
        assert "runtime error" not in output and "AddressSanitizer" not in output, output[-4000:]
    # LeakSanitizer over producer create/send/close cycles and the codec's error paths.
    # PYTHONMALLOC=malloc puts every Python object on the heap LSan scans, so a buffer
    # held by a live object is reachable; what is reported is really lost.
    leaks = _run([sys.executable, "tests/_leak_cycles.py"], cwd=src,
                 env=dict(env, PYTHONMALLOC="malloc", ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                          LSAN_OPTIONS="exitcode=23:fast_unwind_on_malloc=0"), timeout=900)
    assert "cycles done" in leaks.stdout


VENDOR = ROOT / "csrc" / "vendor"
# The vendored sources setup.py compiles (setup.py: C_CODECS).
VENDORED_SOURCES = ["lz4/lz4.c", "lz4/lz4frame.c", "lz4/lz4hc.c", "lz4/xxhash.c", "zstd/zstd.c",
                    "snappy/snappy.c", "snappy/snappy-c.c"]
# Every header a vendored source or kp_compress.c includes from csrc/vendor, by name.
VENDORED_HEADERS = ["lz4.h", "lz4frame.h", "lz4frame_static.h", "lz4hc.h", "xxhash.h", "zstd.h",
                    "zstd_errors.h", "snappy-c.h", "snappy.h", "snappy_compat.h", "rd.h",
                    "rdkafka_int.h", "rdendian.h"]


def _vendored_versions() -> dict:
    """csrc/vendor/VERSIONS: codec -> (Debian source package, Debian version, upstream version)."""
    out = {}
    for line in (VENDOR / "VERSIONS").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            out[fields[0]] = tuple(fields[1:4])
    return out


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _defined_in(lib: ctypes.CDLL, symbol: str) -> str:
    """The file whose code ``symbol`` (as ``lib``'s lookups resolve it) lies in (dladdr(3))."""
    try:
        dladdr = ctypes.CDLL(None).dladdr          # glibc >= 2.34: in libc
    except AttributeError:
        dladdr = ctypes.CDLL("libdl.so.2").dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    info = _DlInfo()
    assert dladdr(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p), ctypes.byref(info)), symbol
    return os.path.realpath(info.dli_fname.decode())


def test_the_extension_compresses_with_the_vendored_codecs():
    """kproducer._core has the codecs of csrc/vendor inside: lz4 and zstd report the
    versions csrc/vendor/VERSIONS names, and every codec's entry points (snappy's: librdkafka's
    C port under kproducer's Google-style interface) are code of the module's own file, not
    of a system liblz4, libzstd or libsnappy, installed here or not."""
    import kproducer._core as acc

    path = os.path.realpath(acc.__file__)
    lib = ctypes.CDLL(path)         # the module already loaded: the same handle
    versions = _vendored_versions()
    assert sorted(versions) == ["lz4", "snappy", "zstd"], versions

    def number(version: str) -> int:
        major, minor, release = (int(x) for x in version.split("."))
        return major * 100 * 100 + minor * 100 + release

    assert lib.LZ4_versionNumber() == number(versions["lz4"][2]), versions["lz4"]
    assert lib.ZSTD_versionNumber() == number(versions["zstd"][2]), versions["zstd"]
    for symbol in ("LZ4_versionNumber", "LZ4F_compressBegin", "LZ4F_compressUpdate", "LZ4_compress_HC",
                   "ZSTD_versionNumber", "ZSTD_compressCCtx", "snappy_compress",
                   "rd_kafka_snappy_compress_iov"):
        assert _defined_in(lib, symbol) == path, symbol


def test_the_vendored_headers_win_over_any_on_the_include_path(tmp_path):
    """kp_compress.c and the vendored sources read the codecs' headers of csrc/vendor even with
    other copies ahead of them on the include path (a system's liblz4-dev, or -I in CFLAGS):
    with headers of those names that stop the compiler put first (-iquote and -I), each still
    preprocesses, and every codec header it reads is csrc/vendor's."""
    poison = tmp_path / "poison"
    poison.mkdir()
    for name in VENDORED_HEADERS:
        (poison / name).write_text(f'#error "{name} from the include path, not from csrc/vendor"\n')
    defines = [f"-D{m}=1" for m in ("KP_HAVE_ZLIB", "KP_HAVE_LZ4", "KP_HAVE_ZSTD", "KP_HAVE_SNAPPY")]
    for src in ["csrc/kp_compress.c", *(f"csrc/vendor/{s}" for s in VENDORED_SOURCES)]:
        deps = tmp_path / (Path(src).name + ".d")
        _run(["gcc", "-M", "-MF", str(deps), f"-iquote{poison}", f"-I{poison}", f"-I{ROOT / 'csrc'}",
              *defines, str(ROOT / src)])
        read = [Path(p) for p in deps.read_text().replace("\\\n", " ").split()[1:]]
        codec_headers = [p for p in read if p.name in VENDORED_HEADERS]
        # The zstd amalgamation reads none: its headers are inlined.
        assert codec_headers or src.endswith("zstd/zstd.c"), src
        assert all(p.resolve().is_relative_to(VENDOR) for p in codec_headers), (src, codec_headers)
        if src == "csrc/kp_compress.c":
            assert {"lz4frame.h", "zstd.h", "snappy-c.h"} <= {p.name for p in codec_headers}, codec_headers


# The C files each plain-C test links besides its own csrc/kp_<unit>.c.
C_UNIT_DEPS = {
    "crc32c": [],
    "produce": [],
    # The courier with a fake selector: batches, the Produce encoder, the turn's counters, the
    # C codecs (gzip alone: the system's zlib; the vendored ones need not be linked).
    "courier": ["produce", "batch", "buf", "crc32c", "turn", "compress"],
}
# (defines, libraries) of a plain-C test.
# The courier's test holds the courier inside kp_compress through the linker's --wrap (a gate
# the test opens), to catch it compressing every time.
C_UNIT_LIBS = {"courier": (["-DKP_HAVE_ZLIB=1"], ["-lz", "-Wl,--wrap=kp_compress"])}


@pytest.mark.parametrize("flags", [[], SANITIZE], ids=["plain", "asan-ubsan"])
@pytest.mark.parametrize("unit", sorted(C_UNIT_DEPS))
def test_c_unit_tests(tmp_path, flags, unit):
    exe = tmp_path / f"test_{unit}"
    sources = [str(ROOT / f"csrc/kp_{name}.c") for name in (unit, *C_UNIT_DEPS[unit])]
    defines, libraries = C_UNIT_LIBS.get(unit, ([], []))
    _run(["gcc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", *flags, *defines, f"-I{ROOT / 'csrc'}",
          *sources, str(ROOT / f"csrc/tests/test_{unit}.c"), "-pthread", *libraries, "-o", str(exe)])
    out = _run([str(exe)]).stdout
    assert " 0 failures" in out and f"test_{unit}:" in out
