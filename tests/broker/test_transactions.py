"""Transactions against the real broker.

What a read_committed consumer sees is checked with confluent-kafka; what was aborted is
checked on the log itself with kproducer.testing.txnlog (Tansu never sends the
AbortedTransactions list, so a read_committed consumer on it still shows aborted records).
What crossed the wire, and in which order, is read from the fault proxy's request log.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import textwrap

import time

import pytest

from kproducer import Producer
from kproducer.errors import (ConfigError, InvalidTxnStateError, ProducerFencedError,
                              TransactionAbortableError, TransactionAbortedError, TransactionTimeoutError)
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.protocol.primitives import Reader
from kproducer.testing.readback import read_back
from kproducer.testing.txnlog import committed_view
from kproducer.transactions import PreparedTransaction

READ_COMMITTED = {"isolation.level": "read_committed"}


def txn_producer(bootstrap, tid, **kw):
    p = Producer(bootstrap_servers=bootstrap, transactional_id=tid, **kw)
    p.init_transactions(timeout=20)
    return p


def committed_values(bootstrap, topic, consumer_config=READ_COMMITTED):
    return {p: [msg.value for msg in msgs] for p, msgs in
            read_back(bootstrap, topic, consumer_config=consumer_config, timeout=30).items() if msgs}


def view_values(view):
    return {p: [r.value for r in rs] for p, rs in view.records.items() if rs}


# -- commit, abort ------------------------------------------------------------------------

def test_commit_is_atomic_across_partitions_and_topics(any_broker):
    broker = any_broker
    rc = broker.consumer_config(read_committed=True)
    broker.create_topic("ta", 3)
    broker.create_topic("tb", 2)
    p = txn_producer(broker.bootstrap, "commit-1")
    try:
        p.begin_transaction()
        expect = {"ta": {}, "tb": {}}
        for i in range(300):
            topic = "ta" if i % 2 else "tb"
            part = (i // 2) % (3 if topic == "ta" else 2)
            value = f"{topic}-{i}".encode()
            p.send(topic, value, key=b"k%d" % i, partition=part)
            expect[topic].setdefault(part, []).append(value)
        p.flush(timeout=20)
        # Sent and acknowledged, not committed: a read_committed reader sees nothing (on
        # Tansu; librdkafka's mock shows an open transaction's records to read_committed
        # readers, confluent-kafka's own as well as kproducer's).
        for topic in ("ta", "tb"):
            if broker.kind == "tansu":
                assert all(not vals for vals in committed_values(broker.bootstrap, topic, rc).values())
                assert sum(len(r) for r in committed_view(broker.bootstrap, topic).open.values()) == \
                    sum(len(vs) for vs in expect[topic].values())
        p.commit_transaction(timeout=20)
        for topic in ("ta", "tb"):
            assert committed_values(broker.bootstrap, topic, rc) == expect[topic]
            if broker.kind != "tansu":
                continue        # the log reader below talks to one broker
            view = committed_view(broker.bootstrap, topic)
            assert view_values(view) == expect[topic]
            assert not any(view.open.values()) and not any(view.aborted.values())
            # One commit marker per partition the transaction wrote, all transactional batches.
            assert sorted(mk[0] for mk in view.markers if mk[3] == "commit") == sorted(expect[topic])
            assert view.transactional_batches >= len(expect[topic])
    finally:
        p.close()


def test_abort_discards_records_and_a_new_transaction_commits(broker):
    broker.create_topic("t", 2)
    # A long linger: records stay queued until a flush, a commit or an abort.
    p = txn_producer(broker.bootstrap, "abort-1", linger_ms=60000)
    try:
        p.begin_transaction()
        sent = [p.send("t", b"gone-%d" % i, partition=i % 2) for i in range(50)]
        p.flush(timeout=20)
        assert all(f.exception(timeout=0) is None for f in sent)
        p.abort_transaction(timeout=20)
        # Records still queued at the abort never leave: their futures fail.
        p.begin_transaction()
        unsent = [p.send("t", b"unsent-%d" % i, partition=0) for i in range(5)]
        p.abort_transaction(timeout=20)
        for f in unsent:
            assert isinstance(f.exception(timeout=5), TransactionAbortedError)
        p.begin_transaction()
        for i in range(20):
            p.send("t", b"kept-%d" % i, partition=i % 2)
        p.commit_transaction(timeout=20)
    finally:
        p.close()
    expect = {q: [b"kept-%d" % i for i in range(20) if i % 2 == q] for q in range(2)}
    view = committed_view(broker.bootstrap, "t")
    assert view_values(view) == expect
    aborted = {r.value for rs in view.aborted.values() for r in rs}
    assert aborted == {b"gone-%d" % i for i in range(50)}
    assert sorted(mk[3] for mk in view.markers) == ["abort", "abort", "commit", "commit"]
    # The read_committed consumer agrees on what it can tell (Tansu would also show the
    # aborted records to it: no AbortedTransactions list), so compare the committed part.
    got = committed_values(broker.bootstrap, "t")
    assert {q: [x for x in vals if not x.startswith(b"gone")] for q, vals in got.items()} == expect


def group_offsets(bootstrap, group, topic, partitions):
    """The group's committed offsets, read with OffsetFetch (confluent-kafka's committed();
    Tansu answers it, and shows transactional offsets only once their transaction has
    committed, as Kafka does for require_stable readers); None where nothing is committed."""
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False})
    try:
        tps = c.committed([confluent_kafka.TopicPartition(topic, q) for q in partitions], timeout=20)
    finally:
        c.close()
    assert all(tp.error is None for tp in tps), tps
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in tps}


def test_send_offsets_to_transaction(broker):
    broker.create_topic("t", 1)
    broker.create_topic("in", 2)
    p = txn_producer(broker.bootstrap, "offsets-1")
    try:
        p.begin_transaction()
        p.send("t", b"x", partition=0)
        p.send_offsets_to_transaction({("in", 0): 42, ("in", 1): (7, "meta")}, "group-1", timeout=20)
        # Part of the open transaction: not committed yet.
        assert group_offsets(broker.bootstrap, "group-1", "in", [0, 1]) == {0: None, 1: None}
        p.commit_transaction(timeout=20)
        assert committed_values(broker.bootstrap, "t") == {0: [b"x"]}
        assert group_offsets(broker.bootstrap, "group-1", "in", [0, 1]) == {0: 42, 1: 7}
        # Offsets of an aborted transaction never count.
        p.begin_transaction()
        p.send_offsets_to_transaction({("in", 0): 99}, "group-1", timeout=20)
        p.abort_transaction(timeout=20)
        assert group_offsets(broker.bootstrap, "group-1", "in", [0, 1]) == {0: 42, 1: 7}
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            p.send_offsets_to_transaction({("in", 0): 43}, "group-1")
        p.begin_transaction()
        with pytest.raises(ValueError, match="offset -1"):
            p.send_offsets_to_transaction({("in", 0): -1}, "group-1")
        with pytest.raises(TypeError, match="group id"):
            p.send_offsets_to_transaction({("in", 0): 1}, {"member_id": "m"})
        p.abort_transaction(timeout=20)
    finally:
        p.close()


# -- what goes over the wire --------------------------------------------------------------

def _request_body(frame: bytes, cls):
    """Decode a logged request frame (size prefix, header v1/v2, body) with its schema."""
    r = Reader(frame, 4)
    _api, version, _cid = r.int16("api_key"), r.int16("api_version"), r.int32("correlation_id")
    r.nullable_string("client_id")                   # always int16-length
    if cls.SCHEMA.is_flexible(version):
        r.skip_tagged_fields("header")
    return cls.SCHEMA.decode_body(r, version, strict=True)


def _idle(p, timeout=10.0):
    """Waits until the producer's Sender wants no step and has nothing in flight (a send()
    runs a step that is wanted, as Java's Sender thread may run between two sends; the
    batching asserted below needs none: the test also holds the step lock over its sends)."""
    deadline = time.monotonic() + timeout
    while p._turn.watcher.pending or p._sender._in_flight_batches() or p._sender.coordinator.pending():
        assert time.monotonic() < deadline, "the producer did not go idle"
        time.sleep(0.002)


def test_partitions_are_added_before_their_first_batch_is_sent(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("t", 4)
    proxy.record_requests(keep_frames={v.PRODUCE, v.ADD_PARTITIONS_TO_TXN})
    p = txn_producer(proxy.bootstrap, "wire-1")
    try:
        p.partitions_for("t")        # metadata first: a send that waits for it meets a step
        p.begin_transaction()
        _idle(p)
        # The first batch of a partition new to the transaction asks for a step at once; one
        # that ran between two sends (a thread descheduled between them) would add the
        # partitions one request each. Holding the step lock, the sends meet none.
        with p._turn.lock:
            for part in (0, 1):
                p.send("t", b"a", partition=part)
        p.flush(timeout=20)
        _idle(p)
        with p._turn.lock:
            for part in (1, 2, 3):   # 1 is in the transaction already, 2 and 3 are new
                p.send("t", b"b", partition=part)
        p.commit_transaction(timeout=20)
    finally:
        p.close()
    added, adds = set(), 0
    acked_adds = {}
    for direction, _conn, api, cid, frame in proxy.requests_log():
        if api == v.ADD_PARTITIONS_TO_TXN and direction == "request":
            req = _request_body(frame, m.AddPartitionsToTxnRequest)
            acked_adds[cid] = {(t.name, p) for t in req.v3_and_below_topics for p in t.partitions}
            adds += 1
        elif api == v.ADD_PARTITIONS_TO_TXN and direction == "response":
            added |= acked_adds.pop(cid)
        elif api == v.PRODUCE and direction == "request":
            req = _request_body(frame, m.ProduceRequest)
            assert req.transactional_id == "wire-1"
            sent = {(t.name, pd.index) for t in req.topic_data for pd in t.partition_data}
            assert sent <= added, f"Produce for {sorted(sent - added)} before AddPartitionsToTxn answered"
    # Batched as Java does: one request for {0, 1}, one for {2, 3} (1 is not asked again).
    assert adds == 2 and added == {("t", 0), ("t", 1), ("t", 2), ("t", 3)}
    assert view_values(committed_view(broker.bootstrap, "t")) == {0: [b"a"], 1: [b"a", b"b"], 2: [b"b"], 3: [b"b"]}


def test_a_partition_is_added_with_the_transactions_first_record_not_a_linger_later(broker):
    """As Java's send() wakes its Sender for a new batch: AddPartitionsToTxn goes out when a
    partition starts its first batch of the transaction, so that its batches are sendable
    when linger.ms is over, not a round trip after (here linger.ms is a minute: the old
    producer asked only when a batch was due)."""
    broker.create_topic("early", 4)
    p = txn_producer(broker.bootstrap, "early-1", linger_ms=60_000, delivery_timeout_ms=180_000)
    try:
        p.partitions_for("early")
        for round_ in range(2):              # each transaction adds its partitions afresh
            p.begin_transaction()
            p.send("early", b"x%d" % round_, partition=0)
            _wait_added(p, {("early", 0)})
            p.send("early", b"y%d" % round_, partition=0)    # a second record, same batch
            p.send("early", b"z%d" % round_, partition=3)
            _wait_added(p, {("early", 0), ("early", 3)})
            p.commit_transaction(timeout=20)
    finally:
        p.close()
    assert committed_values(broker.bootstrap, "early") == {0: [b"x0", b"y0", b"x1", b"y1"], 3: [b"z0", b"z1"]}


def _wait_added(p, partitions, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not partitions <= p._txn.partitions_in_txn:
        assert time.monotonic() < deadline, (
            f"{sorted(partitions - p._txn.partitions_in_txn)} not added to the transaction "
            f"within {timeout} s of their first record")
        time.sleep(0.002)


# -- fencing ------------------------------------------------------------------------------

def test_a_second_instance_fences_the_first_and_aborts_its_transaction(broker):
    broker.create_topic("t", 2)
    old = txn_producer(broker.bootstrap, "fence-1")
    try:
        old.begin_transaction()
        old.send("t", b"old-open", partition=0)
        old.flush(timeout=20)
        new = txn_producer(broker.bootstrap, "fence-1")      # fences old, aborts its transaction
        try:
            assert new.metrics()["producer_epoch"] == old.metrics()["producer_epoch"] + 1
            fut = old.send("t", b"old-late", partition=0)
            assert isinstance(fut.exception(timeout=20), ProducerFencedError)
            with pytest.raises(ProducerFencedError):
                old.commit_transaction(timeout=20)
            # Fatal: every later call says so.
            for call in (lambda: old.send("t", b"x"), old.begin_transaction,
                         lambda: old.abort_transaction(timeout=5)):
                with pytest.raises(ProducerFencedError):
                    call()
            new.begin_transaction()
            new.send("t", b"new", partition=1)
            new.commit_transaction(timeout=20)
        finally:
            new.close()
    finally:
        old.close()
    view = committed_view(broker.bootstrap, "t")
    assert view.values() == [b"new"]
    assert [r.value for r in view.aborted[0]] == [b"old-open"]


# -- two-phase commit ---------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import os, pickle, sys, time
    from kproducer import Producer
    p = Producer(bootstrap_servers=sys.argv[1], transactional_id=sys.argv[2])
    p.init_transactions(timeout=20)
    p.begin_transaction()
    for i in range(int(sys.argv[3])):
        p.send("t", b"2pc-%d" % i, partition=i % 3)
    prepared = p.prepare_transaction(timeout=20)
    sys.stdout.buffer.write(pickle.dumps(prepared).hex().encode() + b"\\n")
    sys.stdout.flush()
    time.sleep(600)          # killed with SIGKILL by the test
""")


