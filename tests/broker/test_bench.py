"""The benchmark runner (README's first command): ``python -m bench`` runs the headline view
(``--quick --headline`` here, at small sizes), ``--quick`` its short list, against the embedded
broker, verifies every run and writes well-formed results that open with a table per view;
the tables for the docs come from a run's results.json (scripts/performance_table.py); and
the read-back check it relies on catches lost, duplicated and stray records.
No timing is asserted."""

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer as ConfluentProducer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)   # bench/ lives in the checkout, it is not an installed package

from bench import aio, ceiling, clients, failover, latency, report, scenarios, spark_recipes
from bench.data import make_values
from bench.verify import check_topic

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_quick_writes_verified_results(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--output", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=580, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    doc = json.loads((out / "results.json").read_text())
    for key in ("environment", "parameters", "scenarios", "clients", "summary", "ratios", "runs",
                "micro", "failed", "ok", "elapsed_s"):
        assert key in doc, key
    assert doc["ok"] is True and doc["failed"] == []
    env = doc["environment"]
    assert env["cpu_count"] >= 1 and env["python"] and env["broker"].startswith("embedded Tansu")
    assert "compiled" in env["versions"]["kproducer"]

    # Every quick scenario ran, every installed client in each (the test extra has them all).
    expected_producer = [n for n in scenarios.QUICK_NAMES if n not in scenarios.SPECIAL_NAMES]
    seen = {(r["scenario"], r["client"]) for r in doc["summary"]}
    for name in expected_producer:
        for client in clients.CLIENTS:
            if name == "idempotent" and client == clients.AIOKAFKA:   # cannot start on Tansu
                assert f"{name} / {client}" in doc["skipped"]
                assert (name, client) not in seen
                continue
            assert (name, client) in seen, (name, client)
    for recipe in spark_recipes.RECIPES:
        assert (scenarios.SPARK, recipe) in seen, recipe

    # Every run verified: read back with the expected count, nothing failed, figures present.
    for r in doc["runs"]:
        assert r["ok"], r
        assert r["verify"]["ok"] and r["verify"]["error"] is None, r
        warm_up = 1 if r["scenario"] != scenarios.SPARK or r["rep"] == 0 else 0
        assert r["verify"]["read"] == r["records"] + warm_up, r
        assert r["records_per_s"] > 0 and r["cpu_us_per_record"] > 0, r
        if r["scenario"] != scenarios.SPARK:
            assert r["peak_rss_mib"] > 0 and r["settings"], r
    by = {(r["scenario"], r["client"]): r for r in doc["summary"]}
    assert by[("base", clients.REFERENCE)]["ratio"] is None
    assert by[("base", clients.KPRODUCER_SEND_MANY)]["ratio"] > 0
    labels = [t["label"] for t in doc["ratios"]]
    assert "kproducer send_many 100B / confluent produce/poll" in labels
    assert "Spark write_kafka / faster confluent recipe" in labels
    # A throughput target comes with the costs beside it (the broker bounds records/s).
    costs = [t for t in doc["ratios"] if t["label"] == (
        f"{clients.REFERENCE} CPU per record / {clients.KPRODUCER_SEND} CPU per record")
        and "(defaults scenario)" in t["detail"]]
    assert len(costs) == 1 and costs[0]["value"] > 0
    assert "the broker's CPU per record while each ran" in costs[0]["detail"]
    # The broker's ceiling ran where a throughput target is, read back, and stands beside
    # the targets' ratios.
    for name in ("base", "defaults"):
        top = by[(name, ceiling.CLIENT)]
        assert top["ok"] and top["records_per_s"] > 0, top
    target = next(t for t in doc["ratios"] if t["label"] == (
        f"{clients.KPRODUCER_SEND} / {clients.REFERENCE}, each at its own defaults"))
    assert "the broker's ceiling " in target["detail"] and "% of it" in target["detail"]
    assert doc["micro"]["encode"] and doc["micro"]["crc"] and not doc["micro"]["errors"]

    # The latency scenario: every (rate, loop) for its clients, verified, with percentiles;
    # the goals for the busy and sleep rows only.
    lat = doc["latency"]
    assert {(r["rate"], r["loop"], r["client"]) for r in lat} == {
        (rate, loop, c) for rate, loop in latency.PLAN for c in latency.clients_for(loop)}
    assert {r["client"] for r in lat if r["loop"] == "compute"} == set(latency.clients_for("compute"))
    assert latency.CONFLUENT_IDEMPOTENT in latency.clients_for("sleep")
    assert latency.CONFLUENT_IDEMPOTENT not in latency.clients_for("compute")
    idem = [r for r in lat if r["client"] == latency.CONFLUENT_IDEMPOTENT]
    assert idem and all(r["settings"] == {"enable.idempotence": True} for r in idem)
    assert any("like for like" in t["label"] and t["value"] > 0 for t in doc["ratios"])
    assert not any("compute loop" in t["label"] for t in doc["ratios"])
    for r in lat:
        assert r["ok"] and r["verify"]["ok"] and r["verify"]["read"] == r["records"] + 1, r
        assert r["failed"] == 0 and r["missing"] == 0 and r["count"] == r["records"], r
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"], r
        assert sum(r["histogram"]["counts"]) == r["count"], r
        # The pre-generated records and the latency slots were out of the collector's sight
        # (a full collection walking them stalled every client's loop for 12-15 ms).
        assert r["gc_frozen"] > 0, r
        # The requests' round trips, from each client's own figures (kproducer's metrics,
        # librdkafka's statistics): every run made requests, and a round trip is shorter
        # than the acknowledgement that waited for it at most.
        assert r["rtt_count"] > 0 and 0 < r["rtt_p50_ms"] <= r["rtt_p99_ms"], r
        assert r["rtt_p50_ms"] <= r["max_ms"], r
    assert any(t["label"].startswith("latency p99 10,000/s busy loop") for t in doc["ratios"])
    assert (out / "latency.png").read_bytes().startswith(PNG_MAGIC)

    # The asyncio scenario: every client, verified, with ordered percentiles and a loop stall;
    # the ratios against aiokafka (records/s target 10x, p99 lower) present.
    rows = doc["asyncio"]
    assert {r["client"] for r in rows} == {*aio.CLIENTS, aio.LOOP_ONLY}
    assert [r["client"] for r in doc["asyncio_summary"]] == [*aio.CLIENTS, aio.LOOP_ONLY]
    # The loop with no producer (the scenario's ceiling): it ran, sent nothing, read nothing.
    alone = [r for r in rows if r["client"] == aio.LOOP_ONLY]
    rows = [r for r in rows if r["client"] != aio.LOOP_ONLY]
    assert len(alone) == doc["parameters"]["repeat"]
    for r in alone:
        assert r["ok"] and r["verify"] is None and r["count"] == r["records"] > 0, r
        assert r["records_per_s"] > 0 and r["tasks"] == aio.TASKS, r
    for r in rows:
        assert r["scenario"] == scenarios.ASYNCIO and r["ok"] and r["error"] is None, r
        assert r["verify"]["ok"] and r["verify"]["read"] == r["records"] + 1, r
        assert r["failed"] == 0 and r["missing"] == 0 and r["count"] == r["records"], r
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"], r
        assert sum(r["histogram"]["counts"]) == r["count"], r
        assert r["records_per_s"] > 0 and r["cpu_seconds"] > 0 and r["heartbeats"] > 0, r
        assert r["loop_stall_max_ms"] >= 0 and r["tasks"] == aio.TASKS and r["api"], r
    ratios = {t["label"]: t for t in doc["ratios"]}
    rate = ratios[f"asyncio records/s: {aio.KPRODUCER} / {aio.AIOKAFKA}"]
    p99 = ratios[f"asyncio p99: {aio.AIOKAFKA} / {aio.KPRODUCER}"]
    assert rate["target"] == report.TARGET_ASYNCIO and rate["value"] > 0 and rate["met"] is not None
    assert p99["target"] == 1.0 and p99["value"] > 0 and p99["met"] is not None
    assert f"asyncio records/s: {aio.KPRODUCER} / {aio.CONFLUENT}" in ratios
    loop_alone = ratios[f"asyncio records/s: {aio.LOOP_ONLY} / {aio.AIOKAFKA}"]
    assert loop_alone["target"] is None and loop_alone["value"] > 0

    png = (out / "results.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    md = (out / "results.md").read_text()
    assert md.startswith("# kproducer benchmark: quick view (")
    # One table per view first, every figure in its client's column; the details after.
    views = ["## Each client at its own defaults: records/s",
             "## Acknowledgement latency, each client at its own defaults", "## Spark, `local[2]`",
             "## Every client with the same settings: records/s",
             "## asyncio, each client at its own defaults", "## Details", "## Environment"]
    at = [md.index(v) for v in views]
    assert at == sorted(at), views
    head = md[:md.index("## Details")]
    assert head.count("## ") == 5 and "| `send()` loop |" in head
    assert "| base | " in head and "| idempotent | " in head and "| lz4 | " in head
    assert f"kproducer / {clients.REFERENCE}" in head
    assert report.TABLE_HEADER in md and "| base | kproducer send_many |" in md
    assert report.LATENCY_HEADER in md and report.ASYNCIO_HEADER in md
    assert f"| {aio.LOOP_ONLY} | {aio.TASKS} × {aio.WINDOW} |" in md
    assert f"| {aio.KPRODUCER} | {aio.TASKS} × {aio.WINDOW} |" in md
    assert f"| asyncio records/s: {aio.KPRODUCER} / {aio.AIOKAFKA} |" in md
    assert "| kproducer send_many 100B / confluent produce/poll |" in md
    # The console shows the same tables.
    for v in views[:5]:
        assert v in proc.stdout, v
    assert "Every run verified" in proc.stdout and "FAILED" not in proc.stdout



@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_headline_view_at_quick_sizes(tmp_path):
    """The default view (here at the quick sizes): each client at its defaults in the
    ``defaults`` scenario, one latency row (kproducer and confluent-kafka at their defaults),
    the data source against the mapInPandas recipe; every run read back; results.md and the
    console open with the three tables; a progress bar with the time left on stderr."""
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--headline", "--output",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=580,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["ok"] is True and doc["parameters"]["view"] == "headline"
    assert doc["parameters"]["scenarios"] == list(scenarios.HEADLINE_NAMES)
    assert {(r["scenario"], r["client"]) for r in doc["summary"]} == {
        *(("defaults", c) for c in (*clients.CLIENTS, ceiling.CLIENT)),
        *((scenarios.SPARK, r) for r in scenarios.HEADLINE_SPARK_RECIPES)}
    assert all(r["ok"] and r["verify"]["ok"] for r in doc["runs"])
    lat = doc["latency"]
    assert {(r["rate"], r["loop"], r["client"]) for r in lat} == {
        (10_000, "busy", c) for c in scenarios.HEADLINE_LATENCY_CLIENTS}
    split = len(os.sched_getaffinity(0)) >= 2
    assert {r["placement"] for r in lat} == {latency.SPLIT if split else latency.SHARED}
    assert all(r["ok"] and r["verify"]["ok"] for r in lat)
    md = (out / "results.md").read_text()
    head = md[:md.index("## Details")]
    for title in ("## Each client at its own defaults: records/s",
                  "## Acknowledgement latency, each client at its own defaults",
                  "## Spark, `local[2]`"):
        assert title in head and title in proc.stdout, title
    assert "| `send()` loop |" in head and "| 10,000/s, busy |" in head
    assert "| data source, its defaults |" in head
    assert "## Every client with the same settings" not in md
    bar = [line for line in proc.stderr.splitlines() if " runs, " in line]
    assert bar and "elapsed" in bar[0] and "left" in bar[0] and "headline · " in bar[0]
    assert bar[-1].endswith("done")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_failover_and_rtt_on_the_mock_cluster(tmp_path):
    """The mock cluster's scenarios in their --quick sizes (a 0.6 s load with every fault, one
    round; 3,000 records at a 50 ms round trip): both clients in each, every run read back
    with nothing lost, duplicated or out of order, the figures and the tables there. They are
    in the full run and not in --quick's default list."""
    assert {scenarios.FAILOVER, scenarios.RTT} <= set(scenarios.ALL_NAMES)
    assert not {scenarios.FAILOVER, scenarios.RTT} & set(scenarios.QUICK_NAMES)
    assert not {scenarios.FAILOVER, scenarios.RTT} & set(scenarios.HEADLINE_NAMES)
    out = tmp_path / "results"
    argv = ["--quick", "--scenarios", "failover,rtt", "--output", str(out)]
    proc = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=580, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    doc = json.loads((out / "results.json").read_text())
    assert doc["ok"] is True and doc["failed"] == []
    assert doc["command"] == ["python", "-m", "bench", *argv]
    assert doc["parameters"]["scenarios"] == [scenarios.FAILOVER, scenarios.RTT]
    assert doc["runs"] == [] and doc["latency"] == [] and doc["asyncio"] == []
    assert doc["scenarios"][scenarios.FAILOVER]["settings"] == {
        failover.KPRODUCER: {}, failover.CONFLUENT: {"enable.idempotence": True}}
    # rtt: confluent-kafka at its real defaults (nothing given) and with idempotence.
    assert doc["scenarios"][scenarios.RTT]["settings"] == {
        failover.KPRODUCER: {}, failover.CONFLUENT_DEFAULTS: {},
        failover.CONFLUENT: {"enable.idempotence": True}}

    rows = doc["failover"]
    assert sorted(r["client"] for r in rows) == sorted(failover.FAILOVER_CLIENTS)  # one round
    for r in rows:
        assert r["ok"] and r["error"] is None and r["problems"] is None, r
        assert (r["lost"], r["duplicated"], r["out_of_order"], r["not_ended"], r["unknown"]) == (
            0, 0, 0, 0, 0), r
        assert r["sent"] > 0 and r["acked"] > 0 and r["acked"] + r["failed"] == r["sent"], r
        assert r["read"] >= r["acked"], r
        assert r["settings"] == failover.shown_settings(r["client"]), r
        # Every fault happened; the ones that take leaders were measured, positive figures.
        assert all(t["applied_ms"] is not None for t in r["fault_times_ms"].values()), r
        assert r["recovery_ms"] and all(x > 0 for x in r["recovery_ms"]), r
        assert {x["fault"] for x in r["per_fault"]} <= set(failover.RECOVERY_FAULTS), r
        assert all(x["since_fault_ms"] > 0 for x in r["per_fault"]), r
    # Both rows of a round ran the same faults.
    assert rows[0]["plan"] == rows[1]["plan"]
    summary = doc["failover_summary"]
    assert list(summary) == list(failover.FAILOVER_CLIENTS)
    for client, s in summary.items():
        q = s["recovery_ms"]["all faults"]
        assert s["ok"] and q["count"] == len(next(r for r in rows if r["client"] == client)
                                             ["recovery_ms"]), s
        assert 0 < q["p50"] <= q["p99"] <= q["max"], s
        assert s["acked"] > 0 and s["lost"] == s["duplicated"] == s["out_of_order"] == 0, s

    rtt = doc["rtt"]
    assert sorted((r["rtt_ms"], r["client"]) for r in rtt) == [
        (50, c) for c in sorted(failover.RTT_CLIENTS)]
    n = doc["parameters"]["sizes"]["rtt_records"]
    for r in rtt:
        v = r["verify"]
        assert r["ok"] and r["error"] is None and v["ok"], r
        assert (v["lost"], v["duplicated"], v["out_of_order"]) == (0, 0, 0), r
        # Every partition stored its warm-up record and some of the load.
        assert v["stored"] == n + failover.PARTITIONS, r
        assert len(v["per_partition"]) == failover.PARTITIONS, r
        assert all(c > 1 for c in v["per_partition"].values()), r
        assert r["records_per_s"] > 0 and r["seconds"] > 0 and r["cpu_us_per_record"] > 0, r
        assert r["settings"] == failover.shown_settings(r["client"]), r
    (row,) = doc["rtt_summary"]
    assert row["rtt_ms"] == 50 and set(row["clients"]) == set(failover.RTT_CLIENTS)
    # kproducer's ratio to both confluent-kafkas; ``ratio`` stays the like-for-like one.
    assert set(row["ratios"]) == set(failover.RTT_REFERENCES)
    assert row["ratio"] == row["ratios"][failover.CONFLUENT] > 0

    md = (out / "results.md").read_text()
    for header in (report.FAILOVER_HEADER, report.RTT_HEADER):
        assert header in md and header in proc.stdout
    for header in (report.FAILOVER_DELIVERY_HEADER, report.RTT_READBACK_HEADER):
        assert header in md
    assert md.index("## Failover on librdkafka's mock cluster") < md.index("## Details")
    assert md.index("## Long round trips on librdkafka's mock cluster") < md.index("## Details")
    assert "### Failover: method and deliveries" in md
    assert "### Long round trips: method and runs" in md
    assert "| all faults |" in md and "| 50 ms |" in md
    assert f"| 50 ms | {failover.CONFLUENT_DEFAULTS} |" in md


def test_the_failover_plan_is_the_same_for_a_seed_and_moves_what_it_says():
    """Round r's faults (seed r) are the same for both clients; each event's partitions are
    those whose leader it takes (a move: a leader that changes; the broker going down: the
    partitions it leads); the last move gives every partition back to its first broker; the
    times are a 6 s load's, scaled."""
    for seed in range(20):
        plan = failover.fault_plan(seed, 6.0)
        assert plan == failover.fault_plan(seed, 6.0)
        events = {e["name"]: e for e in plan["events"]}
        assert [e["name"] for e in plan["events"]] == [
            failover.MOVE, failover.DOWN, failover.ELECT, failover.UP, failover.MOVE_BACK]
        initial = plan["initial"]
        move, down = events[failover.MOVE], events[failover.DOWN]
        assert move["partitions"] == list(range(failover.PARTITIONS))   # every leader moves
        assert all(a != b for a, b in zip(initial, move["leaders"]))
        victim = plan["victim"]
        assert down["down"] == victim and down["partitions"]
        assert down["partitions"] == [p for p, b in enumerate(move["leaders"]) if b == victim]
        elected = events[failover.ELECT]["leaders"]
        assert victim not in elected
        assert events[failover.UP]["up"] == victim
        back = events[failover.MOVE_BACK]
        assert back["leaders"] == initial
        assert back["partitions"] == [p for p in range(failover.PARTITIONS)
                                      if elected[p] != initial[p]]
        assert [e["at_s"] for e in plan["events"]] == [1.0, 2.0, 2.2, 3.5, 4.5]
        assert [e["at_s"] for e in failover.fault_plan(seed, 0.6)["events"]] == pytest.approx(
            [0.1, 0.2, 0.22, 0.35, 0.45])
    assert len({failover.fault_plan(s)["victim"] for s in range(20)}) == 3

def test_verify_reports_lost_duplicated_and_stray_records(broker):
    values = make_values(50, 30)

    def produce(topic, records):
        broker.create_topic(topic, 2)
        p = ConfluentProducer({"bootstrap.servers": broker.bootstrap})
        for v in records:
            p.produce(topic, v)
        assert p.flush(30) == 0

    produce("complete", [b"warm-up"] + values)
    ok = check_topic(broker.bootstrap, "complete", 50)
    assert ok["ok"] and ok["read"] == 51 and ok["error"] is None

    # One lost and one duplicated: the count (50) matches, the indices do not.
    produce("lossy", [b"warm-up"] + values[:7] + values[8:] + [values[3]])
    bad = check_topic(broker.bootstrap, "lossy", 50)
    assert not bad["ok"] and bad["read"] == 51
    assert "1 records missing (first indices [7])" in bad["error"]
    assert "duplicated records (indices [3]" in bad["error"]

    produce("stray", values + make_values(51, 30)[50:])       # index 50 and no warm-up
    bad = check_topic(broker.bootstrap, "stray", 50)
    assert "unexpected values (indices [50]" in bad["error"] and "0 warm-up records" in bad["error"]


def test_values_come_from_random_draws_each_within_randbytes_limit(monkeypatch):
    """random.randbytes takes at most 2**31 bits: 750,000 values of 1 KiB (the 1 KiB scenario)
    need more, so the text is drawn in chunks. A small chunk here puts values across chunk
    boundaries; the values are still whole, hex text, indexed, and the same in every process."""
    import random

    from bench import data

    assert data.RANDOM_CHUNK * 8 <= 2 ** 31
    drawn = []
    real = random.Random.randbytes
    monkeypatch.setattr(random.Random, "randbytes",
                        lambda self, k: drawn.append(k) or real(self, k))
    monkeypatch.setattr(data, "RANDOM_CHUNK", 7)
    values = data.make_values(40, 30)
    assert max(drawn) == 7 and sum(drawn) == (40 * 22 + 1) // 2 and len(drawn) > 40 * 22 // 14
    assert values == data.make_values(40, 30)
    assert len(set(values)) == 40
    for i, v in enumerate(values):
        assert len(v) == 30 and data.index_of(v) == i
        int(v[:22], 16)                                  # hex text


def test_producer_rounds_alternate_the_clients_order(monkeypatch):
    """Each round of a producer scenario runs its clients in the order opposite to the last
    (the scenario's broker keeps every record, so a fixed order measured each client on a
    broker in its own state), every client in every round, a failed start recorded."""
    from bench import runner
    ran = []

    def fake_run(cluster, scenario, client, n, args, rep):
        ran.append((rep, client))
        if client == "c" and rep == 2:
            raise RuntimeError("no topic")
        return {"scenario": scenario.name, "client": client, "rep": rep, "ok": True}

    class Progress:
        steps = 0

        def show(self, text):
            pass

        def step(self, estimate_s=1.0):
            Progress.steps += 1

    class Args:
        repeat = 3

    class Cluster:
        def fresh_broker(self):
            ran.append("fresh broker")

    monkeypatch.setattr(runner, "producer_run", fake_run)
    scenario = scenarios.by_name("base")
    rows = runner.producer_runs(Cluster(), scenario, ["a", "b", "c"], scenarios.QUICK, Args,
                                Progress())
    # Each round on a fresh broker (Cluster.fresh_broker: the broker's cost per idempotent
    # batch grows with the producers and topics of the runs before).
    assert ran == [(0, "a"), (0, "b"), (0, "c"), "fresh broker", (1, "c"), (1, "b"), (1, "a"),
                   "fresh broker", (2, "a"), (2, "b"), (2, "c")]
    assert Progress.steps == 9 and len(rows) == 9
    assert [r["ok"] for r in rows].count(False) == 1
    assert "RuntimeError: no topic" in rows[-1]["error"]
    assert runner.alternating(("x", "y"), 0) == ["x", "y"]
    assert runner.alternating(("x", "y"), 5) == ["y", "x"]


@pytest.mark.parametrize("split", [([1], [0]), None])
def test_latency_rows_each_run_on_a_fresh_broker_in_each_placement(monkeypatch, split):
    """Every (rate, loop) row of the latency scenario runs with the broker on CPUs of its own
    (pinned, the client process kept to the others), then sharing them, each on a fresh
    broker; its repeats share it, the clients alternating. Without a split (one CPU, a given
    cluster) only shared."""
    from bench import runner
    ran = []

    class Cluster:
        bootstrap = "127.0.0.1:1"

        def cpu_split(self):
            return split

        def pin_broker(self, cpus):
            ran.append(("pin", cpus))

        def fresh_broker(self):
            ran.append("fresh broker")

        def new_topic(self, label):
            return label

        def drop_topic(self, topic):
            pass

    class Progress:
        def show(self, text):
            pass

        def step(self, estimate_s=1.0):
            pass

    def fake_client_run(cluster, module, spec, row, n, timeout):
        assert spec["cpus"] == row["cpus"]    # the client process keeps to the row's CPUs
        ran.append((spec["rate"], spec["loop"], row["placement"], row["cpus"], spec["client"]))
        row["ok"] = True

    monkeypatch.setattr(runner, "_client_run", fake_client_run)
    k, c = latency.KPRODUCER, latency.CONFLUENT
    rows = runner.latency_runs(Cluster(), [k, c], 1.0, 2, Progress())
    placements = latency.PLACEMENTS if split else (latency.SHARED,)
    assert len(rows) == len(placements) * sum(2 * len(latency.clients_for(loop, [k, c]))
                                              for _, loop in latency.PLAN)
    groups, current = [], []
    for event in ran:
        if event == "fresh broker":
            groups.append(current)
            current = []
        else:
            current.append(event)
    groups.append(current)
    expected = [(rate, loop, p) for rate, loop in latency.PLAN for p in placements]
    assert len(groups) == len(expected)
    for (rate, loop, placement), group in zip(expected, groups):
        runs = group
        if placement == latency.SPLIT:
            assert group[0] == ("pin", [1])       # the broker pinned before the row's runs
            runs = group[1:]
        assert all(e[0] != "pin" for e in runs), group
        cpus = [0] if placement == latency.SPLIT else None
        assert all(e[:4] == (rate, loop, placement, cpus) for e in runs), group
    assert [e[4] for e in groups[0] if e[0] != "pin"] == [k, c, c, k]
    assert {r["placement"] for r in rows} == set(placements)


def test_the_split_placement_gives_the_broker_the_last_half_of_the_cpus(monkeypatch):
    from bench import runner
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 5})
    assert runner.Cluster(None, 4).cpu_split() == ([2, 3, 5], [0, 1])
    assert runner.Cluster("host:9092", 4).cpu_split() is None      # a cluster elsewhere
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: {3})
    assert runner.Cluster(None, 4).cpu_split() is None


