"""The documentation site: Sphinx builds docs/ without a single warning (nitpicky: every
cross-reference resolves). The pages' text is checked in tests/unit/test_docs.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_sphinx_builds_without_warnings(tmp_path):
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stderr[-8000:]
    for page in ("index", "api", "configuration", "architecture", "producer", "observability"):
        assert (out / f"{page}.html").is_file(), page
    # The API page documents the compiled classes with the stubs' types.
    api = (out / "api.html").read_text()
    assert 'id="kproducer.RecordFuture.result"' in api
    assert 'id="kproducer.Producer.send_many"' in api
    assert 'id="kproducer.aio.AIOProducer"' in api
    assert 'id="kproducer.spark.write_kafka"' in api
