"""Build of kproducer's compiled core.

KPRODUCER_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer
(-O1, frame pointers, KP_DEBUG asserts); run it with the ASan runtime preloaded
(see README.md). KPRODUCER_DEBUG=1 turns on KP_DEBUG asserts alone.

The courier compresses batches in C with the system's codec libraries (csrc/kp_compress.h):
each is linked when its header and library are found (Debian: zlib1g-dev, liblz4-dev,
libzstd-dev, libsnappy-dev); a producer whose codec is not is compressed by its steps
(cramjam). KPRODUCER_C_CODECS=gzip,lz4,zstd,snappy makes those required (the build fails
naming what is missing); KPRODUCER_C_CODECS=none links none.
"""

import os
import subprocess
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError, LinkError, PlatformError

OPENSSL_HINT = ("install libssl-dev (Debian/Ubuntu) or openssl-devel (RHEL/Fedora), or set "
                "CFLAGS=-I<openssl>/include and LDFLAGS=-L<openssl>/lib for an OpenSSL 3 of your own; "
                "or install the manylinux wheel, which has OpenSSL inside (README.md)")


# codec name -> (macro, header, library, a call that needs both)
C_CODECS = {
    "gzip": ("KP_HAVE_ZLIB", "zlib.h", "z", "return zlibVersion() == 0;"),
    "lz4": ("KP_HAVE_LZ4", "lz4frame.h", "lz4", "return LZ4F_getVersion() == 0;"),
    "zstd": ("KP_HAVE_ZSTD", "zstd.h", "zstd", "return ZSTD_versionNumber() == 0;"),
    "snappy": ("KP_HAVE_SNAPPY", "snappy-c.h", "snappy", "return snappy_max_compressed_length(1) == 0;"),
}
CODEC_PACKAGES = {"gzip": "zlib1g-dev", "lz4": "liblz4-dev", "zstd": "libzstd-dev", "snappy": "libsnappy-dev"}


class BuildExt(build_ext):
    """build_ext that checks the OpenSSL headers before compiling anything, so that a source
    build without them fails with one clear message instead of a compiler error deep in
    csrc/kp_tls.c; and links the C codecs it finds into the extension that has
    csrc/kp_compress.c."""

    def _has_codec(self, name: str) -> bool:
        """Compiles a call into the codec's library and links it as the extension is linked
        (a shared object, with LDFLAGS), with the compiler and flags of this build: a cross
        build probes its own target."""
        _, header, library, call = C_CODECS[name]
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, f"probe_{name}.c")
            with open(src, "w") as f:
                f.write(f"#include <{header}>\nint kp_probe(void) {{ {call} }}\n")
            try:
                objs = self.compiler.compile([src], output_dir=tmp, include_dirs=self.include_dirs)
                self.compiler.link_shared_object(objs, os.path.join(tmp, "probe.so"), libraries=[library],
                                                 library_dirs=self.library_dirs)
            except (CompileError, LinkError):
                return False
        return True

    def _link_codecs(self, ext: Extension) -> None:
        wanted = os.environ.get("KPRODUCER_C_CODECS", "").strip()
        if wanted == "none":
            return
        required = {c.strip() for c in wanted.split(",") if c.strip()}
        unknown = required - C_CODECS.keys()
        if unknown:
            raise PlatformError(f"KPRODUCER_C_CODECS: unknown codec(s) {', '.join(sorted(unknown))}; "
                                f"expected some of {', '.join(C_CODECS)}, or none")
        missing = []
        for name, (macro, _, library, _) in C_CODECS.items():
            if self._has_codec(name):
                # New lists: the extensions share their macro list (extension()).
                ext.define_macros = [*ext.define_macros, (macro, "1")]
                ext.libraries = [*ext.libraries, library]
            elif name in required:
                missing.append(name)
        if missing:
            raise PlatformError(f"KPRODUCER_C_CODECS: no usable library for {', '.join(missing)} (install "
                                f"{' '.join(CODEC_PACKAGES[m] for m in missing)}, Debian/Ubuntu)")

    def build_extensions(self):
        for ext in self.extensions:
            if "csrc/kp_compress.c" in ext.sources:
                self._link_codecs(ext)
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

compile_args = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-missing-field-initializers"]
link_args = []
macros = []
if os.environ.get("KPRODUCER_SANITIZE") == "1":
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    compile_args += san + ["-O1", "-g"]
    link_args += san
    macros.append(("KP_DEBUG", "1"))
elif os.environ.get("KPRODUCER_DEBUG") == "1":
    compile_args += ["-O0", "-g"]
    macros.append(("KP_DEBUG", "1"))
else:
    compile_args += ["-O2"]


def extension(name: str, *sources: str, libraries: tuple = ()) -> Extension:
    return Extension(
        name,
        list(sources),
        include_dirs=["csrc"],
        define_macros=macros,
        extra_compile_args=compile_args,
        extra_link_args=link_args + ["-pthread"],
        libraries=list(libraries),
    )


extensions = [
    extension("kproducer._codec", "kproducer/_codec.pyx", "csrc/kp_produce.c", *CSRC),
    # The C codecs (kp_compress.c) are linked by BuildExt as it finds them.
    extension("kproducer._accumulator", "kproducer/_accumulator.pyx", "csrc/kp_turn.c", "csrc/kp_courier.c",
              "csrc/kp_compress.c", "csrc/kp_produce.c", *CSRC),
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
