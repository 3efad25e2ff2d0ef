"""Acknowledgement latency at fixed rates, in a process of its own:
``python -m bench.latency SPEC_JSON`` prints one JSON line.

What OpenMessaging Benchmark reports, measured the way an application meets it: records of
``value_size`` bytes with a key, sent at a fixed ``rate`` (records/s; 0: as fast as the
client goes) for ``seconds``, every client at its own defaults (``settings`` adds to them);
latency runs from just before the send call to the record's delivery callback.

``loop`` is what the application does between sends:

- ``busy``: spins in Python until the next send is due, so the application thread keeps the
  GIL (what a busy application does); a client whose I/O thread needs the GIL waits for the
  interpreter's switch interval.
- ``sleep``: ``time.sleep`` until the next send is due (the GIL is free meanwhile).
- ``compute``: sends in bursts, every ``COMPUTE_BURST_S`` the records due in it back to back,
  and between bursts computes in Python (it keeps the GIL) without sending: what a batch job
  or a stream processor does. The compute loop calls the client's poll where the run has one.

Beside the acknowledgement latency each run reports its requests' round trips to the broker
(``rtt_*``: from a request's write to the read of its response, the broker's share of the
latency): kproducer's from ``Producer.metrics()`` (``request_latency_*``), librdkafka's from
its statistics (the broker's ``rtt`` window each ``STATS_INTERVAL_MS``, which only reads the
figures; the last window is waited for after the flush, untimed).

Before its loop each run moves what is alive (the pre-generated records, the latency slots)
out of the garbage collector's sight (``gc.freeze()``, ``gc_frozen`` in its row), as the
asyncio scenario does: the benchmark's own lists are not what a client is measured by.

confluent-kafka runs callbacks only inside ``poll()``: its loop calls ``poll(0)`` after every
produce, as its documentation shows, a sleeping loop also polls while it waits, and the compute
loop polls between its pieces of work. kproducer needs no poll call: ``kproducer send()`` makes
none; ``kproducer send() + poll()`` (compute rows only) calls ``Producer.poll()`` where
confluent-kafka's loop calls its own, so that its steps do not wait for the I/O thread to get
the GIL from the computing thread.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

from bench.data import make_keys, make_values
from bench.procstat import cpu_seconds

KPRODUCER = "kproducer send()"
KPRODUCER_POLL = "kproducer send() + poll()"
CONFLUENT = "confluent produce/poll"
# Like for like: confluent-kafka with kproducer's default delivery guarantee (idempotence,
# which librdkafka leaves off), in the goal rows. The embedded broker's memory storage does
# more for every batch of an idempotent producer (it clones and writes all of its metadata),
# so this row shows what of a goal row's difference is the client's.
CONFLUENT_IDEMPOTENT = "confluent produce/poll, idempotent"
CLIENTS = (KPRODUCER, KPRODUCER_POLL, CONFLUENT, CONFLUENT_IDEMPOTENT)
DISTRIBUTION = {KPRODUCER: "kproducer", KPRODUCER_POLL: "kproducer", CONFLUENT: "confluent-kafka",
                CONFLUENT_IDEMPOTENT: "confluent-kafka"}
# The producer client of bench.clients each latency client is a way of using (--clients).
USES = {KPRODUCER: KPRODUCER, KPRODUCER_POLL: KPRODUCER, CONFLUENT: CONFLUENT,
        CONFLUENT_IDEMPOTENT: CONFLUENT}
# What a client sets beyond its defaults.
SETTINGS = {CONFLUENT_IDEMPOTENT: {"enable.idempotence": True}}
# (rate, loop) runs of the scenario: fixed rates with the busy and the sleeping loop (issue
# 11's goals), the computing loop at one rate, then as fast as each client goes (rate 0: no
# pacing, so no loop between sends).
RATES = (1_000, 10_000, 50_000)
LOOPS = ("busy", "sleep")
GOAL_LOOPS = LOOPS
PLAN = (tuple((rate, loop) for rate in RATES for loop in LOOPS) + ((10_000, "compute"),)
        + ((0, "none"),))
# Where a row runs beside the embedded broker. ``split``: the broker on CPUs of its own, the
# client on the rest, as a deployment has them (a broker on its own machine); the goal rows.
# ``shared``: both on every CPU, where each wakes the other's threads off their CPU (a client
# that sleeps between sends made the broker answer 0.2-0.3 ms later than one that spins,
# measured: docs/performance.md). One CPU: shared only.
SPLIT, SHARED = "split", "shared"
PLACEMENTS = (SPLIT, SHARED)
COMPUTE_BURST_S = 0.020
STATS_INTERVAL_MS = 500         # librdkafka's statistics (its request round trips)
WARMUP_VALUE = b"warm-up"


def _cpu_s() -> float:
    # This process's CPU so far, every thread's (the client's own threads included).
    return cpu_seconds(os.getpid(), children=False)


def cpu_list(cpus) -> str:
    """CPUs as the progress line and the report name them: ``0,1``."""
    return ",".join(map(str, cpus))


def percentiles(samples_ns: list[int]) -> dict:
    """p50 / p99 / p99.9 / max in milliseconds (nearest rank), plus a log-scale histogram."""
    s = sorted(samples_ns)
    n = len(s)
    if not n:
        return {"count": 0}

    def rank(q: float) -> float:
        return s[min(n - 1, max(0, int(q * n + 0.5) - 1))] / 1e6

    # Buckets: 0.1 ms to 1 s, 10 per decade (the chart's histogram).
    edges = [0.1 * 10 ** (i / 10) for i in range(41)]
    counts = [0] * (len(edges) + 1)
    i = 0
    for v in s:
        ms = v / 1e6
        while i < len(edges) and ms >= edges[i]:
            i += 1
        counts[i] += 1
    return {"count": n, "p50_ms": rank(0.50), "p99_ms": rank(0.99), "p999_ms": rank(0.999),
            "max_ms": s[-1] / 1e6, "mean_ms": sum(s) / n / 1e6,
            "histogram": {"edges_ms": edges, "counts": counts}}


def clients_for(loop: str, names=CLIENTS) -> list:
    """Those of ``names`` that run a row of ``loop``: ``kproducer send() + poll()`` in the
    compute loop only, the idempotent confluent-kafka in the goal loops only."""
    return [c for c in names if (loop == "compute" or c != KPRODUCER_POLL)
            and (loop in GOAL_LOOPS or c != CONFLUENT_IDEMPOTENT)]


def _due(loop: str, start: int, i: int, interval: int, burst: int) -> int:
    """When record ``i`` is sent: at its slot of the rate, or (compute) at its burst's start."""
    if loop == "compute":
        return start + (i // burst) * burst * interval
    return start + i * interval


def _work() -> int:
    # A piece of the computing application's own work (a few us of bytecode).
    x = 0
    for k in range(50):
        x += k * k
    return x


def _pace(loop: str, due: int, poll=None) -> None:
    """Waits until perf_counter_ns() >= due the way ``loop`` says."""
    if loop == "busy":
        while time.perf_counter_ns() < due:
            pass
        return
    if loop == "compute":
        while time.perf_counter_ns() < due:
            _work()
            if poll is not None:
                poll()
        return
    while True:
        left = due - time.perf_counter_ns()
        if left <= 0:
            return
        if poll is not None:
            poll(min(left / 1e9, 0.001))
        else:
            time.sleep(left / 1e9)


def records_for(rate: int, seconds: float) -> int:
    """Records of a run: ``seconds`` at ``rate``; unpaced runs (rate 0) send 200,000/s worth."""
    return max(1, int((rate or 200_000) * seconds))


def _interval_ns(rate: int) -> int:
    return 1_000_000_000 // rate if rate > 0 else 0


def _burst(rate: int) -> int:
    # Records per burst of the compute loop: COMPUTE_BURST_S worth at the rate.
    return max(1, int(rate * COMPUTE_BURST_S))


def _freeze_bookkeeping() -> None:
    """Moves every object alive now (the pre-generated records, the latency slots) out of the
    garbage collector's sight, as bench/aio.py does: a full collection walked those lists
    (two of 200,000 slots at 50,000/s) for 12-15 ms every half second or so, a stall of the
    benchmark's making that held every client's callbacks alike. What the clients allocate
    from here on is collected as usual."""
    gc.collect()
    gc.freeze()


class _Latencies:
    """One slot per record: ns from send to callback, -1 failed, 0 never called back."""

    def __init__(self, n: int):
        self.ns = [0] * n

    def callback(self, i: int, t0: int):
        ns, clock = self.ns, time.perf_counter_ns

        def cb(err, _meta):
            ns[i] = clock() - t0 if err is None else -1
        return cb


def kproducer_rtt(metrics: dict) -> dict:
    """The run's request round trips from ``Producer.metrics()`` (the warm-up's few
    requests included)."""
    return {"rtt_p50_ms": metrics["request_latency_p50_ms"],
            "rtt_p99_ms": metrics["request_latency_p99_ms"],
            "rtt_avg_ms": metrics["request_latency_avg_ms"],
            "rtt_count": metrics["request_latency_count"]}


def confluent_rtt(stats_json: list[str]) -> dict:
    """The run's request round trips from librdkafka's statistics: each window's broker
    ``rtt`` (µs) over the brokers that answered in it; p50 and p99 are the windows' own,
    weighted by their requests (librdkafka keeps no histogram across windows), avg exact."""
    count = total = p50 = p99 = 0.0
    for text in stats_json:
        for broker in json.loads(text).get("brokers", {}).values():
            rtt = broker.get("rtt") or {}
            n = rtt.get("cnt", 0)
            if n > 0:
                count += n
                total += rtt["sum"]
                p50 += rtt["p50"] * n
                p99 += rtt["p99"] * n
    if not count:
        return {"rtt_p50_ms": None, "rtt_p99_ms": None, "rtt_avg_ms": None, "rtt_count": 0}
    return {"rtt_p50_ms": p50 / count / 1000, "rtt_p99_ms": p99 / count / 1000,
            "rtt_avg_ms": total / count / 1000, "rtt_count": int(count)}


def run_kproducer(spec: dict, values: list, keys: list) -> tuple[list[int], float, float, dict, dict]:
    from kproducer import Producer

    settings = dict(spec.get("settings") or {})
    p = Producer(bootstrap_servers=spec["bootstrap"], **settings)
    topic = spec["topic"]
    p.send(topic, WARMUP_VALUE).result(timeout=60)
    n, interval = len(values), _interval_ns(spec["rate"])
    lat = _Latencies(n)
    _freeze_bookkeeping()
    make_cb = lat.callback
    clock = time.perf_counter_ns
    loop = spec["loop"]
    poll = p.poll if spec["client"] == KPRODUCER_POLL else None
    burst = _burst(spec["rate"])
    nk = len(keys)
    cpu0 = _cpu_s()
    start = clock()
    for i in range(n):
        if interval:
            _pace(loop, _due(loop, start, i, interval, burst), poll)
        t0 = clock()
        p.send(topic, values[i], key=keys[i % nk], on_delivery=make_cb(i, t0))
    p.flush()
    elapsed = (clock() - start) / 1e9
    cpu = _cpu_s() - cpu0
    rtt = kproducer_rtt(p.metrics())
    p.close()
    return lat.ns, elapsed, cpu, settings, rtt


def run_confluent(spec: dict, values: list, keys: list) -> tuple[list[int], float, float, dict, dict]:
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": spec["bootstrap"], **(spec.get("settings") or {})}
    stats: list[str] = []
    # The statistics callback only keeps the text (parsed after the run): served by the
    # loop's poll calls like the delivery callbacks, it costs them microseconds a window.
    p = Producer({**settings, "statistics.interval.ms": STATS_INTERVAL_MS,
                  "stats_cb": stats.append})
    topic = spec["topic"]
    p.produce(topic, WARMUP_VALUE)
    p.flush(60)
    n, interval = len(values), _interval_ns(spec["rate"])
    lat = _Latencies(n)
    _freeze_bookkeeping()
    make_cb = lat.callback
    clock = time.perf_counter_ns
    loop = spec["loop"]
    poll = {"sleep": p.poll, "compute": lambda: p.poll(0)}.get(loop)
    burst = _burst(spec["rate"])
    nk = len(keys)
    cpu0 = _cpu_s()
    start = clock()
    for i in range(n):
        if interval:
            _pace(loop, _due(loop, start, i, interval, burst), poll)
        t0 = clock()
        while True:
            try:
                p.produce(topic, values[i], key=keys[i % nk], on_delivery=make_cb(i, t0))
                break
            except BufferError:     # queue full: serve callbacks, then try again
                p.poll(0.001)
        p.poll(0)
    p.flush(120)
    elapsed = (clock() - start) / 1e9
    cpu = _cpu_s() - cpu0
    # The window that holds the last requests: it comes within the interval.
    seen, deadline = len(stats), time.monotonic() + 10 * STATS_INTERVAL_MS / 1000
    while len(stats) == seen and time.monotonic() < deadline:
        p.poll(0.05)
    return (lat.ns, elapsed, cpu, {k: v for k, v in settings.items() if k != "bootstrap.servers"},
            confluent_rtt(stats))


RUNNERS = {KPRODUCER: run_kproducer, KPRODUCER_POLL: run_kproducer, CONFLUENT: run_confluent,
           CONFLUENT_IDEMPOTENT: run_confluent}


def run(spec: dict) -> dict:
    spec = {**spec, "settings": {**SETTINGS.get(spec["client"], {}), **(spec.get("settings") or {})}}
    if spec.get("cpus"):
        # Before any thread starts: the client's threads (kproducer's, librdkafka's) inherit it.
        os.sched_setaffinity(0, spec["cpus"])
    values = make_values(records_for(spec["rate"], spec["seconds"]), spec.get("value_size", 100))
    keys = make_keys(1000)
    lat, elapsed, cpu, settings, rtt = RUNNERS[spec["client"]](spec, values, keys)
    failed = sum(1 for v in lat if v < 0)
    ok = [v for v in lat if v > 0]
    out = {"client": spec["client"], "rate": spec["rate"], "loop": spec["loop"],
           "records": len(lat), "failed": failed, "missing": len(lat) - len(ok) - failed,
           "achieved_rate": len(lat) / elapsed if elapsed > 0 else 0.0, "settings": settings,
           "cpu_cores": cpu / elapsed if elapsed > 0 else 0.0,
           # Objects the run kept out of the collector's sight (_freeze_bookkeeping).
           "gc_frozen": gc.get_freeze_count()}
    out.update(percentiles(ok))
    out.update(rtt)
    return out


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
