"""Turns the runs into the outputs: summary rows, headline ratios, Markdown table, JSON, chart."""

from __future__ import annotations

import json
import math
import statistics

from bench import aio, ceiling, clients, failover, latency, scenarios, spark_recipes

TABLE_HEADER = ("| scenario | client | records | records/s | MB/s | CPU µs/record | "
                "peak RSS MiB (over data) | broker CPU µs/record | vs reference |")
TARGET_SEND_MANY = 4.0        # issue 4: send_many >= 4x confluent's produce/poll loop
TARGET_SPARK = 2.0            # issue 4: write_kafka >= 2x the faster confluent recipe (13: the data source)
TARGET_SPARK_EO = 1.5         # issue 13: the data source with exactlyOnce >= 1.5x it
TARGET_DEFAULTS = {           # issue 11: every client at its own defaults
    clients.KPRODUCER_SEND: 2.0, clients.KPRODUCER_SEND_MANY: 3.0}
TARGET_TRANSACTIONAL = 2.0    # issue 12: a transaction per 10,000 records, >= 2x confluent
TARGET_1KIB = {               # issue 11: 1 KiB values, at least confluent's records/s
    clients.KPRODUCER_SEND: 1.0, clients.KPRODUCER_SEND_MANY: 1.0}
LATENCY_HEADER = ("| rate | application loop | broker | client | records/s achieved | "
                  "p50 ms (runs' range) | p99 ms (runs' range) | p99.9 ms | max ms | "
                  "request round trip p50 / p99 ms | client CPU (cores) | p50 / p99 vs reference |")
# How the latency table and the goals name a placement (bench.latency.PLACEMENTS).
PLACEMENT_NAMES = {latency.SPLIT: "on its own CPU", latency.SHARED: "sharing the CPUs"}
TARGET_ASYNCIO = 10.0         # issue 15: kproducer's async front >= 10x aiokafka's records/s
ASYNCIO_HEADER = ("| client | tasks × window | records | records/s | CPU µs/record | p50 ms | "
                  "p99 ms | p99.9 ms | max ms | longest loop stall ms (not waiting for a CPU) | "
                  "records/s, p99 vs aiokafka |")


# ---- summary ------------------------------------------------------------------------------

def summarize(runs: list[dict]) -> list[dict]:
    """One row per (scenario, client) in run order: the best verified repeat, or FAILED if
    any repeat failed verification (a failed run is never timed)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["scenario"], r["client"]), []).append(r)
    rows = []
    for (scenario, client), group in groups.items():
        failed = [r for r in group if not r["ok"]]
        if failed:
            rows.append({"scenario": scenario, "client": client, "ok": False,
                         "records": group[0]["records"], "repeats": len(group),
                         "error": failed[0]["error"]})
            continue
        best = max(group, key=lambda r: r["records_per_s"])
        rows.append({"scenario": scenario, "client": client, "ok": True,
                     "records": best["records"], "repeats": len(group),
                     "records_per_s": best["records_per_s"], "mb_per_s": best["mb_per_s"],
                     "cpu_us_per_record": best["cpu_us_per_record"],
                     "peak_rss_mib": best.get("peak_rss_mib"),
                     "rss_data_mib": best.get("rss_data_mib"),
                     "broker_cpu_us_per_record": best.get("broker_cpu_us_per_record"),
                     "seconds": best["seconds"], "settings": best.get("settings")})
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == scenario]
        ref = reference_row(scenario, mine)
        for r in mine:
            r["reference"] = ref["client"] if ref else None
            r["ratio"] = (r["records_per_s"] / ref["records_per_s"]
                          if ref and r["ok"] and r is not ref else None)
    return rows


def reference_row(scenario: str, rows: list[dict]) -> dict | None:
    """confluent's produce/poll loop; in the Spark scenario the faster confluent recipe."""
    names = spark_recipes.PEER_RECIPES if scenario == scenarios.SPARK else (clients.REFERENCE,)
    cands = [r for r in rows if r["client"] in names and r["ok"]]
    return max(cands, key=lambda r: r["records_per_s"]) if cands else None


def _scenario_ratios(out: list, by: dict, scenario: str, targets: dict, what: str) -> None:
    """Each client's records/s over the reference's in ``scenario``, against its target."""
    ref = by.get((scenario, clients.REFERENCE))
    for client, target in targets.items():
        r = by.get((scenario, client))
        if r is None or ref is None:
            continue
        label = f"{client} / {clients.REFERENCE}, {what}"
        if not (r["ok"] and ref["ok"]):
            out.append({"label": label, "value": None, "target": target, "met": None,
                        "detail": "a run FAILED verification"})
            continue
        value = r["records_per_s"] / ref["records_per_s"]
        out.append({"label": label, "value": value, "target": target, "met": value >= target,
                    "detail": f"{scenario} scenario: {_rates(r, ref)}, {r['records']:,} records "
                              f"each, same run{_ceiling(by, scenario, r, ref, target)}"})
        _cost_side_by_side(out, r, ref, scenario)


def _rates(*rows: dict, unit: str = "records/s") -> str:
    """Each row's records/s after its client's name: ``kproducer send() 1,375,276 records/s,
    confluent produce/poll 862,601 records/s``."""
    return ", ".join(f"{r['client']} {r['records_per_s']:,.0f} {unit}" for r in rows)


def _ceiling(by: dict, scenario: str, r: dict, ref: dict, target: float | None) -> str:
    """What the broker took in the same scenario from a client that does no work
    (bench.ceiling), beside a ratio: a target above it is beyond this broker, and the
    client's share of it is what its own work costs."""
    top = by.get((scenario, ceiling.CLIENT))
    if top is None or not top["ok"]:
        return ""
    room = top["records_per_s"] / ref["records_per_s"]
    beyond = (f", below the target: {target:g}× is more than the broker takes"
              if target is not None and room < target else "")
    return (f"; the broker's ceiling {top['records_per_s']:,.0f} records/s, "
            f"{room:.2f}× {ref['client']}'s{beyond}; {r['client']} at "
            f"{r['records_per_s'] / top['records_per_s']:.0%} of it")


def _broker_cpu(r: dict) -> str:
    """The broker's CPU per record of a run. /proc counts it in clock ticks (10 ms): a short
    run (``--quick``) may see none, which is not a broker that cost nothing."""
    value = r["broker_cpu_us_per_record"]
    return f"{value:.2f} µs" if value > 0 else "under one clock tick"


def _cost_side_by_side(out: list, r: dict, ref: dict, scenario: str) -> None:
    """The costs beside a throughput ratio: the broker shares this machine, so its CPU bounds
    the records/s of every client; the client's own CPU per record is what the producer
    controls, and the broker's CPU per record shows whether a client's requests cost the
    broker more."""
    mine, theirs = r.get("cpu_us_per_record"), ref.get("cpu_us_per_record")
    if not mine or not theirs:
        return
    broker = ""
    if r.get("broker_cpu_us_per_record") is not None and ref.get("broker_cpu_us_per_record") is not None:
        broker = (f"; the broker's CPU per record while each ran: {ref['client']} "
                  f"{_broker_cpu(ref)}, {r['client']} {_broker_cpu(r)}")
    out.append({"label": f"{ref['client']} CPU per record / {r['client']} CPU per record",
                "value": theirs / mine, "target": None, "met": None,
                "detail": f"{ref['client']} {theirs:.2f} µs, {r['client']} {mine:.2f} µs "
                          f"({scenario} scenario){broker}"})


