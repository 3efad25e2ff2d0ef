"""One producer client's run, in a process of its own: ``python -m bench.clients SPEC_JSON``.

The runner starts this once per (scenario, client) on a fresh topic; it prints one JSON line
with its figures. Every client gets the same records (:mod:`bench.data`) and the same
settings where the clients have them: acks, idempotence, compression, ``linger.ms`` and
batch size. Buffer sizes and in-flight limits stay at each client's default; ``settings``
in the output is what each was given and what those defaults are.

Method: the data is generated, the producer created and one warm-up record (value
``b"warm-up"``) sent and acknowledged, so metadata, connections and a producer id are in
place; then the peak-RSS mark is reset (``/proc/self/clear_refs``) and the timed part runs:
the send loop and the final flush, until every record is acknowledged. CPU is the process's
user + system time (every thread: librdkafka's and kproducer's I/O threads included) over
the timed part. No client registers a per-record delivery callback (the usual way to write
these loops); whether every record arrived is decided by reading the topic back.
"""

from __future__ import annotations

import json
import sys
import time

from bench.data import make_keys, make_values

WARMUP_VALUE = b"warm-up"

KPRODUCER_SEND = "kproducer send()"
KPRODUCER_SEND_MANY = "kproducer send_many"
CONFLUENT_POLL = "confluent produce/poll"
CONFLUENT_BATCH = "confluent produce_batch"
KAFKA_PYTHON = "kafka-python"
AIOKAFKA = "aiokafka"
CLIENTS = (KPRODUCER_SEND, KPRODUCER_SEND_MANY, CONFLUENT_POLL, CONFLUENT_BATCH, KAFKA_PYTHON,
           AIOKAFKA)
REFERENCE = CONFLUENT_POLL           # ratios are to this client in the same scenario
SLOW_CLIENTS = (KAFKA_PYTHON, AIOKAFKA)
# Clients of the transactional scenario (kafka-python and aiokafka have transactions too, but
# aiokafka's InitProducerId v0 cannot start on the embedded broker: see runner.unsupported).
TRANSACTIONAL_CLIENTS = (KPRODUCER_SEND, KPRODUCER_SEND_MANY, CONFLUENT_POLL)
# The distribution a client needs (for "when installed" and the versions in the report).
DISTRIBUTION = {KPRODUCER_SEND: "kproducer", KPRODUCER_SEND_MANY: "kproducer",
                CONFLUENT_POLL: "confluent-kafka", CONFLUENT_BATCH: "confluent-kafka",
                KAFKA_PYTHON: "kafka-python", AIOKAFKA: "aiokafka"}
IMPORT_NAME = {"kproducer": "kproducer", "confluent-kafka": "confluent_kafka",
               "kafka-python": "kafka", "aiokafka": "aiokafka"}

PRODUCE_BATCH_CHUNK = 10_000         # messages per produce_batch call (librdkafka's queue: 100k)


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss() -> None:
    # "5" resets VmHWM to the current RSS (Linux >= 4.0, proc(5)); ru_maxrss cannot be reset.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


# ---- settings per client ------------------------------------------------------------------

def settings(client: str, spec: dict) -> dict:
    """The configuration ``client`` is given for ``spec``, in its own names (with
    ``own_defaults``: the broker address alone)."""
    conf = _settings(client, spec)
    if spec.get("own_defaults"):
        return {k: v for k, v in conf.items() if k in ("bootstrap_servers", "bootstrap.servers")}
    return conf


