"""kproducer against a second, independent Kafka implementation with several brokers:
librdkafka's mock cluster (kproducer.testing.mock_cluster), at kproducer's defaults.

What is produced is read back with confluent-kafka's consumer. The failover suites (leaders
moving, brokers going down) are in test_failover.py; this file covers connecting, the
protocol quirks of another implementation, and the plain paths (keyed, idempotent,
transactional) on three brokers.
"""

from __future__ import annotations

import logging

import pytest

from kproducer import Producer
from kproducer.testing.failover import KeyedLoad, KProducerClient, verify
from kproducer.testing.mock_cluster import MockCluster, MockClusterError
from kproducer.testing.readback import read_back


@pytest.fixture
def cluster():
    with MockCluster(3) as mc:
        yield mc


def test_the_wrapper_drives_the_cluster_and_names_failures(cluster):
    assert len(cluster.bootstrap.split(",")) == 3
    assert sorted(cluster.addresses) == [1, 2, 3]
    cluster.create_topic("w", partitions=2, replication_factor=3)
    cluster.set_leader("w", 0, 3)
    with pytest.raises(MockClusterError, match=r"set_leader\('w', 5, 1\) failed: UNKNOWN_TOPIC_OR_PART"):
        cluster.set_leader("w", 5, 1)
    with pytest.raises(MockClusterError, match=r"broker_down\(9\) failed: BROKER_NOT_AVAILABLE"):
        cluster.broker_down(9)
    with pytest.raises(MockClusterError, match="TOPIC_ALREADY_EXISTS"):
        cluster.create_topic("w", partitions=2)
    with pytest.raises(ValueError, match="kind must be one of"):
        cluster.set_coordinator("cluster", "x", 1)
    cluster.close()
    with pytest.raises(MockClusterError, match="closed"):
        cluster.create_topic("late")


def test_connects_at_its_defaults_and_every_record_reads_back_in_order(cluster):
    # The mock answers ApiVersions v3+ with UNSUPPORTED_VERSION in a body that is neither
    # the request's version nor v0, and adds a byte after MetadataResponse v9+: both used to
    # keep kproducer from connecting at all.
    cluster.create_topic("t", partitions=6, replication_factor=3)
    load = KeyedLoad("t", keys=12, rate=4000, duration_s=0.5, seed=1)
    with Producer(bootstrap_servers=cluster.bootstrap) as p:
        records = load.run(KProducerClient(p))
        negotiated = [ns.versions for ns in p._client.nodes.values() if ns.versions]
    verdict = verify(cluster.bootstrap, "t", records)
    verdict.check()
    assert verdict.acked == len(records) == 2000
    assert {r.partition for r in records} == set(range(6))
    assert negotiated and all(vs[18] <= 2 for vs in negotiated)   # ApiVersions fell back


def test_bytes_after_the_last_field_are_logged_once_per_connection_and_api(cluster, caplog):
    cluster.create_topic("t", partitions=3, replication_factor=3)
    caplog.set_level(logging.DEBUG, logger="kproducer")
    with Producer(bootstrap_servers=cluster.bootstrap, metadata_max_age_ms=0) as p:
        for i in range(30):
            p.send("t", b"v%d" % i, key=b"k%d" % i).result(10)
    lines = [r.getMessage() for r in caplog.records
             if "after the last field of MetadataResponse" in r.getMessage()]
    assert lines, "the mock's extra Metadata byte was not noticed"
    # metadata.max.age.ms=0 refreshed metadata many times; each connection logs it once.
    assert len(lines) == len(set(lines)) <= 6
    assert sum(r.getMessage().split("] ", 1)[-1].startswith("node") and "MetadataResponse" in r.getMessage()
               for r in caplog.records if "ready" not in r.getMessage()) == len(lines)


def test_idempotent_and_transactional_producers_commit_on_three_brokers(cluster):
    cluster.create_topic("t", partitions=3, replication_factor=3)
    with Producer(bootstrap_servers=cluster.bootstrap, transactional_id="tx-plain") as p:
        p.init_transactions()
        for n in range(3):
            p.begin_transaction()
            for i in range(300):
                p.send("t", b"%d:%d" % (n, i), key=b"k%d" % (i % 7))
            if n == 1:
                p.abort_transaction()
            else:
                p.commit_transaction()
    got = read_back(cluster.bootstrap, "t", consumer_config=cluster.consumer_config(read_committed=True))
    values = sorted(m.value for msgs in got.values() for m in msgs)
    assert values == sorted(b"%d:%d" % (n, i) for n in (0, 2) for i in range(300))
