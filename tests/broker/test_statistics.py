"""statistics.interval.ms and stats_cb: a JSON document in librdkafka's statistics layout every
interval (kproducer.statistics), checked against what was sent and read back, on Tansu and on
librdkafka's mock cluster (three brokers: an entry each)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import pytest

from kproducer import Producer
from kproducer.errors import ConfigError
from kproducer.testing.readback import read_back

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


class Documents:
    """What stats_cb received, parsed; waits on a condition with a deadline."""

    def __init__(self):
        self.texts: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, text):
        assert isinstance(text, str)
        with self._cond:
            self.texts.append(text)
            self._cond.notify_all()

    @property
    def docs(self) -> list[dict]:
        with self._cond:
            return [json.loads(t) for t in self.texts]

    def wait_for(self, predicate, timeout: float = 20.0) -> tuple[int, dict]:
        """``(index, document)`` of the first document for which ``predicate(doc)`` holds,
        waiting for it."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for i, text in enumerate(self.texts[seen:], seen):
                    doc = json.loads(text)
                    if predicate(doc):
                        return i, doc
                seen = len(self.texts)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no statistics document matched within {timeout}s "
                                       f"({len(self.texts)} received)")
                self._cond.wait(left)

    def wait_count(self, n: int, timeout: float = 20.0) -> None:
        self.wait_for(lambda _doc: len(self.texts) >= n, timeout)


def _window_fields() -> set:
    return {"min", "max", "avg", "sum", "cnt", "stddev", "hdrsize", "p50", "p75", "p90", "p95",
            "p99", "p99_99", "outofrange"}


def _documented() -> dict:
    """The statistics fields docs/observability.md lists, by table: {table: {field: type}}."""
    text = DOCS.read_text()
    section = text.split("## Statistics", 1)[1].split("\n## ", 1)[0]
    tables: dict = {}
    current = None
    for line in section.splitlines():
        heading = re.match(r"^### (.+)$", line)
        if heading:
            current = tables.setdefault(heading.group(1).strip().strip("`"), {})
            continue
        row = re.match(r"^\| `([a-z0-9_]+)` \| ([a-z ]+) \|", line)
        if row and current is not None:
            current[row.group(1)] = row.group(2).strip()
    return tables


_TYPES = {"string": str, "int": int, "int gauge": int, "object": dict, "bool": bool}


def _check_types(obj: dict, fields: dict, where: str) -> None:
    assert set(obj) == set(fields), (where, sorted(set(obj) ^ set(fields)))
    for name, kind in fields.items():
        value = obj[name]
        want = _TYPES[kind]
        assert isinstance(value, want) and (want is bool or not isinstance(value, bool)), \
            (where, name, value, kind)


