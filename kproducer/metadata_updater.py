"""When and where the producer asks for metadata, and what it does when no broker answers
(Java's NetworkClient.DefaultMetadataUpdater, with KIP-899/KIP-1102's rebootstrap).

Runs on the Sender's steps: :meth:`MetadataUpdater.maybe_update` sends a Metadata request
when one is due (a refresh was asked for, or ``metadata.max.age.ms`` passed) to the least
loaded broker, and installs its answer; :meth:`node_lost` asks for a refresh when a
connection fails or is lost (a leader may have moved off that broker, or the broker may be
gone). The bootstrap connections go once the metadata names the brokers. With
``metadata.recovery.strategy=rebootstrap``, when no broker of the last metadata can be
reached, or none has answered for ``metadata.recovery.rebootstrap.trigger.ms``, the client
starts again from ``bootstrap.servers``: the cluster behind that address may have been
replaced.
"""

from __future__ import annotations

import logging

from kproducer.errors import KafkaError
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v

_METADATA = ("metadata",)     # error_cb's state: metadata requests failing


class MetadataUpdater:
    """Keeps ``metadata`` (kproducer.metadata.Metadata) up to date through ``client`` (the
    NetworkClient); ``on_update(cluster)`` is called with each new snapshot, after the
    client knows its brokers' addresses; ``stats`` (the Sender's counters) counts
    ``rebootstraps``; ``log``: the producer's logger; ``errors``: its error_cb reporter
    (kproducer.error_reporter), told of a failed request once until one succeeds."""

    def __init__(self, config, metadata, client, *, time, stats, on_update, log=None, errors=None):
        self.metadata = metadata
        self.log = log if log is not None else logging.getLogger(__name__)
        self.errors = errors
        self.client = client
        self.time = time
        self.stats = stats
        self.on_update = on_update
        self.bootstrap_addresses = config.bootstrap_addresses
        self.rebootstrap_after_ms = (config.metadata_recovery_rebootstrap_trigger_ms
                                     if config.metadata_recovery_strategy == "rebootstrap" else None)
        self.in_flight = False

    def node_lost(self, node_id: int) -> None:
        """A connection to a broker failed or was lost: refresh as soon as the backoff allows
        (Java's handleServerDisconnect); the bootstrap connections tell nothing."""
        if node_id >= 0:
            self.metadata.request_update()

    def maybe_update(self, now: int, wall: int) -> int:
        """Sends a Metadata request when one is due; returns the longest poll allowed."""
        if self.in_flight:
            return 1 << 30
        due = self.metadata.time_to_next_update(wall)
        if due > 0:
            return due
        if not self.metadata.cluster.is_bootstrap:
            self._forget_bootstrap_nodes()
        client = self.client
        node = client.least_loaded_node(now)
        after = self.rebootstrap_after_ms
        if after is not None and (node is None or self.metadata.failing_for_ms(wall) >= after) \
                and self._rebootstrap():
            node = client.least_loaded_node(now)
        if node is None:
            return max(50, min((client.connection_delay(n, now) for n in client.nodes), default=50))
        if not client.ready(node, now):
            return 50
        plan = self.metadata.request_plan(wall)
        version = client.api_version(node, v.METADATA)
        req = m.MetadataRequest(topics=[m.MetadataRequestTopic(name=t) for t in plan.topics],
                                allow_auto_topic_creation=True)
        self.in_flight = True
        client.send(node, v.METADATA, req, lambda resp, err: self._on_response(plan, version, resp, err), now)
        return 1 << 30

    def _on_response(self, plan, version, resp, err) -> None:
        self.in_flight = False
        wall = self.time.wall_ms()
        if err is not None:
            self.log.debug("metadata request failed: %s", err)
            self.metadata.failed_update(wall)
            if self.errors is not None:
                self.errors.report(_METADATA, KafkaError(f"metadata request failed: {err}"))
            return
        cluster = self.metadata.update(resp, wall, request_version=plan.request_version,
                                       partial=plan.partial, response_version=version)
        if self.errors is not None:
            self.errors.clear(_METADATA)
        for broker in cluster.nodes():
            self.client.set_node(broker.node_id, broker.host, broker.port)
        if cluster.nodes():
            self._forget_bootstrap_nodes()
        self.on_update(cluster)

    def _forget_bootstrap_nodes(self) -> None:
        """Once metadata named the brokers, the bootstrap connections (nodes -1, -2, ...)
        go, as soon as nothing is in flight on them (the one that answered is still
        answering): afterwards only the brokers the metadata names are asked, until a
        rebootstrap brings the bootstrap servers back."""
        for nid in [n for n in self.client.nodes if n < 0]:
            if not self.client.in_flight_count(nid):
                self.client.remove_node(nid)

    def _rebootstrap(self) -> bool:
        """No broker of the last known metadata can be reached (every connection failed and
        waits out its backoff), or none has answered a metadata request for
        metadata.recovery.rebootstrap.trigger.ms: start again from bootstrap.servers, as at
        the start. Not while on them already."""
        if self.metadata.cluster.is_bootstrap:
            return False
        addresses = self.bootstrap_addresses
        self.log.info("no broker of the last known metadata answers: starting again from "
                      "bootstrap.servers %s (metadata.recovery.strategy=rebootstrap)",
                      ",".join(f"{h}:{p}" for h, p in addresses))
        self.metadata.rebootstrap(addresses)
        for i, (host, port) in enumerate(addresses):
            self.client.set_node(-(i + 1), host, port)
        self.stats["rebootstraps"] += 1
        return True
