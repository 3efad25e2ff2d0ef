"""Tests of kproducer.metadata: Cluster snapshots and the Metadata holder.

Clusters are built from real MetadataResponse objects: hand-written golden
bytes (v1) and the protocol codec's round trip at every version 0-12 (one
reply from a Tansu broker: tests/broker/test_metadata_from_tansu.py). Metadata's schedule is tested with a fake clock
(``now_ms`` passed explicitly); only await_update uses real time."""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest

from kproducer.errors import BrokerResponseError, KafkaError
from kproducer.metadata import (FATAL_TOPIC_ERRORS, Cluster, Metadata, Node, PartitionInfo,
                                TopicInfo)
from kproducer.protocol import (METADATA, encode_response, STRUCTS, ErrorCode, MetadataResponse,
                                decode_response)

S = STRUCTS
E = ErrorCode
TID = uuid.UUID("0123456789abcdef0123456789abcdef")


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace("|", " "))


def broker(node_id, host="h", port=9092, rack=None):
    return S["MetadataResponseBroker"](node_id=node_id, host=host, port=port, rack=rack)


def part(index, leader, epoch=0, replicas=None, isr=None, offline=(), error=0):
    replicas = [leader] if replicas is None else replicas
    return S["MetadataResponsePartition"](
        error_code=error, partition_index=index, leader_id=leader, leader_epoch=epoch,
        replica_nodes=list(replicas), isr_nodes=list(replicas if isr is None else isr),
        offline_replicas=list(offline))


def topic(name, partitions=(), error=0, topic_id=TID, internal=False):
    return S["MetadataResponseTopic"](error_code=error, name=name, topic_id=topic_id,
                                      is_internal=internal, partitions=list(partitions))


def response(topics, brokers=None, controller=1, cluster_id="c1"):
    return MetadataResponse(brokers=brokers if brokers is not None else [broker(1), broker(2)],
                            cluster_id=cluster_id, controller_id=controller, topics=list(topics))


def simple(name="t", n=3, leader=1, epoch=0, **kw):
    return response([topic(name, [part(i, leader, epoch) for i in range(n)])], **kw)


# ===========================================================================
# Cluster
# ===========================================================================

# MetadataResponse v1 written out by hand from MetadataResponse.json: header v0,
# no throttle (v3+), no cluster id (v2+), no leader epochs (v7+).
GOLDEN_V1 = h(
    "00000007"                                  # CorrelationId 7
    "|00000002"                                 # Brokers: 2
    "|00000001 0001 61 00002384 ffff"           #   NodeId 1, Host "a", Port 9092, Rack null
    "|00000002 0001 62 00002385 0001 72"        #   NodeId 2, Host "b", Port 9093, Rack "r"
    "|00000002"                                 # ControllerId 2
    "|00000002"                                 # Topics: 2
    "|0000 0001 74 00"                          #   ErrorCode 0, Name "t", IsInternal false
    "|00000002"                                 #   Partitions: 2
    "|0000 00000001 ffffffff"                   #     ErrorCode 0, index 1, leader -1 (listed first)
    "|00000001 00000002 00000000"               #     replicas [2], isr []
    "|0000 00000000 00000001"                   #     ErrorCode 0, index 0, leader 1
    "|00000002 00000001 00000002 00000001 00000001"  # replicas [1, 2], isr [1]
    "|001d 0006 736563726574 00 00000000"       #   TOPIC_AUTHORIZATION_FAILED, "secret", 0 partitions
)


