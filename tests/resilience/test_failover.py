"""Failover on a cluster of three brokers (librdkafka's mock cluster): leaders move, brokers go
down and come back, answers carry errors, round trips grow, coordinators move or go away.

Every scenario sends keyed records (``key:seq``) at a steady rate while its faults happen,
then reads the topic back with confluent-kafka's consumer and checks that every record was
acknowledged once or failed with an error, that nothing acknowledged is missing, that nothing
was stored twice, and that each key's records are stored in the order they were sent
(kproducer.testing.failover.verify). Each runs with several seeds (the key order and the
fault timings move with the seed); ``KP_FAILOVER_SEEDS`` runs more (the soak outside CI:
``KP_FAILOVER_SEEDS=20 python -m pytest tests/resilience/test_failover.py``).

What the mock does not check matters here (kproducer.testing.mock_cluster): it checks
sequence numbers only for transactional producers. An idempotent producer without a
transactional id is therefore only put through faults where a correct client needs no
sequence check from the broker to keep order (leaders moving, brokers going down: the old
leader refuses or is gone); the faults where a broker answers one request with an error and
writes the next (error bursts) run with a transactional producer, whose sequences the mock
checks as Kafka checks every idempotent producer's. A broker slower than request.timeout.ms,
whose requests are written but answered too late, runs on the test broker behind a proxy:
the mock mis-handles a run of such resends (kproducer.testing.mock_cluster).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from kproducer import Producer
from kproducer.protocol.errors_table import ErrorCode
from kproducer.testing import FaultProxy
from kproducer.testing.failover import Fault, KeyedLoad, KProducerClient, recovery_ms, verify
from kproducer.testing.mock_cluster import MockCluster

SEEDS = list(range(int(os.environ.get("KP_FAILOVER_SEEDS", "3"))))
TOPIC = "t"
PRODUCE = 0
PARTITIONS = 6


@pytest.fixture
def cluster():
    with MockCluster(3) as mc:
        mc.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        yield mc


def leaders_of(rng: random.Random, brokers=(1, 2, 3)) -> list[int]:
    return [rng.choice(brokers) for _ in range(PARTITIONS)]


def move_leaders(mc: MockCluster, leaders) -> None:
    for p, b in enumerate(leaders):
        mc.set_leader(TOPIC, p, b)


def run(mc, faults, seed, *, duration_s=2.0, rate=3000, transactional=False, **config):
    """The load through a kproducer Producer with ``config``; returns (records, verdict)."""
    load = KeyedLoad(TOPIC, keys=18, rate=rate, duration_s=duration_s, faults=faults, seed=seed)
    p = Producer(bootstrap_servers=mc.bootstrap,
                 transactional_id=f"tx-{seed}" if transactional else None, **config)
    try:
        if transactional:
            p.init_transactions()
            p.begin_transaction()
        records = load.run(KProducerClient(p))
        if transactional:
            p.commit_transaction(60)
    finally:
        p.close(10)
    verdict = verify(mc.bootstrap, TOPIC, records,
                     consumer_config=mc.consumer_config(read_committed=transactional))
    return records, verdict


@pytest.mark.parametrize("seed", SEEDS)
def test_leaders_move_while_sending(cluster, seed):
    rng = random.Random(seed)
    faults = [Fault(0.3 + 0.5 * i + rng.random() * 0.2, f"move {i}",
                    lambda leaders=leaders_of(rng): move_leaders(cluster, leaders),
                    partitions=range(PARTITIONS)) for i in range(3)]
    records, verdict = run(cluster, faults, seed)
    verdict.check()
    assert verdict.acked == len(records)
    assert recovery_ms(records, faults), "no partition was acknowledged on both sides of a move"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_leader_goes_down_and_comes_back(cluster, seed):
    rng = random.Random(seed)
    victim = rng.choice([1, 2, 3])
    led = [p for p in range(PARTITIONS) if p % 3 == victim - 1]
    move_leaders(cluster, [p % 3 + 1 for p in range(PARTITIONS)])
    others = [b for b in (1, 2, 3) if b != victim]
    down_at = 0.4 + rng.random() * 0.3
    faults = [Fault(down_at, "down", lambda: cluster.broker_down(victim), partitions=led),
              # The cluster elects other leaders a little later, as a controller would.
              Fault(down_at + 0.2, "elect",
                    lambda: [cluster.set_leader(TOPIC, p, rng.choice(others)) for p in led]),
              Fault(down_at + 1.0, "up", lambda: cluster.broker_up(victim))]
    records, verdict = run(cluster, faults, seed)
    verdict.check()
    assert verdict.acked == len(records)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_broker_down_then_back(cluster, seed):
    rng = random.Random(seed)
    at = 0.4 + rng.random() * 0.3
    faults = [Fault(at, "all down", lambda: [cluster.broker_down(b) for b in (1, 2, 3)],
                    partitions=range(PARTITIONS)),
              Fault(at + 1.0 + rng.random() * 0.5, "all up",
                    lambda: [cluster.broker_up(b) for b in (1, 2, 3)])]
    records, verdict = run(cluster, faults, seed, duration_s=2.5)
    verdict.check()
    assert verdict.acked == len(records)
    assert recovery_ms(records, faults[:1])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
                                  ErrorCode.NOT_ENOUGH_REPLICAS])
def test_bursts_of_produce_errors(cluster, seed, code):
    # Transactional: the mock checks these sequences (see the module docstring).
    rng = random.Random(seed)
    faults = [Fault(0.3 + i * 0.4 + rng.random() * 0.2, f"burst {i}",
                    lambda n=rng.randint(1, 4): cluster.push_request_errors(PRODUCE, [int(code)] * n))
              for i in range(3)]
    records, verdict = run(cluster, faults, seed, transactional=True)
    verdict.check()
    assert verdict.acked == len(records)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_broker_slower_than_the_request_timeout(proxied_broker, seed):
    # Its answers come after request.timeout.ms: the requests time out, but the broker wrote
    # them. Sent again they are duplicates, which the broker recognises by their sequence
    # and the producer counts as acknowledged. On the test broker behind a proxy that holds
    # the answers back: librdkafka's mock mis-handles a run of such resends (a duplicate it
    # recognises moves its expected sequence back, and the resends after it are written
    # again; rdkafka_mock.c, rd_kafka_mock_validate_records), whichever client sends them.
    broker, proxy = proxied_broker
    rng = random.Random(seed)
    at = 0.3 + rng.random() * 0.3
    faults = [Fault(at, "slow", lambda: proxy.delay(1.2)),
              Fault(at + 0.9 + rng.random() * 0.4, "fast", lambda: proxy.delay(0))]
    load = KeyedLoad(TOPIC, keys=18, rate=3000, duration_s=2.0, faults=faults, seed=seed)
    with Producer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=700,
                  delivery_timeout_ms=30000) as p:
        records = load.run(KProducerClient(p))
        retries = p.metrics()["retries"]
    verdict = verify(broker.bootstrap, TOPIC, records)
    verdict.check()
    assert verdict.acked == len(records)
    assert retries > 0, "no request timed out: the scenario did not happen"


@pytest.mark.parametrize("seed", SEEDS)
def test_round_trips_of_50_to_200_ms(cluster, seed):
    rng = random.Random(seed)
    for b in (1, 2, 3):
        cluster.set_rtt(b, rng.choice([50, 100, 200]))
    faults = [Fault(0.5 + rng.random() * 0.3, "move",
                    lambda leaders=leaders_of(rng): move_leaders(cluster, leaders),
                    partitions=range(PARTITIONS))]
    records, verdict = run(cluster, faults, seed, duration_s=1.5)
    verdict.check()
    assert verdict.acked == len(records)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_broker_removed_from_metadata(cluster, seed):
    rng = random.Random(seed)
    victim = rng.choice([1, 2, 3])
    others = [b for b in (1, 2, 3) if b != victim]
    move_leaders(cluster, [p % 3 + 1 for p in range(PARTITIONS)])
    led = [p for p in range(PARTITIONS) if p % 3 == victim - 1]

    def remove():
        for p in led:
            cluster.set_leader(TOPIC, p, rng.choice(others))
        cluster.remove_from_metadata(victim)
        cluster.broker_down(victim)

    faults = [Fault(0.4 + rng.random() * 0.4, "remove", remove, partitions=led)]
    records, verdict = run(cluster, faults, seed)
    verdict.check()
    assert verdict.acked == len(records)


# -- transactions: the coordinator moves or goes away ----------------------------------------

def transactions(mc, seed, events, *, count=8, per_txn=300, timeout_s=None):
    """``count`` transactions of ``per_txn`` records over 3 partitions; ``events[i]()`` runs
    before the i-th. Returns the commit times (s)."""
    tid = f"tx-coord-{seed}"
    times = []
    p = Producer(bootstrap_servers=mc.bootstrap, transactional_id=tid)
    try:
        p.init_transactions()
        for i in range(count):
            if i in events:
                events[i](tid)
            p.begin_transaction()
            for j in range(per_txn):
                p.send(TOPIC, b"%d:%d" % (i, j), partition=j % 3)
            t0 = time.monotonic()
            p.commit_transaction(timeout_s)
            times.append(time.monotonic() - t0)
    finally:
        p.close(10)
    got = mc_read_committed(mc)
    expected = {p: [b"%d:%d" % (i, j) for i in range(count) for j in range(per_txn) if j % 3 == p]
                for p in range(3)}
    assert {p: [m.value for m in got[p]] for p in range(3)} == expected
    return times


def mc_read_committed(mc):
    from kproducer.testing.readback import read_back
    return read_back(mc.bootstrap, TOPIC, partitions=range(3),
                     consumer_config=mc.consumer_config(read_committed=True))


@pytest.mark.parametrize("seed", SEEDS)
def test_transactions_survive_a_coordinator_move_and_the_loss_of_its_broker(cluster, seed):
    rng = random.Random(seed)
    first, second = rng.sample([1, 2, 3], 2)
    third = next(b for b in (1, 2, 3) if b not in (first, second))

    def move(tid):
        cluster.set_coordinator("transaction", tid, first)

    def lose(tid):
        # Leaders and the coordinator leave `first`, which goes down.
        for p in range(3):
            cluster.set_leader(TOPIC, p, rng.choice([second, third]))
        cluster.set_coordinator("transaction", tid, second)
        cluster.broker_down(first)

    request_timeout_ms = 5000
    times = transactions(cluster, seed, {3: move, 6: lose}, timeout_s=30)
    # Within request.timeout.ms plus a metadata round.
    assert max(times) < request_timeout_ms / 1000 + 1.0, times


@pytest.mark.parametrize("seed", SEEDS)
def test_transactions_survive_coordinator_errors(cluster, seed):
    rng = random.Random(seed)
    add_partitions, end_txn, find = 24, 26, 10

    def errors(tid):
        cluster.push_request_errors(add_partitions, [int(ErrorCode.NOT_COORDINATOR)])
        cluster.push_request_errors(end_txn, [int(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * rng.randint(1, 2))
        cluster.push_request_errors(find, [int(ErrorCode.COORDINATOR_NOT_AVAILABLE)])
        cluster.set_coordinator("transaction", tid, rng.choice([1, 2, 3]))

    transactions(cluster, seed, {2: errors, 5: errors}, timeout_s=30)


# -- rebootstrap ---------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
def test_rebootstrap_when_no_known_broker_answers(strategy):
    # bootstrap.servers is a stable address (a proxy standing for a load balancer or DNS
    # name) in front of cluster A; A is replaced by cluster B behind it, and every broker of
    # A goes away. With rebootstrap the producer finds B through bootstrap.servers.
    with MockCluster(2) as a, MockCluster(2) as b:
        for mc in (a, b):
            mc.create_topic(TOPIC, partitions=2, replication_factor=2)
        host, port = a.addresses[1].split(":")
        with FaultProxy(host, int(port)) as proxy:
            p = Producer(bootstrap_servers=proxy.bootstrap, metadata_recovery_strategy=strategy,
                         delivery_timeout_ms=4000, request_timeout_ms=1000, linger_ms=0)
            try:
                assert p.send(TOPIC, b"before", key=b"k").result(10).offset == 0
                host, port = b.addresses[1].split(":")
                proxy.retarget(host, int(port))
                proxy.cut_all()
                for broker in (1, 2):
                    a.broker_down(broker)
                # The mock closes its brokers' connections on its own thread: the producer
                # sends again once it saw them go.
                deadline = time.monotonic() + 10
                while any(p._client.state(n) == "READY" for n in (1, 2)):
                    assert time.monotonic() < deadline, "cluster A's connections stayed open"
                    p.poll(0.01)
                f = p.send(TOPIC, b"after", key=b"k")
                if strategy == "rebootstrap":
                    assert f.result(15).offset == 0
                    assert p.metrics()["rebootstraps"] >= 1
                else:
                    with pytest.raises(Exception, match="delivery.timeout.ms|expir"):
                        f.result(15)
                    assert p.metrics()["rebootstraps"] == 0
            finally:
                p.close(5)
        assert verify_values(b) == ([b"after"] if strategy == "rebootstrap" else [])


def verify_values(mc):
    from kproducer.testing.readback import read_back
    return [m.value for msgs in read_back(mc.bootstrap, TOPIC).values() for m in msgs]


# -- quotas (KIP-219), on the test broker behind a proxy that sets ThrottleTimeMs ------------

def test_a_throttled_produce_answer_mutes_that_connection_for_the_throttle(proxied_broker):
    broker, proxy = proxied_broker
    with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0) as p:
        p.send("q", b"warm", partition=0).result(10)
        proxy.record_requests()
        proxy.throttle_answers(PRODUCE, 800, times=1)
        first = p.send("q", b"first", partition=0)
        assert first.result(10).offset == 1             # a throttle is no error
        second = p.send("q", b"second", partition=0)
        assert second.result(10).offset == 2
        m = p.metrics()
        assert (m["produce_throttled_responses"], m["produce_throttle_time_ms_total"],
                m["produce_throttle_time_ms_max"]) == (1, 800, 800)
    log = [e for e in proxy.requests_log(times=True) if e[2] == PRODUCE]
    assert [e[0] for e in log[:4]] == ["request", "response", "request", "response"], log
    throttled_answer_at, next_request_at = log[1][5], log[2][5]
    # The client had the answer after the proxy did: its next request on that connection
    # waited out the whole throttle from then at least.
    assert next_request_at - throttled_answer_at >= 0.8, (throttled_answer_at, next_request_at)
    assert proxy.stats()["api_throttles"] == 1


def test_rebootstrap_when_known_brokers_accept_connections_but_never_answer():
    # KIP-1102: cluster A's brokers still accept connections but answer nothing in time
    # (a round trip far past request.timeout.ms), so some known broker can always be
    # connected to and only metadata.recovery.rebootstrap.trigger.ms brings the producer
    # back to bootstrap.servers, now in front of cluster B.
    with MockCluster(2) as a, MockCluster(2) as b:
        for mc in (a, b):
            mc.create_topic(TOPIC, partitions=2, replication_factor=2)
        host, port = a.addresses[1].split(":")
        with FaultProxy(host, int(port)) as proxy:
            p = Producer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=400,
                         delivery_timeout_ms=20000, linger_ms=0,
                         metadata_recovery_rebootstrap_trigger_ms=1500)
            try:
                assert p.send(TOPIC, b"before", key=b"k").result(10).offset == 0
                host, port = b.addresses[1].split(":")
                proxy.retarget(host, int(port))
                proxy.cut_all()
                a.set_rtt_all(60_000)
                f = p.send(TOPIC, b"after", key=b"k")
                assert f.result(18).offset == 0
                assert p.metrics()["rebootstraps"] == 1
            finally:
                p.close(5)
        assert verify_values(b) == [b"after"]
