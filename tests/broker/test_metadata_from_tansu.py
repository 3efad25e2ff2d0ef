"""A Cluster snapshot and the Metadata holder from a real MetadataResponse of a Tansu broker
(read with kproducer.testing.BlockingClient). The other tests of kproducer.metadata:
tests/unit/test_metadata.py."""

from __future__ import annotations

from kproducer.metadata import Cluster, Metadata, Node
from kproducer.protocol import METADATA
from kproducer.testing import BlockingClient


def test_cluster_from_real_broker(broker):
    with BlockingClient(broker.host, broker.port) as client:
        resp = client.metadata(["topic"])
        version = client.versions[METADATA]
    c = Cluster.from_response(resp)
    assert c.cluster_id == "tansu_cluster" and c.controller_id == 111
    assert c.brokers == {111: Node(111, broker.host, broker.advertised_port, None)}
    assert c.num_partitions("topic") == 4
    assert c.available_partition_ids("topic") == (0, 1, 2, 3)
    assert all(c.leader_for("topic", i).node_id == 111 for i in range(4))
    assert c.partitions_for_node(111) == tuple(("topic", i) for i in range(4))
    md = Metadata()
    md.add("topic", 0)
    md.update(resp, 1000, response_version=version)
    assert md.version == 1 and md.cluster.num_partitions("topic") == 4
    assert not md.update_requested() and md.topic_error("topic") is None