def test_cluster_from_golden_v1_bytes():
    resp = decode_response(METADATA, 1, GOLDEN_V1)
    assert resp.correlation_id == 7
    c = Cluster.from_response(resp)
    assert c.brokers == {1: Node(1, "a", 9092, None), 2: Node(2, "b", 9093, "r")}
    assert c.controller_id == 2 and c.controller == Node(2, "b", 9093, "r")
    assert c.cluster_id is None and not c.is_bootstrap
    assert [p.partition for p in c.partitions_for("t")] == [0, 1]     # sorted
    assert c.partitions_for("t")[0] == PartitionInfo(0, 1, -1, (1, 2), (1,), (), 0)
    assert c.partitions_for("t")[1] == PartitionInfo(1, -1, -1, (2,), (), (), 0)
    assert c.available_partitions("t") == (c.partitions_for("t")[0],)
    assert c.available_partition_ids("t") == (0,) and c.partition_ids("t") == (0, 1)
    assert c.leader_for("t", 0) == Node(1, "a", 9092, None)
    assert c.leader_for("t", 1) is None and c.leader_for("t", 7) is None
    assert c.num_partitions("t") == 2
    ti = c.topics["t"]
    assert (ti.name, ti.error_code, ti.is_internal, ti.topic_id) == ("t", 0, False, None)
    secret = c.topics["secret"]
    assert secret.error_code == E.TOPIC_AUTHORIZATION_FAILED and len(secret.partitions) == 0
    assert c.num_partitions("secret") is None and c.partitions_for("secret") == ()
    assert c.unauthorized_topics == {"secret"} and c.invalid_topics == frozenset()
    assert c.topic_error("secret") == 29 and c.topic_error("t") == 0
    assert c.num_partitions("nope") is None and c.leader_for("nope", 0) is None
    assert c.partitions_for_node(1) == (("t", 0),) and c.partitions_for_node(2) == ()


def rich():
    return MetadataResponse(
        throttle_time_ms=1,
        brokers=[broker(111, "h1", 9092, "r1"), broker(112, "h2", 9093, None)],
        cluster_id="cid", controller_id=112,
        topics=[topic("t", [part(i, 111 + i % 2, epoch=4, replicas=[111, 112], isr=[111], offline=[112])
                            for i in (2, 0, 1)], internal=True),
                topic("bad", error=E.INVALID_TOPIC_EXCEPTION, topic_id=uuid.UUID(int=0))])


@pytest.mark.parametrize("version", range(13))
def test_cluster_from_every_version(version):
    resp = decode_response(METADATA, version, encode_response(METADATA, version, rich(), 5))
    c = Cluster.from_response(resp)
    assert set(c.brokers) == {111, 112}
    assert c.brokers[111].rack == ("r1" if version >= 1 else None)
    assert c.controller_id == (112 if version >= 1 else -1)
    assert c.cluster_id == ("cid" if version >= 2 else None)
    ps = c.partitions_for("t")
    assert [p.partition for p in ps] == [0, 1, 2]
    assert [p.leader for p in ps] == [111, 112, 111]
    assert all(p.leader_epoch == (4 if version >= 7 else -1) for p in ps)
    assert all(p.offline == ((112,) if version >= 5 else ()) for p in ps)
    assert all(p.replicas == (111, 112) and p.isr == (111,) for p in ps)
    assert c.topics["t"].is_internal == (version >= 1)
    assert c.topics["t"].topic_id == (TID if version >= 10 else None)
    assert c.topics["bad"].topic_id is None            # the all-zero uuid means none
    assert c.leader_epoch_for("t", 0) == (4 if version >= 7 else None)
    assert c.invalid_topics == {"bad"}
    assert c.partitions_for_node(112) == (("t", 1),)
    assert c.partitions_for_node(111) == (("t", 0), ("t", 2))


def test_cluster_skips_nameless_topics_v12():
    resp = response([topic(None, [part(0, 1)]), topic("t", [part(0, 1)])])
    resp = decode_response(METADATA, 12, encode_response(METADATA, 12, resp, 5))
    assert set(Cluster.from_response(resp).topics) == {"t"}


def test_available_partitions_need_a_known_leader():
    c = Cluster.from_response(response(
        [topic("t", [part(0, 1), part(1, -1), part(2, 9), part(3, 2, error=E.LEADER_NOT_AVAILABLE)])]))
    # leader 9 is not a broker in the snapshot: not available (Java: leader node null)
    assert c.available_partition_ids("t") == (0, 3)
    assert c.leader_for("t", 2) is None and c.num_partitions("t") == 4


