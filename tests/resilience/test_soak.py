"""Soak (issue 6): 10,000,000 records with idempotence (acks=all) through a FaultProxy that cuts
connections, stalls reads and drops responses at random intervals (seeded). Every record must
be read back exactly once, in send order within its partition, and the producing process's
peak RSS must stay within buffer.memory plus a fixed margin.

The producer runs in a child process (this file run as a script) so that its VmHWM is its own:
the broker, the proxy and the verifying consumer live elsewhere. Records are 16 bytes: an
8-byte big-endian sequence number (the record's index in the whole run) and 8 constant bytes,
sent with ``send_many`` in chunks from a NumPy ``S16`` array. The verifying consumer keeps one
byte per record and the last index per partition, never the records.

Why exactly-once can be asserted against Tansu: it enforces idempotence per (producer id,
epoch, partition) (shared/TANSU.md). Measured here: a batch whose BaseSequence is below the
next expected one gets DUPLICATE_SEQUENCE_NUMBER without being stored (any older batch, not only
the last five as in Kafka), a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER. So a batch resent after a
lost response is not stored twice as long as the producer resends it with the same producer id
and sequence, which is the producer's job. The one thing no broker-side check can save is a
producer that renumbers batches the broker already stored under a new producer id; the test
fails on any duplicate, so it catches that too.

Seed: ``KPRODUCER_SOAK_SEED`` (default: a fresh one per run, printed); record count:
``KPRODUCER_SOAK_RECORDS`` (default 10,000,000). Figures are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from kproducer.testing.procfs import status_kib

N_RECORDS = int(os.environ.get("KPRODUCER_SOAK_RECORDS", "10000000"))
PARTITIONS = 8
CHUNK = 200_000
BUFFER_MEMORY = 32 * 1024 * 1024
# Peak RSS allowance above the process's RSS just before the first record (interpreter,
# pytest and NumPy imported by this file, kproducer, a connected producer: ~48 MiB, not
# counted against the bound): buffer.memory itself, plus a fixed margin for
#   - Produce request frames: each request copies its batches into one frame, up to
#     max.in.flight.requests.per.connection (5) x max.request.size (1 MiB) = 5 MiB,
#   - the chunk being appended (CHUNK x 16 bytes = 3.2 MiB, plus a NumPy temporary of the
#     same size while it is built),
#   - compression: a batch is compressed into a second buffer when it is closed (16 KiB each),
#   - allocator slack (freed batch buffers are not all returned to the OS at once).
# Measured: buffer.memory + 4.3..6 MiB. A leak of ~1 KiB per batch (15,000+ batches) fails it.
RSS_MARGIN = 16 * 1024 * 1024
PRODUCER_SETTINGS = dict(
    acks="all", enable_idempotence=True, buffer_memory=BUFFER_MEMORY, batch_size=16384,
    linger_ms=5, compression_type="lz4",
    # Short timeouts so dropped responses and stalls longer than this turn into timeouts,
    # disconnections and retries within the run; deliveries have ample time.
    request_timeout_ms=1000, delivery_timeout_ms=300_000, retry_backoff_ms=20,
    reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
)
PAD = b"kproduce"                      # non-zero: fixed-width S columns drop trailing NULs


# -- the producing child ------------------------------------------------------------------------

def _produce(bootstrap: str, topic: str, n: int) -> dict:
    import numpy as np

    from kproducer import Producer

    dtype = np.dtype([("seq", ">u8"), ("pad", "S8")])
    p = Producer(bootstrap_servers=bootstrap, **PRODUCER_SETTINGS)
    assert len(p.partitions_for(topic)) == PARTITIONS
    baseline = status_kib("VmRSS")
    t0 = time.monotonic()
    results = []
    for start in range(0, n, CHUNK):
        rows = np.empty(min(CHUNK, n - start), dtype=dtype)
        rows["seq"] = np.arange(start, start + len(rows), dtype=np.uint64)
        rows["pad"] = PAD
        results.append(p.send_many(topic, rows.view("S16")))
        del rows
    p.flush(timeout=600)
    elapsed = time.monotonic() - t0
    pending = sum(1 for r in results if not r.done())
    errors = sorted({repr(r.first_error) for r in results if r.first_error is not None})
    metrics = p.metrics()
    p.close(timeout=30)
    return dict(acked=sum(r.acked for r in results), failed=sum(r.failed for r in results),
                pending_results=pending, errors=errors[:5], elapsed_s=elapsed,
                baseline_rss_kib=baseline, peak_rss_kib=status_kib("VmHWM"),
                metrics={k: v for k, v in metrics.items() if isinstance(v, (int, float))})


# -- verification ---------------------------------------------------------------------------------

def _verify(bootstrap: str, topic: str, n: int, timeout: float) -> dict:
    """Reads every partition to its end with confluent-kafka (CRC checks on); counts records,
    duplicates, indexes out of send order per partition, and indexes never seen."""
    from kproducer.testing.readback import messages_to_end, verifying_consumer

    consumer = verifying_consumer(bootstrap, "kproducer-soak")
    seen = bytearray(n)
    last = [-1] * PARTITIONS
    counts = [0] * PARTITIONS
    out = dict(records=0, duplicates=0, out_of_order=0, foreign=0, first_problem=None)
    from_bytes = int.from_bytes
    try:
        for msg in messages_to_end(consumer, topic, range(PARTITIONS), time.monotonic() + timeout,
                                   "soak read-back"):
            value, part = msg.value(), msg.partition()
            i = from_bytes(value[:8], "big")
            if len(value) != 16 or value[8:] != PAD or i >= n:
                out["foreign"] += 1
                out["first_problem"] = out["first_problem"] or f"foreign record {value!r}"
                continue
            if seen[i]:
                out["duplicates"] += 1
                out["first_problem"] = out["first_problem"] or \
                    f"record {i} twice (partition {part}, offset {msg.offset()})"
            seen[i] = 1
            if i <= last[part]:
                out["out_of_order"] += 1
                out["first_problem"] = out["first_problem"] or \
                    f"partition {part}: record {i} after {last[part]} (offset {msg.offset()})"
            last[part] = i
            counts[part] += 1
        out["records"] = sum(counts)
    finally:
        consumer.close()
    missing = seen.count(0)
    out["missing"] = missing
    if missing:
        out["first_missing"] = seen.index(0)
    out["per_partition"] = counts
    return out


# -- the test -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(900)
def test_soak_idempotent_stream_through_random_faults(proxied_broker):
    broker, proxy = proxied_broker
    seed = int(os.environ.get("KPRODUCER_SOAK_SEED") or random.SystemRandom().randrange(1 << 32))
    topic = "soak"
    broker.create_topic(topic, PARTITIONS)
    print(f"\nsoak: {N_RECORDS} records, seed {seed} (KPRODUCER_SOAK_SEED={seed} repeats the "
          f"fault choices)")
    # Stalls up to 2 s against request.timeout.ms=1000: some end as timeouts and reconnects.
    proxy.chaos(seed, interval=(0.05, 0.5), cut=1, stall=1, drop=1, stall_seconds=(0.05, 2.0))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, __file__, proxy.bootstrap, topic, str(N_RECORDS)],
                          check=False, capture_output=True, text=True, timeout=720)
    produce_wall = time.monotonic() - t0
    proxy.chaos(None)
    faults = proxy.stats()
    assert proc.returncode == 0, f"seed {seed}: producer child failed:\n{proc.stdout}\n{proc.stderr[-5000:]}"
    child = json.loads(proc.stdout.strip().splitlines()[-1])

    t0 = time.monotonic()
    got = _verify(broker.bootstrap, topic, N_RECORDS, timeout=300)
    read_wall = time.monotonic() - t0
    broker_rss = _proc_status_kib(broker.pid, "VmHWM")
    rss_growth = (child["peak_rss_kib"] - child["baseline_rss_kib"]) * 1024
    print(f"soak figures (seed {seed}):\n"
          f"  produce: {child['acked']} acked, {child['failed']} failed in {child['elapsed_s']:.1f} s "
          f"({N_RECORDS / child['elapsed_s']:,.0f} records/s; child wall {produce_wall:.1f} s)\n"
          f"  producer: {child['metrics']}\n"
          f"  faults: {faults['chaos_events']} chosen; took effect: {faults['chaos_cuts']} cuts, "
          f"{faults['chaos_stalls']} stalls, {faults['chaos_drops']} dropped responses; "
          f"{faults['connections_accepted']} connections, {faults['requests_forwarded']} requests\n"
          f"  peak RSS {child['peak_rss_kib'] / 1024:.1f} MiB = {child['baseline_rss_kib'] / 1024:.1f} MiB "
          f"before the first record + {rss_growth / 2**20:.1f} MiB (bound: buffer.memory "
          f"{BUFFER_MEMORY >> 20} MiB + {RSS_MARGIN >> 20} MiB)\n"
          f"  read back: {got['records']} records in {read_wall:.1f} s, per partition "
          f"{got['per_partition']}; broker peak RSS {broker_rss / 1024:.0f} MiB")

    assert child["pending_results"] == 0
    assert (child["acked"], child["failed"]) == (N_RECORDS, 0), f"seed {seed}: {child['errors']}"
    assert (got["duplicates"], got["out_of_order"], got["missing"], got["foreign"]) == (0, 0, 0, 0), \
        f"seed {seed}: {got}"
    assert got["records"] == N_RECORDS
    assert rss_growth <= BUFFER_MEMORY + RSS_MARGIN, f"peak RSS grew by {rss_growth / 2**20:.1f} MiB"
    # The faults really happened and the producer really recovered from them.
    assert faults["chaos_cuts"] and faults["chaos_stalls"] and faults["chaos_drops"], faults
    assert child["metrics"]["retries"] > 0, child["metrics"]


def _proc_status_kib(pid: int, key: str) -> int:
    try:
        return status_kib(key, pid)
    except LookupError:   # the broker is gone: the figure is only reported
        return 0


if __name__ == "__main__":
    bootstrap_arg, topic_arg, n_arg = sys.argv[1:4]
    print(json.dumps(_produce(bootstrap_arg, topic_arg, int(n_arg))))
