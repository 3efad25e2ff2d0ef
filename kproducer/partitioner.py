"""Partition choice (Java's ``KafkaProducer.partition`` and ``BuiltInPartitioner``).

Precedence, for every record: an explicit ``partition`` > the custom ``partitioner``
setting (unless it returns ``None``) > ``(murmur2(key) & 0x7fffffff) % num_partitions`` for a
record with a key (unless ``partitioner.ignore.keys``), so a key lands where the Java client
puts it > the topic's sticky partition (KIP-480 / KIP-794).

What runs where:

* Key hash and sticky partition: compiled, in the accumulator that owns them as Java's does
  (``RecordAccumulator._place`` in ``_core_parts/accumulator.pxi``; the per-topic
  :class:`BuiltInPartitioner` and the per-node latency figures in
  ``_core_parts/partitioner.pxi``). The sticky partition changes after a batch's worth
  of bytes; with ``partitioner.adaptive.partitioning.enable`` the next one is weighted
  towards partitions with shorter queues, and with ``partitioner.availability.timeout.ms``
  partitions whose leader left ready batches waiting longer than that get none.
* A custom partitioner: :func:`custom_partition`, on the ``send()`` thread (Producer's slow
  path: a producer with a custom partitioner never takes the compiled fast path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol

from kproducer._core import BuiltInPartitioner

if TYPE_CHECKING:  # pragma: no cover
    from kproducer.metadata import Cluster

__all__ = ["BuiltInPartitioner", "CustomPartitioner", "custom_partition"]


class CustomPartitioner(Protocol):
    """A user partitioner (Java's ``Partitioner.partition``), the ``partitioner`` setting.

    Called on the ``send()`` thread with the topic, the key and value (after the configured
    serializers), their bytes (``None`` when null) and the current
    :class:`~kproducer.metadata.Cluster`. Returns a partition index in
    ``[0, cluster.num_partitions(topic))``, or ``None`` to let the built-in partitioner
    decide (key hash, else sticky). It must be cheap and thread-safe: every ``send()`` calls
    it, possibly from many threads.
    """

    def __call__(self, topic: str, key: Any, key_bytes: Optional[bytes], value: Any,
                 value_bytes: Optional[bytes], cluster: "Cluster") -> Optional[int]: ...


def custom_partition(partitioner: CustomPartitioner, topic: str, key, value, cluster: "Cluster",
                     num_partitions: int) -> Optional[int]:
    """The custom partitioner's answer for one record, checked: ``None`` or an int in
    ``[0, num_partitions)``, else ``ValueError`` naming what it returned."""
    p = partitioner(topic, key, key, value, value, cluster)
    if p is not None and (not isinstance(p, int) or not 0 <= p < num_partitions):
        raise ValueError(f"custom partitioner returned {p!r} for topic {topic!r} "
                         f"with {num_partitions} partitions")
    return p