def test_cluster_is_read_only_and_bootstrap():
    c = Cluster.from_response(simple())
    with pytest.raises(TypeError):
        c.topics["x"] = None
    with pytest.raises(TypeError):
        c.topics["t"].partitions[9] = None
    with pytest.raises(AttributeError):
        c.extra = 1
    with pytest.raises(AttributeError):
        c.topics = {}
    b = Cluster.bootstrap([("h1", 1), ("h2", "2")])
    assert b.is_bootstrap and b.nodes() == (Node(-1, "h1", 1), Node(-2, "h2", 2))
    assert b.num_partitions("t") is None
    assert "bootstrap" in repr(b)


# ===========================================================================
# Metadata: versions and waiting
# ===========================================================================

def test_versions_and_update_flags():
    md = Metadata()
    assert md.version == 0 and md.update_requested()            # nothing known yet
    assert md.cluster.num_partitions("t") is None
    md.add("t", 0)
    assert md.contains_topic("t") and md.new_topics() == {"t"}
    c = md.update(simple(), 10)
    assert md.version == 1 and md.cluster is c and not md.update_requested()
    assert md.new_topics() == frozenset() and md.topics() == {"t"}
    assert md.request_update() == 1 and md.update_requested()
    md.update(Cluster.from_response(simple(n=5)), 20)             # a Cluster works too
    assert md.version == 2 and md.cluster.num_partitions("t") == 5
    assert not md.update_requested()


def test_topics_not_of_interest_are_dropped():
    md = Metadata()
    md.add("t", 0)
    resp = response([topic("t", [part(0, 1)]), topic("other", [part(0, 1)])])
    assert set(md.update(resp, 0).topics) == {"t"}


def test_await_update_wakes_on_update_from_another_thread():
    md = Metadata()
    md.add("t", 0)
    v = md.request_update_for_new_topics()
    t = threading.Timer(0.05, lambda: md.update(simple(), 1))
    start = time.monotonic()
    t.start()
    try:
        assert md.await_update(v, 5.0) is True
    finally:
        t.join()
    assert time.monotonic() - start < 2.0
    assert md.version == v + 1 and md.cluster.num_partitions("t") == 3
    assert md.await_update(v, 0) is True                        # already newer: no wait


def test_await_update_times_out():
    md = Metadata()
    start = time.monotonic()
    assert md.await_update(md.version, 0.1) is False
    assert 0.09 <= time.monotonic() - start < 2.0
    assert md.await_update(md.version, 0) is False


def test_await_update_close_and_fatal_error():
    md = Metadata()
    threading.Timer(0.05, lambda: md.fatal_error(KafkaError("auth failed"))).start()
    with pytest.raises(KafkaError, match="auth failed"):
        md.await_update(0, 5.0)
    assert md.await_update(0, 0) is False                       # raised once, then cleared
    threading.Timer(0.05, md.close).start()
    with pytest.raises(KafkaError, match="after close"):
        md.await_update(0, 5.0)
    assert md.closed


def test_listeners_are_called_once_at_the_next_update_fatal_error_or_close():
    """What an asyncio send waiting for a topic is woken by (kproducer.aio): each listener
    once, on the thread that changes the metadata; one that raises does not stop the rest."""
    md = Metadata()
    calls = []

    def boom():
        calls.append("boom")
        raise RuntimeError("listener bug")

    md.add_listener(lambda: calls.append(("a", md.version)))
    md.add_listener(boom)
    md.add_listener(lambda: calls.append(("b", md.version)))
    assert calls == []
    md.update(simple(), 1)
    assert calls == [("a", 1), "boom", ("b", 1)]
    md.update(simple(), 2)
    assert len(calls) == 3                                      # once only
    md.add_listener(lambda: calls.append("fatal"))
    md.fatal_error(KafkaError("auth failed"))
    md.add_listener(lambda: calls.append("closed"))
    md.close()
    assert calls[3:] == ["fatal", "closed"]


def test_many_waiters_all_wake():
    md = Metadata()
    results = []
    threads = [threading.Thread(target=lambda: results.append(md.await_update(0, 5.0)))
               for _ in range(8)]
    for th in threads:
        th.start()
    time.sleep(0.05)
    md.update(response([]), 0)
    for th in threads:
        th.join(5)
    assert results == [True] * 8


