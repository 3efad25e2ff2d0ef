"""The producer's view of the cluster: Java's ``Cluster`` and ``ProducerMetadata``.

Two pieces:

* :class:`Cluster` - an immutable snapshot (brokers, controller, cluster id,
  topics -> partitions -> leader, replicas, ISR) built from a decoded
  ``MetadataResponse`` of any version 0-12. Lookups the per-record path needs
  (partition ids, available partitions, partition count) are precomputed, so
  reading a snapshot never locks and never allocates.
* :class:`Metadata` - the thread-safe holder of the current snapshot: a
  version number bumped by every update, the topics the producer uses (with
  idle expiry), the refresh schedule (``metadata.max.age.ms``, retry backoff
  with exponential growth after failed refreshes), waiting for a newer version
  (``awaitUpdate``), and the per-topic errors that make ``send()`` fail fast.

Typical use, as in Java's ``KafkaProducer.waitOnMetadata`` and the sender::

    # user thread (send path)
    metadata.add(topic, now_ms)
    cluster = metadata.cluster
    while cluster.num_partitions(topic) is None:
        metadata.maybe_raise_for_topic(topic)          # fatal topic error: fail fast
        version = metadata.request_update_for_topic(topic)
        if not metadata.await_update(version, remaining_s):
            raise TimeoutError(...)                    # max.block.ms is the caller's
        cluster = metadata.cluster

    # network thread
    if metadata.time_to_next_update(now_ms) == 0:
        plan = metadata.request_plan(now_ms)            # topics, request_version, partial
        ... send MetadataRequest(topics=plan.topics) to the least loaded node ...
    ... on response:  metadata.update(resp, now_ms, request_version=plan.request_version,
                                      partial=plan.partial, response_version=version)
    ... on failure:   metadata.failed_update(now_ms)

Errors in a response: topic or partition errors that Java maps to
``InvalidMetadataException`` (``LEADER_NOT_AVAILABLE``,
``UNKNOWN_TOPIC_OR_PARTITION``, ...) mean "not yet": the topic simply has no
usable partitions in the snapshot and another refresh is requested (after the
retry backoff). The errors in :data:`FATAL_TOPIC_ERRORS`
(``TOPIC_AUTHORIZATION_FAILED``, ``INVALID_TOPIC_EXCEPTION``) are reported by
:meth:`Metadata.topic_error` / :meth:`Metadata.maybe_raise_for_topic` until a
later update shows the topic without them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from types import MappingProxyType
from typing import Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

from .backoff import ExponentialBackoff
from .errors import KafkaError
from .protocol.errors_table import ErrorCode, broker_error, is_invalid_metadata


__all__ = [
    "Node", "PartitionInfo", "TopicInfo", "Cluster", "Metadata", "MetadataRequestPlan",
    "FATAL_TOPIC_ERRORS", "NO_LEADER",
]

#: Leader id of a partition without a leader (Kafka's ``-1``).
NO_LEADER = -1

#: Topic-level errors that make ``send()`` to that topic fail at once rather
#: than wait for ``max.block.ms`` (Java: ``Metadata.handleMetadataResponse``
#: collects these two into ``invalidTopics`` / ``unauthorizedTopics``).
FATAL_TOPIC_ERRORS: FrozenSet[int] = frozenset({
    int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    int(ErrorCode.INVALID_TOPIC_EXCEPTION),
})

_NULL_UUID = uuid.UUID(int=0)
_EMPTY: Mapping = MappingProxyType({})


class Node(NamedTuple):
    """A broker as Metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: Optional[str] = None


class PartitionInfo(NamedTuple):
    """One partition of a topic.

    ``leader`` is a node id, ``-1`` when there is none; ``leader_epoch`` is
    ``-1`` when the response carried none (Metadata v0-6). Replica lists are
    tuples of node ids.
    """

    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: Tuple[int, ...] = ()
    isr: Tuple[int, ...] = ()
    offline: Tuple[int, ...] = ()
    error_code: int = 0


