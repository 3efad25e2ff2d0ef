# Part of the kproducer._core extension (included by _core.pyx): the sticky
# partitioner for unkeyed records (Java's BuiltInPartitioner, KIP-480 / KIP-794) and the
# per-node latency figures its availability check reads (Java's NodeLatencyStats).
#
# How the accumulator drives it (the accumulator's lock held throughout):
#   per record:  RecordAccumulator._place puts the record on ``partition`` and adds its bytes
#                to ``produced_bytes`` (plain C arithmetic, no call);
#   per batch:   when a batch's worth (batch.size bytes) went there, or the partition's batch
#                filled, ``next_partition`` chooses again, weighing the queues as they are now;
#   per ready(): with partitioner.availability.timeout.ms, ``update_availability`` leaves out
#                the partitions whose leader has left ready batches waiting too long (Java's
#                partitionReady).
#   per metadata update: ``set_partitions`` (the partition count and which have a leader).
# Keyed records never come here: murmur2 of the key, in C (kp_murmur2_partition).
#
# Unlike Java, the queue sizes are read at the switch rather than copied at each ready()
# pass: here the I/O thread may not run a ready() pass for milliseconds while send() holds
# the GIL, and stats that old sent a stalled partition a full share of new records.

from bisect import bisect_right


cdef class BuiltInPartitioner:
    """One topic's sticky partition for unkeyed records; the accumulator owns one per
    topic, as Java's TopicInfo does.

    The next partition is drawn among the partitions that have a leader (as the last
    metadata update said) and whose leader is not stalled (the last ready() pass): with
    adaptive partitioning weighted by ``max_queue + 1 - queue`` (queued batches), so that
    partitions with long queues (slow brokers) get less new data; else uniformly. When
    every candidate is left out there is no preference: any partition with a leader, else
    any partition. ``rng`` is anything with ``getrandbits(k)``: a seeded ``random.Random``
    (or a script of draws) makes the choices exact in tests."""
    cdef readonly str topic
    cdef readonly int32_t num_partitions
    cdef readonly int32_t partition       # the current sticky partition, -1: choose on next use
    cdef readonly int64_t produced_bytes  # appended to it since it was chosen
    cdef readonly bint used               # chosen at least once: ready() keeps it informed
    cdef readonly bint adaptive
    cdef list queues                      # the topic's per-partition deques (the accumulator's)
    cdef tuple available                  # partitions with a leader; None: all
    cdef frozenset stalled                # partitions whose leader is stalled
    cdef object rng

    def __cinit__(self, str topic, list queues, rng, bint adaptive=True):
        self.topic = topic
        self.queues = queues
        self.num_partitions = 0
        self.partition = -1
        self.produced_bytes = 0
        self.used = False
        self.adaptive = adaptive
        self.available = None
        self.stalled = frozenset()
        self.rng = rng

    def set_partitions(self, int32_t n, available=None):
        """The topic's partition count and the partitions that have a leader (from metadata;
        None: all). A sticky partition that no longer exists is chosen again on next use."""
        self.num_partitions = n
        self.available = tuple(p for p in available if 0 <= p < n) if available is not None else None
        if self.partition >= n:
            self.partition = -1

    def choice_table(self):
        """(partition ids, cumulative weights or None for uniform): what the next draw
        chooses from. Weights: queue sizes 0 3 1 -> ``max + 1 - size`` = 4 1 3 -> running
        sum 4 5 8; a draw in [0, 8) picks the first entry strictly greater, so partition 0
        gets 4/8 of the switches, 1 gets 1/8 and 2 gets 3/8 (Java's
        updatePartitionLoadStats)."""
        cdef object ids
        cdef list sizes, cft
        cdef Py_ssize_t top, total = 0
        if self.num_partitions <= 0:
            raise ValueError(f"no partitions known for topic {self.topic!r}")
        ids = self.available if self.available is not None else range(self.num_partitions)
        if self.stalled:
            usable = [p for p in ids if p not in self.stalled]
            if usable:
                ids = usable
        if not ids:
            # Nothing has a leader: any partition (its batches wait for one).
            ids = range(self.num_partitions)
        if not self.adaptive or len(ids) < 2:
            return ids, None
        sizes = [len(<object>self.queues[p]) for p in ids]
        top = max(sizes) + 1
        cft = []
        for s in sizes:
            total += top - <Py_ssize_t>s
            cft.append(total)
        return ids, cft

    cpdef int32_t next_partition(self) except -1:
        """Chooses a new sticky partition (per batch, not per record) and returns it."""
        cdef int64_t rnd
        ids, cft = self.choice_table()
        rnd = self.rng.getrandbits(31)
        if cft is None:
            self.partition = ids[rnd % len(ids)]
        else:
            # The first entry strictly greater than the draw (see choice_table).
            # (No negative indexes: the module is compiled with wraparound=False.)
            self.partition = ids[bisect_right(cft, rnd % (<list>cft)[len(cft) - 1])]
        self.produced_bytes = 0
        self.used = True
        return self.partition

    cdef int update_availability(self, leader_of, dict node_stats, int64_t timeout_ms) except -1:
        """Java's partitionReady exclusion, for partitioner.availability.timeout.ms > 0:
        leaves out the partitions whose leader has left ready batches waiting, undrained,
        for longer than ``timeout_ms`` (``node_stats[leader] = (ready_ms, drain_ms)``)."""
        cdef list out = []
        cdef int32_t p
        cdef tuple lat
        for p in range(self.num_partitions):
            leader = leader_of(self.topic, p)
            if leader is None or leader < 0:
                continue
            lat = node_stats.get(leader)
            if lat is not None and <int64_t>lat[0] - <int64_t>lat[1] > timeout_ms:
                out.append(p)
        self.stalled = frozenset(out)
        return 0

    @property
    def stalled_partitions(self):
        """The partitions the last ready() pass left out (stalled leaders)."""
        return sorted(self.stalled)