def _latency_row(client, rep, p50, p99, counts, ok=True, rate=10_000, loop="busy", rtt=None,
                 cpu=None, placement=None):
    return {"scenario": scenarios.LATENCY, "client": client, "rate": rate, "loop": loop,
            **({} if cpu is None else {"cpu_cores": cpu}),
            **({} if placement is None else {"placement": placement,
                                             "cpus": [0] if placement == latency.SPLIT else None}),
            "rep": rep, "ok": ok, "error": None if ok else "read-back: 3 records missing",
            "p50_ms": p50, "p99_ms": p99, "p999_ms": p99 + 1, "max_ms": p99 + 2,
            "achieved_rate": float(rate), "count": sum(counts),
            "histogram": {"edges_ms": [0.1, 1.0], "counts": counts},
            **({} if rtt is None else {"rtt_p50_ms": rtt[0], "rtt_p99_ms": rtt[1]})}


def test_latency_rows_show_the_requests_round_trips_beside_them():
    # Medians over the repeats, in the table and in the goal's detail; rows from before the
    # round trips were measured (no rtt_*) show none.
    k, c = latency.KPRODUCER, latency.CONFLUENT
    rows = [_latency_row(k, 0, 3.0, 9.0, [1], rtt=(0.7, 2.0), cpu=0.7), _latency_row(c, 0, 3.2, 6.0, [1], rtt=(0.4, 3.0), cpu=1.1),
            _latency_row(c, 1, 2.0, 5.0, [1], rtt=(0.5, 4.0), cpu=1.0), _latency_row(k, 1, 2.5, 5.5, [1], rtt=(0.9, 2.5), cpu=0.6),
            _latency_row(k, 2, 2.8, 5.8, [1], rtt=(0.6, 1.0), cpu=0.8), _latency_row(c, 2, 2.9, 7.0, [1], rtt=(0.3, 9.0), cpu=1.2)]
    summary = {r["client"]: r for r in report.latency_summary(rows)}
    assert (summary[k]["rtt_p50_ms"], summary[k]["rtt_p99_ms"]) == (0.7, 2.0)
    assert (summary[c]["rtt_p50_ms"], summary[c]["rtt_p99_ms"]) == (0.4, 4.0)
    table = "\n".join(report.latency_table(rows))
    assert "| 6.80 | 7.80 | 0.70 / 2.00 | 0.70 | 0.97× / 0.97× |" in table
    p50 = {t["label"]: t for t in report.latency_ratios(rows)}[f"latency p50 10,000/s busy loop: {c} / {k}"]
    # Every figure after its client's name.
    assert (f"round trips to the broker, p50 / p99: {k} 0.70 / 2.00 ms, {c} 0.40 / 4.00 ms"
            in p50["detail"])
    assert f"client CPU: {k} 0.70 cores, {c} 1.10 cores" in p50["detail"]
    assert p50["detail"].startswith(f"{k} 2.80 ms, {c} 2.90 ms")
    old = [{key: v for key, v in r.items() if not key.startswith("rtt_") and key != "cpu_cores"}
           for r in rows]
    assert "| 6.80 | 7.80 | – | – | 0.97× / 0.97× |" in "\n".join(report.latency_table(old))
    assert all("round trips" not in t["detail"] and "CPU" not in t["detail"]
               for t in report.latency_ratios(old))