def _prepare_in_child(bootstrap, tid, n):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, bootstrap, tid, str(n)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = child.stdout.readline()
        assert line, child.stderr.read().decode()
        prepared = pickle.loads(bytes.fromhex(line.decode().strip()))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    return prepared


def test_a_prepared_transaction_is_completed_by_another_process(broker):
    broker.create_topic("t", 3)
    prepared = _prepare_in_child(broker.bootstrap, "2pc-1", 300)
    assert isinstance(prepared, PreparedTransaction) and prepared.transactional_id == "2pc-1"
    # Prepared, child dead, nothing readable yet.
    assert sum(len(rs) for rs in committed_view(broker.bootstrap, "t").open.values()) == 300
    assert all(not vals for vals in committed_values(broker.bootstrap, "t").values())
    with Producer(bootstrap_servers=broker.bootstrap) as q:
        q.complete_transaction(prepared, commit=True, timeout=20)
        q.complete_transaction(prepared, commit=True, timeout=20)      # harmless
    expect = {p: [b"2pc-%d" % i for i in range(300) if i % 3 == p] for p in range(3)}
    assert committed_values(broker.bootstrap, "t") == expect
    view = committed_view(broker.bootstrap, "t")
    assert view_values(view) == expect and len(view.markers) == 3


def test_a_prepared_transaction_can_be_aborted_elsewhere_and_a_fenced_one_is_refused(broker):
    broker.create_topic("t", 3)
    prepared = _prepare_in_child(broker.bootstrap, "2pc-2", 30)
    with Producer(bootstrap_servers=broker.bootstrap) as q:
        q.complete_transaction(prepared, commit=False, timeout=20)
    assert committed_view(broker.bootstrap, "t").values() == []
    # A newer instance of the id fences what an older one prepared.
    fenced = _prepare_in_child(broker.bootstrap, "2pc-3", 30)
    txn_producer(broker.bootstrap, "2pc-3").close()
    with Producer(bootstrap_servers=broker.bootstrap, request_timeout_ms=2000) as q:
        # Kafka answers PRODUCER_FENCED; Tansu closes the connection on an EndTxn with a
        # stale epoch instead, so there the call gives up with the connection error.
        with pytest.raises((ProducerFencedError, TransactionTimeoutError)):
            q.complete_transaction(fenced, commit=True, timeout=5)
    view = committed_view(broker.bootstrap, "t")
    assert view.values() == [] and sum(len(rs) for rs in view.aborted.values()) == 60


