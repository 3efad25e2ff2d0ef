#!/usr/bin/env bash
# Rewrites the vendored codecs in csrc/vendor/ from the Debian source packages that
# csrc/vendor/VERSIONS names (csrc/vendor/README.md says what is there and why):
#
#     scripts/update_vendored.sh
#
# For each codec: `apt-get source PACKAGE=VERSION` (apt checks what it downloads against its
# signed index; dpkg-source unpacks it with Debian's patches applied), then exactly the files
# kproducer compiles are copied into csrc/vendor/<codec>/ with their licences:
#   - lz4: lib/lz4.c lz4frame.c lz4hc.c xxhash.c and their headers (lz4hc.c includes lz4.c);
#   - zstd: build/single_file_libs/zstd.c, regenerated here with the tree's own combine.py from
#     its zstd-in.c minus the decompress/ and dictBuilder/ sections (kproducer only
#     compresses; the recipe upstream's build/single_file_libs/README.md gives for a
#     compressor-only library), and lib/zstd.h;
#   - snappy: librdkafka's C port (src/snappy.c, snappy.h, snappy_compat.h). The files that
#     make it compile outside librdkafka (rd.h, rdkafka_int.h, rdendian.h) and the Google-style
#     C interface kp_compress.c calls (snappy-c.h, snappy-c.c) are kproducer's and are left
#     as they are.
# Needs apt-get and dpkg-source (Debian: dpkg-dev) and python3; adds Debian's deb-src entries
# when apt has none (root or sudo), as scripts/build_wheel.sh does for OpenSSL. To move to
# another version: change its line in VERSIONS, run this, run tests/broker/test_build.py,
# tests/unit/test_c_compress.py and tests/broker/test_c_compress_read_by_librdkafka.py, and review `git diff --stat csrc/vendor`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENDOR=$ROOT/csrc/vendor
log() { echo "update_vendored: $*" >&2; }
die() { log "$*"; exit 1; }

for tool in apt-get apt-cache dpkg-source python3; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: apt, dpkg-dev, python3)"
done
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi

# -- VERSIONS: codec, Debian source package, Debian version, upstream version ------------------
declare -A PKG VER UPSTREAM
while read -r codec pkg ver up _; do
    case $codec in ''|'#'*) continue ;; esac
    PKG[$codec]=$pkg; VER[$codec]=$ver; UPSTREAM[$codec]=$up
done < "$VENDOR/VERSIONS"
for codec in lz4 zstd snappy; do
    [ -n "${PKG[$codec]:-}" ] && [ -n "${UPSTREAM[$codec]:-}" ] || die "csrc/vendor/VERSIONS has no line for $codec"
done

# The same as scripts/build_wheel.sh's enable_deb_src.
enable_deb_src() {
    log "adding Debian deb-src entries (apt) to get the codecs' sources"
    local deb822="" f
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/ubuntu.sources; do
        if [ -f "$f" ]; then deb822=$f; break; fi
    done
    if [ -n "$deb822" ]; then
        sed 's/^Types: deb$/Types: deb-src/' "$deb822" | $SUDO tee /etc/apt/sources.list.d/kproducer-deb-src.sources >/dev/null
    elif [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list; then
        sed -n 's/^deb /deb-src /p' /etc/apt/sources.list | $SUDO tee /etc/apt/sources.list.d/kproducer-deb-src.list >/dev/null
    else
        die "no Debian apt sources found: cannot fetch the codecs' sources"
    fi
    $SUDO apt-get update -qq >&2
}

offered() { apt-get source --print-uris "$1" 2>/dev/null | grep -q "\.dsc"; }  # SPEC
if ! offered "${PKG[lz4]}"; then enable_deb_src; fi
for codec in lz4 zstd snappy; do
    if ! offered "${PKG[$codec]}=${VER[$codec]}"; then
        log "apt offers no source ${PKG[$codec]}=${VER[$codec]}; it has:"
        apt-cache showsrc "${PKG[$codec]}" 2>/dev/null | sed -n 's/^Version: /    /p' >&2
        die "name one of those in csrc/vendor/VERSIONS"
    fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kproducer-vendor.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Downloads and unpacks PACKAGE=VERSION into $WORK; prints the unpacked tree's path.
unpack() {  # PACKAGE VERSION
    log "apt-get source $1=$2"
    (cd "$WORK" && apt-get source "$1=$2" > "$WORK/$1.log" 2>&1) || { tail -20 "$WORK/$1.log" >&2; die "apt-get source $1=$2 failed"; }
    local dir
    dir=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d -name "$1-*" | head -1)
    [ -n "$dir" ] || die "apt-get source $1=$2 unpacked no $1-* directory"
    echo "$dir"
}

# The value of C macro NAME in FILE.
macro() { sed -n "s/^#define $2 *\([0-9][0-9]*\).*/\1/p" "$1" | head -1; }