def test_round_trips_from_each_client_s_own_figures():
    # librdkafka's statistics windows, weighted by their requests, brokers without any left out.
    window = lambda cnt, total, p50, p99: json.dumps({"brokers": {
        "127.0.0.1:9092/1": {"rtt": {"cnt": cnt, "sum": total, "p50": p50, "p99": p99}},
        "127.0.0.1:9092/bootstrap": {"rtt": {"cnt": 0, "sum": 0, "p50": 0, "p99": 0}}}})
    got = latency.confluent_rtt([window(100, 50_000, 400, 2_000), window(300, 180_000, 600, 1_000)])
    assert got == {"rtt_p50_ms": pytest.approx(0.55), "rtt_p99_ms": pytest.approx(1.25),
                   "rtt_avg_ms": pytest.approx(0.575), "rtt_count": 400}
    assert latency.confluent_rtt([window(0, 0, 0, 0)])["rtt_p50_ms"] is None
    assert latency.kproducer_rtt({"request_latency_p50_ms": 0.5, "request_latency_p99_ms": 2.0,
                                  "request_latency_avg_ms": 0.6, "request_latency_count": 9}) == {
        "rtt_p50_ms": 0.5, "rtt_p99_ms": 2.0, "rtt_avg_ms": 0.6, "rtt_count": 9}


