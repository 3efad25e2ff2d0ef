"""The Sender's hand-over to the courier, and back.

The courier (csrc/kp_courier.h, owned by the accumulator: kproducer/_core_parts/
courier.pxi) is a plain C thread that runs the steady state between two Sender steps, so
that nothing waits for a thread to get the GIL from an application computing in Python. It
seals each queued batch when it is sendable (its linger.ms over, or full), finishes it with
the partition's next sequence, encodes the Produce requests (one batch per partition each,
with correlation ids reserved for it) and writes them while max.in.flight allows; it reads
the responses to the requests in flight, the step's and its own, and keeps the offsets of
the batches they acknowledge, so that each response makes room for the next request.
Anything but an acknowledgement is left to the step.

A step *arms* it as the step ends (:meth:`CourierHandover.arm`: the plan, with the nodes that
can take a request now and the partitions they lead); the next step *takes* what it did as
it begins (:meth:`CourierHandover.take`): its requests become in-flight requests of the
client and their batches in-flight batches of the Sender, as if the last step had sent them,
and the batches it saw acknowledged complete once the responses ahead of them on their
connection have. When the Sender arms it, and for which partitions, is the Sender's policy
(``Sender._arm_courier``).
"""

from __future__ import annotations

from kproducer._core import courier_codecs
from kproducer.protocol import versions as v
from kproducer.protocol.produce import decode_produce_response

_SEQ_MOD = 1 << 31   # BaseSequence wraps at Integer.MAX_VALUE (Java's DefaultRecordBatch)


class CourierHandover:
    """One Sender's hand-over to its accumulator's courier; see the module docstring.

    ``io`` is the selector's courier interface (``Selector.courier_io()``), or None when the
    courier never sends for this producer: a codec this build has not in C (the steps
    compress those), or a selector without one (tests). The Sender's state it reads and
    writes: ``acc``, ``client``, ``metadata``, ``muted``, ``next_seq``, ``producer_id``,
    ``producer_epoch``, ``acks``, ``idempotent``, ``stats``, ``acks0_nodes``, and the
    Sender's ``into_flight``, ``on_produce`` and ``on_acknowledged``."""

    def __init__(self, sender):
        self.sender = sender
        config, client = sender.config, sender.client
        selector = client.selector
        self.io = None
        if (config.compression_type == "none" or config.compression_type in courier_codecs()) \
                and hasattr(selector, "courier_io"):
            self.io = selector.courier_io()
        self._client_id = None if self.io is None or client.client_id is None \
            else client.client_id.encode()
        self._transactional_id = None if config.transactional_id is None \
            else config.transactional_id.encode()
        # (metadata version, leaders(), leader_nodes())
        self._leader_cache = None

    def arm(self, only=None) -> None:
        """As the step ends: the courier may send, until the next step begins, the queued
        batches of the nodes whose connections can take a request now, as they become
        sendable and max.in.flight allows, reading the responses to what is in flight (with
        acks=0 it reads nothing: its requests are done once written); ``only``: to these
        partitions only (a transaction's), None: to any not muted."""
        if self.io is None:
            return
        s = self.sender
        client = s.client
        nodes = client.reserve_courier_requests(v.PRODUCE, reads=s.acks != 0)
        if nodes:
            # It paces each node's requests as the step does (NetworkClient.paced_until_us).
            pacing = {n: (client.pace_us(n), client.last_produce_us(n, -1)) for n in nodes}
            s.acc.arm_courier(self.io, nodes, self.leaders(), s.muted,
                              s.next_seq if s.idempotent else None, s.producer_id,
                              s.producer_epoch, s.acks, s.request_timeout_ms, self._client_id,
                              only=only, transactional_id=self._transactional_id, pacing=pacing)

    def leaders(self) -> dict:
        """{topic: [leader node id, -1 when none, by partition]} of the accumulator's topics,
        rebuilt when the metadata changes only: the courier is armed at every step."""
        s = self.sender
        version = s.metadata.version
        cached = self._leader_cache
        if cached is not None and cached[0] == version:
            return cached[1]
        cluster = s.metadata.cluster
        acc = s.acc
        leaders = {}
        for topic in acc.topics():
            n = acc.partition_count(topic)
            if n:
                by_partition = []
                for p in range(n):
                    node = cluster.leader_for(topic, p)
                    by_partition.append(-1 if node is None else node.node_id)
                leaders[topic] = by_partition
        ids = frozenset(n for by_partition in leaders.values() for n in by_partition if n >= 0)
        self._leader_cache = (version, leaders, ids)
        return leaders

    def leader_nodes(self) -> frozenset:
        """The ids of the nodes that lead a partition of the accumulator's topics: the
        connections a batch can go to (NetworkClient.windows_full), kept with leaders()."""
        self.leaders()
        return self._leader_cache[2]

    def take(self, now: int) -> None:
        """As the step begins: disarms the courier. The requests it sent since the last step
        become in-flight requests of the client, their batches in-flight batches of the
        Sender, in the order it wrote them, as if the last step had sent them. Those whose
        acknowledgement it read complete (their callbacks run) once the responses ahead of
        them on their connection have, which the poll that follows reads from what the
        courier kept; the others are answered as any request (decode_produce_response)."""
        s = self.sender
        taken = s.acc.take_courier_sends(s.time.wall_ms())
        s.client.release_courier_ids([req.correlation_id for req in taken])
        if not taken:
            return
        for node in {req.node_id for req in taken}:
            # The courier drained these nodes: the sticky partitioner's figures say so, as for
            # a step's drain.
            s.acc.update_node_latency(node, now, True)
        expect_response = s.acks != 0
        stats = s.stats
        for req in taken:
            node, batches = req.node_id, req.batches
            if not expect_response:
                s.acks0_nodes.add(node)     # a barrier before close (Sender._acks0_barrier)
            if s.idempotent:
                next_seq = s.next_seq
                for b in batches:
                    next_seq[(b.topic, b.partition)] = (b.base_sequence + b.record_count) % _SEQ_MOD
            topics = s.into_flight(batches, node)
            stats["requests_by_courier"] += 1
            if req.results is None:
                s.client.adopt(node, v.PRODUCE, req.version, req.correlation_id, topics,
                               lambda resp, err, batches=batches, node=node:
                               s.on_produce(batches, resp, err, node),
                               req.send_us // 1000, decoder=decode_produce_response,
                               sent=req.whole, expect_response=expect_response,
                               send_us=req.send_us)
            else:
                stats["responses_by_courier"] += 1
                s.client.adopt(node, v.PRODUCE, req.version, req.correlation_id, topics,
                               lambda resp, err, req=req: s.on_acknowledged(req, err),
                               req.send_us // 1000, decoder=decode_produce_response,
                               sent=req.whole, expect_response=expect_response,
                               send_us=req.send_us, answer_us=req.answer_us, answer=req)
        s.client.settle_answered()