# Empties csrc/vendor/CODEC except kproducer's own files (KEEP), then copies FILES from SRC.
replace() {  # CODEC SRC KEEP FILES...
    local codec=$1 src=$2 keep=" $3 " f
    shift 3
    mkdir -p "$VENDOR/$codec"
    for f in "$VENDOR/$codec"/*; do
        [ -e "$f" ] || continue
        case $keep in *" $(basename "$f") "*) ;; *) rm -f "$f" ;; esac
    done
    for f in "$@"; do
        [ -f "$src/$f" ] || die "$codec: the source has no $f"
        cp "$src/$f" "$VENDOR/$codec/$(basename "$f")"
    done
}

# -- lz4 ----------------------------------------------------------------------------------------
src=$(unpack "${PKG[lz4]}" "${VER[lz4]}")
h=$src/lib/lz4.h
got=$(macro "$h" LZ4_VERSION_MAJOR).$(macro "$h" LZ4_VERSION_MINOR).$(macro "$h" LZ4_VERSION_RELEASE)
[ "$got" = "${UPSTREAM[lz4]}" ] || die "lz4: lib/lz4.h says $got, VERSIONS says ${UPSTREAM[lz4]}"
replace lz4 "$src" "" lib/lz4.c lib/lz4.h lib/lz4frame.c lib/lz4frame.h lib/lz4frame_static.h \
    lib/lz4hc.c lib/lz4hc.h lib/xxhash.c lib/xxhash.h lib/LICENSE

# -- zstd: the single-file library, compressor only ----------------------------------------------
src=$(unpack "${PKG[zstd]}" "${VER[zstd]}")
h=$src/lib/zstd.h
got=$(macro "$h" ZSTD_VERSION_MAJOR).$(macro "$h" ZSTD_VERSION_MINOR).$(macro "$h" ZSTD_VERSION_RELEASE)
[ "$got" = "${UPSTREAM[zstd]}" ] || die "zstd: lib/zstd.h says $got, VERSIONS says ${UPSTREAM[zstd]}"
sfl=$src/build/single_file_libs
[ -f "$sfl/zstd-in.c" ] && [ -f "$sfl/combine.py" ] || die "zstd: no build/single_file_libs/zstd-in.c and combine.py"
grep -v -E '^#include "(decompress|dictBuilder)/' "$sfl/zstd-in.c" > "$sfl/kproducer-zstd-in.c"
removed=$(grep -c -E '^#include "(decompress|dictBuilder)/' "$sfl/zstd-in.c" || true)
grep -q '^#include "compress/zstd_compress.c"' "$sfl/kproducer-zstd-in.c" && [ "$removed" -ge 2 ] \
    || die "zstd: build/single_file_libs/zstd-in.c is not laid out as expected (decompress/, dictBuilder/ sections)"
# Everything inlined (no -k zstd.h): a kept `#include "../zstd.h"` would be looked up on the
# include path, and would find the system's zstd.h.
(cd "$sfl" && python3 combine.py -r ../../lib -x legacy/zstd_legacy.h -o "$WORK/zstd.c" kproducer-zstd-in.c) \
    > "$WORK/combine.log" 2>&1 || { tail -20 "$WORK/combine.log" >&2; die "zstd: combine.py failed"; }
! grep -n '^#include "' "$WORK/zstd.c" >&2 || die "zstd: the amalgamation still includes a local header"
replace zstd "$src" "" lib/zstd.h LICENSE COPYING
{
    echo "/* Generated by kproducer's scripts/update_vendored.sh from Debian's ${PKG[zstd]} ${VER[zstd]}:"
    echo " * build/single_file_libs/combine.py -r ../../lib -x legacy/zstd_legacy.h over zstd-in.c without"
    echo " * its $removed #include lines of decompress/ and dictBuilder/ (kproducer only compresses). */"
    cat "$WORK/zstd.c"
} > "$VENDOR/zstd/zstd.c"

# -- snappy: librdkafka's C port -------------------------------------------------------------------
src=$(unpack "${PKG[snappy]}" "${VER[snappy]}")
OURS="rd.h rdkafka_int.h rdendian.h snappy-c.h snappy-c.c"
for f in $OURS; do [ -f "$VENDOR/snappy/$f" ] || die "snappy: kproducer's csrc/vendor/snappy/$f is missing"; done
replace snappy "$src" "$OURS" src/snappy.c src/snappy.h src/snappy_compat.h LICENSE.snappy LICENSE

log "csrc/vendor/ now holds:"
while read -r codec pkg ver up _; do
    case $codec in ''|'#'*) continue ;; esac
    log "    $codec $up (Debian $pkg $ver)"
done < "$VENDOR/VERSIONS"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" status --short -- csrc/vendor >&2
fi
