"""kproducer.producer_cache without a broker: pickles name the cache module, the names it
had in kproducer.producer still work (kproducer.spark and older pickles use them), and
one configuration is one producer per process. (The broker-backed round trips, across a
subprocess and a fork, are in test_spark.py.)"""

from __future__ import annotations

import pickle
import pickletools

from kproducer import Producer, producer_cache
from kproducer import producer as producer_module


def _globals_in(blob: bytes) -> set:
    """The module-level names a pickle refers to."""
    names, strings = set(), []
    for op, arg, _ in pickletools.genops(blob):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            names.add(tuple(strings[-2:]))
        elif op.name == "GLOBAL":
            names.add(tuple(arg.split(" ", 1)))
    return names


def test_a_producer_pickles_through_the_cache_module():
    p = Producer(bootstrap_servers="127.0.0.1:1", linger_ms=7)
    try:
        blob = pickle.dumps(p)
        assert ("kproducer.producer_cache", "unpickle_producer") in _globals_in(blob)
        q = pickle.loads(blob)
        try:
            assert q is not p and q.config.linger_ms == 7
            assert q is producer_cache.cached_producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 7})
        finally:
            q.close(0)
    finally:
        p.close(0)


def test_the_old_private_names_are_aliases():
    assert producer_module._cached_producer is producer_cache.cached_producer
    assert producer_module._unpickle_producer is producer_cache.unpickle_producer
    # A pickle made before the move names kproducer.producer._unpickle_producer.
    # (pickle protocol 0, written out: pickle.dumps would name the function's new home)
    old = (b"ckproducer.producer\n_unpickle_producer\n(}(Vbootstrap.servers\nV127.0.0.1:1\nu}tR.")
    assert ("kproducer.producer", "_unpickle_producer") in _globals_in(old)
    q = pickle.loads(old)
    try:
        assert isinstance(q, Producer) and q is producer_cache.cached_producer({"bootstrap.servers": "127.0.0.1:1"})
    finally:
        q.close(0)
