"""Build of kproducer's compiled core.

KPRODUCER_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer
(-O1, frame pointers, KP_DEBUG asserts); run it with the ASan runtime preloaded
(see docs/development.md). KPRODUCER_DEBUG=1 turns on KP_DEBUG asserts alone.

The courier and the steps compress batches in C (csrc/kp_compress.h), with every codec in
every build:
- lz4, zstd and snappy are vendored in csrc/vendor/ (csrc/vendor/README.md: which versions,
  from which Debian source packages, and scripts/update_vendored.sh, which updates them) and
  compiled into kproducer._core with flags of their own (VENDOR_COMPILE_ARGS: -Wall,
  not our -Wextra set, as they are not our code to fix) and this build's optimisation and
  sanitizers. kp_compress.c includes
  their headers by a path relative to itself ("vendor/lz4/lz4frame.h"), which a C compiler
  looks up beside the including file before any -I or system directory: a system's
  liblz4-dev, libzstd-dev or libsnappy-dev, or -I flags in CFLAGS, are never used, and none
  is needed. tests/broker/test_build.py checks both (the headers a build reads, and the versions the
  built extension reports).
- gzip is the system's zlib (Debian: zlib1g-dev); a build without it stops naming the package.
There is no build without a codec: a missing vendored file stops the build too.

Cross builds (scripts/build_wheel.sh --all, which compiles every wheel of the release set with
zig cc on one machine): KPRODUCER_PYTHON_INCLUDE names the target CPython's header directory
(the one holding Python.h and that target's pyconfig.h), used instead of the running
interpreter's, and KPRODUCER_EXT_SUFFIX the target's extension suffix
(".cpython-312-aarch64-linux-gnu.so", ".cpython-313-x86_64-linux-musl.so"), used instead of
this interpreter's EXT_SUFFIX. Both or neither; unset, the build is the ordinary one.
"""

import hashlib
import os
import subprocess
import sysconfig
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError, LinkError, PlatformError

try:
    from setuptools.modified import newer_group
except ImportError:  # setuptools < 69
    from distutils.dep_util import newer_group

OPENSSL_HINT = ("install libssl-dev (Debian/Ubuntu) or openssl-devel (RHEL/Fedora), or set "
                "CFLAGS=-I<openssl>/include and LDFLAGS=-L<openssl>/lib for an OpenSSL 3 of your own; "
                "or install the manylinux wheel, which has OpenSSL inside (README.md)")
ZLIB_HINT = ("install zlib1g-dev (Debian/Ubuntu) or zlib-devel (RHEL/Fedora), or set "
             "CFLAGS=-I<zlib>/include and LDFLAGS=-L<zlib>/lib")

# The codecs of csrc/kp_compress.c: the macro that turns each on, and the vendored sources
# compiled into the extension that has kp_compress.c (gzip: the system's zlib, -lz).
VENDOR = "csrc/vendor"
C_CODECS = {
    "gzip": ("KP_HAVE_ZLIB", []),
    "lz4": ("KP_HAVE_LZ4", ["lz4/lz4.c", "lz4/lz4frame.c", "lz4/lz4hc.c", "lz4/xxhash.c"]),
    "zstd": ("KP_HAVE_ZSTD", ["zstd/zstd.c"]),
    "snappy": ("KP_HAVE_SNAPPY", ["snappy/snappy.c", "snappy/snappy-c.c"]),
}
VENDORED_SOURCES = [f"{VENDOR}/{path}" for _, paths in C_CODECS.values() for path in paths]


def _vendored_files() -> list:
    """Every file under csrc/vendor (sources, headers): what the vendored objects depend on."""
    return sorted(os.path.join(d, f) for d, _, files in os.walk(VENDOR) for f in files)


# Cross builds: the target CPython's headers and extension suffix (module docstring).
TARGET_PYTHON_INCLUDE = os.environ.get("KPRODUCER_PYTHON_INCLUDE") or None
TARGET_EXT_SUFFIX = os.environ.get("KPRODUCER_EXT_SUFFIX") or None
if bool(TARGET_PYTHON_INCLUDE) != bool(TARGET_EXT_SUFFIX):
    raise SystemExit("KPRODUCER_PYTHON_INCLUDE and KPRODUCER_EXT_SUFFIX go together (a cross build)")
