"""Partition choice: Java's ``BuiltInPartitioner`` and ``KafkaProducer.partition``.

* Keyed records: ``(murmur2(key) & 0x7fffffff) % num_partitions``
  (:func:`default_partition_for_key`, the hash in C), so a key lands on the
  same partition as with the Java client.
* Unkeyed records (and every record with ``partitioner.ignore.keys``): the
  "strictly uniform sticky" partitioner of KIP-794 (:class:`BuiltInPartitioner`).
  Each topic sticks to one partition until about ``batch.size`` bytes were
  appended to it, then picks the next one: uniformly at random among the
  partitions with a leader, or, with adaptive partitioning and load stats
  from the accumulator, weighted towards partitions with shorter queues.
* A custom partitioner is any callable
  ``(topic, key, key_bytes, value, value_bytes, cluster) -> int | None``
  (:class:`CustomPartitioner`); ``None`` falls back to the built-in choice.
  :func:`resolve_partition` applies the precedence: explicit partition >
  custom partitioner > key hash (unless ``ignore_keys``) > sticky.

How the accumulator drives the sticky partitioner (Java's
``RecordAccumulator.append``), so that a switch decided by one thread is never
credited with another thread's bytes::

    info = partitioner.peek_partition_info(topic, cluster)
    with lock_of(deque[info.partition]):
        if partitioner.is_partition_changed(topic, info):
            retry                      # someone switched meanwhile: peek again
        appended = append(...)
        partitioner.update_partition_info(topic, appended, cluster,
                                          enable_switch=all_batches_full, info=info)

and once per ``ready()`` pass, per topic (Java's ``partitionReady``)::

    sizes, ids, n = collect_load_stats(cluster, topic, deque_lengths,
                                       node_latency, availability_timeout_ms)
    partitioner.update_partition_load_stats(topic, sizes, ids, n)

Thread safety: :meth:`BuiltInPartitioner.partition` and
:meth:`~BuiltInPartitioner.peek_partition_info` take no lock once a topic has
a sticky partition (one dict lookup and two attribute reads). Adding appended
bytes is lock-free too; only a switch takes the topic's lock. Under
concurrency a byte count may be lost to a race, which delays a switch by at
most those bytes; two threads crossing the threshold together still switch
once.
"""

from __future__ import annotations

import random
import threading
from bisect import bisect_right
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Protocol, Tuple

from .codec import murmur2_partition

if TYPE_CHECKING:  # pragma: no cover
    from .metadata import Cluster

__all__ = [
    "UNKNOWN_PARTITION", "default_partition_for_key", "BuiltInPartitioner", "StickyPartitionInfo",
    "CustomPartitioner", "resolve_partition", "collect_load_stats",
]

#: "Not chosen yet: let the sticky partitioner decide" (Java's
#: ``RecordMetadata.UNKNOWN_PARTITION``).
UNKNOWN_PARTITION = -1


def default_partition_for_key(key_bytes, num_partitions: int) -> int:
    """Java's ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % n``."""
    return murmur2_partition(key_bytes, num_partitions)


class CustomPartitioner(Protocol):
    """A user partitioner (Java's ``Partitioner.partition``).

    Called on the ``send()`` thread with the topic, the original key and value,
    their serialized bytes (``None`` when null) and the current
    :class:`~kproducer.metadata.Cluster`. Returns a partition index in
    ``[0, cluster.num_partitions(topic))``, or ``None`` to let the built-in
    partitioner decide (key hash, else sticky). It must be cheap and
    thread-safe: every ``send()`` calls it, possibly from many threads.
    """

    def __call__(self, topic: str, key: Any, key_bytes: Optional[bytes], value: Any,
                 value_bytes: Optional[bytes], cluster: "Cluster") -> Optional[int]: ...


class StickyPartitionInfo:
    """The current sticky partition of a topic and the bytes appended to it so far.

    A new object is created on every switch, so identity tells a caller
    whether the partition it peeked is still current.
    """

    __slots__ = ("partition", "produced_bytes")

    def __init__(self, partition: int):
        self.partition = partition
        self.produced_bytes = 0

    def __repr__(self) -> str:
        return f"StickyPartitionInfo(partition={self.partition}, produced_bytes={self.produced_bytes})"


class _TopicState:
    __slots__ = ("sticky", "cluster", "load_stats", "lock")

    def __init__(self):
        self.sticky: Optional[StickyPartitionInfo] = None
        # The snapshot the sticky partition was last checked against: while the
        # caller passes the same snapshot the fast path skips the range check.
        self.cluster: Any = None
        # (cumulative frequency table, partition ids, length) or None.
        self.load_stats: Optional[Tuple[List[int], List[int], int]] = None
        self.lock = threading.Lock()


