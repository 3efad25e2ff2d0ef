"""Smoke test of the main job (README's first command): ``python -m bench --quick`` runs the
codec microbenchmark and the producer comparison against the embedded broker, verifies what it
measured, and exits 0. No timing is asserted."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(600)
def test_bench_quick_runs_and_verifies():
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=580)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "Verification passed" in out
    assert "FAILED" not in out
    for line in ("kproducer / confluent throughput", "CRC-32C within 1.5x"):
        assert line in out, out[-3000:]
