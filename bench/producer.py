"""Producer benchmark: kproducer's ``send()`` loop against confluent-kafka's produce/poll loop.

Each client runs in its own process, on its own fresh topic, with the same pre-generated
records; the time covers the send loop and the final flush. Every run is verified by reading
the topic back with confluent-kafka (CRC checks on): a run that lost or duplicated records is
reported as FAILED, not timed. Without ``--bootstrap-servers`` an embedded Tansu broker is
started on a free loopback port.

    python -m bench.producer [--records N] [--value-size B] [--partitions P] [--acks 1|all]
                             [--idempotence on|off] [--unkeyed] [--repeat K]
                             [--batch-sizes default,16384,1000000]

``--batch-sizes`` lists scenarios: ``default`` runs each client with its own default batching
(kproducer follows Java: ``batch.size=16384``; librdkafka batches up to ~1 MB), a number
sets that ``batch.size`` for both clients. The embedded broker's cost is mostly per request,
so batching decides much of the result: compare clients at equal batching too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid

CLIENTS = ("kproducer", "confluent")


def _records(n: int, value_size: int, keyed: bool, seed: int = 1):
    rnd = __import__("random").Random(seed)
    value = rnd.randbytes(value_size)
    keys = [b"key-%08d" % i for i in range(n)] if keyed else None
    return keys, value


def _peak_rss_mib() -> float:
    # VmHWM belongs to this process image; ru_maxrss would carry the parent's peak across
    # fork+exec on Linux.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _child(args) -> dict:
    """Runs one client in this process and returns its figures."""
    keys, value = _records(args.records, args.value_size, not args.unkeyed)
    topic, n = args.topic, args.records
    acks = -1 if args.acks == "all" else int(args.acks)
    idem = args.idempotence == "on"
    batch = {} if args.batch_size in (None, "default") else {"batch_size": int(args.batch_size)}
    if args.client == "kproducer":
        from kproducer import Producer
        p = Producer(bootstrap_servers=args.bootstrap, acks=acks, enable_idempotence=idem,
                     linger_ms=args.linger_ms, **batch)
        p.send(topic, b"warm-up").result(30)      # metadata and connection, outside the timing
        send = p.send
        t0, c0 = time.perf_counter(), time.process_time()
        if keys is None:
            for _ in range(n):
                send(topic, value)
        else:
            for k in keys:
                send(topic, value, key=k)
        p.flush()
        t1, c1 = time.perf_counter(), time.process_time()
        p.close()
    elif args.client == "confluent":
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": args.bootstrap, "acks": acks, "enable.idempotence": idem,
                      "linger.ms": args.linger_ms,
                      **({"batch.size": batch["batch_size"]} if batch else {})})
        p.produce(topic, b"warm-up")
        p.flush(30)
        produce, poll = p.produce, p.poll
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            while True:
                try:
                    if keys is None:
                        produce(topic, value)
                    else:
                        produce(topic, value, keys[i])
                    break
                except BufferError:       # queue full: serve delivery reports, then retry
                    poll(0.005)
            poll(0)
        p.flush()
        t1, c1 = time.perf_counter(), time.process_time()
    else:
        raise SystemExit(f"unknown client {args.client}")
    return {"client": args.client, "seconds": t1 - t0, "cpu_seconds": c1 - c0,
            "peak_rss_mib": _peak_rss_mib()}


def _verify(bootstrap: str, topic: str, expected: int) -> str | None:
    from kproducer.testing.readback import read_back

    got = read_back(bootstrap, topic, timeout=max(60.0, expected / 50_000))
    count = sum(len(v) for v in got.values())
    if count != expected:
        return f"read back {count} records, expected {expected}"
    return None


def run(args) -> list[dict]:
    from kproducer.testing import TansuBroker

    broker = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        broker = TansuBroker().start()
        bootstrap = broker.bootstrap
    results = []
    try:
        for rep, batch_size, client in ((r, bs, c) for r in range(args.repeat)
                                        for bs in args.batch_sizes for c in args.clients):
            if True:
                topic = f"bench-{client}-{uuid.uuid4().hex[:8]}"
                if broker is not None:
                    broker.create_topic(topic, args.partitions)
                cmd = [sys.executable, "-m", "bench.producer", "--child", "--client", client,
                       "--bootstrap", bootstrap, "--topic", topic, "--records", str(args.records),
                       "--value-size", str(args.value_size), "--acks", args.acks,
                       "--idempotence", args.idempotence, "--linger-ms", str(args.linger_ms),
                       "--batch-size", batch_size]
                if args.unkeyed:
                    cmd.append("--unkeyed")
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                                      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                if proc.returncode != 0:
                    results.append({"client": client, "batch_size": batch_size, "error": proc.stderr[-2000:]})
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                r["error"] = _verify(bootstrap, topic, args.records + 1)   # + the warm-up record
                n = args.records
                r.update(records=n, rep=rep, batch_size=batch_size, records_per_s=n / r["seconds"],
                         mb_per_s=n * args.value_size / r["seconds"] / 1e6,
                         cpu_us_per_record=r["cpu_seconds"] / n * 1e6)
                results.append(r)
    finally:
        if broker is not None:
            broker.stop()
    return results


def report(results: list[dict]) -> None:
    """Best of the repeats per (batch size, client), and the ratios to confluent-kafka."""
    best = {}
    for r in results:
        if r.get("error"):
            print(f"{r['client']:<10} batch.size={r.get('batch_size')}: FAILED: {r['error']}")
            continue
        key = (r["batch_size"], r["client"])
        if key not in best or r["records_per_s"] > best[key]["records_per_s"]:
            best[key] = r
    print(f"{'batch.size':<11} {'client':<10} {'records/s':>12} {'MB/s':>8} {'CPU us/rec':>11} "
          f"{'peak RSS MiB':>13} {'vs confluent':>13}")
    for (bs, c), r in best.items():
        peer = best.get((bs, "confluent"))
        ratio = f"{r['records_per_s'] / peer['records_per_s']:.2f}x" if peer and c != "confluent" else ""
        print(f"{bs:<11} {c:<10} {r['records_per_s']:>12,.0f} {r['mb_per_s']:>8.1f} "
              f"{r['cpu_us_per_record']:>11.2f} {r['peak_rss_mib']:>13.0f} {ratio:>13}")
    for bs in dict.fromkeys(b for b, _ in best):
        k, c = best.get((bs, "kproducer")), best.get((bs, "confluent"))
        if k and c:
            print(f"batch.size={bs}: kproducer / confluent throughput "
                  f"{k['records_per_s'] / c['records_per_s']:.2f}x, CPU per record "
                  f"{k['cpu_us_per_record'] / c['cpu_us_per_record']:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--idempotence", default="off", choices=["on", "off"])
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--unkeyed", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--clients", type=lambda s: s.split(","), default=list(CLIENTS))
    ap.add_argument("--batch-sizes", type=lambda s: s.split(","), default=["default", "16384"])
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--json", default=None)
    # internal: one client in this process
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--batch-size", default="default", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    results = run(args)
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