# -- faults -------------------------------------------------------------------------------

def settled_count(proxy, key: str, at_least: int) -> int:
    """A proxy counter once it reaches ``at_least`` (or 10 s): the proxy publishes its counts
    just after forwarding, so the client may act on a replaced answer before it counts."""
    return proxy.wait_for(lambda s: s[key] >= at_least)[key]


@pytest.mark.parametrize("api,on", [(v.END_TXN, "response"), (v.END_TXN, "request"),
                                    (v.ADD_PARTITIONS_TO_TXN, "response"),
                                    (v.ADD_PARTITIONS_TO_TXN, "request")])
def test_a_lost_coordinator_answer_commits_exactly_once(proxied_broker, api, on):
    broker, proxy = proxied_broker
    broker.create_topic("t", 2)
    p = txn_producer(proxy.bootstrap, f"fault-{api}-{on}", request_timeout_ms=3000)
    try:
        p.begin_transaction()
        for i in range(100):
            p.send("t", b"f-%d" % i, partition=i % 2)
        proxy.cut_on_api(api, on=on)
        p.commit_transaction(timeout=30)
        assert settled_count(proxy, "api_cuts", 1) == 1
        p.begin_transaction()
        p.send("t", b"after", partition=0)
        p.commit_transaction(timeout=30)
    finally:
        p.close()
    expect = {q: [b"f-%d" % i for i in range(100) if i % 2 == q] for q in range(2)}
    expect[0].append(b"after")
    assert view_values(committed_view(broker.bootstrap, "t")) == expect
    assert committed_values(broker.bootstrap, "t") == expect