def _settings(client: str, spec: dict) -> dict:
    acks_num = -1 if spec["acks"] == "all" else int(spec["acks"])
    acks_py = "all" if acks_num == -1 else acks_num      # kafka-python's and aiokafka's form
    comp = spec["compression"]
    # kafka-python and aiokafka have no compression level setting (see DEFAULTS_NOTE).
    level = spec.get("compression_level")
    txn_id = f"bench-{spec['topic']}" if spec.get("commit_every") else None
    if client in (KPRODUCER_SEND, KPRODUCER_SEND_MANY):
        return {"bootstrap_servers": spec["bootstrap"], "acks": spec["acks"],
                "enable_idempotence": spec["idempotence"], "compression_type": comp,
                **({f"compression_{comp}_level": level} if level is not None else {}),
                **({"transactional_id": txn_id} if txn_id else {}),
                "linger_ms": spec["linger_ms"], "batch_size": spec["batch_size"]}
    if client in (CONFLUENT_POLL, CONFLUENT_BATCH):
        return {"bootstrap.servers": spec["bootstrap"], "acks": acks_num,
                "enable.idempotence": spec["idempotence"], "compression.type": comp,
                **({"compression.level": level} if level is not None else {}),
                **({"transactional.id": txn_id} if txn_id else {}),
                "linger.ms": spec["linger_ms"], "batch.size": spec["batch_size"]}
    if client == KAFKA_PYTHON:
        return {"bootstrap_servers": spec["bootstrap"], "acks": acks_py,
                "enable_idempotence": spec["idempotence"],
                "compression_type": None if comp == "none" else comp,
                "linger_ms": spec["linger_ms"], "batch_size": spec["batch_size"]}
    if client == AIOKAFKA:
        return {"bootstrap_servers": spec["bootstrap"], "acks": acks_py,
                "enable_idempotence": spec["idempotence"],
                "compression_type": None if comp == "none" else comp,
                "linger_ms": spec["linger_ms"], "max_batch_size": spec["batch_size"]}
    raise ValueError(f"unknown client {client!r}")


# The defaults that stay in force (documented values of each client's version in use).
DEFAULTS_NOTE = {
    KPRODUCER_SEND: "buffer.memory 32 MiB, max.in.flight.requests.per.connection 5",
    KPRODUCER_SEND_MANY: "buffer.memory 32 MiB, max.in.flight.requests.per.connection 5",
    CONFLUENT_POLL: "queue.buffering.max.messages 100000, queue.buffering.max.kbytes 1 GiB, "
                    "max.in.flight 1000000 (5 with idempotence)",
    CONFLUENT_BATCH: "queue.buffering.max.messages 100000, queue.buffering.max.kbytes 1 GiB, "
                     "max.in.flight 1000000 (5 with idempotence)",
    KAFKA_PYTHON: "buffer_memory 32 MiB, max_in_flight_requests_per_connection 5; no "
                  "compression level setting (lz4: the lz4 package's fast mode, zstd: level 3)",
    AIOKAFKA: "max_request_size 1 MiB, one in-flight request per broker; no compression level "
              "setting (lz4: level 9, LZ4 HC; zstd: level 3)",
}


# ---- the clients --------------------------------------------------------------------------
# Each returns (wall seconds, cpu seconds, failed count or None if the API does not report it,
# first error text or None), timing from just after the warm-up to the last acknowledgement.

def _timed_start():
    reset_peak_rss()
    return time.perf_counter(), time.process_time()


def run_kproducer(spec, conf, values, keys, many: bool, statistics=None):
    """``statistics``: a list that the producer's ``stats_cb`` appends each document to
    (``spec["statistics_interval_ms"]``: the statistics-cost run, bench.runner)."""
    from kproducer import Producer

    topic = spec["topic"]
    if statistics is not None:
        conf = {**conf, "statistics_interval_ms": spec["statistics_interval_ms"],
                "stats_cb": statistics.append}
    p = Producer(**conf)
    every = spec.get("commit_every") or 0
    if every:
        return _kproducer_transactions(p, topic, values, keys, many, every)
    p.send(topic, WARMUP_VALUE).result(60)
    failed, first_error = None, None
    t0, c0 = _timed_start()
    if many:
        result = p.send_many(topic, values, keys)
        p.flush()
        result.wait()
        failed = result.failed
        first_error = None if result.first_error is None else repr(result.first_error)
    else:
        _send_loop(p.send, topic, values, keys)
        p.flush()
    t1, c1 = time.perf_counter(), time.process_time()
    p.close()
    return t1 - t0, c1 - c0, failed, first_error