class BuiltInPartitioner:
    """Sticky partitioning for records without a key (KIP-480 / KIP-794), all topics.

    ``batch_size`` is ``batch.size``: after that many bytes were appended to
    the sticky partition (``2 * batch_size`` while the caller disables the
    switch because the partition's last batch is not full) the next partition
    is chosen. ``adaptive`` is ``partitioner.adaptive.partitioning.enable``:
    when False, load stats are ignored and the choice is uniform. ``rng`` is
    anything with ``getrandbits(k)`` (a seeded :class:`random.Random` for
    reproducible tests).
    """

    def __init__(self, batch_size: int = 16384, *, adaptive: bool = True,
                 rng: Optional[random.Random] = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.adaptive = bool(adaptive)
        self._rng = rng if rng is not None else random.Random()
        self._topics: Dict[str, _TopicState] = {}
        self._lock = threading.Lock()

    # -- hot path -------------------------------------------------------------------
    def partition(self, topic: str, cluster: "Cluster") -> int:
        """The current sticky partition of ``topic`` (choosing one on first use)."""
        st = self._topics.get(topic)
        if st is not None and st.cluster is cluster:
            info = st.sticky
            if info is not None:
                return info.partition
        return self._peek_slow(topic, cluster).partition

    def peek_partition_info(self, topic: str, cluster: "Cluster") -> StickyPartitionInfo:
        """The current :class:`StickyPartitionInfo` (Java's ``peekCurrentPartitionInfo``)."""
        st = self._topics.get(topic)
        if st is not None and st.cluster is cluster:
            info = st.sticky
            if info is not None:
                return info
        return self._peek_slow(topic, cluster)

    def _peek_slow(self, topic: str, cluster: "Cluster") -> StickyPartitionInfo:
        st = self._state(topic)
        with st.lock:
            info = st.sticky
            # First use, or a new snapshot in which the partition no longer
            # exists (topic deleted and re-created smaller): choose again.
            if info is None or info.partition >= (cluster.num_partitions(topic) or 0):
                info = st.sticky = StickyPartitionInfo(self._next_partition(topic, st, cluster))
            st.cluster = cluster
            return info

    def _state(self, topic: str) -> _TopicState:
        st = self._topics.get(topic)
        if st is None:
            with self._lock:
                st = self._topics.get(topic)
                if st is None:
                    st = self._topics[topic] = _TopicState()
        return st

    def is_partition_changed(self, topic: str, info: Optional[StickyPartitionInfo]) -> bool:
        """True if ``info`` (from :meth:`peek_partition_info`) is no longer current."""
        if info is None:
            return False
        st = self._topics.get(topic)
        return st is None or st.sticky is not info

    def update_partition_info(self, topic: str, appended_bytes: int, cluster: "Cluster",
                              enable_switch: bool = True, *,
                              info: Optional[StickyPartitionInfo] = None) -> None:
        """Count ``appended_bytes`` against the sticky partition; switch when due.

        Java's ``updatePartitionInfo``: switch once the count reaches
        ``batch_size`` if ``enable_switch`` (the caller passes False while the
        partition's last batch is not full, to avoid cutting a batch short), or
        ``2 * batch_size`` regardless. With ``info``, the bytes count only if
        it is still the current sticky partition; without it they count for
        the current one. Call it only for records the sticky partitioner
        placed (not for keyed or explicitly partitioned ones).
        """
        st = self._topics.get(topic)
        if st is None:
            return
        cur = st.sticky
        if cur is None or (info is not None and info is not cur):
            return
        produced = cur.produced_bytes + appended_bytes
        cur.produced_bytes = produced
        limit = self.batch_size
        if produced >= limit and (enable_switch or produced >= 2 * limit):
            with st.lock:
                if st.sticky is cur:     # a racing thread may have switched already
                    st.sticky = StickyPartitionInfo(self._next_partition(topic, st, cluster))
                    st.cluster = cluster

    # -- choosing the next partition --------------------------------------------------
    def _next_partition(self, topic: str, st: _TopicState, cluster: "Cluster") -> int:
        rnd = self._rng.getrandbits(31)
        stats = st.load_stats
        if stats is None:
            ids = cluster.available_partition_ids(topic)
            if not ids:
                # Nothing has a leader: any partition (it waits for one).
                ids = cluster.partition_ids(topic)
                if not ids:
                    raise ValueError(f"no partitions known for topic {topic!r}")
            return ids[rnd % len(ids)]
        cft, ids, length = stats
        # The first entry strictly greater than the draw (see update_partition_load_stats).
        return ids[bisect_right(cft, rnd % cft[length - 1], 0, length)]

    def update_partition_load_stats(self, topic: str, queue_sizes: Optional[List[int]],
                                    partition_ids: Optional[List[int]], length: int) -> None:
        """Install queue sizes for adaptive partitioning (Java's ``updatePartitionLoadStats``).

        ``queue_sizes[i]`` is the number of batches queued for partition
        ``partition_ids[i]``; only the first ``length`` entries are used (the
        partitions that have a leader and are not excluded by
        ``partitioner.availability.timeout.ms``), while ``len(queue_sizes)``
        is the number of partitions considered in all. ``None`` (or fewer
        than two partitions, or all queues equal with none excluded) switches
        back to uniform choice. The inputs are not modified.

        The inverted sizes become a cumulative frequency table: sizes
        ``0 3 1`` -> ``max + 1 - size`` = ``4 1 3`` -> running sum ``4 5 8``; a
        draw in ``[0, 8)`` picks the first entry strictly greater, so partition
        0 gets 4/8 of the switches, partition 1 1/8 and partition 2 3/8.
        """
        st = self._state(topic)
        if not self.adaptive or queue_sizes is None or partition_ids is None:
            st.load_stats = None
            return
        if len(queue_sizes) != len(partition_ids) or not 0 <= length <= len(queue_sizes):
            raise ValueError("queue_sizes and partition_ids must have the same length >= length")
        if length < 1 or len(queue_sizes) < 2:
            st.load_stats = None
            return
        sizes = queue_sizes[:length]
        max_plus_1 = max(sizes) + 1
        if length == len(queue_sizes) and min(sizes) == max_plus_1 - 1:
            st.load_stats = None   # all equal and none excluded: uniform is the same
            return
        cft: List[int] = []
        total = 0
        for s in sizes:
            total += max_plus_1 - s
            cft.append(total)
        # One tuple, published by one store: readers see old or new stats, never a mix.
        st.load_stats = (cft, list(partition_ids[:length]), length)

    def load_stats(self, topic: str) -> Optional[Tuple[List[int], List[int], int]]:
        """The installed ``(cumulative frequency table, partition ids, length)``, or None."""
        st = self._topics.get(topic)
        return None if st is None else st.load_stats

    def forget(self, topic: str) -> None:
        """Drop the state of ``topic`` (e.g. when metadata forgets an idle topic)."""
        with self._lock:
            self._topics.pop(topic, None)


def collect_load_stats(cluster: "Cluster", topic: str, queue_sizes: Mapping[int, int],
                       node_latency: Optional[Mapping[int, Tuple[int, int]]] = None,
                       availability_timeout_ms: int = 0,
                       ) -> Tuple[Optional[List[int]], Optional[List[int]], int]:
    """Inputs for :meth:`BuiltInPartitioner.update_partition_load_stats`.

    What Java's ``RecordAccumulator.partitionReady`` gathers for one topic:
    ``queue_sizes`` maps each partition the accumulator has a queue for to
    its number of queued batches. Until there is a queue for every partition
    of the topic the result is ``(None, None, 0)`` (adaptive choice only
    knows partitions it has stats for). Partitions without a leader are left
    out, and with ``availability_timeout_ms > 0`` so are partitions whose
    leader's ``node_latency[node_id] = (ready_time_ms, drain_time_ms)`` shows
    it had batches ready for longer than the timeout without a drain.
    Returns ``(sizes, ids, length)`` with the usable partitions first, sorted
    by partition.
    """
    n = cluster.num_partitions(topic)
    if n is None or len(queue_sizes) < n:
        return None, None, 0
    sizes = [0] * len(queue_sizes)
    ids = [0] * len(queue_sizes)
    k = 0
    for partition in sorted(queue_sizes):
        leader = cluster.leader_for(topic, partition)
        if leader is None:
            continue
        if availability_timeout_ms > 0 and node_latency is not None:
            lat = node_latency.get(leader.node_id)
            if lat is not None and lat[0] - lat[1] > availability_timeout_ms:
                continue
        sizes[k] = queue_sizes[partition]
        ids[k] = partition
        k += 1
    return sizes, ids, k


def resolve_partition(topic: str, key: Any, key_bytes: Optional[bytes], value: Any,
                      value_bytes: Optional[bytes], cluster: "Cluster", *,
                      partition: Optional[int] = None,
                      partitioner: Optional[CustomPartitioner] = None,
                      builtin: Optional[BuiltInPartitioner] = None,
                      ignore_keys: bool = False) -> int:
    """The partition for one record (Java's ``KafkaProducer.partition``).

    Precedence: an explicit ``partition`` (returned as is: the caller checks
    it against metadata, which may still be catching up) > the custom
    ``partitioner`` (unless it returns ``None``; its answer must be an int in
    ``[0, num_partitions)``, else ``ValueError``) > the key hash when
    ``key_bytes`` is not ``None`` and not ``ignore_keys`` > the sticky
    partition: ``builtin.partition(topic, cluster)``, or
    :data:`UNKNOWN_PARTITION` without ``builtin`` so the accumulator can use
    the peek/update protocol itself. The topic must be in ``cluster``
    (``ValueError`` otherwise) unless an explicit partition is given.
    """
    if partition is not None:
        return partition
    if partitioner is not None:
        p = partitioner(topic, key, key_bytes, value, value_bytes, cluster)
        if p is not None:
            n = cluster.num_partitions(topic)
            if isinstance(p, bool) or not isinstance(p, int) or p < 0 or (n is not None and p >= n):
                raise ValueError(f"custom partitioner returned {p!r} for topic {topic!r} "
                                 f"with {n} partitions")
            return p
    if key_bytes is not None and not ignore_keys:
        n = cluster.num_partitions(topic)
        if n is None:
            raise ValueError(f"no partitions known for topic {topic!r}")
        return murmur2_partition(key_bytes, n)
    if builtin is None:
        return UNKNOWN_PARTITION
    return builtin.partition(topic, cluster)