def test_a_failed_record_makes_the_transaction_abortable(proxied_broker):
    broker, proxy = proxied_broker
    broker.create_topic("t", 1)
    p = txn_producer(proxy.bootstrap, "abortable-1", delivery_timeout_ms=1500, request_timeout_ms=1000,
                     linger_ms=0)
    try:
        p.begin_transaction()
        p.send("t", b"ok", partition=0).result(20)
        epoch = p.metrics()["producer_epoch"]
        # The broker's answers stop (its requests still arrive, so nothing reaches the log
        # after the abort: a request held back and released later would be a zombie write,
        # the hanging transaction KIP-890 closes on the broker side).
        proxy.stall(True, client=False)         # the next record expires (delivery.timeout.ms)
        bad = p.send("t", b"bad", partition=0)
        with pytest.raises(TransactionAbortableError, match="must be aborted"):
            p.commit_transaction(timeout=20)
        assert bad.exception(timeout=20) is not None
        with pytest.raises(TransactionAbortableError):
            p.send("t", b"more")
        with pytest.raises(TransactionAbortableError):
            p.commit_transaction(timeout=5)
        proxy.stall(False)
        p.abort_transaction(timeout=20)
        # A sequenced batch failed: the next transaction runs at a new epoch.
        assert p.metrics()["producer_epoch"] == epoch + 1
        p.begin_transaction()
        p.send("t", b"fine", partition=0)
        p.commit_transaction(timeout=20)
    finally:
        p.close()
    view = committed_view(broker.bootstrap, "t")
    assert view.values() == [b"fine"] and b"ok" in {r.value for rs in view.aborted.values() for r in rs}