def headline_ratios(rows: list[dict], micro: dict | None) -> list[dict]:
    """The issue's targets, each as {"label", "value", "target", "met", "detail"}."""
    out = []
    by = {(r["scenario"], r["client"]): r for r in rows}
    ref = by.get(("base", clients.REFERENCE))
    for client, target in ((clients.KPRODUCER_SEND_MANY, TARGET_SEND_MANY),
                           (clients.KPRODUCER_SEND, None),
                           (clients.CONFLUENT_BATCH, None)):
        r = by.get(("base", client))
        if r is None or ref is None:
            continue
        label = f"{client} 100B / {clients.REFERENCE}"
        if not (r["ok"] and ref["ok"]):
            out.append({"label": label, "value": None, "target": target, "met": None,
                        "detail": "a run FAILED verification"})
            continue
        value = r["records_per_s"] / ref["records_per_s"]
        out.append({"label": label, "value": value, "target": target,
                    "met": None if target is None else value >= target,
                    "detail": f"base scenario: {_rates(r, ref)}, {r['records']:,} records each, "
                              f"same run{_ceiling(by, 'base', r, ref, target)}"})
        if client.startswith("kproducer"):
            # On a shared machine the broker's CPU bounds the wall-clock ratio; the client's
            # own CPU per record is the cost the producer controls.
            out.append({"label": f"{clients.REFERENCE} CPU per record / {client} CPU per record",
                        "value": ref["cpu_us_per_record"] / r["cpu_us_per_record"],
                        "target": None, "met": None,
                        "detail": f"{clients.REFERENCE} {ref['cpu_us_per_record']:.2f} µs, "
                                  f"{client} {r['cpu_us_per_record']:.2f} µs (base scenario)"})
    for scenario, targets, what in (
            ("defaults", TARGET_DEFAULTS, "each at its own defaults"),
            ("value-1KiB", TARGET_1KIB, "1 KiB values"),
            ("transactional", {clients.KPRODUCER_SEND: TARGET_TRANSACTIONAL,
                               clients.KPRODUCER_SEND_MANY: TARGET_TRANSACTIONAL},
             "a transaction per 10,000 records")):
        _scenario_ratios(out, by, scenario, targets, what)
    spark = [r for r in rows if r["scenario"] == scenarios.SPARK]
    peer = reference_row(scenarios.SPARK, spark)
    for recipe, target in ((spark_recipes.DATA_SOURCE, TARGET_SPARK),
                           (spark_recipes.DATA_SOURCE_EO, TARGET_SPARK_EO)):
        r = next((x for x in spark if x["client"] == recipe), None)
        if r is None:
            continue
        label = f"Spark {recipe} / faster confluent recipe"
        if not r["ok"] or peer is None:
            out.append({"label": label, "value": None, "target": target, "met": None,
                        "detail": "a run FAILED verification"})
            continue
        value = r["records_per_s"] / peer["records_per_s"]
        out.append({"label": label, "value": value, "target": target, "met": value >= target,
                    "detail": f"{_rates(r, peer, unit='rows/s')}; {r['records']:,} rows, "
                              f"local[2], same run"})
    mine = next((r for r in spark if r["client"] == spark_recipes.WRITE_KAFKA), None)
    if mine is not None:
        label = "Spark write_kafka / faster confluent recipe"
        if not mine["ok"] or peer is None:
            out.append({"label": label, "value": None, "target": TARGET_SPARK, "met": None,
                        "detail": "a run FAILED verification"})
        else:
            value = mine["records_per_s"] / peer["records_per_s"]
            out.append({"label": label, "value": value, "target": TARGET_SPARK,
                        "met": value >= TARGET_SPARK,
                        "detail": f"{_rates(mine, peer, unit='rows/s')}; {mine['records']:,} "
                                  f"rows, local[2], same run"})
            out.append({"label": "Spark: faster confluent recipe CPU per row / write_kafka "
                                 "CPU per row",
                        "value": peer["cpu_us_per_record"] / mine["cpu_us_per_record"],
                        "target": None, "met": None,
                        "detail": f"{peer['client']} {peer['cpu_us_per_record']:.2f} µs, "
                                  f"{mine['client']} {mine['cpu_us_per_record']:.2f} µs, "
                                  f"whole Spark process tree"})
    if micro:
        for t in micro["targets"]:
            values = list(t["values"].values())
            out.append({"label": t["target"], "value": min(values) if values else None,
                        "target": None, "met": t["met"],
                        "detail": ", ".join(f"{k}: {v:.2f}x" for k, v in t["values"].items())})
    return out


_LATENCY_FIGURES = ("p50_ms", "p99_ms", "p999_ms", "max_ms", "achieved_rate")
# Figures absent from results made before they were measured: the requests' round trips
# (bench.latency: rtt_*) and the client's CPU.
_LATER_FIGURES = ("rtt_p50_ms", "rtt_p99_ms", "cpu_cores")


def _placement(r: dict) -> str:
    # Results from before the placements ran everything on shared CPUs.
    return r.get("placement") or latency.SHARED


def goal_placement(rows: list[dict]) -> str:
    """Where issue 11's latency goals are judged: with the broker on CPUs of its own, as in
    a deployment, when the scenario ran that placement; on shared CPUs otherwise (one CPU, a
    given cluster, results from before)."""
    return latency.SPLIT if any(_placement(r) == latency.SPLIT for r in rows) else latency.SHARED


def latency_summary(rows: list[dict]) -> list[dict]:
    """One row per (rate, loop, placement, client) in :data:`bench.latency.PLAN` order: each
    figure the median over the row's repeats (one run's p99 moves by about a millisecond from
    run to run, for every client), with the lowest and highest beside it (``<figure>_range``),
    and the repeats' histograms added up (the chart's); or the row's FAILED run if any
    failed."""
    out = []
    keys = dict.fromkeys((r["rate"], r["loop"], _placement(r), r["client"]) for r in rows)
    order = {k: i for i, k in enumerate(latency.PLAN)}
    where = {p: i for i, p in enumerate(latency.PLACEMENTS)}
    for key in sorted(keys, key=lambda k: (order.get(k[:2], len(order)), where.get(k[2], 0))):
        group = [r for r in rows if (r["rate"], r["loop"], _placement(r), r["client"]) == key]
        failed = [r for r in group if not r["ok"]]
        if failed:
            out.append({**failed[0], "placement": key[2], "repeats": len(group)})
            continue
        row = {**group[0], "placement": key[2], "repeats": len(group)}
        for f in _LATENCY_FIGURES:
            values = sorted(r[f] for r in group)
            row[f] = statistics.median(values)
            row[f"{f}_range"] = [values[0], values[-1]]
        for f in _LATER_FIGURES:
            values = [r[f] for r in group if r.get(f) is not None]
            row[f] = statistics.median(values) if values else None
        row["count"] = sum(r["count"] for r in group)
        row["histogram"] = {"edges_ms": group[0]["histogram"]["edges_ms"],
                            "counts": [sum(c) for c in zip(*(r["histogram"]["counts"]
                                                             for r in group))]}
        out.append(row)
    return out


def _round_trips_and_cpu(mine: dict, other: dict) -> str:
    """The requests' round trips and the clients' CPU of two latency rows, for a goal's detail,
    each figure after its client's name (each part "" when either has none: results from
    before they were measured)."""
    out = ""
    if mine.get("rtt_p50_ms") is not None and other.get("rtt_p50_ms") is not None:
        out += ("; the requests' round trips to the broker, p50 / p99: "
                + ", ".join(f"{r['client']} {r['rtt_p50_ms']:.2f} / {r['rtt_p99_ms']:.2f} ms"
                            for r in (mine, other)))
    if mine.get("cpu_cores") is not None and other.get("cpu_cores") is not None:
        out += ("; client CPU: " + ", ".join(f"{r['client']} {r['cpu_cores']:.2f} cores"
                                             for r in (mine, other)))
    return out


def _find(summary: list[dict], rate: int, loop: str, placement: str, client: str):
    return next((r for r in summary if r["rate"] == rate and r["loop"] == loop
                 and r["placement"] == placement and r["client"] == client), None)


def latency_ratios(rows: list[dict]) -> list[dict]:
    """Issue 11's latency goals: at each fixed rate and loop, kproducer's p50 and p99 no
    higher than confluent-kafka's, each the median of the row's repeats (a ratio <= 1 meets
    it; shown as reference / kproducer so that, like the throughput ratios, higher is
    better), judged in :func:`goal_placement`; the other placement's ratios and the
    like-for-like rows are shown without a target."""
    out = []
    summary = latency_summary(rows)
    goal = goal_placement(rows)
    placements = [p for p in latency.PLACEMENTS if any(r["placement"] == p for r in summary)]
    for placement in placements:
        # Named once the scenario ran both; results with one placement keep the plain labels.
        where = f", broker {PLACEMENT_NAMES[placement]}" if len(placements) > 1 else ""
        target = 1.0 if placement == goal else None
        for rate, loop in latency.PLAN:
            if not rate or loop not in latency.GOAL_LOOPS:
                continue
            mine = _find(summary, rate, loop, placement, latency.KPRODUCER)
            ref = _find(summary, rate, loop, placement, latency.CONFLUENT)
            if mine is None or ref is None:
                continue
            rtt = _round_trips_and_cpu(mine, ref)
            for q in ("p50", "p99"):
                label = (f"latency {q} {rate:,}/s {loop} loop{where}: "
                         f"{latency.CONFLUENT} / {latency.KPRODUCER}")
                if not (mine["ok"] and ref["ok"]):
                    out.append({"label": label, "value": None, "target": target, "met": None,
                                "detail": "a run FAILED verification"})
                    continue
                a, b = ref[f"{q}_ms"], mine[f"{q}_ms"]
                (a0, a1), (b0, b1) = ref[f"{q}_ms_range"], mine[f"{q}_ms_range"]
                runs = (f" (medians of {mine['repeats']} runs each; the runs: "
                        f"{latency.KPRODUCER} {b0:.2f}–{b1:.2f}, {latency.CONFLUENT} "
                        f"{a0:.2f}–{a1:.2f} ms)" if mine["repeats"] > 1 else "")
                out.append({"label": label, "value": a / b, "target": target,
                            "met": b <= a if target else None,
                            "detail": f"{latency.KPRODUCER} {b:.2f} ms, {latency.CONFLUENT} "
                                      f"{a:.2f} ms{runs}, every client at its defaults{rtt}"})
            like = _find(summary, rate, loop, placement, latency.CONFLUENT_IDEMPOTENT)
            if like is not None and like["ok"] and mine["ok"]:
                trips = _round_trips_and_cpu(mine, like)
                for q in ("p50", "p99"):
                    a, b = like[f"{q}_ms"], mine[f"{q}_ms"]
                    out.append({"label": f"latency {q} {rate:,}/s {loop} loop{where}, like for "
                                         f"like: {latency.CONFLUENT_IDEMPOTENT} / "
                                         f"{latency.KPRODUCER}",
                                "value": a / b, "target": None, "met": None,
                                "detail": f"{latency.KPRODUCER} {b:.2f} ms, "
                                          f"{latency.CONFLUENT_IDEMPOTENT} {a:.2f} ms, both "
                                          f"idempotent (kproducer's default){trips}"})
    return out