def _kproducer_transactions(p, topic, values, keys, many: bool, every: int):
    """begin, a chunk of ``every`` records (a send() loop or one send_many), commit."""
    p.init_transactions(60)
    p.begin_transaction()
    p.send(topic, WARMUP_VALUE)
    p.commit_transaction(60)
    failed, first_error = 0, None
    t0, c0 = _timed_start()
    for lo in range(0, len(values), every):
        hi = lo + every
        ks = None if keys is None else keys[lo:hi]
        p.begin_transaction()
        if many:
            result = p.send_many(topic, values[lo:hi], ks)
        else:
            _send_loop(p.send, topic, values[lo:hi], ks)
        p.commit_transaction(60)
        if many:
            failed += result.failed
            if first_error is None and result.first_error is not None:
                first_error = repr(result.first_error)
    t1, c1 = time.perf_counter(), time.process_time()
    p.close()
    return t1 - t0, c1 - c0, failed, first_error


def _send_loop(send, topic, values, keys) -> None:
    """One send(topic, value[, key=]) per record: the loop a user writes (kproducer's
    send() and kafka-python's share the signature)."""
    if keys is None:
        for v in values:
            send(topic, v)
    else:
        for v, k in zip(values, keys):
            send(topic, v, key=k)


def _confluent_warmup(p, topic):
    errors = []
    p.produce(topic, WARMUP_VALUE, on_delivery=lambda err, msg: errors.append(err))
    if p.flush(60) != 0 or errors != [None]:
        raise RuntimeError(f"confluent-kafka warm-up record not delivered: {errors}")


def _confluent_flush(p, t0, c0):
    """The end of a timed confluent run: flush, stop the clocks, report what was left."""
    left = p.flush(600)
    t1, c1 = time.perf_counter(), time.process_time()
    return t1 - t0, c1 - c0, None, (f"{left} messages still queued after flush" if left else None)


def run_confluent_poll(spec, conf, values, keys):
    from confluent_kafka import Producer

    topic = spec["topic"]
    p = Producer(conf)
    every = spec.get("commit_every") or 0
    if every:
        return _confluent_transactions(p, topic, values, keys, every)
    _confluent_warmup(p, topic)
    produce, poll = p.produce, p.poll
    t0, c0 = _timed_start()
    if keys is None:
        for v in values:
            while True:
                try:
                    produce(topic, v)
                    break
                except BufferError:      # queue full: serve delivery reports, then retry
                    poll(0.005)
            poll(0)
    else:
        for v, k in zip(values, keys):
            while True:
                try:
                    produce(topic, v, k)
                    break
                except BufferError:
                    poll(0.005)
            poll(0)
    return _confluent_flush(p, t0, c0)


def _confluent_transactions(p, topic, values, keys, every: int):
    """The loop confluent-kafka's transactional examples use: produce/poll(0), then
    commit_transaction (which flushes) every ``every`` records."""
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)

    p.init_transactions(60)
    p.begin_transaction()
    _confluent_warmup(p, topic)
    p.commit_transaction(60)
    produce, poll = p.produce, p.poll
    t0, c0 = _timed_start()
    for lo in range(0, len(values), every):
        p.begin_transaction()
        chunk = values[lo:lo + every]
        ks = [None] * len(chunk) if keys is None else keys[lo:lo + every]
        for v, k in zip(chunk, ks):
            while True:
                try:
                    produce(topic, v, k, on_delivery=report)
                    break
                except BufferError:
                    poll(0.005)
            poll(0)
        p.commit_transaction(60)
    t1, c1 = time.perf_counter(), time.process_time()
    return t1 - t0, c1 - c0, len(errors), repr(errors[0]) if errors else None


def run_confluent_batch(spec, conf, values, keys):
    """produce_batch takes a list of message dicts: building them is part of the timed work
    (it is what a caller holding columns of keys and values has to do)."""
    from confluent_kafka import Producer

    topic = spec["topic"]
    p = Producer(conf)
    _confluent_warmup(p, topic)
    produce_batch, poll = p.produce_batch, p.poll
    n = len(values)
    t0, c0 = _timed_start()
    for lo in range(0, n, PRODUCE_BATCH_CHUNK):
        hi = min(n, lo + PRODUCE_BATCH_CHUNK)
        if keys is None:
            msgs = [{"value": v} for v in values[lo:hi]]
        else:
            msgs = [{"value": v, "key": k} for v, k in zip(values[lo:hi], keys[lo:hi])]
        while msgs:
            if produce_batch(topic, msgs) == len(msgs):
                break
            # Messages refused (queue full) carry '_error'; retry those after serving reports.
            msgs = [m for m in msgs if m.pop("_error", None) is not None]
            poll(0.005)
        poll(0)
    return _confluent_flush(p, t0, c0)