# -- call order ---------------------------------------------------------------------------

def test_calls_in_the_wrong_order_raise_clear_errors(broker):
    broker.create_topic("t", 1)
    p = Producer(bootstrap_servers=broker.bootstrap, transactional_id="order-1")
    try:
        with pytest.raises(InvalidTxnStateError, match="init_transactions"):
            p.begin_transaction()
        with pytest.raises(InvalidTxnStateError, match="UNINITIALIZED"):
            p.send("t", b"x")
        p.init_transactions(timeout=20)
        with pytest.raises(InvalidTxnStateError, match="already initialized"):
            p.init_transactions(timeout=20)
        with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
            p.send("t", b"x")
        with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
            p.send_many("t", [b"x"])
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            p.commit_transaction(timeout=5)
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            p.abort_transaction(timeout=5)
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            p.prepare_transaction(timeout=5)
        p.begin_transaction()
        with pytest.raises(InvalidTxnStateError, match="already open"):
            p.begin_transaction()
        res = p.send_many("t", [b"a", b"b"], partition=0)
        prepared = p.prepare_transaction(timeout=20)
        assert res.acked == 2
        with pytest.raises(InvalidTxnStateError, match="PREPARED"):
            p.send("t", b"x")
        p.complete_transaction(prepared, commit=True, timeout=20)      # its own: finishes it
        p.begin_transaction()
        p.commit_transaction(timeout=20)       # nothing sent: ends locally
    finally:
        p.close()
    assert committed_values(broker.bootstrap, "t") == {0: [b"a", b"b"]}
    with Producer(bootstrap_servers=broker.bootstrap) as plain:
        with pytest.raises(InvalidTxnStateError, match="transactional.id"):
            plain.begin_transaction()
        with pytest.raises(TypeError, match="PreparedTransaction"):
            plain.complete_transaction(("id", 1, 0))