if TARGET_PYTHON_INCLUDE and not os.path.isfile(os.path.join(TARGET_PYTHON_INCLUDE, "Python.h")):
    raise SystemExit(f"KPRODUCER_PYTHON_INCLUDE={TARGET_PYTHON_INCLUDE}: no Python.h there")


class BuildExt(build_ext):
    """build_ext that checks the OpenSSL and zlib headers before compiling anything, so that a
    source build without them fails with one clear message instead of a compiler error deep in
    csrc/kp_tls.c or csrc/kp_compress.c; and compiles the vendored codecs (csrc/vendor) with
    flags of their own into the extension that has csrc/kp_compress.c."""

    def finalize_options(self):
        super().finalize_options()
        if TARGET_PYTHON_INCLUDE:
            # The running interpreter's headers out, the target's first: a cross build must
            # never read this machine's pyconfig.h.
            host = {os.path.realpath(p) for p in (sysconfig.get_path("include"), sysconfig.get_path("platinclude"))
                    if p}
            self.include_dirs = [TARGET_PYTHON_INCLUDE] + [d for d in self.include_dirs
                                                           if os.path.realpath(d) not in host]

    def get_ext_filename(self, fullname):
        name = super().get_ext_filename(fullname)
        host_suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if TARGET_EXT_SUFFIX and name.endswith(host_suffix):
            name = name[: -len(host_suffix)] + TARGET_EXT_SUFFIX
        return name

    def _check_zlib(self, ext: Extension) -> None:
        """Compiles a call into zlib and links it as the extension is linked (a shared object,
        with LDFLAGS), with the compiler and flags of this build: a cross build probes its own
        target."""
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "probe_zlib.c")
            with open(src, "w") as f:
                f.write("#include <zlib.h>\nint kp_probe(void) { return zlibVersion() == 0; }\n")
            try:
                objs = self.compiler.compile([src], output_dir=tmp, include_dirs=self.include_dirs)
                self.compiler.link_shared_object(objs, os.path.join(tmp, "probe.so"), libraries=["z"],
                                                 library_dirs=self.library_dirs)
            except (CompileError, LinkError):
                raise PlatformError(f"zlib (zlib.h and -lz), which {ext.name} compresses gzip with, "
                                    f"is not usable (the compiler's words are above): {ZLIB_HINT}") from None

    def _vendored_objects(self) -> list:
        """The vendored codecs' objects, compiled with VENDOR_COMPILE_ARGS and this build's
        compiler and CFLAGS. Kept in a directory of build_temp named by the command line, so a
        switch to or from KPRODUCER_SANITIZE does not reuse objects of the other build, and
        compiled again only when a file of their codec's directory is newer (the zstd
        amalgamation alone takes 20 s or more)."""
        command = repr((self.compiler.compiler_so, VENDOR_COMPILE_ARGS))
        out = os.path.join(self.build_temp, "vendor-" + hashlib.sha1(command.encode()).hexdigest()[:12])
        objects = self.compiler.object_filenames(VENDORED_SOURCES, strip_dir=0, output_dir=out)
        for src, obj in zip(VENDORED_SOURCES, objects):
            codec_dir = os.path.dirname(src)
            deps = [os.path.join(codec_dir, f) for f in os.listdir(codec_dir)]
            if self.force or newer_group(deps, obj, "newer"):
                self.compiler.compile([src], output_dir=out, debug=self.debug,
                                      extra_postargs=VENDOR_COMPILE_ARGS)
        return objects

    def build_extension(self, ext):
        if "csrc/kp_compress.c" in ext.sources:
            up_to_date = not (self.force or newer_group(sorted(ext.sources) + ext.depends,
                                                        self.get_ext_fullpath(ext.name), "newer"))
            if not up_to_date:
                # A new list: extra_objects is not shared, but keep a rebuild from adding twice.
                vendored = self._vendored_objects()
                ext.extra_objects = [o for o in ext.extra_objects if o not in vendored] + vendored
        super().build_extension(ext)

    def build_extensions(self):
        for ext in self.extensions:
            if "csrc/kp_compress.c" in ext.sources:
                missing = [s for s in VENDORED_SOURCES if not os.path.isfile(s)]
                if missing:
                    raise PlatformError(f"the vendored codec sources {', '.join(missing)} are missing: an "
                                        f"incomplete source tree (csrc/vendor/README.md; "
                                        f"scripts/update_vendored.sh writes them)")
                self._check_zlib(ext)
        compiler = getattr(self.compiler, "compiler_so", None)
        ssl_exts = [e for e in self.extensions if "ssl" in e.libraries]
        if compiler and ssl_exts:
            includes = [f"-I{d}" for d in [*ssl_exts[0].include_dirs, *(self.include_dirs or [])]]
            with tempfile.TemporaryDirectory() as tmp:
                probe = os.path.join(tmp, "openssl_probe.c")
                with open(probe, "w") as f:
                    f.write("#include <openssl/ssl.h>\n#if OPENSSL_VERSION_NUMBER < 0x30000000L\n"
                            "#error kproducer-needs-openssl-3\n#endif\n")
                proc = subprocess.run([*compiler, *includes, "-E", probe, "-o", os.devnull],
                                      capture_output=True, text=True)
            out = proc.stdout + proc.stderr
            error = next((line.strip() for line in out.splitlines() if "error" in line), out.strip()[-300:])
            if proc.returncode != 0 and "kproducer-needs-openssl-3" in out:
                raise PlatformError(f"the OpenSSL headers found are older than 3.0 and kproducer._net needs "
                                    f"OpenSSL 3: {OPENSSL_HINT}")
            if proc.returncode != 0:
                what = "openssl/ssl.h not found" if "openssl/ssl.h" in error else "OpenSSL headers unusable"
                raise PlatformError(f"{what}: {OPENSSL_HINT} ({compiler[0]} -E said: {error})")
        super().build_extensions()