def test_latency_rows_are_the_median_of_their_repeats():
    # Three runs a client: the summary takes each figure's median with its range, pools the
    # histograms, and the goal compares medians (one outlying run decides nothing).
    k, c = latency.KPRODUCER, latency.CONFLUENT
    rows = [_latency_row(k, 0, 3.0, 9.0, [1, 2, 0]), _latency_row(c, 0, 3.2, 6.0, [0, 3, 0]),
            _latency_row(c, 1, 2.0, 5.0, [1, 1, 1]), _latency_row(k, 1, 2.5, 5.5, [0, 3, 0]),
            _latency_row(k, 2, 2.8, 5.8, [3, 0, 0]), _latency_row(c, 2, 2.9, 7.0, [2, 1, 0])]
    summary = {r["client"]: r for r in report.latency_summary(rows)}
    mine = summary[k]
    assert (mine["p50_ms"], mine["p99_ms"], mine["repeats"]) == (2.8, 5.8, 3)
    assert mine["p50_ms_range"] == [2.5, 3.0] and mine["p99_ms_range"] == [5.5, 9.0]
    assert mine["histogram"]["counts"] == [4, 5, 0] and mine["count"] == 9
    ratios = {t["label"]: t for t in report.latency_ratios(rows)}
    p99 = ratios[f"latency p99 10,000/s busy loop: {c} / {k}"]
    assert p99["met"] is True and p99["value"] == pytest.approx(6.0 / 5.8)
    assert "medians of 3 runs" in p99["detail"] and "5.50–9.00" in p99["detail"]
    p50 = ratios[f"latency p50 10,000/s busy loop: {c} / {k}"]
    assert p50["value"] == pytest.approx(2.9 / 2.8) and p50["met"] is True
    table = "\n".join(report.latency_table(rows))
    assert ("| 10,000/s | busy | sharing the CPUs | kproducer send() | 10,000 | 2.80 (2.50–3.00) | "
            "5.80 (5.50–9.00) |") in table

    # A failed repeat makes the row FAILED, and its goal unjudged.
    rows[4] = _latency_row(k, 2, 2.8, 5.8, [3, 0, 0], ok=False)
    failed = {r["client"]: r for r in report.latency_summary(rows)}[k]
    assert not failed["ok"] and "3 records missing" in failed["error"]
    assert all(t["met"] is None for t in report.latency_ratios(rows))
    assert "| 10,000/s | busy | sharing the CPUs | kproducer send() | FAILED |" in "\n".join(
        report.latency_table(rows))


