"""Leak checks of kproducer's own allocations.

- The C core (batch writer/reader, buffers, frame receiver), on success and error paths,
  under LeakSanitizer: csrc/tests/test_leaks.c.
- The compiled glue around it (_codec, _core): the codec's error paths and the
  producer's refused records leave RSS flat and release every buffer they borrowed.
- Under the sanitizer build, LeakSanitizer over producer create/send/close cycles and the
  same codec cycles: tests/broker/test_build.py (which builds it once) runs tests/_leak_cycles.py.
- Threads, file descriptors, the C and Python heaps across 200 producer lifecycles:
  tests/resilience/test_lifecycle.py.
"""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path

import _leak_cycles
import pytest

from kproducer import Producer
from kproducer.testing.procfs import rss_kib as _rss_kib
from kproducer.errors import RecordTooLargeError

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"


def test_c_allocations_are_freed_under_leak_sanitizer(tmp_path):
    exe = tmp_path / "test_leaks"
    build = subprocess.run(
        ["gcc", "-g", "-O1", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", f"-I{CSRC}",
         *(str(CSRC / f) for f in ("kp_buf.c", "kp_crc32c.c", "kp_batch.c", "kp_frame.c", "tests/test_leaks.c")),
         "-pthread", "-o", str(exe)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False,
                         env={"ASAN_OPTIONS": "detect_leaks=1", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "LeakSanitizer" not in run.stderr, run.stdout + run.stderr[-4000:]
    assert run.stdout.strip() == "0 failures"


def test_codec_cycles_keep_rss_flat():
    _leak_cycles.codec_cycles(300)          # warm up caches, the allocator, cramjam's contexts
    gc.collect()
    before = _rss_kib()
    _leak_cycles.codec_cycles(5000)
    gc.collect()
    grown = _rss_kib() - before
    # Measured here: 0 KiB. Each cycle abandons a 5 KB partial frame and a half-encoded
    # 50-record batch on an error: losing either would add 15-25 MiB.
    assert grown < 4 * 1024, f"RSS grew by {grown} KiB over 5000 codec cycles"


@pytest.mark.timeout(120)
def test_refused_records_release_what_they_borrowed(broker):
    """A send refused after its key/value buffers were taken must give them back: a
    bytearray with an exported buffer cannot be resized, so a leaked view shows at once."""
    broker.create_topic("borrow", 1)
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=10_000) as p:
        p.send("borrow", b"warm").result(10)
        key, value = bytearray(b"k"), bytearray(b"v" * 100)
        big = bytearray(20_000)
        refusals = [
            (TypeError, lambda: p.send("borrow", value, key=key, headers=[("h", "not bytes")])),
            (TypeError, lambda: p.send("borrow", value, key=key, on_delivery=5)),
            # Taken, then failed through the future (Java's send()).
            (RecordTooLargeError, lambda: p.send("borrow", big, key=key).result(0)),
            (RecordTooLargeError, lambda: p.send("borrow", value, key=key, headers=[("h", bytes(big))]).result(0)),
            (ValueError, lambda: p.send("borrow", value, key=key, partition=-3)),
        ]
        gc.collect()
        before = _rss_kib()
        for _ in range(2000):
            for exc, call in refusals:
                with pytest.raises(exc):
                    call()
        for buf in (key, value, big):
            buf.append(0)                   # BufferError if a view were still exported
        gc.collect()
        grown = _rss_kib() - before
        # 10000 refusals; a lost 20 KB buffer copy per refusal would be 40+ MiB.
        assert grown < 4 * 1024, f"RSS grew by {grown} KiB over 10000 refused sends"
        assert p.metrics()["queued_batches"] == 0
