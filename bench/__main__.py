"""``python -m bench``: kproducer against its peers, every run verified.

Views (``scenarios.View``): with no arguments the **headline view**, what users meet, each client
at its own defaults: the ``defaults`` scenario (kproducer's ``send()`` loop and ``send_many``
against confluent-kafka's produce/poll loop and ``produce_batch``, kafka-python and aiokafka,
beside the broker's ceiling), the ``latency`` scenario at one rate (10,000/s, the application
busy between sends, the broker on a CPU of its own) and the Spark data source against the
confluent ``mapInPandas`` recipe (the JVM warmed up first): 3 to 5 minutes on 2 cores, the
more the busier the machine is otherwise.

``--full`` runs the whole suite: against an embedded broker (``kproducer.testing.TansuBroker``, a
fresh one per scenario), each producer scenario of :mod:`bench.scenarios` for kproducer's
``send()`` loop and ``send_many``, confluent-kafka's produce/poll loop and ``produce_batch``,
kafka-python and aiokafka (each when installed, each in its own process on its own fresh topic,
same records, same settings), and in the scenarios with a throughput target the broker's ceiling
(:mod:`bench.ceiling`: the same records in requests encoded before the clock, what the broker
takes when the client does no work); the whole latency scenario (:mod:`bench.latency`); the
Spark scenario (``write_kafka`` and the data source against confluent-kafka's
``foreachPartition`` and ``mapInPandas`` recipes) when pyspark is installed; the encode and
CRC-32C microbenchmarks (:mod:`bench.micro`); the asyncio scenario (:mod:`bench.aio`); and on
librdkafka's mock cluster of three brokers (:mod:`bench.failover`, whatever
``--bootstrap-servers`` says) kproducer against confluent-kafka through failover (recovery
times) and long round trips (0-500 ms: records/s, confluent-kafka at its defaults and with
idempotence). ``--scenarios`` runs the named ones as the full suite has them. Every producer
run is read back and checked record by record: a run that lost or duplicated records is
FAILED, not timed, and the exit status is then 1. A progress bar on stderr shows the run now,
runs done of the total, the time elapsed and an estimate of the time left.

Outputs, in ``--output DIR`` (default ``bench-results/<timestamp>``): ``results.md`` (one table
per view first, also printed; then the details and the environment), ``results.json`` (every
figure, every run's settings, the environment) and ``results.png`` (records/s per scenario and
client). ``scripts/performance_table.py DIR`` puts the tables into docs/performance.md.

    python -m bench [--full | --quick [--headline]] [--scenarios base,lz4,spark,...]
                    [--bootstrap-servers HOST:PORT] [--output DIR] [--repeat K] [--records N]
                    [--spark-rows N]

The headline view takes 3 to 5 minutes on 2 cores; ``--full`` about 40 (failover and rtt about
8 of them); ``--quick`` (a few scenarios, small sizes, a tiny Spark run, no repeats, not failover
and rtt: ``--quick --scenarios failover,rtt`` runs them in a fraction of a second of load and one
round trip) a few minutes, ``--quick --headline`` the headline view at those sizes. Sizes of the
full suite: 1,000,000 records per client for 10 B and 100 B values (750,000 for 1 KiB), a tenth
of that for the pure-Python kafka-python and aiokafka (compared by rate), 2,000,000 Spark rows,
latency runs of 5 s (the headline view: 500,000 records, 500,000 Spark rows, latency runs of
4 s: ``scenarios.HEADLINE``); every run three times, round-robin over the clients, the fastest
verified run kept (the machine is shared with the broker, and noisy); the latency scenario's
rows three times as well, each figure the median of the runs; failover: 3 rounds of a 6 s load
at 5,000 records/s per client; rtt: 1,200,000 records of 100 B per client and round trip (0, 50,
150, 500 ms: ten round trips' worth of a client's window at its defaults,
``scenarios.RTT_ROUND_TRIPS``), best of 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys

from bench import ceiling, clients, failover, report, runner, scenarios

KNOWN_CLIENTS = (*clients.CLIENTS, ceiling.CLIENT)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    views = ap.add_mutually_exclusive_group()
    views.add_argument("--full", action="store_true",
                       help=f"the whole suite: {', '.join(scenarios.ALL_NAMES)} (about 40 "
                            f"minutes on 2 cores)")
    views.add_argument("--quick", action="store_true",
                       help=f"scenarios {', '.join(scenarios.QUICK_NAMES)} at small sizes "
                            f"(a few minutes; for tests)")
    ap.add_argument("--headline", action="store_true",
                    help="the headline view (the default: "
                         f"{', '.join(scenarios.HEADLINE_NAMES)}, each client at its own "
                         "defaults, one latency rate, the Spark data source); with --quick at "
                         "its small sizes")
    ap.add_argument("--scenarios", type=lambda s: [p for p in s.split(",") if p],
                    help=f"comma-separated names or globs, from: {', '.join(scenarios.ALL_NAMES)}")
    ap.add_argument("--clients", type=lambda s: [p.strip() for p in s.split(",") if p.strip()],
                    help=f"only these producer clients: {', '.join(KNOWN_CLIENTS)} (the "
                         f"last: what the embedded broker takes from a client that does no "
                         f"work, bench/ceiling.py: in scenarios {', '.join(ceiling.SCENARIOS)}, "
                         f"and in any other but the transactional one when named here)")
    ap.add_argument("--bootstrap-servers", help="a real cluster instead of the embedded broker")
    ap.add_argument("--output", help="results folder (default: bench-results/<timestamp>)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs per producer client and scenario, best kept (default 3; 1 with "
                         "--quick), Spark recipes included; latency rows: the median of them")
    ap.add_argument("--records", type=int, help="records per kproducer/confluent run, 10 B and "
                                                "100 B values (1 KiB: three quarters)")
    ap.add_argument("--spark-rows", type=int, help="rows per Spark recipe")
    ap.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    ap.add_argument("--batch-size", type=int, default=1_000_000,
                    help="batch size in bytes for every client (default 1000000, librdkafka's)")
    ap.add_argument("--linger-ms", type=int, default=5, help="linger.ms for every client (5)")
    ap.add_argument("--statistics-cost", action="store_true",
                    help="only the cost of kproducer's statistics: the defaults scenario's send() "
                         "loop with statistics.interval.ms=1000 against statistics off, --repeat "
                         "rounds (default 10) alternating the two, every run read back; prints "
                         "the ratio of records/s (on to off)")
    args = ap.parse_args(argv)
    args.repeat_given = args.repeat is not None
    if args.headline and (args.full or args.scenarios):
        ap.error("--headline runs the headline view's scenarios: not with --full or --scenarios")
    args.view = scenarios.view_for(args.full, args.quick, args.headline, bool(args.scenarios))
    if args.repeat is None:
        args.repeat = args.view.repeat
    if args.repeat < 1 or args.partitions < 1 or args.batch_size < 1:
        ap.error("--repeat, --partitions and --batch-size must be at least 1")
    if args.clients:
        unknown = [c for c in args.clients if c not in KNOWN_CLIENTS]
        if unknown:
            ap.error(f"--clients: unknown {unknown}; known: {', '.join(KNOWN_CLIENTS)}")
    try:
        args.names = scenarios.select(args.scenarios, args.view)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def _statistics_cost(args, sizes, out_dir: str, started, argv) -> int:
    """``--statistics-cost``: runner.statistics_cost_runs on the embedded broker (or
    ``--bootstrap-servers``), written to ``statistics-cost.json`` in the output folder."""
    rounds = args.repeat if args.repeat_given else 10
    records = args.records or sizes.records
    cluster = runner.Cluster(args.bootstrap_servers, args.partitions)
    progress = runner.Progress(2 * rounds, "statistics cost",
                               2 * rounds * runner.producer_estimate(clients.KPRODUCER_SEND, records))
    cluster.start_scenario("defaults")
    try:
        result = runner.statistics_cost_runs(cluster, records, rounds, args, progress)
    finally:
        cluster.end_scenario()
        progress.close()
    result["started_at"] = started.isoformat(timespec="seconds")
    result["command"] = ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]
    with open(os.path.join(out_dir, "statistics-cost.json"), "w") as f:
        json.dump(result, f, indent=1)
    failed = [r for r in result["runs"] if not r["ok"]]

    def fmt(x, spec):
        return "n/a" if x is None else format(x, spec)
    print(f"send() loop, defaults scenario, {records:,} records x {rounds} rounds: statistics "
          f"off {fmt(result['records_per_s_off'], ',.0f')} records/s, at "
          f"{result['interval_ms']} ms {fmt(result['records_per_s_on'], ',.0f')} records/s; "
          f"on/off {fmt(result['ratio_on_to_off'], '.4f')} (medians), median of the rounds' "
          f"ratios {fmt(result['median_round_ratio'], '.4f')}; CPU per record "
          f"{fmt(result['cpu_us_per_record_off'], '.4f')} -> "
          f"{fmt(result['cpu_us_per_record_on'], '.4f')} us ({fmt(result['cpu_ratio_on_to_off'], '.4f')})"
          + (f"; {len(failed)} runs FAILED" if failed else ""), flush=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    from bench.environment import describe

    args = parse_args(argv)
    view = args.view
    sizes = view.sizes
    if args.records:
        sizes = dataclasses.replace(sizes, records=args.records,
                                    records_1kib=max(1000, args.records * 3 // 4))
    if args.spark_rows:
        sizes = dataclasses.replace(sizes, spark_rows=args.spark_rows)
    started = datetime.datetime.now()
    out_dir = args.output or os.path.join("bench-results", started.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out_dir, exist_ok=True)

    if args.statistics_cost:
        return _statistics_cost(args, sizes, out_dir, started, argv)
    cluster_label = runner.Cluster(args.bootstrap_servers, args.partitions).describe()
    env = describe(cluster_label, with_java=scenarios.SPARK in args.names)
    view_label = view.name if not args.scenarios else (
        "selected scenarios" + (", quick sizes" if args.quick else ""))
    args.view_label = view_label
    print(f"kproducer benchmark, {view_label}: {', '.join(args.names)} -> {out_dir}", flush=True)
    results = runner.run(args, args.names, sizes, env, view)

    summary = report.summarize(results["runs"])
    producer_names = [n for n in args.names if n not in scenarios.SPECIAL_NAMES]
    doc = {
        "started_at": started.isoformat(timespec="seconds"),
        "command": ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)],
        "environment": env,
        "parameters": {"view": view_label, "view_parts": view.as_dict(),
                       "quick": args.quick, "scenarios": args.names, "repeat": args.repeat,
                       "partitions": args.partitions, "batch_size": args.batch_size,
                       "linger_ms": args.linger_ms, "sizes": dataclasses.asdict(sizes),
                       "reference_client": clients.REFERENCE},
        "scenarios": {**{n: scenarios.by_name(n).as_dict() for n in producer_names},
                      **({scenarios.SPARK: {"description": ", ".join(view.spark_recipes)
                          + ": kproducer's recipes at their defaults (the data source) or given "
                          "acks=1 and idempotence off (write_kafka), the confluent-kafka recipes "
                          "acks=1, idempotence off; 100 B values, keyed, local[2]"}}
                         if scenarios.SPARK in args.names else {}),
                      **({scenarios.ASYNCIO: {"description": "kproducer.aio.AIOProducer vs "
                          "aiokafka and confluent-kafka's asyncio producer, 100 B values, keyed, "
                          "every client at its own defaults, tasks awaiting sends on the "
                          "default loop (bench/aio.py)"}}
                         if scenarios.ASYNCIO in args.names else {}),
                      **({scenarios.FAILOVER: {"description": "kproducer vs confluent-kafka on "
                          "librdkafka's mock cluster of 3 brokers, a topic of 6 partitions: "
                          f"keyed records at {failover.RATE:,}/s while leaders move and a "
                          "leader's broker goes down and comes back; recovery per partition "
                          "(bench/failover.py)",
                          "settings": {c: failover.shown_settings(c)
                                       for c in failover.FAILOVER_CLIENTS},
                          "defaults": {c: failover.DEFAULTS_NOTE[c]
                                       for c in failover.FAILOVER_CLIENTS}}}
                         if scenarios.FAILOVER in args.names else {}),
                      **({scenarios.RTT: {"description": "kproducer vs confluent-kafka on "
                          "librdkafka's mock cluster of 3 brokers answering every request "
                          f"{', '.join(map(str, sizes.rtt_ms))} ms late: records/s of "
                          f"{sizes.rtt_records:,} keyed records of {failover.VALUE_SIZE} B; "
                          "confluent-kafka at its defaults and with idempotence "
                          "(bench/failover.py)",
                          "settings": {c: failover.shown_settings(c)
                                       for c in failover.RTT_CLIENTS},
                          "defaults": {c: failover.DEFAULTS_NOTE[c]
                                       for c in failover.RTT_CLIENTS}}}
                         if scenarios.RTT in args.names else {})},
        "clients": {c: {"distribution": clients.DISTRIBUTION[c],
                        "version": env["versions"].get(clients.DISTRIBUTION[c]),
                        "defaults_in_force": clients.DEFAULTS_NOTE[c]} for c in clients.CLIENTS},
        "summary": summary,
        "ratios": (report.headline_ratios(summary, results["micro"])
                   + report.latency_ratios(results["latency"])
                   + report.asyncio_ratios(results["asyncio"])),
        "latency": results["latency"],
        "latency_summary": report.latency_summary(results["latency"]),
        "asyncio": results["asyncio"],
        "asyncio_summary": report.asyncio_summary(results["asyncio"]),
        "failover": results["failover"],
        "failover_summary": report.failover_summary(results["failover"]),
        "rtt": results["rtt"],
        "rtt_summary": report.rtt_summary(results["rtt"]),
        "runs": results["runs"],
        "micro": results["micro"],
        "skipped": results["skipped"],
        "broker_errors": results["broker_errors"],
        "elapsed_s": results["elapsed_s"],
    }
    failed = ([r for r in results["runs"] if not r["ok"]]
              + [{**r, "client": f"{r['client']} at {r['rate']}/s, {r['loop']} loop"}
                 for r in results["latency"] if not r["ok"]]
              + [{**r, "client": f"{r['client']} (repeat {r['rep'] + 1})"}
                 for r in results["asyncio"] if not r["ok"]]
              + [{**r, "client": f"{r['client']} (seed {r['seed']})"}
                 for r in results["failover"] if not r["ok"]]
              + [{**r, "client": f"{r['client']} at {r['rtt_ms']} ms (repeat {r['rep'] + 1})"}
                 for r in results["rtt"] if not r["ok"]])
    micro_errors = (results["micro"] or {}).get("errors") or []
    doc["failed"] = ([f"{r['scenario']} / {r['client']}: {r['error']}" for r in failed]
                     + [f"micro: {e}" for e in micro_errors])
    doc["ok"] = not doc["failed"]

    md = report.markdown(doc)
    paths = {k: os.path.join(out_dir, f"results.{k}") for k in ("md", "json", "png")}
    with open(paths["md"], "w", encoding="utf-8") as fh:
        fh.write(md)
    report.write_json(doc, paths["json"])
    report.chart(doc, paths["png"])
    if results["latency"]:
        report.latency_chart(results["latency"], os.path.join(out_dir, "latency.png"))

    print()
    print("\n".join(report.view_sections(doc)).rstrip())
    if results["micro"]:
        print()
        print("\n".join(report.micro_tables(results["micro"])))
    print()
    print(f"Done in {results['elapsed_s'] / 60:.1f} min. Results (the details, every run, "
          f"the environment): " + ", ".join(paths.values()))
    if results["broker_errors"]:
        print(f"Broker logged errors: {results['broker_errors']}")
    if doc["failed"]:
        print()
        print(f"VERIFICATION FAILED ({len(doc['failed'])}):")
        for f in doc["failed"]:
            print(f"  {f}")
        return 1
    print("Every run verified: all records read back exactly once (CRC checks on).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
