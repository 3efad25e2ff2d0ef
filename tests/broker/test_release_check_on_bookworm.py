"""The release check (scripts/check_release.sh) run on the wheel the wheel tests build (the
``release`` fixture of test_wheel.py, reused, not built again) under Debian bookworm's
CPython 3.11 for amd64, fetched with apt-get download and unpacked on the spot: the wheel
imports, sends with ``send()`` and ``send_many()`` over TLS, and every record is read back;
a wheel whose compiled module is broken makes the check fail.

The first run on a machine fetches bookworm's package lists and about 30 packages (some
20 MB) into .release-check/; later runs take seconds. Which interpreter each wheel fits:
tests/unit/test_release_check.py."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_wheel import release  # noqa: F401  (the fixture: the wheel is built once per run)

ROOT = Path(__file__).resolve().parents[2]


def _broken(wheel: Path, dest: Path) -> Path:
    """A copy of ``wheel`` whose kproducer._net is not a shared object."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.startswith("kproducer/_net.") and info.filename.endswith(".so"):
                data = b"not an ELF file"
            out.writestr(info, data)
    return dest


def _check(house: Path, markdown: Path, *wheels: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    house.mkdir()
    for w in wheels:
        (house / w.name).symlink_to(w)
    proc = subprocess.run(["bash", ROOT / "scripts/check_release.sh", house, "--interpreters", "bookworm-amd64",
                           "--no-probe", "--records", "500", "--markdown", markdown],
                          env=dict(os.environ, PYTHON=sys.executable), capture_output=True, text=True, timeout=900)
    rows = [ln for ln in markdown.read_text().splitlines() if ln.startswith("| `")] if markdown.exists() else []
    return proc, rows


@pytest.mark.slow
@pytest.mark.timeout(1800)      # the wheel fixture may build first
def test_release_check_runs_the_wheel_under_debian_bookworm_cpython_amd64(release, tmp_path):  # noqa: F811
    wheel, _ = release
    proc, rows = _check(tmp_path / "house", tmp_path / "release-check.md", wheel)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert len(rows) == 1, out[-6000:]
    cells = [c.strip() for c in rows[0].strip("|").split(" | ")]
    assert cells[0] == f"`{wheel.name}`"
    assert cells[1] == "CPython 3.11 (Debian bookworm, amd64, native)"
    assert cells[2].startswith("ok: Python 3.11.") and "500 send() + 500 send_many() over TLS" in cells[2], cells
    assert "C codecs: gzip, lz4, snappy, zstd" in cells[2] and cells[2].endswith("check_wheel ok"), cells

    # The same check fails, and says where, for a wheel that cannot import.
    broken = _broken(wheel, tmp_path / wheel.name)
    proc, rows = _check(tmp_path / "broken-house", tmp_path / "broken.md", broken)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(rows) == 1 and "FAILED" in rows[0] and "_net" in rows[0], rows