def test_latency_goals_are_judged_with_the_broker_on_its_own_cpu():
    # Both placements ran: the goals (target 1.0) are the split rows', where kproducer loses
    # here; the shared rows, where it wins, carry no target. Each placement is compared within
    # itself, and the table names it.
    k, c = latency.KPRODUCER, latency.CONFLUENT
    split, shared = latency.SPLIT, latency.SHARED
    rows = [_latency_row(k, 0, 3.5, 9.0, [1], placement=split), _latency_row(c, 0, 3.0, 8.0, [1], placement=split),
            _latency_row(k, 0, 2.0, 5.0, [1], placement=shared), _latency_row(c, 0, 3.0, 6.0, [1], placement=shared)]
    assert report.goal_placement(rows) == split
    ratios = {t["label"]: t for t in report.latency_ratios(rows)}
    goal = ratios[f"latency p50 10,000/s busy loop, broker on its own CPU: {c} / {k}"]
    assert goal["target"] == 1.0 and goal["met"] is False
    assert goal["value"] == pytest.approx(3.0 / 3.5)
    beside = ratios[f"latency p50 10,000/s busy loop, broker sharing the CPUs: {c} / {k}"]
    assert beside["target"] is None and beside["met"] is None
    assert beside["value"] == pytest.approx(3.0 / 2.0)
    assert len(ratios) == 4
    table = "\n".join(report.latency_table(rows))
    assert ("| 10,000/s | busy | on its own CPU (client on CPU 0) | kproducer send() | 10,000 | "
            "3.50 | 9.00 |") in table
    assert "| 10,000/s | busy | sharing the CPUs | kproducer send() | 10,000 | 2.00 | 5.00 |" in table
    assert table.index("on its own CPU") < table.index("sharing the CPUs")
    # Results with one placement (one CPU, or from before): judged there, labels as before.
    only_shared = rows[2:]
    assert report.goal_placement(only_shared) == shared
    assert {t["label"]: t for t in report.latency_ratios(only_shared)}[
        f"latency p50 10,000/s busy loop: {c} / {k}"]["met"] is True