def test_document_counts_match_what_was_sent_and_read_back(any_broker):
    """After a flush, a document says every record was sent and none is queued; the
    partitions' counts are the records read back from each; the windows of the run add up
    to the batches and records sent; every broker of the cluster has its entry."""
    broker = any_broker
    broker.create_topic("stats", 3)
    got = Documents()
    n = 3000
    with Producer(bootstrap_servers=broker.bootstrap, statistics_interval_ms=100,
                  stats_cb=got, linger_ms=2) as p:
        futures = [p.send("stats", b"v%d" % i, key=b"k%d" % i) for i in range(n)]
        p.flush(30)
        offsets = [f.result(0) for f in futures]
        stats = p.metrics()
        index, final = got.wait_for(lambda d: d["txmsgs"] == n and d["msg_cnt"] == 0)
        got.wait_count(index + 2)   # one more: the windows taken are all of the run's
        client_id = p.client_id
    back = read_back(broker.bootstrap, "stats", consumer_config=broker.consumer_config())
    per_partition = {p: len(msgs) for p, msgs in back.items()}
    assert sum(per_partition.values()) == n == len(offsets)
    parts = final["topics"]["stats"]["partitions"]
    assert sorted(parts) == ["0", "1", "2"]
    for partition, count in per_partition.items():
        entry = parts[str(partition)]
        assert entry["txmsgs"] == count == entry["msgs"], (partition, entry, count)
        assert entry["msgq_cnt"] == 0 and entry["msgs_inflight"] == 0
        assert entry["leader"] >= 0 and not entry["unknown"]
    assert final["txmsgs"] == n and final["msg_size"] == 0
    assert final["txmsg_bytes"] == stats["batch_bytes"] == sum(e["txbytes"] for e in parts.values())
    assert final["client_id"] == client_id and final["type"] == "producer"

    # Brokers: the cluster's (1 on Tansu, 3 on the mock), each leading its partitions.
    learned = {b["nodeid"]: b for b in final["brokers"].values() if b["nodeid"] >= 0}
    assert len(learned) == (3 if broker.kind == "mock-3" else 1)
    leaders = {e["leader"] for e in parts.values()}
    assert leaders <= set(learned)
    for node_id in leaders:
        b = learned[node_id]
        assert b["state"] == "UP" and b["name"] == f"{b['nodename']}/{node_id}"
        assert b["req"].get("Produce", 0) >= 1 and b["tx"] >= b["req"]["Produce"]
        assert b["txbytes"] > 0 and b["rxbytes"] > 0
        assert {f"stats-{k}" for k, e in parts.items() if e["leader"] == node_id} == set(b["toppars"])
    assert final["tx"] >= sum(b["tx"] for b in learned.values())
    assert final["txbytes"] >= final["txmsg_bytes"]

    # The windows of every document since the start: one batchcnt/batchsize/int_latency
    # sample per batch sent, one rtt sample per request answered.
    docs = got.docs
    batches = sum(d["topics"].get("stats", {}).get("batchcnt", {}).get("cnt", 0) for d in docs)
    assert batches == stats["batches"]
    assert sum(d["topics"].get("stats", {}).get("batchcnt", {}).get("sum", 0) for d in docs) == n
    assert sum(d["topics"].get("stats", {}).get("batchsize", {}).get("sum", 0) for d in docs) \
        == stats["batch_bytes"]
    assert sum(b["int_latency"]["cnt"] for d in docs for b in d["brokers"].values()) == batches
    rtts = [b["rtt"] for d in docs for b in d["brokers"].values() if b["rtt"]["cnt"]]
    assert rtts, "no round trip in any window"
    assert sum(w["cnt"] for w in rtts) >= stats["requests"]
    for w in rtts:
        assert 0 <= w["min"] <= w["p50"] <= w["p99"] <= w["max"], w
        assert w["min"] <= w["avg"] <= w["max"], w
    throttles = [b["throttle"] for d in docs for b in d["brokers"].values()]
    assert sum(w["cnt"] for w in throttles) == stats["requests"]   # every Produce answer
    if final.get("eos") is not None:
        assert final["eos"]["producer_id"] == stats["producer_id"] >= 0
        assert final["eos"]["epoch_cnt"] >= 1 and final["eos"]["idemp_state"] == "Assigned"