def test_config_refuses_transactions_without_idempotence():
    with pytest.raises(ConfigError, match="transactional.id.*enable.idempotence"):
        Producer(bootstrap_servers="127.0.0.1:1", transactional_id="x", enable_idempotence=False)


def test_prepared_transaction_pickles():
    prep = PreparedTransaction("id-1", 7, 3)
    assert pickle.loads(pickle.dumps(prep)) == prep


def test_broker_answers_of_fencing_are_producer_fenced_errors(proxied_broker):
    """Kafka answers an EndTxn of a fenced epoch with PRODUCER_FENCED; Tansu closes the
    connection instead, so the proxy puts Kafka's answer on the wire (the broker did act on
    nothing else: only the error code of that one response is replaced)."""
    broker, proxy = proxied_broker
    broker.create_topic("t", 1)
    p = txn_producer(proxy.bootstrap, "answer-1")
    try:
        p.begin_transaction()
        p.send("t", b"x", partition=0)
        prepared = p.prepare_transaction(timeout=20)
        with Producer(bootstrap_servers=proxy.bootstrap) as q:
            proxy.answer_error(v.END_TXN, 90)          # PRODUCER_FENCED
            with pytest.raises(ProducerFencedError, match="PRODUCER_FENCED"):
                q.complete_transaction(prepared, commit=True, timeout=20)
            assert settled_count(proxy, "api_answers", 1) == 1
            q.complete_transaction(prepared, commit=True, timeout=20)   # the real answer: done
        p.complete_transaction(prepared, commit=True, timeout=20)       # again, by its producer
        # The producer's own commit answered with INVALID_PRODUCER_EPOCH: fenced, fatal.
        p.begin_transaction()
        p.send("t", b"y", partition=0)
        proxy.answer_error(v.END_TXN, 47)
        with pytest.raises(ProducerFencedError, match="INVALID_PRODUCER_EPOCH"):
            p.commit_transaction(timeout=20)
        with pytest.raises(ProducerFencedError):
            p.begin_transaction()
    finally:
        p.close()
    # Only what the client heard was replaced: the broker did end both transactions.
    assert committed_values(broker.bootstrap, "t") == {0: [b"x", b"y"]}


def test_concurrent_transactions_and_a_moved_coordinator_are_retried(proxied_broker):
    """CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written)
    is retried after a backoff; NOT_COORDINATOR makes the producer find the coordinator
    again (FindCoordinator on the wire) and retry. Answers put on the wire by the proxy."""
    broker, proxy = proxied_broker
    broker.create_topic("t", 1)
    proxy.record_requests()
    p = txn_producer(proxy.bootstrap, "retry-1")
    try:
        p.begin_transaction()
        p.send("t", b"a", partition=0)
        proxy.answer_error(v.END_TXN, 51, times=2)                 # CONCURRENT_TRANSACTIONS
        p.commit_transaction(timeout=20)
        assert settled_count(proxy, "api_answers", 2) == 2
        finds_before = sum(1 for d, _, api, _, _ in proxy.requests_log()
                           if d == "request" and api == v.FIND_COORDINATOR)
        p.begin_transaction()
        p.send("t", b"b", partition=0)
        proxy.answer_error(v.ADD_OFFSETS_TO_TXN, 16)               # NOT_COORDINATOR
        p.send_offsets_to_transaction({("in", 0): 5}, "group-r", timeout=20)
        p.commit_transaction(timeout=20)
        finds_after = sum(1 for d, _, api, _, _ in proxy.requests_log()
                          if d == "request" and api == v.FIND_COORDINATOR)
        assert finds_after > finds_before
        ends = [cid for d, _, api, cid, _ in proxy.requests_log() if d == "request" and api == v.END_TXN]
        assert len(ends) == 4                  # 3 for the first commit (2 answered 51), 1 more
    finally:
        p.close()
    assert committed_values(broker.bootstrap, "t") == {0: [b"a", b"b"]}


# -- timeouts, coordinator lookup, offsets ------------------------------------------------

def _wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _on_wire(proxy, api, direction):
    return [e for e in proxy.requests_log() if e[0] == direction and e[2] == api]