# ===========================================================================
# Metadata: refresh schedule (fake clock)
# ===========================================================================

def test_time_to_next_update_max_age_and_backoff():
    md = Metadata(metadata_max_age_ms=1000, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                  retry_backoff_jitter=0)
    assert md.time_to_next_update(0) == 0                        # never refreshed
    md.update(response([]), 5000)
    assert md.time_to_next_update(5000) == 1000
    assert md.time_to_next_update(5600) == 400
    assert md.time_to_next_update(6000) == 0                     # metadata.max.age.ms
    assert md.time_to_next_update(9999) == 0
    md.update(response([]), 10000)
    md.request_update()
    # requested, but not before retry.backoff.ms after the last refresh
    assert md.time_to_next_update(10000) == 100
    assert md.time_to_next_update(10060) == 40
    assert md.time_to_next_update(10100) == 0


def test_failed_updates_back_off_exponentially():
    md = Metadata(retry_backoff_ms=100, retry_backoff_max_ms=1000, retry_backoff_jitter=0)
    waits = []
    now = 0
    for _ in range(6):
        md.failed_update(now)
        waits.append(md.time_to_next_update(now))
        now += 5000
    assert waits == [100, 200, 400, 800, 1000, 1000]
    assert md.update_requested()                                 # still wanted
    md.update(response([]), now)
    md.request_update()
    assert md.time_to_next_update(now) == 100                    # reset by the success


def test_backoff_jitter_stays_in_bounds():
    md = Metadata(retry_backoff_ms=100, retry_backoff_max_ms=10000, rng=random.Random(7))
    for attempt in range(5):
        md.failed_update(0)
        base = 100 * 2 ** attempt
        assert int(base * 0.8) <= md.time_to_next_update(0) <= int(base * 1.2)


def test_new_topic_bypasses_backoff_and_asks_partial():
    md = Metadata(metadata_max_age_ms=1000, retry_backoff_jitter=0)
    md.add("a", 0)
    plan = md.request_plan(0)
    assert plan.topics == ("a",) and not plan.partial            # first ever: full
    md.update(simple("a"), 0, request_version=plan.request_version, partial=plan.partial)
    assert md.time_to_next_update(10) == 990
    md.add("b", 20)
    # a new topic is asked for at once, not after retry.backoff.ms (due at 100)
    assert md.time_to_next_update(20) == 0
    plan = md.request_plan(20)
    assert plan.topics == ("b",) and plan.partial
    md.add("c", 25)                                              # added while in flight
    md.update(simple("b", n=2), 30, request_version=plan.request_version, partial=True)
    c = md.cluster
    assert c.num_partitions("a") == 3 and c.num_partitions("b") == 2   # partial keeps "a"
    assert md.update_requested() and md.new_topics() == {"c"}
    plan = md.request_plan(130)
    assert plan.topics == ("c",) and plan.partial
    # once metadata.max.age.ms has passed the next request is a full one
    assert md.request_plan(1000) == (("a", "b", "c"), plan.request_version, False)
    # and a full update answering an older request leaves the newer one pending
    md.add("d", 1000)
    md.update(simple("a"), 1001, request_version=plan.request_version)
    assert md.update_requested() and "d" in md.new_topics()


def test_request_update_for_topic():
    md = Metadata(retry_backoff_jitter=0)
    md.add("t", 0)
    md.update(simple(), 0)
    assert md.request_update_for_topic("t") == 1
    assert md.time_to_next_update(0) == 100                      # known topic: full, backoff
    md.add("u", 1)
    md.update(response([]), 2)                                   # "u" not in the answer: still new
    assert md.request_update_for_topic("u") == 2
    assert md.request_plan(3).partial and md.time_to_next_update(3) == 0


# ===========================================================================
# Metadata: idle topics, errors, leader epochs
# ===========================================================================