def run_kafka_python(spec, conf, values, keys):
    from kafka import KafkaProducer

    topic = spec["topic"]
    p = KafkaProducer(**conf)
    p.send(topic, WARMUP_VALUE).get(60)
    t0, c0 = _timed_start()
    _send_loop(p.send, topic, values, keys)
    p.flush()
    t1, c1 = time.perf_counter(), time.process_time()
    p.close()
    return t1 - t0, c1 - c0, None, None


def run_aiokafka(spec, conf, values, keys):
    import asyncio

    from aiokafka import AIOKafkaProducer

    topic = spec["topic"]

    async def main():
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            await p.send_and_wait(topic, WARMUP_VALUE)
            send = p.send
            futures = []
            t0, c0 = _timed_start()
            # send() waits only while its accumulator is full; the returned futures are
            # kept so that a failure is not "never retrieved", and counted after the flush.
            if keys is None:
                for v in values:
                    futures.append(await send(topic, v))
            else:
                for v, k in zip(values, keys):
                    futures.append(await send(topic, v, key=k))
            await p.flush()
            t1, c1 = time.perf_counter(), time.process_time()
        finally:
            await p.stop()
        failed = [f.exception() for f in futures if f.done() and f.exception() is not None]
        undone = sum(not f.done() for f in futures)
        first = repr(failed[0]) if failed else (f"{undone} sends unsettled" if undone else None)
        return t1 - t0, c1 - c0, len(failed) + undone, first

    return asyncio.run(main())


def run(spec: dict) -> dict:
    client = spec["client"]
    n, keyed = spec["records"], spec["keyed"]
    values = make_values(n, spec["value_size"])
    keys = make_keys(n) if keyed else None
    conf = settings(client, spec)
    rss_before_kib = status_kib("VmRSS")
    documents = [] if spec.get("statistics_interval_ms") else None
    if client in (KPRODUCER_SEND, KPRODUCER_SEND_MANY):
        seconds, cpu, failed, first = run_kproducer(spec, conf, values, keys,
                                                    many=client == KPRODUCER_SEND_MANY,
                                                    statistics=documents)
    elif client == CONFLUENT_POLL:
        seconds, cpu, failed, first = run_confluent_poll(spec, conf, values, keys)
    elif client == CONFLUENT_BATCH:
        seconds, cpu, failed, first = run_confluent_batch(spec, conf, values, keys)
    elif client == KAFKA_PYTHON:
        seconds, cpu, failed, first = run_kafka_python(spec, conf, values, keys)
    elif client == AIOKAFKA:
        seconds, cpu, failed, first = run_aiokafka(spec, conf, values, keys)
    else:
        raise SystemExit(f"unknown client {client!r}")
    shown = {k: v for k, v in conf.items() if "bootstrap" not in k} or {"own defaults": True}
    extra = {}
    if documents is not None:
        # How many documents came, and the last one's count of records sent.
        last = json.loads(documents[-1]) if documents else {}
        extra = {"statistics_documents": len(documents),
                 "statistics_txmsgs": last.get("txmsgs"),
                 "statistics_interval_ms": spec["statistics_interval_ms"]}
        shown = {**shown, "statistics.interval.ms": spec["statistics_interval_ms"]}
    return {**extra, "seconds": seconds, "cpu_seconds": cpu, "client_failed": failed,
            "client_first_error": first, "rss_data_mib": rss_before_kib / 1024,
            "peak_rss_mib": status_kib("VmHWM") / 1024, "settings": shown,
            "defaults": DEFAULTS_NOTE[client]}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