def test_the_costs_beside_a_ratio_keep_a_broker_figure_under_one_clock_tick():
    # /proc counts the broker's CPU in 10 ms ticks: a --quick run may see none. The figure is
    # still given (the quick run's check above failed once in CI for the want of it).
    mine = {"client": "kproducer send()", "cpu_us_per_record": 0.5, "broker_cpu_us_per_record": 0.0}
    ref = {"client": clients.REFERENCE, "cpu_us_per_record": 1.5, "broker_cpu_us_per_record": 0.41}
    out = []
    report._cost_side_by_side(out, mine, ref, "defaults")
    assert out[0]["value"] == pytest.approx(3.0)
    assert out[0]["detail"] == (f"{clients.REFERENCE} 1.50 µs, kproducer send() 0.50 µs "
                                f"(defaults scenario); the broker's CPU per record while each "
                                f"ran: {clients.REFERENCE} 0.41 µs, kproducer send() under one "
                                f"clock tick")
    out = []
    report._cost_side_by_side(out, mine, dict(ref, broker_cpu_us_per_record=None), "defaults")
    assert "broker" not in out[0]["detail"]      # an external cluster: no broker figure


# ---- views, the progress bar, the tables for the docs ---------------------------------------

def test_the_default_is_the_headline_view_and_full_the_whole_suite():
    from bench.__main__ import parse_args

    head = parse_args([])
    assert head.view is scenarios.HEADLINE_VIEW and head.repeat == 3
    assert head.names == list(scenarios.HEADLINE_NAMES) == ["defaults", "latency", "spark"]
    assert head.view.latency_plan == ((10_000, "busy"),)
    assert head.view.latency_clients == (latency.KPRODUCER, latency.CONFLUENT)
    assert head.view.spark_recipes == (spark_recipes.DATA_SOURCE, spark_recipes.MAP_IN_PANDAS)
    assert head.view.sizes.records == scenarios.HEADLINE.records <= scenarios.FULL.records
    full = parse_args(["--full"])
    assert full.view is scenarios.FULL_VIEW and full.names == list(scenarios.ALL_NAMES)
    assert full.view.latency_plan == latency.PLAN and full.view.latency_placements is None
    assert full.view.spark_recipes == spark_recipes.RECIPES
    quick = parse_args(["--quick"])
    assert quick.names == list(scenarios.QUICK_NAMES) and quick.repeat == 1
    assert quick.view.sizes is scenarios.QUICK
    small = parse_args(["--quick", "--headline"])
    assert small.names == list(scenarios.HEADLINE_NAMES) and small.view.sizes is scenarios.QUICK
    assert small.view.latency_plan == head.view.latency_plan
    # Named scenarios run as the full suite has them.
    named = parse_args(["--scenarios", "latency"])
    assert named.names == ["latency"] and named.view is scenarios.FULL_VIEW
    with pytest.raises(SystemExit):
        parse_args(["--full", "--quick"])
    with pytest.raises(SystemExit):
        parse_args(["--headline", "--scenarios", "base"])


def test_the_headline_latency_row_runs_in_the_split_placement_only():
    """The headline view's one latency row runs with the broker on a CPU of its own where
    the machine has two (shared where it has one), and only the view's row."""
    from bench import runner

    class Cluster:
        def __init__(self, split):
            self.split = split

        def cpu_split(self):
            return self.split

    two, one = Cluster(([1], [0])), Cluster(None)
    assert runner.latency_placements(two, (latency.SPLIT,)) == (latency.SPLIT,)
    assert runner.latency_placements(one, (latency.SPLIT,)) == (latency.SHARED,)
    assert runner.latency_placements(two, None) == latency.PLACEMENTS
    assert runner.latency_placements(one, None) == (latency.SHARED,)