def test_idle_topics_expire_on_next_update():
    md = Metadata(metadata_max_idle_ms=1000)
    md.add("busy", 0)
    md.add("idle", 0)
    md.update(response([topic("busy", [part(0, 1)]), topic("idle", [part(0, 1)])]), 0)
    md.add("busy", 900)                                          # touched: kept
    md.update(response([topic("busy", [part(0, 1)]), topic("idle", [part(0, 1)])]), 999)
    assert md.topics() == {"busy", "idle"}
    md.update(response([topic("busy", [part(0, 1)]), topic("idle", [part(0, 1)])]), 1000)
    assert md.topics() == {"busy"} and not md.contains_topic("idle")
    assert set(md.cluster.topics) == {"busy"}
    assert md.request_plan(1000).topics == ("busy",)
    md.add("idle", 1001)                                         # used again: new again
    assert md.new_topics() == {"idle"} and md.update_requested()


def test_new_topic_never_expires_before_its_first_answer():
    md = Metadata(metadata_max_idle_ms=10)
    md.add("slow", 0)
    md.update(response([]), 500)                                 # answer without "slow"
    assert md.contains_topic("slow") and md.new_topics() == {"slow"}


@pytest.mark.parametrize("code", sorted(FATAL_TOPIC_ERRORS))
def test_fatal_topic_errors_fail_fast(code):
    md = Metadata()
    md.add("t", 0)
    md.add("ok", 0)
    md.update(response([topic("t", error=code), topic("ok", [part(0, 1)])]), 0)
    assert md.topic_error("t") == code and md.topic_error("ok") is None
    assert not md.update_requested()                             # waiting would not help
    with pytest.raises(BrokerResponseError) as ei:
        md.maybe_raise_for_topic("t")
    assert ei.value.code == code and "'t'" in str(ei.value)
    md.maybe_raise_for_topic("ok")
    assert md.topic_error("t") == code                           # stays until a later update
    md.update(response([topic("t", [part(0, 1)])]), 1)
    assert md.topic_error("t") is None and md.cluster.num_partitions("t") == 1


@pytest.mark.parametrize("code", [E.LEADER_NOT_AVAILABLE, E.UNKNOWN_TOPIC_OR_PARTITION])
def test_retriable_topic_errors_mean_not_yet(code):
    md = Metadata(retry_backoff_jitter=0)
    md.add("t", 0)
    md.update(response([topic("t", error=code)]), 0)
    assert md.topic_error("t") is None
    md.maybe_raise_for_topic("t")                                # no exception
    assert md.cluster.num_partitions("t") is None
    assert md.update_requested() and md.time_to_next_update(0) == 100   # retry after backoff
    md.update(simple(), 100)
    assert md.cluster.num_partitions("t") == 3 and not md.update_requested()


def test_retriable_partition_error_requests_refresh():
    md = Metadata()
    md.add("t", 0)
    md.update(response([topic("t", [part(0, 1), part(1, -1, error=E.LEADER_NOT_AVAILABLE)])]), 0)
    assert md.cluster.available_partition_ids("t") == (0,) and md.update_requested()


def test_stale_leader_epoch_keeps_newer_information():
    md = Metadata()
    md.add("t", 0)
    md.update(simple(leader=1, epoch=5), 0)
    md.update(response([topic("t", [part(0, 2, epoch=4), part(1, 2, epoch=6), part(2, 2, epoch=5)])]), 1)
    c = md.cluster
    assert (c.partitions_for("t")[0].leader, c.partitions_for("t")[0].leader_epoch) == (1, 5)
    assert [p.leader for p in c.partitions_for("t")[1:]] == [2, 2]
    assert not md.update_requested()
    # before v9 epochs are not trusted
    md.update(response([topic("t", [part(0, 2, epoch=1)])]), 2, response_version=8)
    assert md.cluster.leader_for("t", 0).node_id == 2
    # a re-created topic (new topic id) resets the epochs
    md.update(response([topic("t", [part(0, 1, epoch=9)])]), 3)
    md.update(response([topic("t", [part(0, 2, epoch=0)], topic_id=uuid.uuid4())]), 4)
    assert md.cluster.partitions_for("t")[0] == PartitionInfo(0, 2, 0, (2,), (2,), (), 0)