def test_a_commit_that_times_out_is_finished_by_calling_it_again(proxied_broker):
    """The EndTxn answer is held back (the proxy stops reading from the broker after the
    request went through): commit_transaction(timeout=) raises TransactionTimeoutError
    naming the call, and the commit goes on in the background. Once the answer is released
    and the background commit has finished, commit_transaction() again returns that
    commit's outcome (Java's cached TransactionalRequestResult): no second EndTxn, one
    commit marker per partition, every record once."""
    broker, proxy = proxied_broker
    broker.create_topic("t", 2)
    proxy.record_requests()
    p = txn_producer(proxy.bootstrap, "timeout-1")
    try:
        p.begin_transaction()
        for i in range(40):
            p.send("t", b"t-%d" % i, partition=i % 2)
        p.flush(timeout=20)                      # only the EndTxn is left to go
        proxy.stall(True, client=False)          # requests still reach the broker
        started = time.monotonic()
        with pytest.raises(TransactionTimeoutError, match="commit_transaction"):
            p.commit_transaction(timeout=1.0)
        assert time.monotonic() - started < 10
        assert len(_on_wire(proxy, v.END_TXN, "request")) == 1
        assert not _on_wire(proxy, v.END_TXN, "response")
        proxy.stall(False)
        # The answer arrives and the producer finishes the commit before being asked again.
        _wait_until(lambda: p._txn.state.value == "READY", 20, "the background commit")
        p.commit_transaction(timeout=20)         # the same commit's outcome: success
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            p.commit_transaction(timeout=5)      # ... once: there is nothing more to commit
        assert len(_on_wire(proxy, v.END_TXN, "request")) == 1
        p.begin_transaction()
        p.send("t", b"next", partition=0)
        p.commit_transaction(timeout=20)
    finally:
        p.close()
    expect = {q: [b"t-%d" % i for i in range(40) if i % 2 == q] for q in range(2)}
    expect[0].append(b"next")
    view = committed_view(broker.bootstrap, "t")
    assert view_values(view) == expect
    assert sorted(mk[0] for mk in view.markers if mk[3] == "commit") == [0, 0, 1]
    assert not any(view.aborted.values()) and not any(view.open.values())
    assert committed_values(broker.bootstrap, "t") == expect


@pytest.mark.parametrize("code", [15, 14])     # COORDINATOR_NOT_AVAILABLE, _LOAD_IN_PROGRESS
def test_find_coordinator_errors_are_retried_with_backoff(proxied_broker, code):
    """FindCoordinator answered with a retriable coordinator error three times (the proxy
    rewrites the per-key error code of the v4+ ``Coordinators`` array): init_transactions
    asks again after growing backoffs and then succeeds."""
    broker, proxy = proxied_broker
    broker.create_topic("t", 1)
    proxy.record_requests(keep_frames={v.FIND_COORDINATOR})
    proxy.answer_error(v.FIND_COORDINATOR, code, times=3)
    p = Producer(bootstrap_servers=proxy.bootstrap, transactional_id=f"find-{code}",
                 retry_backoff_ms=200, retry_backoff_max_ms=2000)
    try:
        p.init_transactions(timeout=20)
        assert settled_count(proxy, "api_answers", 3) == 3
        log = proxy.requests_log(times=True)
        finds = [e for e in log if e[2] == v.FIND_COORDINATOR]
        assert [e[0] for e in finds] == ["request", "response"] * 4
        # The layout the rewrite had to handle: v4 (KIP-699), a Coordinators array.
        assert all(Reader(e[4], 4).int16("api_key") == v.FIND_COORDINATOR and
                   Reader(e[4], 6).int16("api_version") >= 4 for e in finds[::2])
        # 200 ms * 2**attempt, jitter 0.2: each wait from an error answer to the next ask.
        waits = [finds[i + 1][5] - finds[i][5] for i in range(1, 6, 2)]
        for attempt, wait in enumerate(waits):
            assert wait >= 0.95 * 0.8 * 0.2 * 2 ** attempt, waits
        # Found at last: InitProducerId only after the successful lookup.
        inits = [i for i, e in enumerate(log) if e[0] == "request" and e[2] == v.INIT_PRODUCER_ID]
        assert len(inits) == 1 and inits[0] > log.index(finds[-1])
        p.begin_transaction()
        p.send("t", b"found", partition=0)
        p.commit_transaction(timeout=20)
    finally:
        p.close()
    assert committed_values(broker.bootstrap, "t") == {0: [b"found"]}