class TopicInfo(NamedTuple):
    """One topic: its error code and its partitions by index (read-only mapping).

    A topic with a topic-level error has no partitions. ``topic_id`` is a
    :class:`uuid.UUID`, or ``None`` before Metadata v10 (or when all zero).
    """

    name: str
    error_code: int = 0
    partitions: Mapping[int, PartitionInfo] = _EMPTY
    is_internal: bool = False
    topic_id: Optional[uuid.UUID] = None


def _topic_info(name: str, error_code: int = 0, partitions: Iterable[PartitionInfo] = (),
                is_internal: bool = False, topic_id: Optional[uuid.UUID] = None) -> TopicInfo:
    parts = {p.partition: p for p in partitions}
    return TopicInfo(name, int(error_code), MappingProxyType(parts), bool(is_internal),
                     None if topic_id is None or topic_id == _NULL_UUID else topic_id)


class Cluster:
    """Immutable snapshot of the cluster (Java's ``Cluster``).

    Build one with :meth:`from_response` (a decoded ``MetadataResponse``),
    :meth:`bootstrap` (addresses only) or the constructor. All accessors are
    lock-free and return shared immutable objects (tuples, read-only
    mappings); ``partitions_for`` and friends return partitions sorted by index.
    """

    __slots__ = ("_brokers", "_controller_id", "_cluster_id", "_topics", "_is_bootstrap",
                 "_parts", "_part_ids", "_avail", "_avail_ids", "_by_node", "_nparts",
                 "_brokers_view", "_topics_view")

    def __init__(self, brokers: Iterable[Node] = (), topics: Iterable[TopicInfo] = (), *,
                 controller_id: int = -1, cluster_id: Optional[str] = None,
                 is_bootstrap: bool = False):
        b: Dict[int, Node] = {n.node_id: n for n in brokers}
        t: Dict[str, TopicInfo] = {}
        for ti in topics:
            if not isinstance(ti.partitions, MappingProxyType):
                ti = ti._replace(partitions=MappingProxyType(dict(ti.partitions)))
            t[ti.name] = ti
        self._brokers = b
        self._topics = t
        self._controller_id = int(controller_id)
        self._cluster_id = cluster_id
        self._is_bootstrap = is_bootstrap
        self._brokers_view = MappingProxyType(b)
        self._topics_view = MappingProxyType(t)

        parts, part_ids, avail, avail_ids, nparts = {}, {}, {}, {}, {}
        by_node: Dict[int, List[Tuple[str, int]]] = {}
        for name, ti in t.items():
            if not ti.partitions:
                continue
            ps = tuple(sorted(ti.partitions.values(), key=lambda p: p.partition))
            av = tuple(p for p in ps if p.leader >= 0 and p.leader in b)
            parts[name] = ps
            part_ids[name] = tuple(p.partition for p in ps)
            avail[name] = av
            avail_ids[name] = tuple(p.partition for p in av)
            nparts[name] = len(ps)
            for p in av:
                by_node.setdefault(p.leader, []).append((name, p.partition))
        self._parts = parts
        self._part_ids = part_ids
        self._avail = avail
        self._avail_ids = avail_ids
        self._nparts = nparts
        self._by_node = {k: tuple(v) for k, v in by_node.items()}

    # -- construction -----------------------------------------------------------
    @classmethod
    def from_response(cls, response) -> "Cluster":
        """Build a snapshot from a decoded ``MetadataResponse`` (any version 0-12).

        Fields absent from older versions have the schema defaults (no rack,
        no cluster id, controller ``-1``, leader epoch ``-1``, null topic id).
        Topics without a name (v12 answers by topic id) are skipped; a topic
        with a topic-level error keeps its error code and no partitions.
        """
        brokers = [Node(br.node_id, br.host, br.port, getattr(br, "rack", None))
                   for br in response.brokers]
        topics = []
        for rt in response.topics:
            name = rt.name
            if name is None:
                continue
            err = int(rt.error_code)
            parts = ()
            if err == 0:
                parts = [PartitionInfo(int(p.partition_index), int(p.leader_id),
                                       int(getattr(p, "leader_epoch", -1)),
                                       tuple(p.replica_nodes or ()), tuple(p.isr_nodes or ()),
                                       tuple(getattr(p, "offline_replicas", None) or ()),
                                       int(p.error_code))
                         for p in rt.partitions]
            topics.append(_topic_info(name, err, parts, getattr(rt, "is_internal", False),
                                      getattr(rt, "topic_id", None)))
        return cls(brokers, topics, controller_id=getattr(response, "controller_id", -1),
                   cluster_id=getattr(response, "cluster_id", None))

    @classmethod
    def empty(cls) -> "Cluster":
        return cls()

    @classmethod
    def bootstrap(cls, addresses: Iterable[Tuple[str, int]]) -> "Cluster":
        """A snapshot holding only the bootstrap servers, as nodes ``-1, -2, ...``."""
        nodes = [Node(-(i + 1), host, int(port)) for i, (host, port) in enumerate(addresses)]
        return cls(nodes, is_bootstrap=True)

    # -- cluster-wide ---------------------------------------------------------------
    @property
    def brokers(self) -> Mapping[int, Node]:
        """``{node_id: Node}`` (read-only)."""
        return self._brokers_view

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        """``{name: TopicInfo}`` (read-only), including topics with errors."""
        return self._topics_view

    @property
    def controller_id(self) -> int:
        return self._controller_id

    @property
    def controller(self) -> Optional[Node]:
        return self._brokers.get(self._controller_id)

    @property
    def cluster_id(self) -> Optional[str]:
        return self._cluster_id

    @property
    def is_bootstrap(self) -> bool:
        """True for a :meth:`bootstrap` snapshot (no Metadata response yet)."""
        return self._is_bootstrap

    def node(self, node_id: int) -> Optional[Node]:
        return self._brokers.get(node_id)

    def nodes(self) -> Tuple[Node, ...]:
        return tuple(self._brokers.values())

    # -- per topic ----------------------------------------------------------------
    def topic(self, topic: str) -> Optional[TopicInfo]:
        return self._topics.get(topic)

    def partitions_for(self, topic: str) -> Tuple[PartitionInfo, ...]:
        """All partitions of ``topic`` sorted by index (empty if unknown)."""
        return self._parts.get(topic, ())

    def partition_ids(self, topic: str) -> Tuple[int, ...]:
        """Indexes of all partitions of ``topic``, sorted (empty if unknown)."""
        return self._part_ids.get(topic, ())

    def available_partitions(self, topic: str) -> Tuple[PartitionInfo, ...]:
        """Partitions whose leader is known: ``>= 0`` and a broker in this snapshot."""
        return self._avail.get(topic, ())

    def available_partition_ids(self, topic: str) -> Tuple[int, ...]:
        return self._avail_ids.get(topic, ())

    def num_partitions(self, topic: str) -> Optional[int]:
        """Partition count of ``topic``, ``None`` if unknown (or it has an error)."""
        return self._nparts.get(topic)

    def partition(self, topic: str, partition: int) -> Optional[PartitionInfo]:
        ti = self._topics.get(topic)
        return None if ti is None else ti.partitions.get(partition)

    def leader_for(self, topic: str, partition: int) -> Optional[Node]:
        """The leader's :class:`Node`, or ``None`` if no leader or it is not a known broker."""
        ti = self._topics.get(topic)
        if ti is None:
            return None
        p = ti.partitions.get(partition)
        if p is None or p.leader < 0:
            return None
        return self._brokers.get(p.leader)

    def leader_epoch_for(self, topic: str, partition: int) -> Optional[int]:
        p = self.partition(topic, partition)
        return None if p is None or p.leader_epoch < 0 else p.leader_epoch

    def partitions_for_node(self, node_id: int) -> Tuple[Tuple[str, int], ...]:
        """``(topic, partition)`` pairs led by ``node_id`` (for draining per node)."""
        return self._by_node.get(node_id, ())

    def topic_error(self, topic: str) -> int:
        """The topic-level error code of ``topic`` (0 if none or unknown)."""
        ti = self._topics.get(topic)
        return 0 if ti is None else ti.error_code

    @property
    def unauthorized_topics(self) -> FrozenSet[str]:
        return frozenset(n for n, t in self._topics.items()
                         if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    @property
    def invalid_topics(self) -> FrozenSet[str]:
        return frozenset(n for n, t in self._topics.items()
                         if t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION)

    def __repr__(self) -> str:
        return (f"Cluster(id={self._cluster_id!r}, controller={self._controller_id}, "
                f"brokers={sorted(self._brokers)}, "
                f"topics={ {n: self._nparts.get(n, 0) for n in sorted(self._topics)} }"
                f"{', bootstrap' if self._is_bootstrap else ''})")


class MetadataRequestPlan(NamedTuple):
    """What the next Metadata request should ask for (see :meth:`Metadata.request_plan`)."""

    topics: Tuple[str, ...]
    request_version: int
    partial: bool


class Metadata:
    """Thread-safe holder of the current :class:`Cluster` (Java's ``ProducerMetadata``).

    One lock guards the mutable state; its condition variable wakes
    :meth:`await_update` callers. :attr:`cluster` and :attr:`version` are read
    without the lock (a reference read is atomic), which is what the send path
    should do. Times are milliseconds passed in by the caller (``now_ms``), so
    the schedule can be tested with a fake clock; only :meth:`await_update`
    uses real time (seconds, monotonic).

    Constructor arguments mirror the producer configs of the same names.
    ``retry_backoff_jitter`` and ``rng`` shape the backoff after failed
    refreshes (Java: ±20 % jitter).
    """

    def __init__(self, *, metadata_max_age_ms: int = 300000, metadata_max_idle_ms: int = 300000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 retry_backoff_jitter: float = 0.2, rng: Optional[random.Random] = None,
                 cluster: Optional[Cluster] = None, log=None):
        if metadata_max_age_ms < 0 or metadata_max_idle_ms < 0 or retry_backoff_ms < 0:
            raise ValueError("metadata timings must be non-negative")
        self.metadata_max_age_ms = int(metadata_max_age_ms)
        self.metadata_max_idle_ms = int(metadata_max_idle_ms)
        self.retry_backoff_ms = int(retry_backoff_ms)
        self.retry_backoff_max_ms = int(retry_backoff_max_ms)
        # The producer's logger (kproducer.log_context), or this module's.
        self.log = log if log is not None else logging.getLogger(__name__)
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, retry_backoff_jitter,
                                           rng or random.Random())
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._cluster: Cluster = cluster if cluster is not None else Cluster()
        self._version = 0                  # bumped by every successful update
        self._request_version = 0          # bumped by every request for new topics
        self._need_full = True             # nothing known yet
        self._need_partial = False
        self._last_success_ms = 0
        self._last_answer_ms: Optional[int] = None   # of any update, partial ones too
        self._next_allowed_ms = 0          # no request before this (backoff)
        self._attempts = 0                 # failed refreshes in a row
        self._last_used: Dict[str, int] = {}   # topic -> last add() time
        self._new_topics: set = set()
        self._last_epochs: Dict[Tuple[str, int], int] = {}
        self._fatal: Optional[BaseException] = None
        self._closed = False
        self._listeners: list = []         # add_listener's, until the next wake-up

    # -- lock-free reads ------------------------------------------------------------
    @property
    def cluster(self) -> Cluster:
        """The current snapshot (never ``None``; empty before the first update)."""
        return self._cluster

    @property
    def version(self) -> int:
        """Bumped by every :meth:`update`; compare with :meth:`await_update`."""
        return self._version

    @property
    def last_update_ms(self) -> Optional[int]:
        """The wall-clock ms of the last update (partial ones too), None before the first:
        the metrics' metadata-age and the statistics' metadata_age."""
        return self._last_answer_ms

    @property
    def closed(self) -> bool:
        return self._closed

    # -- topics of interest ---------------------------------------------------------
    def add(self, topic: str, now_ms: int) -> None:
        """Note that ``topic`` is used now; a topic not seen before triggers a refresh.

        Called for every ``send()``. For a known topic this is one dict store,
        no lock (a store to an existing key is atomic). If the topic expires at
        that same instant the store may bring it back without a refresh
        request; the send path then finds no partitions and requests one.
        """
        if topic is None:
            raise TypeError("topic cannot be None")
        last_used = self._last_used
        if topic in last_used:
            last_used[topic] = now_ms
            return
        with self._lock:
            if topic not in self._last_used:
                self._new_topics.add(topic)
                self._request_update_for_new_topics_locked()
            self._last_used[topic] = now_ms

    touch = add

    def topics(self) -> FrozenSet[str]:
        """Every topic of interest (what a full refresh asks for)."""
        with self._lock:
            return frozenset(self._last_used)

    def new_topics(self) -> FrozenSet[str]:
        """Topics added since the last update that included them."""
        with self._lock:
            return frozenset(self._new_topics)

    def contains_topic(self, topic: str) -> bool:
        return topic in self._last_used

    # -- asking for a refresh -------------------------------------------------------
    def request_update(self) -> int:
        """Ask for a full refresh as soon as the backoff allows; return the current version."""
        with self._lock:
            self._need_full = True
            return self._version

    def request_update_for_new_topics(self) -> int:
        """Ask for a partial refresh of the new topics, bypassing the backoff."""
        with self._lock:
            return self._request_update_for_new_topics_locked()

    def _request_update_for_new_topics_locked(self) -> int:
        # Java: lastRefreshMs = 0, so a new topic never waits for retry.backoff.ms.
        self._next_allowed_ms = 0
        self._need_partial = True
        self._request_version += 1
        return self._version

    def request_update_for_topic(self, topic: str) -> int:
        """Partial refresh if ``topic`` is still new, else a full one; return the version."""
        with self._lock:
            if topic in self._new_topics:
                return self._request_update_for_new_topics_locked()
            self._need_full = True
            return self._version

    def update_requested(self) -> bool:
        return self._need_full or self._need_partial

    def time_to_next_update(self, now_ms: int) -> int:
        """Milliseconds until a refresh is due (0: send one now).

        0 when one was requested, else when ``metadata.max.age.ms`` has passed
        since the last successful refresh; either way not before the backoff
        that follows the last attempt (``retry.backoff.ms`` after a success,
        growing exponentially up to ``retry.backoff.max.ms`` after failures).
        """
        with self._lock:
            if self._need_full or self._need_partial:
                expire = 0
            else:
                expire = max(self._last_success_ms + self.metadata_max_age_ms - now_ms, 0)
            return max(expire, self._next_allowed_ms - now_ms, 0)

    def request_plan(self, now_ms: int) -> MetadataRequestPlan:
        """The topics the next request should carry.

        Partial (only the new topics) when no full refresh is requested and the
        snapshot has not expired; otherwise every topic of interest. Pass
        ``request_version`` and ``partial`` back to :meth:`update`.
        """
        with self._lock:
            if (not self._need_full and self._new_topics
                    and self._last_success_ms + self.metadata_max_age_ms > now_ms):
                return MetadataRequestPlan(tuple(sorted(self._new_topics)), self._request_version, True)
            return MetadataRequestPlan(tuple(sorted(self._last_used)), self._request_version, False)

    # -- results ----------------------------------------------------------------------
    def update(self, response: Union["Cluster", object], now_ms: int, *,
               request_version: Optional[int] = None, partial: bool = False,
               response_version: Optional[int] = None) -> Cluster:
        """Install a new snapshot from a ``MetadataResponse`` (or a :class:`Cluster`).

        Bumps :attr:`version`, clears the update request it answers, and wakes
        :meth:`await_update` callers. Only topics of interest are kept; those
        idle for ``metadata.max.idle.ms`` are forgotten. A partial update keeps
        the other topics from the previous snapshot. A partition whose leader
        epoch went backwards (a broker with stale metadata) keeps its previous
        information; from Metadata v9 on epochs are reliable, so with
        ``response_version`` < 9 they are not compared (unknown: compared).
        ``request_version`` is :attr:`MetadataRequestPlan.request_version`;
        ``None`` means the response covers every request made so far.
        Returns the new snapshot.
        """
        incoming = response if isinstance(response, Cluster) else Cluster.from_response(response)
        reliable_epochs = response_version is None or response_version >= 9
        with self._cond:
            if request_version is None:
                request_version = self._request_version
            self._need_partial = request_version < self._request_version
            if not partial:
                self._need_full = False
                self._last_success_ms = now_ms
            self._last_answer_ms = now_ms
            self._attempts = 0
            self._next_allowed_ms = now_ms + self.retry_backoff_ms

            self._expire_topics(now_ms)
            old = self._cluster
            topics: Dict[str, TopicInfo] = {}
            if partial:
                for name, ti in old.topics.items():
                    if name in self._last_used:
                        topics[name] = ti
            retry = False
            for name, ti in incoming.topics.items():
                if name not in self._last_used:
                    continue
                self._new_topics.discard(name)
                if ti.error_code:
                    if is_invalid_metadata(ti.error_code):
                        retry = True
                    topics[name] = ti
                    continue
                ti, part_retry = self._check_epochs(ti, old.topics.get(name), reliable_epochs)
                retry = retry or part_retry
                topics[name] = ti
            # Forget epochs of topics no longer tracked.
            if len(self._last_epochs) > 0:
                for key in [k for k in self._last_epochs if k[0] not in topics]:
                    del self._last_epochs[key]
            cluster = Cluster(incoming.brokers.values(), topics.values(),
                              controller_id=incoming.controller_id, cluster_id=incoming.cluster_id)
            if retry:
                self._need_full = True
            self._cluster = cluster
            self._version += 1
            self._wake_locked()
            return cluster

    def _check_epochs(self, ti: TopicInfo, old: Optional[TopicInfo],
                      reliable: bool) -> Tuple[TopicInfo, bool]:
        """Java's ``updateLatestMetadata`` for each partition of ``ti``."""
        retry = False
        changed_id = (old is not None and old.topic_id is not None and ti.topic_id is not None
                      and old.topic_id != ti.topic_id)
        parts: Dict[int, PartitionInfo] = {}
        name = ti.name
        epochs = self._last_epochs
        for idx, p in ti.partitions.items():
            if p.error_code and is_invalid_metadata(p.error_code):
                retry = True
            key = (name, idx)
            if reliable and p.leader_epoch >= 0:
                cur = epochs.get(key)
                if cur is None or p.leader_epoch >= cur or changed_id:
                    epochs[key] = p.leader_epoch
                else:
                    # This broker is behind: keep what we had (Java does not
                    # ask again either; the next refresh may reach another broker).
                    prev = old.partitions.get(idx) if old is not None else None
                    if prev is not None:
                        p = prev
            else:
                epochs.pop(key, None)
            parts[idx] = p
        return ti._replace(partitions=MappingProxyType(parts)), retry

    def _expire_topics(self, now_ms: int) -> None:
        idle = self.metadata_max_idle_ms
        for topic, last in list(self._last_used.items()):
            if last + idle <= now_ms and topic not in self._new_topics:
                del self._last_used[topic]

    def failed_update(self, now_ms: int) -> None:
        """Record a failed refresh: the next one waits an exponentially growing backoff."""
        with self._lock:
            self._attempts += 1
            self._next_allowed_ms = now_ms + self._backoff.backoff(self._attempts - 1)

    def bootstrap(self, addresses: Iterable[Tuple[str, int]]) -> None:
        """Install a bootstrap snapshot (nodes ``-1, -2, ...``) and request a full refresh."""
        with self._lock:
            self._cluster = Cluster.bootstrap(addresses)
            self._need_full = True

    def update_leaders(self, leaders: Mapping[Tuple[str, int], Tuple[int, int]],
                       endpoints: Optional[Mapping[int, Tuple[str, int]]] = None) -> bool:
        """KIP-951 (Java's ``updatePartitionLeadership``): a Produce answer named the new
        leaders, ``{(topic, partition): (leader id, leader epoch)}``, and the addresses of
        brokers the client may not know, ``{node id: (host, port)}``. A partition takes its
        new leader when the epoch is newer than the one known and the leader's address is
        known; the snapshot is replaced (the version moves on, so what is cached per version
        is read again). Returns whether anything changed. The refresh already asked for
        confirms it."""
        with self._lock:
            old = self._cluster
            if old.is_bootstrap:
                return False
            brokers = dict(old.brokers)
            for node_id, (host, port) in (endpoints or {}).items():
                if node_id not in brokers:
                    brokers[node_id] = Node(node_id, host, port)
            epochs = self._last_epochs
            changed: Dict[str, Dict[int, PartitionInfo]] = {}
            for (topic, idx), (leader, epoch) in leaders.items():
                ti = old.topics.get(topic)
                p = ti.partitions.get(idx) if ti is not None else None
                if p is None or leader < 0 or leader not in brokers or p.leader == leader:
                    continue
                if epoch < 0 or epoch <= max(p.leader_epoch, epochs.get((topic, idx), -1)):
                    continue
                changed.setdefault(topic, dict(ti.partitions))[idx] = p._replace(leader=leader,
                                                                                 leader_epoch=epoch)
                epochs[(topic, idx)] = epoch
            if not changed:
                return False
            topics = [ti._replace(partitions=MappingProxyType(changed[name])) if name in changed
                      else ti for name, ti in old.topics.items()]
            self._cluster = Cluster(brokers.values(), topics, controller_id=old.controller_id,
                                    cluster_id=old.cluster_id)
            self._version += 1
            self._wake_locked()
            return True

    def rebootstrap(self, addresses: Iterable[Tuple[str, int]]) -> None:
        """KIP-899: no broker of the current snapshot can be reached; start again from the
        bootstrap servers, now (no backoff). The topics of interest stay; their partitions
        and leaders come with the next refresh. The version moves on, so that whatever is
        cached per version (the Sender's leaders) is read again."""
        with self._lock:
            self._cluster = Cluster.bootstrap(addresses)
            self._need_full = True
            self._next_allowed_ms = 0
            self._version += 1

    def failing_for_ms(self, now_ms: int) -> int:
        """How long refreshes have failed in a row: 0 while the last one succeeded (or none
        has succeeded yet), else the time since the last that did, partial or full."""
        with self._lock:
            if self._attempts == 0 or self._last_answer_ms is None:
                return 0
            return max(0, now_ms - self._last_answer_ms)

    # -- waiting ----------------------------------------------------------------------
    def add_listener(self, fn) -> None:
        """Calls ``fn()`` once, at the next update, fatal error or close, on the thread
        that makes it (an asyncio send waiting for a topic wakes its loop: kproducer.aio);
        keep it short, and do not call back into this object from it."""
        with self._lock:
            self._listeners.append(fn)

    def _wake_locked(self) -> None:
        self._cond.notify_all()
        if self._listeners:
            listeners, self._listeners = self._listeners, []
            for fn in listeners:
                try:
                    fn()
                except Exception:
                    self.log.exception("metadata listener %r raised", fn)

    def await_update(self, last_version: int, timeout_s: Optional[float]) -> bool:
        """Block until :attr:`version` > ``last_version``; False if ``timeout_s`` passed first.

        Raises a fatal error set by :meth:`fatal_error` (once), and
        :class:`~kproducer.errors.KafkaError` if the metadata is closed.
        ``timeout_s=None`` waits without limit.
        """
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while True:
                self._raise_fatal_locked()
                if self._closed:
                    raise KafkaError("requested metadata update after close")
                if self._version > last_version:
                    return True
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)

    # -- errors -----------------------------------------------------------------------
    def topic_error(self, topic: str) -> Optional[int]:
        """The fatal error code recorded for ``topic`` (see :data:`FATAL_TOPIC_ERRORS`), or None."""
        ti = self._cluster._topics.get(topic)
        if ti is not None and ti.error_code in FATAL_TOPIC_ERRORS:
            return ti.error_code
        return None

    def maybe_raise_for_topic(self, topic: str) -> None:
        """Raise a pending fatal error, or :class:`BrokerResponseError` for a fatal topic error."""
        with self._lock:
            self._raise_fatal_locked()
        code = self.topic_error(topic)
        if code is not None:
            raise broker_error(code, f"topic {topic!r}")

    def fatal_error(self, exc: BaseException) -> None:
        """Fail waiters with ``exc`` (e.g. an authentication failure); raised once."""
        with self._cond:
            self._fatal = exc
            self._wake_locked()

    def _raise_fatal_locked(self) -> None:
        exc, self._fatal = self._fatal, None
        if exc is not None:
            raise exc

    def close(self) -> None:
        """Wake every waiter; later :meth:`await_update` calls raise."""
        with self._cond:
            self._closed = True
            self._wake_locked()

    def __repr__(self) -> str:
        return (f"Metadata(version={self._version}, topics={sorted(self._last_used)}, "
                f"update_requested={self.update_requested()}, cluster={self._cluster!r})")