def test_add_is_safe_against_concurrent_updates():
    md = Metadata(metadata_max_idle_ms=5)
    stop = threading.Event()
    errors = []

    def sender(i):
        try:
            n = 0
            while not stop.is_set():
                md.add(f"t{n % 20}", n)
                n += 1
        except Exception as e:  # pragma: no cover - the failure being tested for
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    try:
        for now in range(0, 2000, 10):
            md.update(response([topic(f"t{i}", [part(0, 1)]) for i in range(20)]), now)
    finally:
        stop.set()
        for th in threads:
            th.join()
    assert not errors and md.version == 200


def test_topic_info_and_partition_info_shapes():
    p = PartitionInfo(0, 1)
    assert (p.leader_epoch, p.replicas, p.isr, p.offline, p.error_code) == (-1, (), (), (), 0)
    t = TopicInfo("x")
    assert t.partitions == {} and t.topic_id is None
    c = Cluster([Node(1, "h", 1)], [TopicInfo("x", 0, {0: PartitionInfo(0, 1)})], controller_id=1)
    assert c.available_partition_ids("x") == (0,) and c.controller == Node(1, "h", 1)


def test_failing_for_counts_from_the_last_answer_partial_ones_too():
    md = Metadata()
    assert md.failing_for_ms(10_000) == 0               # nothing answered yet: not failing
    md.failed_update(10_000)
    assert md.failing_for_ms(20_000) == 0
    md.add("t", 20_000)
    md.update(_cluster_with_topic("t"), 20_000)          # a full refresh
    md.add("u", 21_000)
    plan = md.request_plan(21_000)
    assert plan.partial and plan.topics == ("u",)
    md.update(_cluster_with_topic("u"), 22_000, request_version=plan.request_version, partial=True)
    assert md.failing_for_ms(25_000) == 0               # the last refresh succeeded
    md.failed_update(25_000)
    md.failed_update(26_000)
    assert md.failing_for_ms(30_000) == 8_000           # since the partial answer
    md.update(_cluster_with_topic("t"), 31_000)
    assert md.failing_for_ms(40_000) == 0


def test_rebootstrap_forgets_the_cluster_keeps_the_topics_and_asks_at_once():
    md = Metadata()
    md.add("t", 0)
    md.update(_cluster_with_topic("t"), 1000)
    version = md.version
    assert not md.cluster.is_bootstrap and md.time_to_next_update(1001) > 0
    md.rebootstrap([("boot", 9092)])
    assert md.cluster.is_bootstrap and md.version == version + 1
    assert [(n.node_id, n.host, n.port) for n in md.cluster.nodes()] == [(-1, "boot", 9092)]
    assert md.time_to_next_update(1001) == 0            # no backoff
    assert md.request_plan(1001).topics == ("t",)         # the topics of interest stay


def _cluster_with_topic(name: str) -> Cluster:
    return Cluster([Node(1, "h", 1)], [TopicInfo(name, 0, {0: PartitionInfo(0, 1)})], controller_id=1)


def test_leaders_named_by_a_produce_answer_take_over_when_their_epoch_is_newer():
    md = Metadata()
    assert not md.update_leaders({("t", 0): (2, 9)})    # the bootstrap snapshot: nothing
    md.add("t", 0)
    md.update(Cluster([Node(1, "h1", 1)], [TopicInfo("t", 0, {0: PartitionInfo(0, 1, 5),
                                                              1: PartitionInfo(1, 1, 5)})]), 0)
    version = md.version
    assert not md.update_leaders({("t", 0): (2, 6)})    # node 2 unknown, no address given
    assert not md.update_leaders({("t", 0): (1, 9)})    # the leader it has already
    assert md.update_leaders({("t", 0): (2, 6), ("t", 1): (2, 5), ("u", 0): (2, 9)},
                             {2: ("h2", 2)})
    c = md.cluster
    assert md.version == version + 1
    assert (c.leader_for("t", 0), c.partitions_for("t")[0].leader_epoch) == (Node(2, "h2", 2), 6)
    assert c.leader_for("t", 1).node_id == 1            # epoch 5 is not newer
    assert not md.update_leaders({("t", 0): (1, 6)})    # not newer than 6 either