def _median_cell(r: dict, figure: str) -> str:
    lo, hi = r[f"{figure}_range"]
    return f"{r[figure]:.2f}" + (f" ({lo:.2f}–{hi:.2f})" if r["repeats"] > 1 else "")


def _broker_cell(r: dict) -> str:
    # The broker's placement, and the CPUs the client kept to there.
    cpus = r.get("cpus")
    return PLACEMENT_NAMES[r["placement"]] + (
        f" (client on CPU {latency.cpu_list(cpus)})" if cpus else "")


def latency_table(rows: list[dict]) -> list[str]:
    """The scenario's summary (:func:`latency_summary`): medians over the repeats, the p50's
    and p99's lowest and highest run in brackets."""
    lines = [LATENCY_HEADER, "|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    summary = latency_summary(rows)
    for r in summary:
        rate = f"{r['rate']:,}/s" if r["rate"] else "unpaced"
        head = f"| {rate} | {r['loop']} | {_broker_cell(r)} | {r['client']} |"
        if not r["ok"]:
            lines.append(f"{head} FAILED | | | | | | | {(r['error'] or '')[:120]} |")
            continue
        ref = _find(summary, r["rate"], r["loop"], r["placement"], latency.CONFLUENT)
        ref = ref if ref is not None and ref["ok"] else None
        vs = "reference" if r["client"] == latency.CONFLUENT else (
            f"{r['p50_ms'] / ref['p50_ms']:.2f}× / {r['p99_ms'] / ref['p99_ms']:.2f}×" if ref else "–")
        rtt = ("–" if r.get("rtt_p50_ms") is None
               else f"{r['rtt_p50_ms']:.2f} / {r['rtt_p99_ms']:.2f}")
        cpu = "–" if r.get("cpu_cores") is None else f"{r['cpu_cores']:.2f}"
        lines.append(f"{head} {r['achieved_rate']:,.0f} | "
                     f"{_median_cell(r, 'p50_ms')} | {_median_cell(r, 'p99_ms')} | "
                     f"{r['p999_ms']:.2f} | {r['max_ms']:.2f} | {rtt} | {cpu} | {vs} |")
    return lines


# ---- the asyncio scenario -----------------------------------------------------------------

def asyncio_summary(rows: list[dict]) -> list[dict]:
    """One row per client in run order: its verified run with the most records/s (its own
    latency figures with it), or its FAILED run if any repeat failed."""
    out = []
    for client in dict.fromkeys(r["client"] for r in rows):
        group = [r for r in rows if r["client"] == client]
        failed = [r for r in group if not r["ok"]]
        best = failed[0] if failed else max(group, key=lambda r: r["records_per_s"])
        out.append({**best, "repeats": len(group)})
    return out


def asyncio_ratios(rows: list[dict]) -> list[dict]:
    """Issue 15's goals: kproducer's async front at least 10x aiokafka's records/s and a
    lower p99 (shown as aiokafka / kproducer, so that higher is better); the same figures
    against confluent-kafka's asyncio producer, without a target."""
    by = {r["client"]: r for r in asyncio_summary(rows)}
    mine = by.get(aio.KPRODUCER)
    out = []
    for peer, target_rate, target_p99 in ((aio.AIOKAFKA, TARGET_ASYNCIO, 1.0),
                                          (aio.CONFLUENT, None, None)):
        ref = by.get(peer)
        if mine is None or ref is None:
            continue
        rate_label = f"asyncio records/s: {aio.KPRODUCER} / {peer}"
        p99_label = f"asyncio p99: {peer} / {aio.KPRODUCER}"
        if not (mine["ok"] and ref["ok"]):
            for label, target in ((rate_label, target_rate), (p99_label, target_p99)):
                out.append({"label": label, "value": None, "target": target, "met": None,
                            "detail": "a run FAILED verification"})
            continue
        value = mine["records_per_s"] / ref["records_per_s"]
        out.append({"label": rate_label, "value": value, "target": target_rate,
                    "met": None if target_rate is None else value >= target_rate,
                    "detail": f"{aio.KPRODUCER} {mine['records_per_s']:,.0f} records/s of "
                              f"{mine['records']:,}, {peer} {ref['records_per_s']:,.0f} of "
                              f"{ref['records']:,} ({mine['tasks']} tasks, same run)"})
        a, b = ref["p99_ms"], mine["p99_ms"]
        out.append({"label": p99_label, "value": a / b, "target": target_p99,
                    "met": None if target_p99 is None else b < a,
                    "detail": f"{aio.KPRODUCER} {b:.1f} ms, {peer} {a:.1f} ms (lower p99 "
                              f"wanted)"})
    alone, ref = by.get(aio.LOOP_ONLY), by.get(aio.REFERENCE)
    if alone is not None and alone["ok"] and ref is not None and ref["ok"]:
        # What the 10x goal is up against: the benchmark's own loop with no producer.
        out.append({"label": f"asyncio records/s: {aio.LOOP_ONLY} / {aio.REFERENCE}",
                    "value": alone["records_per_s"] / ref["records_per_s"], "target": None,
                    "met": None,
                    "detail": f"{aio.LOOP_ONLY} {alone['records_per_s']:,.0f} records/s, "
                              f"{aio.REFERENCE} {ref['records_per_s']:,.0f}: the most any client "
                              f"reaches in this loop (a send that returns a settled future, "
                              f"nothing sent), same run"})
    return out


def _stall(r: dict) -> str:
    """The longest loop stall, and (where the kernel says) the part of it that was not the
    loop's thread waiting for a CPU."""
    own = r.get("loop_stall_own_max_ms")
    return f"{r['loop_stall_max_ms']:.1f}" + ("" if own is None else f" ({own:.1f})")


def asyncio_table(rows: list[dict]) -> list[str]:
    lines = [ASYNCIO_HEADER, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    summary = asyncio_summary(rows)
    ref = next((r for r in summary if r["client"] == aio.REFERENCE and r["ok"]), None)
    for r in summary:
        if not r["ok"]:
            lines.append(f"| {r['client']} | | {r['records']:,} | FAILED | | | | | | | "
                         f"{(r['error'] or '')[:120]} |")
            continue
        if r["client"] == aio.LOOP_ONLY:         # no producer: no latency, no stall of its own
            vs = f"{r['records_per_s'] / ref['records_per_s']:.2f}× / –" if ref else "–"
            lines.append(f"| {r['client']} | {r['tasks']} × {r['window']} | {r['records']:,} | "
                         f"{r['records_per_s']:,.0f} | {r['cpu_us_per_record']:.2f} | – | – | – | "
                         f"– | – | {vs} |")
            continue
        vs = "reference" if r["client"] == aio.REFERENCE else (
            f"{r['records_per_s'] / ref['records_per_s']:.2f}× / "
            f"{r['p99_ms'] / ref['p99_ms']:.2f}×" if ref else "–")
        lines.append(f"| {r['client']} | {r['tasks']} × {r['window']} | {r['records']:,} | "
                     f"{r['records_per_s']:,.0f} | {r['cpu_us_per_record']:.2f} | "
                     f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | "
                     f"{r['max_ms']:.2f} | {_stall(r)} | {vs} |")
    return lines


def asyncio_section(rows: list[dict], level: str = "##") -> list[str]:
    apis = "; ".join(f"{r['client']}: `{r['api']}`" for r in asyncio_summary(rows) if r.get("api"))
    return ["", f"{level} asyncio: method and every client", "",
            "100 B keyed records from tasks on asyncio's default loop, every client at its own "
            "defaults (only the bootstrap servers given). Each task awaits every send call and "
            "keeps at most `window` records unacknowledged, awaiting its records' futures in "
            "the order sent; then the final flush. records/s and CPU (user + system, every "
            "thread) over the send loops and the flush; latency per record from just before "
            "the send call to the return of the await on its future (settled futures are "
            "collected after every send), so with the window full the latency is about "
            "tasks × window / records/s (Little's law); longest loop stall: the worst lateness "
            "of a heartbeat task sleeping 1 ms at a time. Best run of each client by records/s "
            f"(its own latency figures); each run read back. {apis}. The last row is the "
            f"same loop with no producer at all (nothing sent): the most records/s any client "
            f"can reach in it.", ""] + asyncio_table(rows)


# ---- the mock cluster's scenarios: failover and rtt ----------------------------------------

TARGET_FAILOVER = 1.0         # issue 39: recovery no slower than confluent-kafka's (idempotent)
TARGET_RTT = 1.0              # issue 39: over 50-500 ms round trips at least confluent-kafka's
FAILOVER_HEADER = ("| fault | "
                   + " | ".join(f"{c}: recovery p50 / p99 / max ms (recoveries)"
                                for c in failover.FAILOVER_CLIENTS)
                   + f" | {failover.REFERENCE} / {failover.KPRODUCER}, p50 · p99 (target "
                     f"≥ {TARGET_FAILOVER:g}×: as fast) |")
FAILOVER_DELIVERY_HEADER = ("| client | rounds | records sent | acknowledged | failed | never "
                            "settled | lost | duplicated | out of order | records/s achieved |")
RTT_HEADER = ("| round trip | "
              + " | ".join(f"{c}: records/s (CPU µs/record)" for c in failover.RTT_CLIENTS)
              + " | "
              + " | ".join(f"{failover.KPRODUCER} / {c} (target ≥ {TARGET_RTT:g}× over a "
                           f"round trip)" for c in failover.RTT_REFERENCES) + " |")
RTT_READBACK_HEADER = ("| round trip | client | runs | records/s: best (range) | lost | "
                       "duplicated | out of order |")
# The failover table's rows: every recovery, then each fault that takes leaders, then the
# broker-down recoveries counted from the election (what the client controls of them).
SINCE_ELECT = f"{failover.DOWN}, from the election"
FAILOVER_ROWS = ("all faults", *failover.RECOVERY_FAULTS, SINCE_ELECT)


def quantiles(values: list[float]) -> dict:
    """count, p50, p99, max and mean (nearest rank, as :func:`bench.latency.percentiles`)."""
    s = sorted(values)
    n = len(s)
    if not n:
        return {"count": 0, "p50": None, "p99": None, "max": None, "mean": None}

    def rank(q: float) -> float:
        return s[min(n - 1, max(0, int(q * n + 0.5) - 1))]

    return {"count": n, "p50": rank(0.50), "p99": rank(0.99), "max": s[-1], "mean": sum(s) / n}


def failover_summary(rows: list[dict]) -> dict:
    """Per client (in :data:`bench.failover.CLIENTS` order): the recovery times of every
    round pooled, over all faults and per fault (:data:`FAILOVER_ROWS`), and the delivery
    counts summed over the rounds; ``ok`` false when a round FAILED (its figures left out)."""
    out = {}
    for client in [c for c in failover.CLIENTS if any(r["client"] == c for r in rows)]:
        group = [r for r in rows if r["client"] == client]
        good = [r for r in group if r["ok"]]
        per = [x for r in good for x in r["per_fault"]]
        recovery = {"all faults": quantiles([x["recovery_ms"] for x in per])}
        for name in failover.RECOVERY_FAULTS:
            recovery[name] = quantiles([x["recovery_ms"] for x in per if x["fault"] == name])
        recovery[SINCE_ELECT] = quantiles([x["since_elect_ms"] for x in per
                                           if "since_elect_ms" in x])
        counts = {k: sum(r.get(k) or 0 for r in group)
                  for k in ("sent", "acked", "failed", "not_ended", "lost", "duplicated",
                            "out_of_order", "unknown")}
        rates = [r["achieved_rate"] for r in good]
        failed_runs = [r for r in group if not r["ok"]]
        out[client] = {"ok": not failed_runs, "rounds": len(group),
                       "error": failed_runs[0]["error"] if failed_runs else None,
                       "recovery_ms": recovery, **counts,
                       "achieved_rate": statistics.median(rates) if rates else None,
                       "settings": group[0].get("settings"), "defaults": group[0].get("defaults")}
    return out


def _qcell(q: dict) -> str:
    if not q["count"]:
        return "–"
    return f"{q['p50']:.0f} / {q['p99']:.0f} / {q['max']:.0f} ({q['count']})"


def failover_tables(rows: list[dict]) -> list[str]:
    """The view's table: a row per fault (:data:`FAILOVER_ROWS`), a column per client (its
    recoveries' p50 / p99 / max and how many), and the reference's over kproducer's (higher
    is better: kproducer recovered sooner)."""
    summary = failover_summary(rows)
    mine, ref = summary.get(failover.KPRODUCER), summary.get(failover.REFERENCE)
    lines = [FAILOVER_HEADER, "|---|" + "--:|" * len(failover.FAILOVER_CLIENTS) + "--:|"]
    for name in FAILOVER_ROWS:
        cells = []
        for c in failover.FAILOVER_CLIENTS:
            r = summary.get(c)
            cells.append("–" if r is None else _qcell(r["recovery_ms"][name]) + (
                "" if r["ok"] else " (a round FAILED)"))
        ratio = "–"
        if mine is not None and ref is not None:
            a, b = mine["recovery_ms"][name], ref["recovery_ms"][name]
            if a["count"] and b["count"] and a["p50"] and a["p99"]:
                p50, p99 = b["p50"] / a["p50"], b["p99"] / a["p99"]
                ratio = (f"{p50:.2f}× · {p99:.2f}× (target {TARGET_FAILOVER:g}×: "
                         f"{_verdict(min(p50, p99) >= TARGET_FAILOVER)})")
        lines.append(f"| {name} | {' | '.join(cells)} | {ratio} |")
    return lines


def failover_delivery_table(rows: list[dict]) -> list[str]:
    """What each client's rounds delivered, summed (the details)."""
    lines = [FAILOVER_DELIVERY_HEADER, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for c, r in failover_summary(rows).items():
        rate = "–" if r["achieved_rate"] is None else f"{r['achieved_rate']:,.0f}"
        lines.append(f"| {c} | {r['rounds']} | {r['sent']:,} | {r['acked']:,} | {r['failed']:,} | "
                     f"{r['not_ended']:,} | {r['lost']:,} | {r['duplicated']:,} | "
                     f"{r['out_of_order']:,} | {rate} |")
    return lines


def rtt_summary(rows: list[dict]) -> list[dict]:
    """One row per round trip (in run order): per client its verified run with the most
    records/s (``None`` and the error when a run FAILED) and the range over the runs, and
    kproducer's records/s over each of :data:`bench.failover.RTT_REFERENCES` (``ratios``;
    ``ratio``: over :data:`bench.failover.REFERENCE`, the idempotent confluent-kafka)."""
    out = []
    for rtt in dict.fromkeys(r["rtt_ms"] for r in rows):
        row = {"rtt_ms": rtt, "clients": {}, "ratios": {}, "ratio": None}
        for client in failover.CLIENTS:
            group = [r for r in rows if r["rtt_ms"] == rtt and r["client"] == client]
            if not group:
                continue
            failed = [r for r in group if not r["ok"]]
            rates = sorted(r["records_per_s"] for r in group if r["ok"])
            best = None if failed else max(group, key=lambda r: r["records_per_s"])
            row["clients"][client] = {
                "ok": not failed, "error": failed[0]["error"] if failed else None,
                "repeats": len(group), "records": group[0]["records"],
                "records_per_s": best["records_per_s"] if best else None,
                "records_per_s_range": [rates[0], rates[-1]] if rates else None,
                "cpu_us_per_record": best.get("cpu_us_per_record") if best else None,
                "seconds": best["seconds"] if best else None,
                "verify": {k: sum(r["verify"][k] for r in group if r.get("verify"))
                           for k in ("lost", "duplicated", "out_of_order")}}
        mine = row["clients"].get(failover.KPRODUCER)
        for peer in failover.RTT_REFERENCES:
            ref = row["clients"].get(peer)
            if mine and ref and mine["ok"] and ref["ok"]:
                row["ratios"][peer] = mine["records_per_s"] / ref["records_per_s"]
        row["ratio"] = row["ratios"].get(failover.REFERENCE)
        out.append(row)
    return out


def rtt_table(rows: list[dict]) -> list[str]:
    """The view's table: a row per round trip, a column per client (records/s of its best
    run, CPU per record), then kproducer's over each confluent-kafka's, with the target over
    a round trip (the 0 ms row only checks that nothing is lost: no target)."""
    lines = [RTT_HEADER, "|--:|" + "--:|" * (len(failover.RTT_CLIENTS)
                                             + len(failover.RTT_REFERENCES))]
    for row in rtt_summary(rows):
        cells = []
        for c in failover.RTT_CLIENTS:
            r = row["clients"].get(c)
            if r is None:
                cells.append("–")
            elif not r["ok"]:
                cells.append(f"FAILED: {(r['error'] or '')[:80]}")
            else:
                cells.append(_rate_cpu(r["records_per_s"], r.get("cpu_us_per_record")))
        target = TARGET_RTT if row["rtt_ms"] else None
        ratios = [_ratio_cell(row["ratios"].get(peer), target)
                  for peer in failover.RTT_REFERENCES]
        lines.append(f"| {row['rtt_ms']} ms | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return lines


def rtt_readback_table(rows: list[dict]) -> list[str]:
    """Each round trip's and client's runs: records/s, their range, the read-back (details)."""
    lines = [RTT_READBACK_HEADER, "|--:|---|--:|--:|--:|--:|--:|"]
    for row in rtt_summary(rows):
        for c, r in row["clients"].items():
            if r["ok"]:
                lo, hi = r["records_per_s_range"]
                rate = f"{r['records_per_s']:,.0f}" + (
                    f" ({lo:,.0f}–{hi:,.0f})" if r["repeats"] > 1 else "")
            else:
                rate = f"FAILED: {(r['error'] or '')[:80]}"
            v = r["verify"]
            lines.append(f"| {row['rtt_ms']} ms | {c} | {r['repeats']} | {rate} | {v['lost']} | "
                         f"{v['duplicated']} | {v['out_of_order']} |")
    return lines


def mock_sections(doc: dict, level: str = "###") -> list[str]:
    """The failover and rtt details of results.md (each when it ran): the method, the
    deliveries of the failover rounds, each rtt run's read-back."""
    out = []
    if doc.get("failover"):
        names = [c for c in failover.FAILOVER_CLIENTS]
        given = ", ".join(f"{c} `{failover.settings(c, 'HOST:PORT')}`" for c in names)
        settings = "; ".join(f"{c}: {failover.DEFAULTS_NOTE[c]}" for c in names)
        sizes = doc["parameters"]["sizes"]
        out += ["", f"{level} Failover: method and deliveries", "",
                f"Three mock brokers in the client's process, a fresh cluster per run, a topic "
                f"of {failover.PARTITIONS} partitions (replication {failover.REPLICATION}); "
                f"`key:seq` records over {failover.KEYS} keys at {failover.RATE:,}/s for "
                f"{sizes['failover_seconds']:g} s while, at the times of a 6 s load scaled to "
                f"that: every leader moves (1 s), the broker leading some partitions goes down "
                f"(2 s) and their leadership moves to the others 0.2 s later, it comes back "
                f"(3.5 s), every leader moves back to its first broker (4.5 s). Round r uses "
                f"seed r for both clients (same faults, same times), the clients' order "
                f"alternating over {doc['parameters']['repeat']} round(s). Recovery: per "
                f"partition a fault took a leader from, from the last acknowledgement before "
                f"the mock had applied the change to the first acknowledgement of a record "
                f"sent after it (kproducer.testing.failover.recovery_ms's measure, made immune "
                f"to answers already on their way: bench/failover.py), pooled over the rounds; "
                f"p99 over a few dozen values is about the max. The last row counts the "
                f"broker-down recoveries from the election instead: what the client adds once "
                f"a new leader is there. Each run read back (verify: every acknowledged "
                f"record once, each key's records in the order sent; lost, duplicated, out of "
                f"order and never settled must be 0). confluent-kafka runs with idempotence "
                f"only here: without it librdkafka may reorder a key's records on a retry. "
                f"Clients at their defaults, given: {given}. Defaults in force: {settings}.",
                ""]
        out += failover_delivery_table(doc["failover"])
    if doc.get("rtt"):
        names = [c for c in failover.RTT_CLIENTS]
        given = ", ".join(f"{c} `{failover.settings(c, 'HOST:PORT')}`" for c in names)
        settings = "; ".join(f"{c}: {failover.DEFAULTS_NOTE[c]}" for c in names)
        sizes = doc["parameters"]["sizes"]
        out += ["", f"{level} Long round trips: method and runs", "",
                f"The same cluster and topic, every broker answering every request the round "
                f"trip late; {sizes['rtt_records']:,} records of {failover.VALUE_SIZE} B values "
                f"with a key each, sent as fast as each client takes them, then flushed; "
                f"records/s from the first send to the flush's return, after one acknowledged "
                f"record per partition (connections, metadata, producer id in place). Best of "
                f"{doc['parameters']['repeat']} run(s), their range in brackets; a fresh "
                f"cluster per run. CPU per record: the client process's, which holds the mock's "
                f"brokers too. The mock is a functional mock, not a performance reference "
                f"(its brokers share the client's process and CPUs): over a long round trip the "
                f"round trip dominates, and what a client keeps in flight per round trip "
                f"decides its records/s; the 0 ms row only checks that nothing is lost. "
                f"confluent-kafka runs at its real defaults (no idempotence) and with "
                f"idempotence (kproducer's default). Read back: the mock keeps the last 5 MiB "
                f"of a partition, so every partition's stored count is checked against what "
                f"was sent and the records kept one by one (bench/failover.py, "
                f"check_read_back). Clients at their defaults, given: {given}. Defaults in "
                f"force: {settings}.", ""]
        out += rtt_readback_table(doc["rtt"])
    return out


# ---- the view tables: results.md's head, docs/performance.md, the README -------------------
#
# One table per view, every figure in its client's column: rows are scenarios (or rates, round
# trips, faults), a cell is a client's records/s or p50 / p99 with its CPU per record in
# brackets, and the last columns give kproducer's ratio to the reference with its target.

# The `defaults` scenario's table: a row per API, a column per library.
LIBRARIES = ("kproducer", "confluent-kafka", "kafka-python", "aiokafka", "broker ceiling")
DEFAULTS_ROWS = (
    ("`send()` loop", {"kproducer": clients.KPRODUCER_SEND,
                       "confluent-kafka": clients.CONFLUENT_POLL,
                       "kafka-python": clients.KAFKA_PYTHON, "aiokafka": clients.AIOKAFKA,
                       "broker ceiling": ceiling.CLIENT}),
    ("bulk: kproducer `send_many`, confluent `produce_batch`",
     {"kproducer": clients.KPRODUCER_SEND_MANY, "confluent-kafka": clients.CONFLUENT_BATCH,
      "broker ceiling": ceiling.CLIENT}),
)
SPARK_TARGETS = {spark_recipes.DATA_SOURCE: TARGET_SPARK,
                 spark_recipes.DATA_SOURCE_EO: TARGET_SPARK_EO,
                 spark_recipes.WRITE_KAFKA: TARGET_SPARK}
SPARK_ROW_NAMES = {spark_recipes.DATA_SOURCE: "data source, its defaults",
                   spark_recipes.DATA_SOURCE_EO: "data source, `exactlyOnce`",
                   spark_recipes.WRITE_KAFKA: "`write_kafka`"}


def target_for(scenario: str, client: str) -> float | None:
    """The issues' throughput target for ``client`` over :data:`bench.clients.REFERENCE` in
    ``scenario`` (None: no target)."""
    if scenario == "defaults":
        return TARGET_DEFAULTS.get(client)
    if scenario == "value-1KiB":
        return TARGET_1KIB.get(client)
    if scenario == "transactional" and client in (clients.KPRODUCER_SEND,
                                                  clients.KPRODUCER_SEND_MANY):
        return TARGET_TRANSACTIONAL
    if scenario == "base" and client == clients.KPRODUCER_SEND_MANY:
        return TARGET_SEND_MANY
    return None


def _rate_cpu(rate: float | None, cpu: float | None) -> str:
    if rate is None:
        return "–"
    return f"{rate:,.0f}" + ("" if cpu is None else f" ({cpu:.2f})")


def _summary_cell(r: dict | None) -> str:
    if r is None:
        return "–"
    if not r["ok"]:
        return "FAILED"
    return _rate_cpu(r["records_per_s"], r.get("cpu_us_per_record"))


def _verdict(met: bool) -> str:
    return "met" if met else "not met"


def _ratio_cell(value: float | None, target: float | None) -> str:
    """``2.31×`` and, with a target, ``(target 2×: met)``."""
    if value is None:
        return "–"
    if target is None:
        return f"{value:.2f}×"
    return f"{value:.2f}× (target {target:g}×: {_verdict(value >= target)})"


def _ratio(r: dict | None, ref: dict | None) -> float | None:
    if r is None or ref is None or not (r["ok"] and ref["ok"]):
        return None
    return r["records_per_s"] / ref["records_per_s"]


def _records_note(rows: list[dict]) -> str:
    """``1,000,000 records per run (kafka-python, aiokafka: 100,000)``."""
    counts: dict[int, list[str]] = {}
    for r in rows:
        counts.setdefault(r["records"], [])
        if r["client"] not in counts[r["records"]]:
            counts[r["records"]].append(r["client"])
    if not counts:
        return ""
    most = max(counts, key=lambda n: len(counts[n]))
    others = [f"{', '.join(names)}: {n:,}" for n, names in counts.items() if n != most]
    return f"{most:,} records per run" + (f" ({'; '.join(others)})" if others else "")


def defaults_table(summary: list[dict]) -> list[str]:
    """The `defaults` scenario: a row per API (:data:`DEFAULTS_ROWS`), a column per library,
    kproducer's ratio to confluent's produce/poll loop with its target."""
    by = {r["client"]: r for r in summary if r["scenario"] == "defaults"}
    libs = [lib for lib in LIBRARIES
            if any(names.get(lib) in by for _, names in DEFAULTS_ROWS)]
    lines = ["| each client at its own defaults | "
             + " | ".join(f"{lib}: records/s (CPU µs/record)" for lib in libs)
             + f" | kproducer / {clients.REFERENCE} |",
             "|---|" + "--:|" * len(libs) + "--:|"]
    ref = by.get(clients.REFERENCE)
    for label, names in DEFAULTS_ROWS:
        mine = names["kproducer"]
        if mine not in by and names["confluent-kafka"] not in by:
            continue
        cells = [_summary_cell(by.get(names[lib])) if lib in names else "–" for lib in libs]
        ratio = _ratio_cell(_ratio(by.get(mine), ref), target_for("defaults", mine))
        lines.append(f"| {label} | {' | '.join(cells)} | {ratio} |")
    return lines


def matrix_table(summary: list[dict]) -> list[str]:
    """Every producer scenario but `defaults` (the same settings for every client): a row per
    scenario, a column per client, kproducer's two sends' ratios to the reference."""
    rows = [r for r in summary if r["scenario"] not in ("defaults", scenarios.SPARK)]
    names = [c for c in (*clients.CLIENTS, ceiling.CLIENT) if any(r["client"] == c for r in rows)]
    mine = [c for c in (clients.KPRODUCER_SEND, clients.KPRODUCER_SEND_MANY) if c in names]
    lines = ["| scenario | " + " | ".join(f"{c}: records/s (CPU µs/record)" for c in names)
             + "".join(f" | {c} / {clients.REFERENCE}" for c in mine) + " |",
             "|---|" + "--:|" * (len(names) + len(mine))]
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        by = {r["client"]: r for r in rows if r["scenario"] == scenario}
        cells = [_summary_cell(by.get(c)) for c in names]
        ratios = [_ratio_cell(_ratio(by.get(c), by.get(clients.REFERENCE)),
                              target_for(scenario, c)) for c in mine]
        lines.append(f"| {scenario} | {' | '.join(cells + ratios)} |")
    return lines


def spark_table(summary: list[dict]) -> list[str]:
    """The Spark scenario: a row per kproducer recipe, its column and each confluent recipe's,
    and its ratio to the faster confluent recipe with its target."""
    rows = [r for r in summary if r["scenario"] == scenarios.SPARK]
    by = {r["client"]: r for r in rows}
    peers = [c for c in spark_recipes.PEER_RECIPES if c in by]
    peer = reference_row(scenarios.SPARK, rows)
    lines = ["| recipe | kproducer: rows/s (CPU µs/row) | "
             + " | ".join(f"{c}: rows/s (CPU µs/row)" for c in peers)
             + " | kproducer / the faster confluent recipe |",
             "|---|--:|" + "--:|" * len(peers) + "--:|"]
    for recipe in spark_recipes.KPRODUCER_RECIPES:
        if recipe not in by:
            continue
        cells = [_summary_cell(by[recipe])] + [_summary_cell(by[c]) for c in peers]
        ratio = _ratio_cell(_ratio(by[recipe], peer), SPARK_TARGETS.get(recipe))
        lines.append(f"| {SPARK_ROW_NAMES[recipe]} | {' | '.join(cells)} | {ratio} |")
    return lines


def _latency_cell(r: dict | None) -> str:
    """p50 / p99 ms and (the client process's CPU in cores: at a fixed rate the CPU per
    record is that over the rate, and a busy application's spinning is most of it)."""
    if r is None:
        return "–"
    if not r["ok"]:
        return "FAILED"
    cpu = "" if r.get("cpu_cores") is None else f" ({r['cpu_cores']:.2f})"
    return f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}{cpu}"


def latency_view_table(rows: list[dict]) -> list[str]:
    """The latency scenario in the goals' placement (:func:`goal_placement`): a row per rate
    and loop, a column per client (medians of the runs), the reference's p50 and p99 over
    kproducer's (higher: kproducer's lower) with the goal's target in its rows."""
    summary = [r for r in latency_summary(rows) if r["placement"] == goal_placement(rows)]
    names = [c for c in latency.CLIENTS if any(r["client"] == c for r in summary)]
    lines = ["| rate, application loop | "
             + " | ".join(f"{c}: p50 / p99 ms (CPU cores)" for c in names)
             + f" | {latency.CONFLUENT} / {latency.KPRODUCER}: p50 · p99 |",
             "|---|" + "--:|" * len(names) + "--:|"]
    for rate, loop in dict.fromkeys((r["rate"], r["loop"]) for r in summary):
        by = {r["client"]: r for r in summary if (r["rate"], r["loop"]) == (rate, loop)}
        mine, ref = by.get(latency.KPRODUCER), by.get(latency.CONFLUENT)
        ratio = "–"
        if mine is not None and ref is not None and mine["ok"] and ref["ok"]:
            p50, p99 = ref["p50_ms"] / mine["p50_ms"], ref["p99_ms"] / mine["p99_ms"]
            ratio = f"{p50:.2f}× · {p99:.2f}×"
            if rate and loop in latency.GOAL_LOOPS:
                ratio += f" (target 1×: {_verdict(min(p50, p99) >= 1.0)})"
        what = f"{rate:,}/s, {loop}" if rate else "unpaced"
        lines.append(f"| {what} | {' | '.join(_latency_cell(by.get(c)) for c in names)} | "
                     f"{ratio} |")
    return lines


def asyncio_view_table(rows: list[dict]) -> list[str]:
    """The asyncio scenario: one row, a column per client (records/s, CPU per record, p99)
    and the loop alone, then the goals' ratios against aiokafka."""
    by = {r["client"]: r for r in asyncio_summary(rows)}
    names = [c for c in (*aio.CLIENTS, aio.LOOP_ONLY) if c in by]

    def cell(r):
        if not r["ok"]:
            return "FAILED"
        p99 = "" if r["client"] == aio.LOOP_ONLY else f", p99 {r['p99_ms']:.1f} ms"
        return _rate_cpu(r["records_per_s"], r.get("cpu_us_per_record")) + p99

    mine, ref = by.get(aio.KPRODUCER), by.get(aio.REFERENCE)
    rate = p99 = "–"
    if mine is not None and ref is not None and mine["ok"] and ref["ok"]:
        rate = _ratio_cell(mine["records_per_s"] / ref["records_per_s"], TARGET_ASYNCIO)
        p99 = _ratio_cell(ref["p99_ms"] / mine["p99_ms"], 1.0)
    tasks = next(iter(by.values()))
    return ["| tasks × window | "
            + " | ".join(f"{c}: records/s (CPU µs/record), p99" for c in names)
            + f" | records/s: {aio.KPRODUCER} / {aio.REFERENCE} | p99: {aio.REFERENCE} / "
              f"{aio.KPRODUCER} |",
            "|---|" + "--:|" * (len(names) + 2),
            f"| {tasks.get('tasks', aio.TASKS)} × {tasks.get('window', aio.WINDOW)} | "
            f"{' | '.join(cell(by[c]) for c in names)} | {rate} | {p99} |"]


def view_sections(doc: dict, level: str = "##") -> list[str]:
    """One titled table per view that ran (the at-defaults throughput, latency, Spark, the
    same-settings matrix, asyncio, failover, long round trips), each with a line saying what
    its cells are. results.md opens with these; :func:`headline_table` is them for the docs."""
    params = doc["parameters"]
    repeat = params["repeat"]
    summary = doc["summary"]
    out: list[str] = []

    def section(title: str, note: str, table: list[str]) -> None:
        out.extend([f"{level} {title}", "", note, "", *table, ""])

    defaults = [r for r in summary if r["scenario"] == "defaults"]
    if defaults:
        top = next((r for r in defaults if r["client"] == ceiling.CLIENT), None)
        section("Each client at its own defaults: records/s",
                f"Keyed 100 B records, each client given only the broker address; "
                f"{_records_note([r for r in defaults if r['client'] != ceiling.CLIENT])}, "
                f"best of {repeat}, every run read back record by record. A cell: records/s "
                f"(the client process's CPU µs per record). Reference: {clients.REFERENCE}."
                + ("" if top is None else
                   f" {ceiling.CLIENT}: the same records in requests encoded before the clock, "
                   f"what the embedded broker takes from a client that does no work."),
                defaults_table(summary))
    if doc.get("latency"):
        goal = goal_placement(doc["latency"])
        where = ("the embedded broker on a CPU of its own, the client on the others"
                 if goal == latency.SPLIT else "the broker sharing the client's CPUs")
        section("Acknowledgement latency, each client at its own defaults",
                f"Keyed 100 B records sent at a fixed rate, latency from just before the send "
                f"call to the delivery callback; `busy`: the application spins in Python "
                f"between sends (it keeps the GIL), `sleep`: it sleeps. A cell: p50 / p99 ms "
                f"(the client process's CPU in cores: at a fixed rate its CPU per record is "
                f"that over the rate, and a busy application spins), medians of {repeat} "
                f"run(s); {where}. Ratio above 1×: kproducer's latency is the lower.",
                latency_view_table(doc["latency"]))
    if any(r["scenario"] == scenarios.SPARK for r in summary):
        spark = [r for r in summary if r["scenario"] == scenarios.SPARK]
        section("Spark, `local[2]`",
                f"{spark[0]['records']:,} rows (a key and a 100 B value), each recipe warmed up "
                f"by an untimed pass, best of {repeat}, every run read back. A cell: rows/s "
                f"(CPU µs per row of the whole Spark process tree). The data source at its "
                f"defaults (acks=all, idempotence); the confluent recipes produce per row "
                f"(acks=1, linger.ms {params['linger_ms']}, batch.size "
                f"{params['batch_size']:,}).", spark_table(summary))
    matrix = [r for r in summary if r["scenario"] not in ("defaults", scenarios.SPARK)]
    if matrix:
        sizes = params.get("sizes") or {}
        records = (f"{sizes['records']:,} records per run ({sizes['records_1kib']:,} of 1 KiB; "
                   f"{sizes['slow_fraction']:.0%} of that for the pure-Python "
                   f"{clients.KAFKA_PYTHON} and {clients.AIOKAFKA})"
                   if {"records", "records_1kib", "slow_fraction"} <= set(sizes)
                   else _records_note(matrix))
        section("Every client with the same settings: records/s",
                f"Batch size {params['batch_size']:,} bytes and linger.ms {params['linger_ms']} "
                f"for every client, acks=1 and no idempotence unless the scenario changes them "
                f"(one change per scenario); {records}, best of {repeat}, every run read back. "
                f"A cell: records/s (CPU µs per record).", matrix_table(summary))
    if doc.get("asyncio"):
        section("asyncio, each client at its own defaults",
                "Tasks on asyncio's default loop awaiting every send, each with a window of "
                "records unacknowledged; best run of each client. A cell: records/s (CPU µs "
                f"per record), p99 ms. {aio.LOOP_ONLY}: the same loop sending nothing, the most "
                "any client reaches in it.", asyncio_view_table(doc["asyncio"]))
    if doc.get("failover"):
        section("Failover on librdkafka's mock cluster of 3 brokers",
                f"Keyed records at {failover.RATE:,}/s while leaders move, a leader's broker "
                f"goes down and comes back; {repeat} round(s), the same faults for each client. "
                "A cell: time to recover per partition, p50 / p99 / max ms (recoveries "
                "measured). Ratio above 1×: kproducer recovered the sooner.",
                failover_tables(doc["failover"]))
    if doc.get("rtt"):
        sizes = params["sizes"]
        section("Long round trips on librdkafka's mock cluster of 3 brokers",
                f"{sizes['rtt_records']:,} keyed records of {failover.VALUE_SIZE} B as fast as "
                f"each client takes them, every broker answering the round trip late; best of "
                f"{repeat}, every run read back. A cell: records/s (the process's CPU µs per "
                f"record, the mock's brokers included). confluent-kafka at its real defaults "
                f"and with idempotence (kproducer's default).", rtt_table(doc["rtt"]))
    return out


def shown_command(argv: list[str]) -> list[str]:
    """The command that made a run, as the docs show it: without ``--output DIR`` (where this
    machine kept it says nothing of the run)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--output":
            skip = True
        elif not arg.startswith("--output="):
            out.append(arg)
    return out


def headline_table(doc: dict, level: str = "###", chart: str | None = None) -> str:
    """The view tables of a run as a Markdown snippet for docs/performance.md and the README
    (scripts/performance_table.py puts it between their ``<!-- bench:begin -->`` and
    ``<!-- bench:end -->`` markers): a line on where, when and how, the chart (``chart``: its
    path from the page, when given), then the tables."""
    env, v = doc["environment"], doc["environment"]["versions"]
    command = " ".join(shown_command(doc.get("command") or ["python", "-m", "bench"]))
    minutes = doc.get("elapsed_s", 0) / 60
    verdict = ("every run read back and verified" if doc.get("ok")
               else f"{len(doc.get('failed') or [])} run(s) FAILED verification")
    head = (f"{view_name(doc)[0].upper()}{view_name(doc)[1:]}: `{command}`, on "
            f"{doc['started_at'][:10]}: "
            f"{env['cpu_count']} cores "
            f"({env['cpu_model']}), "
            f"Python {env['python']}; kproducer {v.get('kproducer', '?').split(' ')[0]}, "
            f"confluent-kafka {v.get('confluent-kafka', '?')} (librdkafka "
            f"{v.get('librdkafka', '?')}), kafka-python {v.get('kafka-python', '?')}, aiokafka "
            f"{v.get('aiokafka', '?')}, pyspark {v.get('pyspark', '?')}; {minutes:.0f} min, "
            f"{verdict}.")
    picture = [] if chart is None else [f"![records/s per scenario and client]({chart})", ""]
    return "\n".join([head, "", *picture, *view_sections(doc, level)]).rstrip() + "\n"


# ---- results.md ---------------------------------------------------------------------------

def _fmt(v, spec, default="–"):
    return default if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def producer_table(rows: list[dict]) -> list[str]:
    lines = [TABLE_HEADER, "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['scenario']} | {r['client']} | {r['records']:,} | FAILED | | | | | "
                         f"{r['error'][:120]} |")
            continue
        rss = "–"
        if r.get("peak_rss_mib") is not None:
            rss = f"{r['peak_rss_mib']:,.0f}"
            if r.get("rss_data_mib") is not None:
                rss += f" (+{r['peak_rss_mib'] - r['rss_data_mib']:,.0f})"
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else (
            "reference" if r["client"] == r.get("reference") else "–")
        lines.append(f"| {r['scenario']} | {r['client']} | {r['records']:,} | "
                     f"{r['records_per_s']:,.0f} | {r['mb_per_s']:,.1f} | "
                     f"{r['cpu_us_per_record']:.2f} | {rss} | "
                     f"{_fmt(r.get('broker_cpu_us_per_record'), '.2f')} | {ratio} |")
    return lines


def ratio_lines(ratios: list[dict]) -> list[str]:
    lines = []
    for t in ratios:
        if t["value"] is None and t["met"] is None:
            lines.append(f"{t['label']}: not measured ({t['detail']})")
            continue
        value = f"{t['value']:.2f}×" if t["value"] is not None else ""
        verdict = ""
        if t["target"] is not None:
            verdict = f" (target ≥ {t['target']:g}×: {'met' if t['met'] else 'NOT met'})"
        elif t["met"] is not None:
            verdict = f" ({'met' if t['met'] else 'NOT met'})"
        lines.append(f"{t['label']}: {value}{verdict} — {t['detail']}")
    return lines


def micro_tables(micro: dict) -> list[str]:
    lines = ["| scenario | encoder | Mrecords/s | MB/s | kproducer / this |",
             "|---|---|--:|--:|--:|"]
    for r in micro["encode"]:
        ratio = micro["encode_ratios"].get(r["scenario"], {}).get(r["encoder"])
        lines.append(f"| {r['scenario']} | {r['encoder']} | {r['records_per_s'] / 1e6:,.2f} | "
                     f"{r['mb_per_s']:,.0f} | {_fmt(ratio, '.2f')}{'×' if ratio else ''} |")
    lines += ["", "| buffer | CRC-32C | GB/s | kproducer / this |", "|---|---|--:|--:|"]
    for r in micro["crc"]:
        ratio = micro["crc_ratios"].get(str(r["size"])) if r["impl"] == "crc32c-pkg" else None
        size = f"{r['size'] >> 20} MiB" if r["size"] >= 1 << 20 else f"{r['size'] >> 10} KiB"
        lines.append(f"| {size} | {r['impl']} | {r['gb_per_s']:.2f} | "
                     f"{_fmt(ratio, '.2f')}{'×' if ratio else ''} |")
    return lines


def client_settings(doc: dict) -> list[str]:
    """What each client was given (in its own names; first scenario it ran) and the
    defaults left in force: the clients' defaults differ, so the table needs this beside it."""
    firsts: dict[str, dict] = {}
    for r in doc["runs"]:
        if r.get("settings") is not None:
            firsts.setdefault(r["client"], r)
    if not firsts:
        return []
    out = ["", "### Client settings", "",
           "Given explicitly (scenario shown; other scenarios change acks, idempotence and "
           "compression alike for every client), then defaults left in force:", ""]
    for client, r in firsts.items():
        given = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
        note = clients.DEFAULTS_NOTE.get(client)
        if note is None and r["scenario"] == scenarios.SPARK:
            note = ("kproducer defaults otherwise" if client in spark_recipes.KPRODUCER_RECIPES
                    else "librdkafka defaults otherwise")
        out.append(f"- {client} (`{r['scenario']}`): {given}; {note}")
    return out


def goals_table(ratios: list[dict]) -> list[str]:
    """The issues' targets and the ratios beside them, one row each, their figures named."""
    lines = ["| ratio | value | target | figures |", "|---|--:|---|---|"]
    for t in ratios:
        value = "–" if t["value"] is None else f"{t['value']:.2f}×"
        if t["target"] is not None:
            target = (f"{t['target']:g}×: " + ("not measured" if t["met"] is None
                                               else _verdict(t["met"])))
        elif t["met"] is not None:
            target = _verdict(t["met"])
        else:
            target = "–"
        lines.append(f"| {t['label']} | {value} | {target} | {t['detail']} |")
    return lines


def view_name(doc: dict) -> str:
    """``headline view``, ``full view``, ``quick view`` or ``selected scenarios[, quick sizes]``
    (results from before views: quick or full by their sizes)."""
    params = doc["parameters"]
    name = params.get("view") or ("quick" if params.get("quick") else "full")
    return f"{name} view" if name in ("headline", "full", "quick") else name


def markdown(doc: dict) -> str:
    """results.md: the view tables first (:func:`view_sections`), then the details (the
    targets' ratios, every run, the method of each scenario, the settings, the codec
    microbenchmarks) and the environment."""
    env, params = doc["environment"], doc["parameters"]
    v = env["versions"]
    command = " ".join(doc.get("command") or ["python", "-m", "bench"])
    failed = doc.get("failed") or []
    status = ("Every run read back and verified record by record."
              if not failed else f"VERIFICATION FAILED for {len(failed)} run(s): "
              + "; ".join(failed[:5]) + (" ..." if len(failed) > 5 else ""))
    out = [f"# kproducer benchmark: {view_name(doc)} ({doc['started_at']})", "",
           f"`{command}`, {doc.get('elapsed_s', 0) / 60:.1f} min on {env['cpu_count']} cores. "
           f"{status} The details and the environment follow the tables.", ""]
    out += view_sections(doc, "##")
    out += ["## Details", "", "### The targets and the ratios", ""]
    out += goals_table(doc["ratios"]) if doc["ratios"] else ["(none measured)"]
    out += ["", "### Every producer run", "",
            f"Every client in its own process on a fresh topic with {params['partitions']} "
            f"partitions and the same records; common settings (not in `defaults`): "
            f"linger.ms={params['linger_ms']}, batch size {params['batch_size']:,} bytes "
            f"(per-client settings in results.json). Every run read back (CRC checks on) and "
            f"checked record by record; FAILED runs are not timed. records/s and MB/s (key + "
            f"value bytes) over the send loop and the final flush; CPU: user + system time of "
            f"the client process (of the whole Spark process tree for Spark) per record; peak "
            f"RSS: VmHWM during the timed part, in brackets what it adds to the pre-generated "
            f"data; broker CPU: the embedded broker's user + system time while the client ran, "
            f"per record. Best of {params['repeat']} repeat(s). Reference: {clients.REFERENCE} "
            f"(Spark: the faster confluent recipe). `{ceiling.CLIENT}` (the embedded broker "
            f"only; in {', '.join(ceiling.SCENARIOS)}, and where `--clients` names it): the "
            f"same records in kproducer's requests, encoded before the clock and written one "
            f"at a time over one connection, what the broker takes from a client that does no "
            f"work (bench/ceiling.py).", ""]
    out += producer_table(doc["summary"])
    if doc.get("latency"):
        out += ["", "### Acknowledgement latency: every row and placement", "",
                "100 B keyed records at a fixed rate, every client at its own defaults (acks=all, "
                "linger.ms 5); latency from just before the send call to the record's delivery "
                "callback. `busy`: the application spins in Python between sends (it keeps the "
                "GIL); `sleep`: it sleeps (confluent-kafka polls) until the next send is due; "
                f"`compute`: it sends in bursts every {latency.COMPUTE_BURST_S * 1000:.0f} ms and "
                "computes in Python between them without sending (confluent-kafka, and "
                f"`{latency.KPRODUCER_POLL}`, poll between pieces of the work; issue 11's goals "
                "are the busy and sleep rows); "
                "`unpaced`: as fast as the client goes. "
                f"`{latency.CONFLUENT_IDEMPOTENT}` (busy and sleep rows): confluent-kafka with "
                "`enable.idempotence=true`, kproducer's default, which the embedded broker "
                "pays for on every batch: like for like, beside the goals. Each run read back. "
                "Broker: where the embedded broker ran. `on its own CPU`: pinned to CPUs of its "
                "own, the client's process kept to the others, as in a deployment, where the "
                "broker has a machine of its own: issue 11's goals are judged there. `sharing "
                "the CPUs`: broker and client on every CPU, where each one's wake-ups take the "
                "other's threads off their CPU (shown beside, without a target). "
                "Client CPU: the client process's CPU seconds (all its threads) per second of "
                "the run, the cost of its latency (confluent-kafka's sleeping loop polls, and "
                "librdkafka returns at once from a timeout under 1 ms). "
                "Every row and placement on a fresh broker, "
                f"{params['repeat']} time(s), the clients alternating; each figure "
                "is the median over the runs (p50 and p99: their lowest and highest in "
                "brackets), the histograms every run's records. Request round trip: from a "
                "request's write to the read of its response, the broker's share of the latency "
                "(and the reading thread's wake-up), medians over the runs: kproducer's "
                "`Producer.metrics()` `request_latency_p50_ms` / `_p99_ms`, librdkafka's "
                f"statistics (`statistics.interval.ms={latency.STATS_INTERVAL_MS}`, which only "
                "reads the figures: each window's broker `rtt` p50 / p99 weighted by its "
                "requests). Reference: "
                f"{latency.CONFLUENT}; lower ratios are better.", ""]
        out += latency_table(doc["latency"])
        out += ["", "![acknowledgement latency histograms](latency.png)"]
    if doc.get("asyncio"):
        out += asyncio_section(doc["asyncio"], "###")
    out += mock_sections(doc, "###")
    out += ["", "### Scenarios", ""]
    for name, s in doc["scenarios"].items():
        out.append(f"- `{name}`: {s['description']}")
    out += client_settings(doc)
    if doc["micro"]:
        out += ["", "### Codec microbenchmarks", "", f"{doc['micro']['params']['records']:,} "
                "records per encode scenario, best of "
                f"{doc['micro']['params']['repeat']} samples.", ""]
        out += micro_tables(doc["micro"])
    if doc["skipped"]:
        out += ["", "Skipped: " + "; ".join(f"{k}: {why}" for k, why in doc["skipped"].items())]
    load = ", ".join(f"{x:.2f}" for x in env.get("load_average_at_start") or []) or "–"
    out += ["", "![records/s per scenario and client](results.png)", "",
            "## Environment", "",
            f"{env['cpu_model']}, {env['cpu_count']} cores, {env['memory_gib']} GiB, load "
            f"average at the start {load}; "
            f"{env.get('platform', '')}; Python {env['python']}; kproducer {v['kproducer']}, "
            f"confluent-kafka {v['confluent-kafka']} (librdkafka {v.get('librdkafka', '?')}), "
            f"kafka-python {v['kafka-python']}, aiokafka {v['aiokafka']}, pyspark "
            f"{v['pyspark']}" + (f", {env['java']}" if env.get("java") else "")
            + f". Broker: {env['broker']}.", ""]
    return "\n".join(out)


# ---- chart --------------------------------------------------------------------------------

def chart(doc: dict, path: str) -> None:
    """Grouped bars of records/s (log scale) per producer scenario and client; the Spark
    recipes in a panel of their own; FAILED runs are drawn as an empty slot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["summary"]
    producer = [r for r in rows if r["scenario"] != scenarios.SPARK]
    spark = [r for r in rows if r["scenario"] == scenarios.SPARK]
    panels = [p for p in (("Producers: records/s (log scale)", producer),
                          ("Spark, local[2]: rows/s", spark)) if p[1]]
    if not panels:
        panels = [("no producer runs", [])]
    widths = [3 if title.startswith("Producers") else 1 for title, _ in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(13 if len(panels) > 1 else 10, 6.5),
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, (title, data) in zip(axes[0], panels):
        groups = list(dict.fromkeys(r["scenario"] for r in data))
        names = list(dict.fromkeys(r["client"] for r in data))
        width = 0.8 / max(len(names), 1)
        for j, name in enumerate(names):
            xs, ys = [], []
            for i, g in enumerate(groups):
                r = next((r for r in data if r["scenario"] == g and r["client"] == name), None)
                if r is not None and r["ok"]:
                    xs.append(i + (j - (len(names) - 1) / 2) * width)
                    ys.append(r["records_per_s"])
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, rotation=20)
        ax.set_title(title)
        if title.startswith("Producers"):
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        if names:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14),
                      ncol=3 if title.startswith("Producers") else 1, frameon=False)
    env = doc["environment"]
    fig.suptitle(f"kproducer benchmark — {env['cpu_count']} cores, Python {env['python']}, "
                 f"{view_name(doc)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_chart(rows: list[dict], path: str) -> None:
    """One histogram panel per (rate, loop) in the goals' placement: each client's share of
    records per latency bucket (log-spaced, 0.1 ms to 1 s; every repeat's records),
    OpenMessaging Benchmark's view."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    goal = goal_placement(rows)
    rows = [r for r in rows if _placement(r) == goal]    # the goals' placement
    plan = [k for k in latency.PLAN if any(r["rate"] == k[0] and r["loop"] == k[1] for r in rows)]
    fig, axes = plt.subplots(1, max(len(plan), 1), figsize=(3.2 * max(len(plan), 1), 3.6),
                             sharey=True, squeeze=False)
    summary = latency_summary(rows)
    for ax, (rate, loop) in zip(axes[0], plan):
        for r in summary:
            if r["rate"] != rate or r["loop"] != loop or not r["ok"]:
                continue
            h = r["histogram"]
            total = sum(h["counts"]) or 1
            edges = [h["edges_ms"][0] / 10 ** 0.1] + h["edges_ms"]
            ax.stairs([c / total for c in h["counts"]], edges + [edges[-1] * 10 ** 0.1],
                      label=r["client"])
        ax.set_xscale("log")
        ax.set_title(f"{f'{rate:,}/s' if rate else 'unpaced'}, {loop}", fontsize=9)
        ax.set_xlabel("ms")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of records")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_json(doc: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, default=str)
        fh.write("\n")


__all__ = ["summarize", "headline_ratios", "markdown", "chart", "write_json", "producer_table",
           "ratio_lines", "view_sections", "headline_table", "TABLE_HEADER"]
