"""The benchmark matrix: a base scenario, then one dimension varied at a time.

A full cross product (3 value sizes x 2 acks x 2 idempotence x 3 compressions x 2 keyings x
6 clients) would take hours; varying one dimension of a base scenario shows each
dimension's effect at a fraction of that. Producer scenarios (every client runs each):

=============  ==========  =====  ====  ===========  =============
name           value size  keyed  acks  idempotence  compression
=============  ==========  =====  ====  ===========  =============
``base``       100 B       yes    1     off          none
``value-10B``  10 B        yes    1     off          none
``value-1KiB`` 1 KiB       yes    1     off          none
``acks-all``   100 B       yes    all   off          none
``idempotent`` 100 B       yes    all   on           none
``lz4``        100 B       yes    1     off          lz4 (level 1)
``zstd``       100 B       yes    1     off          zstd
``unkeyed``    100 B       no     1     off          none
=============  ==========  =====  ====  ===========  =============

``defaults`` (100 B, keyed) gives every client nothing but the broker address: what users run
(kproducer: acks=all, idempotence, batch.size 16 KiB growing to batch.max.size 256 KiB,
linger.ms 5; librdkafka: acks=all, no idempotence, 1 MB batches, linger.ms 5; ...). The other
scenarios give every client the same batch size (``--batch-size``, 1 MB) and linger.

``transactional`` (100 B, keyed, acks=all, idempotence on) wraps every 10,000 records in a
transaction (begin, send, commit) and is read back with ``isolation.level=read_committed``;
it compares kproducer with confluent-kafka's transactional producer only.

(Idempotence requires ``acks=all`` in every client, so ``idempotent`` is compared with
``acks-all``.) ``lz4`` runs at level 1, LZ4's fast mode, where the client has the setting:
that is librdkafka's and kafka-python's default, while Java (and so kproducer) and aiokafka
default to level 9, LZ4 HC, several times slower to compress; aiokafka has no setting and
stays at 9. zstd runs at every client's default, level 3.

Besides these: ``latency`` (acknowledgement latency at fixed rates with an application loop
that keeps the GIL busy and one that sleeps, every client at its defaults: :mod:`bench.latency`),
``asyncio`` (kproducer's async front against aiokafka and confluent-kafka's asyncio producer:
:mod:`bench.aio`), ``spark`` (``kproducer.spark.write_kafka`` against the confluent-kafka
``foreachPartition`` and ``mapInPandas`` recipes, when pyspark is installed) and ``micro``
(the encode and CRC-32C microbenchmarks of :mod:`bench.micro`).

Two more run on librdkafka's mock cluster of three brokers (not the embedded broker, nor a
cluster given with ``--bootstrap-servers``), kproducer against confluent-kafka, each client at
its defaults (confluent-kafka with idempotence on, kproducer's default), a fresh cluster per
run: ``failover`` (keyed records at a steady rate while leaders move and a leader's broker goes
down and comes back: the recovery time per partition, every record read back) and ``rtt``
(ten round trips' worth of records, ``RTT_RECORDS``, as fast as each client goes with every
broker answering 0, 50, 150 or 500 ms late: records/s; confluent-kafka there also at its real defaults, without idempotence). Both
are in the full run only (:mod:`bench.failover`).

Views (:class:`View`): ``python -m bench`` runs the headline view (``HEADLINE_NAMES``: the
``defaults`` scenario, one latency row, the Spark data source against one confluent recipe, in
3 to 5 minutes on 2 cores); ``--full`` every scenario above (about 40 minutes); ``--quick``
a short list at small sizes (``--quick --headline``: the headline view at those sizes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bench import failover, latency, spark_recipes


@dataclass(frozen=True)
class Scenario:
    name: str
    value_size: int = 100
    keyed: bool = True
    acks: str = "1"              # "1" or "all"
    idempotence: bool = False
    compression: str = "none"
    compression_level: int | None = None   # None: each client's default for the codec
    commit_every: int = 0        # > 0: a transaction per this many records (read_committed)
    own_defaults: bool = False   # every client at its own defaults (only the broker address given)
    varies: str = "base"         # the dimension this scenario changes, for the table

    def describe(self) -> str:
        size = (f"{self.value_size} B" if self.value_size < 1024
                else f"{self.value_size // 1024} KiB")
        if self.own_defaults:
            return (f"{size}, {'keyed' if self.keyed else 'unkeyed'}, every client at its own "
                    f"defaults (no batch size, linger, acks or idempotence given)")
        level = "" if self.compression_level is None else f" level {self.compression_level}"
        txn = f", a transaction per {self.commit_every:,} records" if self.commit_every else ""
        return (f"{size}, {'keyed' if self.keyed else 'unkeyed'}, acks={self.acks}, "
                f"idempotence {'on' if self.idempotence else 'off'}, "
                f"compression {self.compression}{level}{txn}")

    def as_dict(self) -> dict:
        return {**asdict(self), "description": self.describe()}


BASE = Scenario("base")
PRODUCER_SCENARIOS = (
    BASE,
    Scenario("defaults", own_defaults=True, varies="settings"),
    Scenario("value-10B", value_size=10, varies="value size"),
    Scenario("value-1KiB", value_size=1024, varies="value size"),
    Scenario("acks-all", acks="all", varies="acks"),
    Scenario("idempotent", acks="all", idempotence=True, varies="idempotence"),
    Scenario("lz4", compression="lz4", compression_level=1, varies="compression"),
    Scenario("zstd", compression="zstd", varies="compression"),
    Scenario("unkeyed", keyed=False, varies="keying"),
    Scenario("transactional", acks="all", idempotence=True, commit_every=10_000, varies="transactions"),
)
SPARK = "spark"
MICRO = "micro"
LATENCY = "latency"
ASYNCIO = "asyncio"
FAILOVER = "failover"
RTT = "rtt"
ALL_NAMES = (tuple(s.name for s in PRODUCER_SCENARIOS)
             + (LATENCY, ASYNCIO, FAILOVER, RTT, SPARK, MICRO))
# Scenarios that are not a producer matrix row (each has its own runner and table).
SPECIAL_NAMES = (LATENCY, ASYNCIO, FAILOVER, RTT, SPARK, MICRO)
# Those that run on librdkafka's mock cluster, whatever --bootstrap-servers says.
MOCK_CLUSTER_NAMES = (FAILOVER, RTT)

# The headline view, what ``python -m bench`` runs by default: every client at its own defaults
# (the ``defaults`` scenario: kproducer's ``send()`` loop and ``send_many`` against
# confluent-kafka's produce/poll loop and ``produce_batch``, kafka-python and aiokafka), the
# latency scenario at one rate (``HEADLINE_LATENCY_PLAN``, the broker on a CPU of its own where
# the machine has two) and the Spark data source against the confluent recipe the full run
# finds the faster (``HEADLINE_SPARK_RECIPES``): 3 to 5 minutes on 2 cores.
HEADLINE_NAMES = ("defaults", LATENCY, SPARK)
HEADLINE_LATENCY_PLAN = ((10_000, "busy"),)
HEADLINE_LATENCY_CLIENTS = (latency.KPRODUCER, latency.CONFLUENT)     # each at its defaults
HEADLINE_SPARK_RECIPES = (spark_recipes.DATA_SOURCE, spark_recipes.MAP_IN_PANDAS)

# What --quick runs: the base scenario (issue 4's send_many figure), one variation that
# changes the protocol path (idempotence: InitProducerId, sequence numbers) and one that
# changes the encoding path (compression), plus short latency runs, a short asyncio run (the
# records of ``Sizes.records``), a tiny Spark run and the microbenchmarks. Not the mock
# cluster's failover and rtt scenarios: name them (``--quick --scenarios failover,rtt``: a
# fraction of a second of load, one round trip).
QUICK_NAMES = ("base", "defaults", "idempotent", "lz4", LATENCY, ASYNCIO, SPARK, MICRO)


@dataclass(frozen=True)
class Sizes:
    """Records per run. The pure-Python peers (kafka-python, aiokafka) are ~20x slower than
    the others: they get ``slow_fraction`` of the records and are compared by rate."""
    records: int              # kproducer and confluent-kafka, 10 B and 100 B values
    records_1kib: int         # the same for 1 KiB values (the broker keeps everything in memory)
    slow_fraction: float
    spark_rows: int
    micro_records: int
    micro_repeat: int
    latency_seconds: float    # per latency run (rate x seconds records)
    failover_seconds: float   # the failover load's length (its faults' times scale with it)
    rtt_records: int          # records per rtt run (RTT_ROUND_TRIPS windows: see there)
    rtt_ms: tuple             # the rtt scenario's round trips (ms)

    def for_client(self, scenario: Scenario, slow: bool) -> int:
        n = self.records_1kib if scenario.value_size >= 1024 else self.records
        return max(1000, int(n * self.slow_fraction)) if slow else n


# The rtt scenario's runs, in round trips: each client sends this many windows' worth
# (bench.failover.RECORDS_PER_ROUND_TRIP), so that at every round trip it runs for at least
# this many (more where its CPU, not the round trip, bounds it), and the first round trip,
# which starts with nothing in flight, does not decide the rate. About 5 to 17 s of load per
# run at 500 ms (kproducer; confluent-kafka with idempotence, its 5 requests in flight).
RTT_ROUND_TRIPS = 10
RTT_RECORDS = RTT_ROUND_TRIPS * failover.RECORDS_PER_ROUND_TRIP

FULL = Sizes(records=1_000_000, records_1kib=750_000, slow_fraction=0.1, spark_rows=2_000_000,
             micro_records=200_000, micro_repeat=5, latency_seconds=5.0, failover_seconds=6.0,
             rtt_records=RTT_RECORDS, rtt_ms=(0, 50, 150, 500))
QUICK = Sizes(records=20_000, records_1kib=15_000, slow_fraction=0.25, spark_rows=20_000,
              micro_records=10_000, micro_repeat=2, latency_seconds=0.5, failover_seconds=0.6,
              rtt_records=3_000, rtt_ms=(50,))
# The headline view's sizes, chosen so that it takes at most about 5 minutes on a busy 2-core
# machine with three rounds of everything: half the full run's records per producer run (each run
# still sends for half a second or more; most of a run's time is starting the process,
# making the records and reading them back), a quarter of its Spark rows (the JVM's start
# and the warm-up passes are most of the Spark step), latency runs of 4 s (40,000 records at
# 10,000/s: a p99 of 400 samples).
HEADLINE = Sizes(records=500_000, records_1kib=375_000, slow_fraction=0.1,
                 spark_rows=500_000, micro_records=200_000, micro_repeat=5,
                 latency_seconds=4.0, failover_seconds=6.0, rtt_records=RTT_RECORDS,
                 rtt_ms=(0, 50, 150, 500))


@dataclass(frozen=True)
class View:
    """What a run covers: its scenarios by default, their sizes and repeats, and the parts of
    the latency and Spark scenarios it runs (the headline view runs one latency row and one
    pair of Spark recipes; the others all of them)."""
    name: str
    names: tuple
    sizes: Sizes
    repeat: int
    latency_plan: tuple = latency.PLAN
    # None: every placement the machine has (bench.latency.PLACEMENTS); else these, where
    # the machine has them (shared otherwise).
    latency_placements: tuple | None = None
    latency_clients: tuple = latency.CLIENTS
    spark_recipes: tuple = spark_recipes.RECIPES

    def as_dict(self) -> dict:
        return {"name": self.name, "latency_plan": [list(k) for k in self.latency_plan],
                "latency_placements": (None if self.latency_placements is None
                                       else list(self.latency_placements)),
                "latency_clients": list(self.latency_clients),
                "spark_recipes": list(self.spark_recipes)}


HEADLINE_VIEW = View("headline", HEADLINE_NAMES, HEADLINE, repeat=3,
                     latency_plan=HEADLINE_LATENCY_PLAN, latency_placements=(latency.SPLIT,),
                     latency_clients=HEADLINE_LATENCY_CLIENTS,
                     spark_recipes=HEADLINE_SPARK_RECIPES)
FULL_VIEW = View("full", ALL_NAMES, FULL, repeat=3)
QUICK_VIEW = View("quick", QUICK_NAMES, QUICK, repeat=1)
# ``--quick --headline``: the headline view's parts at the quick sizes (the tests' run of it).
QUICK_HEADLINE_VIEW = View("headline", HEADLINE_NAMES, QUICK, repeat=1,
                           latency_plan=HEADLINE_LATENCY_PLAN,
                           latency_placements=(latency.SPLIT,),
                           latency_clients=HEADLINE_LATENCY_CLIENTS,
                           spark_recipes=HEADLINE_SPARK_RECIPES)


def view_for(full: bool, quick: bool, headline: bool, named: bool) -> View:
    """The view of a command line: ``--full`` the whole suite; ``--quick`` alone its short
    list at small sizes, with ``--headline`` the headline view at those sizes; scenarios
    named with ``--scenarios`` run as the full suite has them (at the quick sizes with
    ``--quick``); nothing: the headline view."""
    if quick:
        return QUICK_HEADLINE_VIEW if headline else QUICK_VIEW
    if full or named:
        return FULL_VIEW
    return HEADLINE_VIEW


def select(patterns: list[str] | None, view: View | bool) -> list[str]:
    """Scenario names to run, in matrix order: ``patterns`` are names or fnmatch globs; none:
    the view's (``view`` True/False: the quick/full view, as before views)."""
    import fnmatch

    if isinstance(view, bool):
        view = QUICK_VIEW if view else FULL_VIEW
    if not patterns:
        return [n for n in ALL_NAMES if n in view.names]
    chosen = []
    for pattern in patterns:
        hits = fnmatch.filter(ALL_NAMES, pattern)
        if not hits:
            raise ValueError(f"--scenarios: {pattern!r} matches no scenario "
                             f"(known: {', '.join(ALL_NAMES)})")
        chosen.extend(hits)
    return [n for n in ALL_NAMES if n in chosen]


def by_name(name: str) -> Scenario:
    for s in PRODUCER_SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(name)