def test_the_progress_bar_shows_the_view_the_run_and_the_time_left():
    import io

    from bench import runner

    stream = io.StringIO()
    bar = runner.Progress(3, "headline", estimate_s=30.0, stream=stream)
    bar.started -= 10                          # 10 s ago
    bar.show("defaults: kproducer send(), 1,000,000 records (round 1 of 3)")
    line = stream.getvalue().splitlines()[-1]
    assert "0/3 runs" in line and "0:10 elapsed" in line and "~0:20 left" in line
    assert "headline · defaults: kproducer send()" in line
    bar.step(5.0)                              # the first step took twice its estimate
    bar.show("next")
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("[########" + "." * 16 + "] 1/3 runs")
    assert "~0:50 left" in line               # 25 s of estimates to come, at half the pace
    bar.step(10.0)
    bar.step(15.0)
    bar.close()
    last = stream.getvalue().splitlines()[-1]
    assert "3/3 runs" in last and "left" not in last and last.endswith("done")
    assert runner.estimate("producer", 1_000_000) > runner.estimate("producer", 20_000)


def _fixture_doc() -> dict:
    """A small results.json: the headline view's scenarios and the rtt scenario."""
    def run(scenario, client, rate, cpu, records=1_000_000, ok=True):
        return {"scenario": scenario, "client": client, "ok": ok, "records": records,
                "repeats": 3, "records_per_s": rate, "mb_per_s": rate * 1e-4,
                "cpu_us_per_record": cpu, "peak_rss_mib": 40.0, "rss_data_mib": 20.0,
                "broker_cpu_us_per_record": 0.5, "seconds": records / rate, "settings": {},
                **({} if ok else {"error": "read-back: 3 records missing"})}

    summary = [run("defaults", clients.KPRODUCER_SEND, 2_000_000, 0.34),
               run("defaults", clients.KPRODUCER_SEND_MANY, 2_500_000, 0.2),
               run("defaults", clients.CONFLUENT_POLL, 1_000_000, 1.25),
               run("defaults", clients.CONFLUENT_BATCH, 600_000, 2.0),
               run("defaults", clients.KAFKA_PYTHON, 30_000, 38.9, records=100_000),
               run("defaults", clients.AIOKAFKA, 90_000, 10.1, records=100_000),
               run("defaults", ceiling.CLIENT, 2_400_000, 0.04),
               run("spark", spark_recipes.DATA_SOURCE, 1_300_000, 0.79),
               run("spark", spark_recipes.MAP_IN_PANDAS, 600_000, 2.34)]
    for r in summary:
        r["reference"] = clients.REFERENCE
        r["ratio"] = None
    k, c = latency.KPRODUCER, latency.CONFLUENT
    lat = [_latency_row(k, rep, 3.0, 5.5, [1], rtt=(0.3, 1.0), cpu=0.98, placement=latency.SPLIT)
           for rep in range(3)]
    lat += [_latency_row(c, rep, 3.3, 8.8, [1], rtt=(0.3, 3.0), cpu=0.92, placement=latency.SPLIT)
            for rep in range(3)]

    def rtt_run(client, ms, rate, rep=0):
        return {"scenario": scenarios.RTT, "client": client, "rtt_ms": ms, "rep": rep,
                "records": 300_000, "ok": True, "error": None, "records_per_s": rate,
                "cpu_us_per_record": 2.5, "seconds": 300_000 / rate,
                "verify": {"lost": 0, "duplicated": 0, "out_of_order": 0}}

    rtt = [rtt_run(failover.KPRODUCER, 0, 900_000), rtt_run(failover.CONFLUENT_DEFAULTS, 0, 1e6),
           rtt_run(failover.CONFLUENT, 0, 800_000),
           rtt_run(failover.KPRODUCER, 50, 900_000),
           rtt_run(failover.CONFLUENT_DEFAULTS, 50, 450_000),
           rtt_run(failover.CONFLUENT, 50, 1_000_000)]
    return {"started_at": "2026-11-28T10:00:00", "command": ["python", "-m", "bench"],
            "environment": {"cpu_model": "AMD EPYC", "cpu_count": 2, "memory_gib": 23.5,
                            "python": "3.11.7", "broker": "embedded Tansu",
                            "versions": {"kproducer": "0.1.0 (compiled)",
                                         "confluent-kafka": "2.16.1", "librdkafka": "2.16.0",
                                         "kafka-python": "3.0.12", "aiokafka": "0.14.0",
                                         "pyspark": "4.3.0"}},
            "parameters": {"view": "headline", "quick": False, "repeat": 3, "partitions": 4,
                           "batch_size": 1_000_000, "linger_ms": 5,
                           "sizes": {"rtt_records": 300_000}},
            "summary": summary, "latency": lat, "rtt": rtt, "asyncio": [], "failover": [],
            "ratios": [], "ok": True, "failed": [], "elapsed_s": 290.0}