CSRC = ["csrc/kp_buf.c", "csrc/kp_crc32c.c", "csrc/kp_murmur2.c", "csrc/kp_batch.c", "csrc/kp_frame.c"]

warning_args = ["-Wall", "-Wextra", "-Wno-unused-function", "-Wno-missing-field-initializers"]
link_args = []
macros = []
if os.environ.get("KPRODUCER_SANITIZE") == "1":
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    opt_args = san + ["-O1", "-g"]
    link_args += san
    macros.append(("KP_DEBUG", "1"))
elif os.environ.get("KPRODUCER_DEBUG") == "1":
    opt_args = ["-O0", "-g"]
    macros.append(("KP_DEBUG", "1"))
else:
    opt_args = ["-O2"]
compile_args = ["-std=c11", *warning_args, *opt_args]
# The vendored codecs: the language their upstream builds use (the compiler's default), the
# warnings of -Wall only (they build clean with it; -Wextra finds an unused parameter in the
# snappy port, not ours to change), the same optimisation and sanitizers as the rest.
VENDOR_COMPILE_ARGS = ["-Wall", *opt_args]


def extension(name: str, *sources: str, libraries: tuple = (), extra_macros: tuple = (),
              depends: tuple = ()) -> Extension:
    return Extension(
        name,
        list(sources),
        include_dirs=["csrc"],
        define_macros=[*macros, *extra_macros],
        extra_compile_args=compile_args,
        extra_link_args=link_args + ["-pthread"],
        libraries=list(libraries),
        depends=list(depends),
    )


extensions = [
    extension("kproducer._codec", "kproducer/_codec.pyx", "csrc/kp_produce.c", *CSRC),
    # The C codecs (kp_compress.c): every one, zlib from the system and the vendored ones
    # compiled in by BuildExt (their objects are extra_objects, their files depends).
    extension("kproducer._core", "kproducer/_core.pyx", "csrc/kp_turn.c", "csrc/kp_courier.c",
              "csrc/kp_compress.c", "csrc/kp_produce.c", *CSRC, libraries=("z",),
              extra_macros=tuple((macro, "1") for macro, _ in C_CODECS.values()), depends=_vendored_files()),
    # TLS is OpenSSL 3 (Debian: libssl-dev to build, libssl3 to run).
    extension("kproducer._net", "kproducer/_net.pyx", "csrc/kp_selector.c", "csrc/kp_tls.c", "csrc/kp_buf.c",
              "csrc/kp_frame.c", libraries=("ssl", "crypto")),
]

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["."],
    ),
)
