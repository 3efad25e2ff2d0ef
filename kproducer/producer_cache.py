"""The per-process producer cache and how a Producer pickles.

A ``Producer`` pickles as its configuration (callables by reference) and unpickles into the
receiving process's cached producer for that configuration (:func:`cached_producer`), so one
captured in a Spark UDF or ``foreachPartition`` closure becomes one producer per worker
process; ``kproducer.spark``'s executors use the same cache.

One producer per process and configuration, made on first use and closed (after sending
what is queued) when the interpreter exits. Fork-safe: the cache remembers the pid that
filled it, and a child that inherited it starts with an empty one (the parent's producers'
I/O threads do not exist in the child; their sockets are left alone, as in
``Producer._check_fork``). Processes that end with ``os._exit`` (PySpark's forked workers do)
skip atexit: callers that need delivery guarantees flush themselves (kproducer.spark flushes
after every task).
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import pickle
import threading
from typing import TYPE_CHECKING

from kproducer.config import ProducerConfig

if TYPE_CHECKING:  # pragma: no cover
    from kproducer.producer import Producer

log = logging.getLogger(__name__)

_cache: dict = {}
_cache_pid: int | None = None
_cache_lock = threading.Lock()
_abandoned_caches: list = []   # a forked child's copies of the parent's producers, kept untouched
_atexit_registered = False


def _callable_ref(name: str, fn) -> tuple[str, str]:
    """(module, qualname) of a callable setting, checked to import back to the same object:
    callables pickle by reference, so lambdas, nested functions and instances cannot."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    ok = isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname
    if ok:
        try:
            ok = _resolve_ref(module, qualname) is fn
        except (ImportError, AttributeError, ValueError):
            ok = False
    if not ok:
        raise pickle.PicklingError(
            f"cannot pickle Producer: config {name!r} holds {fn!r}, which cannot be pickled by "
            f"reference; a pickled Producer carries its configuration and callables in it must be "
            f"module-level functions or classes importable where it is unpickled (not lambdas, "
            f"nested functions or instances)")
    return module, qualname


def _resolve_ref(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def cached_producer(user_config: dict) -> "Producer":
    """This process's producer for ``user_config`` (dotted names as in
    ``ProducerConfig.user_config``), made on first use; a closed one is replaced.
    kproducer.spark's executors and unpickled producers share it."""
    global _cache, _cache_pid, _atexit_registered
    from kproducer.producer import Producer   # producer.py imports this module
    key = tuple(sorted((str(k), _freeze(v)) for k, v in ProducerConfig(user_config).user_config.items()))
    with _cache_lock:
        if _cache_pid != os.getpid():
            if _cache:
                _abandoned_caches.append(_cache)
            _cache, _cache_pid = {}, os.getpid()
        producer = _cache.get(key)
        if producer is None or producer._closed:
            producer = _cache[key] = Producer(user_config)
        if not _atexit_registered:
            atexit.register(_close_cached)
            _atexit_registered = True
        return producer


def reduce_producer(producer: "Producer"):
    """``Producer.__reduce__``: (unpickle_producer, (plain settings, callable references))."""
    plain, refs = {}, {}
    for name, value in producer.config.user_config.items():
        if callable(value):
            refs[name] = _callable_ref(name, value)
        else:
            plain[name] = value
    return (unpickle_producer, (plain, refs))


def unpickle_producer(plain: dict, refs: dict) -> "Producer":
    config = dict(plain)
    for name, (module, qualname) in refs.items():
        config[name] = _resolve_ref(module, qualname)
    return cached_producer(config)


def _close_cached() -> None:
    """At interpreter exit: close this process's cached producers (an inherited cache is
    the parent's and is left alone)."""
    if _cache_pid != os.getpid():
        return
    for producer in list(_cache.values()):
        try:
            producer.close(timeout=producer.config.delivery_timeout_ms / 1000.0)
        except Exception:
            log.exception("kproducer: closing a cached producer at exit failed")
    _cache.clear()