def test_the_headline_table_from_a_results_json(tmp_path):
    """bench.report.headline_table turns a run's results.json into one table per view, each
    figure in its client's column, kproducer's ratio to the reference with its target."""
    doc = json.loads(json.dumps(_fixture_doc()))          # as read back from results.json
    doc["command"] += ["--output", "/tmp/bench-x"]       # where it went is not shown
    text = report.headline_table(doc)
    assert "/tmp" not in text
    assert text.startswith("Headline view: `python -m bench`, on 2026-11-28: 2 cores "
                           "(AMD EPYC)")
    assert "5 min, every run read back and verified." in text.splitlines()[0]
    titles = [line for line in text.splitlines() if line.startswith("### ")]
    assert titles == ["### Each client at its own defaults: records/s",
                      "### Acknowledgement latency, each client at its own defaults",
                      "### Spark, `local[2]`",
                      "### Long round trips on librdkafka's mock cluster of 3 brokers"]
    # records/s (CPU µs per record) under each library; the bulk row has no pure-Python peer.
    assert ("| each client at its own defaults | kproducer: records/s (CPU µs/record) | "
            "confluent-kafka: records/s (CPU µs/record) | kafka-python: records/s (CPU "
            "µs/record) | aiokafka: records/s (CPU µs/record) | broker ceiling: records/s (CPU "
            f"µs/record) | kproducer / {clients.REFERENCE} |") in text
    assert ("| `send()` loop | 2,000,000 (0.34) | 1,000,000 (1.25) | 30,000 (38.90) | "
            "90,000 (10.10) | 2,400,000 (0.04) | 2.00× (target 2×: met) |") in text
    assert ("| bulk: kproducer `send_many`, confluent `produce_batch` | 2,500,000 (0.20) | "
            "600,000 (2.00) | – | – | 2,400,000 (0.04) | 2.50× (target 3×: not met) |"
            ) in text
    assert "1,000,000 records per run (kafka-python, aiokafka: 100,000), best of 3" in text
    # Latency: medians of the runs, the reference over kproducer, the goal's target.
    assert ("| 10,000/s, busy | 3.00 / 5.50 (0.98) | 3.30 / 8.80 (0.92) | 1.10× · 1.60× "
            "(target 1×: met) |") in text
    assert ("| data source, its defaults | 1,300,000 (0.79) | 600,000 (2.34) | 2.17× "
            "(target 2×: met) |") in text
    # rtt: kproducer's ratio to confluent-kafka at its defaults and with idempotence; the
    # 0 ms row carries no target.
    assert report.RTT_HEADER in text
    assert ("| 0 ms | 900,000 (2.50) | 1,000,000 (2.50) | 800,000 (2.50) | 0.90× | 1.12× |"
            in text)
    assert ("| 50 ms | 900,000 (2.50) | 450,000 (2.50) | 1,000,000 (2.50) | 2.00× (target 1×: "
            "met) | 0.90× (target 1×: not met) |") in text
    # A FAILED run shows as such in its column, and no ratio is made of it.
    doc["summary"][0].update(ok=False)
    failed = report.headline_table(doc)
    assert "| `send()` loop | FAILED | 1,000,000 (1.25) |" in failed
    assert "| – |\n| bulk" in failed
    # results.md opens with the same tables (one level up), the details after them.
    doc["summary"][0].update(ok=True)
    doc.update(scenarios={}, skipped={}, micro=None, runs=[])
    md = report.markdown(doc)
    assert md.index("## Each client at its own defaults") < md.index("## Details")
    assert md.index("## Details") < md.index("## Environment")
    assert "| `send()` loop | 2,000,000 (0.34) |" in md[:md.index("## Details")]


def test_performance_table_rewrites_only_the_marked_section(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import performance_table
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    report.write_json(_fixture_doc(), str(run_dir / "results.json"))
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\nMethod.\n\n<!-- bench:begin -->\nold table\n"
                    "<!-- bench:end -->\n\nWhat limits the figures.\n")
    other = tmp_path / "README.md"
    other.write_text("# kproducer\n\nno markers here\n")
    chart = tmp_path / "bench.png"
    argv = [str(run_dir), "--page", str(page), "--chart", str(chart)]
    assert performance_table.main(argv) == 0
    text = page.read_text()
    assert text.startswith("# Performance\n\nMethod.\n\n<!-- bench:begin -->\n")
    assert text.endswith("<!-- bench:end -->\n\nWhat limits the figures.\n")
    assert "old table" not in text and "| `send()` loop | 2,000,000 (0.34) |" in text
    # The chart above the tables, by its path from the page.
    assert report.headline_table(_fixture_doc(), chart="bench.png") in text
    assert "\n![records/s per scenario and client](bench.png)\n" in text
    assert chart.read_bytes().startswith(PNG_MAGIC)
    # --check: up to date now; stale once the page changes; nothing written either way.
    check = [str(run_dir), "--page", str(page), "--chart", str(chart), "--check"]
    assert performance_table.main(check) == 0
    page.write_text(text.replace("2,000,000 (0.34)", "1 (1)"))
    assert performance_table.main(check) == 1
    assert "1 (1)" in page.read_text()
    # A page that shows the chart itself, outside the section, gets the tables alone.
    page.write_text("![chart](bench.png)\n\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    assert performance_table.main([str(run_dir), "--page", str(page), "--chart", str(chart)]) == 0
    assert page.read_text().count("bench.png") == 1
    # A page named without the markers is an error; unnamed, it is left alone.
    with pytest.raises(SystemExit):
        performance_table.main([str(run_dir), "--page", str(other), "--chart", "-"])
    assert performance_table.replace_section(other.read_text(), _fixture_doc()) is None
    assert other.read_text() == "# kproducer\n\nno markers here\n"


def test_rtt_runs_confluent_kafka_at_its_defaults_and_idempotent():
    assert failover.RTT_CLIENTS == (failover.KPRODUCER, failover.CONFLUENT_DEFAULTS,
                                    failover.CONFLUENT)
    assert failover.FAILOVER_CLIENTS == (failover.KPRODUCER, failover.CONFLUENT)
    assert failover.settings(failover.CONFLUENT_DEFAULTS, "h:1") == {"bootstrap.servers": "h:1"}
    assert failover.settings(failover.CONFLUENT, "h:1") == {"bootstrap.servers": "h:1",
                                                            "enable.idempotence": True}
    assert "idempotence off" in failover.DEFAULTS_NOTE[failover.CONFLUENT_DEFAULTS]
    (zero, fifty) = report.rtt_summary(_fixture_doc()["rtt"])
    assert fifty["ratios"] == {failover.CONFLUENT_DEFAULTS: 2.0, failover.CONFLUENT: 0.9}
    assert fifty["ratio"] == 0.9 and zero["rtt_ms"] == 0
    table = "\n".join(report.rtt_readback_table(_fixture_doc()["rtt"]))
    assert f"| 50 ms | {failover.CONFLUENT_DEFAULTS} | 1 | 450,000 | 0 | 0 | 0 |" in table


def test_the_failover_table_has_a_column_per_client():
    def row(client, values, seed=0):
        return {"client": client, "ok": True, "seed": seed, "achieved_rate": 5000.0,
                "sent": 100, "acked": 100, "failed": 0, "not_ended": 0, "lost": 0,
                "duplicated": 0, "out_of_order": 0, "unknown": 0,
                "per_fault": [{"fault": failover.MOVE, "partition": p, "recovery_ms": v}
                              for p, v in enumerate(values)]}

    rows = [row(failover.KPRODUCER, [10.0, 20.0, 30.0]),
            row(failover.CONFLUENT, [20.0, 30.0, 60.0])]
    table = "\n".join(report.failover_tables(rows))
    assert report.FAILOVER_HEADER in table
    assert ("| all faults | 20 / 30 / 30 (3) | 30 / 60 / 60 (3) | 1.50× · 2.00× (target 1×: "
            "met) |") in table
    assert f"| {failover.DOWN} | – | – | – |" in table
    delivery = "\n".join(report.failover_delivery_table(rows))
    assert f"| {failover.CONFLUENT} | 1 | 100 | 100 | 0 |" in delivery
