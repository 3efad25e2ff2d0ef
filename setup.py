"""Build of kproducer's compiled core.

KPRODUCER_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer
(-O1, frame pointers, KP_DEBUG asserts); run it with the ASan runtime preloaded
(see README.md). KPRODUCER_DEBUG=1 turns on KP_DEBUG asserts alone.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

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
    extension("kproducer._codec", "kproducer/_codec.pyx", *CSRC),
    extension("kproducer._accumulator", "kproducer/_accumulator.pyx", "csrc/kp_turn.c", *CSRC),
    # TLS is OpenSSL 3 (Debian: libssl-dev to build, libssl3 to run).
    extension("kproducer._net", "kproducer/_net.pyx", "csrc/kp_selector.c", "csrc/kp_tls.c", "csrc/kp_buf.c",
              "csrc/kp_frame.c", libraries=("ssl", "crypto")),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["."],
    ),
)