def test_every_field_is_documented_with_its_type(broker):
    """docs/observability.md lists each field kproducer fills, with librdkafka's type, and
    the document has those fields and no other."""
    broker.create_topic("stats-doc", 2)
    got = Documents()
    with Producer(bootstrap_servers=broker.bootstrap, statistics_interval_ms=100, stats_cb=got) as p:
        for i in range(100):
            p.send("stats-doc", b"x", partition=i % 2)
        p.flush(30)
        _, doc = got.wait_for(lambda d: d["txmsgs"] == 100)
    tables = _documented()
    assert {"top level", "brokers", "window", "topics", "partitions", "toppars", "eos"} <= set(tables), \
        sorted(tables)
    _check_types(doc, tables["top level"], "top level")
    for name, b in doc["brokers"].items():
        _check_types(b, tables["brokers"], name)
        for window in ("rtt", "int_latency", "throttle"):
            _check_types(b[window], tables["window"], f"{name}.{window}")
        for key, tp in b["toppars"].items():
            _check_types(tp, tables["toppars"], key)
        assert all(isinstance(k, str) and isinstance(n, int) for k, n in b["req"].items())
    for name, t in doc["topics"].items():
        _check_types(t, tables["topics"], name)
        for window in ("batchsize", "batchcnt"):
            _check_types(t[window], tables["window"], f"{name}.{window}")
        for key, part in t["partitions"].items():
            _check_types(part, tables["partitions"], f"{name}.{key}")
    _check_types(doc["eos"], tables["eos"], "eos")
    assert set(tables["window"]) == _window_fields()


def test_called_every_interval_while_idle_and_off_at_zero(broker):
    """An idle producer still reports every interval (the step's deadline includes the
    document's), each document later than the one before; with statistics.interval.ms=0 (the
    default) stats_cb is never called, measured against the other producer's documents."""
    on, off = Documents(), Documents()
    with Producer(bootstrap_servers=broker.bootstrap, statistics_interval_ms=50, stats_cb=on), \
            Producer(bootstrap_servers=broker.bootstrap, statistics_interval_ms=0, stats_cb=off) as quiet:
        on.wait_count(6)
        assert quiet._sender.statistics is None
    docs = on.docs
    ts = [d["ts"] for d in docs]
    ages = [d["age"] for d in docs]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert ages == sorted(ages)
    assert off.texts == []


class Broken(Documents):
    def __call__(self, text):
        super().__call__(text)
        raise RuntimeError("dashboard down")


def test_stats_cb_exceptions_are_logged_and_swallowed(broker, caplog):
    caplog.set_level(logging.ERROR, logger="kproducer")
    broken = Broken()
    with Producer(bootstrap_servers=broker.bootstrap, statistics_interval_ms=50, stats_cb=broken) as p:
        broken.wait_count(3)        # called again after raising
        assert p.send("stats-err", b"x").result(30).offset == 0    # the producer goes on
    assert "stats_cb" in caplog.text and "dashboard down" in caplog.text


@pytest.mark.parametrize("settings, key", [
    ({"statistics_interval_ms": -1}, "statistics.interval.ms"),
    ({"statistics.interval.ms": "often"}, "statistics.interval.ms"),
    ({"stats_cb": "not callable"}, "stats.cb"),
    ({"metrics_num_samples": 0}, "metrics.num.samples"),
    ({"metrics.sample.window.ms": 0}, "metrics.sample.window.ms"),
])
def test_bad_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError) as exc:
        Producer({"bootstrap.servers": "127.0.0.1:1", **settings})
    assert key in str(exc.value)


def test_windows_are_exact_then_folded_into_a_histogram():
    from kproducer.histogram import WINDOW_VALUES, Window

    w = Window()
    for v in (5, 1, 9, 3, 7):
        w.add(v)
    got = w.take()
    assert (got["min"], got["max"], got["sum"], got["cnt"], got["avg"]) == (1, 9, 25, 5, 5)
    assert (got["p50"], got["p99"], got["p99_99"]) == (5, 9, 9)
    assert got["stddev"] == 2                          # sqrt(8)
    assert w.take()["cnt"] == 0                        # a new window began
    for v in range(WINDOW_VALUES + 1000):
        w.add(v)
    w.compact()                                        # the reporter's, between documents
    assert len(w) == WINDOW_VALUES + 1000
    w.add(10)
    big = w.take()
    assert big["cnt"] == WINDOW_VALUES + 1001 and big["min"] == 0
    assert big["max"] == WINDOW_VALUES + 999
    assert abs(big["p50"] - (WINDOW_VALUES + 1000) / 2) <= (WINDOW_VALUES + 1000) / 16
