"""Build of kproducer's compiled core.

KPRODUCER_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer
(-O1, frame pointers, KP_DEBUG asserts); run it with the ASan runtime preloaded
(see README.md). KPRODUCER_DEBUG=1 turns on KP_DEBUG asserts alone.
"""

import os
import subprocess
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import PlatformError

OPENSSL_HINT = ("install libssl-dev (Debian/Ubuntu) or openssl-devel (RHEL/Fedora), or set "
                "CFLAGS=-I<openssl>/include and LDFLAGS=-L<openssl>/lib for an OpenSSL 3 of your own; "
                "or install the manylinux wheel, which has OpenSSL inside (README.md)")


class BuildExt(build_ext):
    """build_ext that checks the OpenSSL headers before compiling anything, so that a source
    build without them fails with one clear message instead of a compiler error deep in
    csrc/kp_tls.c."""

    def build_extensions(self):
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
    extension("kproducer._accumulator", "kproducer/_accumulator.pyx", "csrc/kp_turn.c", "csrc/kp_courier.c",
              "csrc/kp_produce.c", *CSRC),
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
