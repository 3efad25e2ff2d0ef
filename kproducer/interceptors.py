"""Producer interceptors (Java's ``ProducerInterceptor`` and ``ProducerInterceptors``).

Set with ``interceptor.classes`` (keyword ``interceptor_classes=``): a list of objects, of
classes (instantiated with no arguments) or of ``"module.Class"`` names (imported and
instantiated, as Java does; a comma-separated str of names works too). An interceptor has
some of these methods, all optional (:class:`ProducerInterceptor` is a base class with
no-op ones):

``on_send(record) -> record``
    Called by ``send()`` first, on the calling thread, before the key and value are
    serialized and the partition chosen, with a :class:`ProducerRecord`; returns the record
    to send (the same, or a new one: ``record._replace(headers=...)``). Interceptors run in
    the configured order, each given what the previous one returned.
``on_acknowledgement(metadata, error)``
    Called once per record sent with ``send()`` when it is acknowledged (``error`` None,
    ``metadata`` its RecordMetadata) or fails (``error`` the exception, ``metadata`` a
    RecordMetadata with the topic, the partition or -1, offset -1, timestamp -1), before
    the record's ``on_delivery`` callback, on the thread that completes it (the I/O thread,
    or an application thread running the producer's steps: keep it short). Also called
    when ``send()`` raises after ``on_send`` ran (Java's ``onSendError``): the record was
    not queued.
``on_send_many(columns) -> columns``
    ``send_many()`` calls interceptors once per call, never per record: with a
    :class:`SendManyColumns` (the call's topic, columns, partition, timestamps and
    headers, before serialization), returning the columns to send.
``on_acknowledgement_many(columns, result, error)``
    Once per ``send_many()`` call, when every record of it is settled: ``result`` its
    SendManyResult (counts and ``first_error``), ``error`` the first error or None. When
    ``send_many()`` raises before queuing anything: ``result`` None and ``error`` the
    exception.
``close()``
    Called when the producer closes, for the interceptors the producer instantiated (from
    a class or a name); objects the application passed are the application's to close.
    An interceptor the producer instantiated also gets ``configure(config)`` (the
    producer's settings as a dict) first, if it has that method (Java's ``Configurable``).

An interceptor without ``on_send_many``/``on_acknowledgement_many`` does not see the
records of ``send_many()``: calling per-record methods per record would undo what
``send_many`` is for.

Exceptions raised by an interceptor are logged (WARNING, on the ``kproducer.interceptors``
logger) and swallowed, as Java's ``ProducerInterceptors`` does: an ``on_send`` that raises
leaves the record as the previous interceptor returned it, and the next interceptor runs.
``on_send`` returning anything but a ProducerRecord counts as raising.

With no interceptor set, ``send()`` keeps its compiled path: interceptors cost nothing.
With one, each ``send()`` runs in Python (a few microseconds).
"""

from __future__ import annotations

import importlib
import logging
import re
from collections import namedtuple
from typing import Any, Callable, Optional

from kproducer._core import RecordMetadata
from kproducer.errors import ConfigError

__all__ = ["ProducerInterceptor", "ProducerRecord", "SendManyColumns"]

log = logging.getLogger("kproducer.interceptors")

ProducerRecord = namedtuple("ProducerRecord", "topic value key partition timestamp_ms headers")
ProducerRecord.__doc__ = (
    "A record as send() was given it (Java's ProducerRecord), before serialization: what "
    "on_send receives and returns. Immutable: return ``record._replace(...)`` to change it.")

SendManyColumns = namedtuple("SendManyColumns", "topic values keys partition timestamps headers")
SendManyColumns.__doc__ = (
    "One send_many() call's arguments, before serialization: what on_send_many receives and "
    "returns (``columns._replace(...)`` to change them). ``headers`` is None, one list of "
    "(str, bytes) pairs for every record, or one list per record, as send_many takes them.")

_HOOKS = ("on_send", "on_acknowledgement", "on_send_many", "on_acknowledgement_many")
# Private hooks (kproducer.otel): per-record or per-call state from the send to its
# acknowledgement. ``_kp_on_send(record) -> (record, ack)`` with ``ack(metadata, error)``
# or None; ``_kp_on_send_many(columns) -> (columns, ack)`` with ``ack(columns, result,
# error)`` or None.
_STATE_HOOKS = ("_kp_on_send", "_kp_on_send_many")


class ProducerInterceptor:
    """A base class with no-op methods (subclassing it is optional: any object with some of
    the methods works). See the module docstring for when each runs."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def on_acknowledgement(self, metadata, error: Optional[BaseException]) -> None:
        pass

    def on_send_many(self, columns: SendManyColumns) -> SendManyColumns:
        return columns

    def on_acknowledgement_many(self, columns: SendManyColumns, result, error: Optional[BaseException]) -> None:
        pass

    def close(self) -> None:
        pass


def _is_interceptor(obj) -> bool:
    return any(callable(getattr(obj, name, None)) for name in _HOOKS + _STATE_HOOKS)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*([.:][A-Za-z_][A-Za-z0-9_]*)+$")


def parse_setting(name: str, value: Any) -> tuple:
    """``interceptor.classes`` as ProducerConfig keeps it: a tuple of objects, classes and
    dotted names, checked but not imported (the producer imports names when it starts: a
    config may be made where the module is not importable, and shipped where it is)."""
    if isinstance(value, str):
        items: list = [e.strip() for e in value.split(",") if e.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    for item in items:
        if isinstance(item, str):
            if not _DOTTED.match(item.strip()):
                raise ConfigError(f"{name}: {item!r} is not a 'module.Class' name", key=name)
        elif not _is_interceptor(item):
            raise ConfigError(
                f"{name}: {item!r} is not an interceptor: expected an object or class with "
                f"on_send(record) and/or on_acknowledgement(metadata, error) (or the send_many "
                f"hooks), or a 'module.Class' name", key=name)
    return tuple(item.strip() if isinstance(item, str) else item for item in items)


def _import(name: str, path: str):
    module, sep, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{name}: cannot import {path!r}: {exc}", key=name) from exc
    return obj


def _instantiate(entries, config) -> tuple[list, list]:
    """(interceptors, the ones the producer made and so closes)."""
    name = "interceptor.classes"
    out, owned = [], []
    for entry in entries:
        obj = _import(name, entry) if isinstance(entry, str) else entry
        if isinstance(obj, type):
            try:
                obj = obj()
            except Exception as exc:
                raise ConfigError(f"{name}: {entry!r} could not be instantiated with no "
                                  f"arguments: {exc!r}", key=name) from exc
            configure = getattr(obj, "configure", None)
            if callable(configure):
                configure(config.as_dict())
            owned.append(obj)
        if not _is_interceptor(obj):
            raise ConfigError(f"{name}: {entry!r} gives {obj!r}, which has none of "
                              f"{', '.join(_HOOKS)}", key=name)
        out.append(obj)
    return out, owned


# Interceptors added to every producer made from now on (kproducer.otel's instrument()):
# factories called as f(producer), each returning an interceptor or None (none for this one).
_global_factories: list = []


def add_global_factory(factory: Callable) -> None:
    if factory not in _global_factories:
        _global_factories.append(factory)


def remove_global_factory(factory: Callable) -> None:
    try:
        _global_factories.remove(factory)
    except ValueError:
        pass


def for_producer(producer, config) -> Optional["ProducerInterceptors"]:
    """The interceptors of a new producer: those of ``interceptor.classes`` in order, then
    the instrumentations' (kproducer.otel); None when there are none."""
    entries = config["interceptor.classes"] or ()
    interceptors, owned = _instantiate(entries, config) if entries else ([], [])
    for factory in list(_global_factories):
        try:
            extra = factory(producer)
        except Exception:
            log.warning("interceptor factory %r raised; the producer starts without it",
                        factory, exc_info=True)
            continue
        if extra is not None:
            interceptors.append(extra)
    return ProducerInterceptors(interceptors, owned) if interceptors else None


def _method(obj, name: str, base_default) -> Optional[Callable]:
    """``obj.name`` when it exists and is not ProducerInterceptor's no-op."""
    fn = getattr(obj, name, None)
    if not callable(fn):
        return None
    if getattr(type(obj), name, None) is base_default:
        return None
    return fn


def _run_chain(chain, value, hook: str):
    """``value`` through each interceptor's ``hook`` of ``chain`` ((hook, stateful,
    on_acknowledgement) in order; a stateful hook returns (value, its acknowledgement)),
    each given what the one before returned; a hook that raises or returns another type is
    logged and skipped (its on_acknowledgement still runs), as Java's ProducerInterceptors does. Returns (value, the
    acknowledgement hooks to run)."""
    kind = type(value)
    acks = []
    for fn, stateful, on_ack in chain:
        if fn is not None:
            try:
                returned = fn(value)
                if stateful:
                    returned, on_ack = returned
                if type(returned) is not kind:
                    raise TypeError(f"{fn!r} returned {type(returned).__name__}, not a {kind.__name__}")
                value = returned
            except Exception:
                log.warning("Error executing interceptor %s callback for topic %r", hook, value.topic,
                            exc_info=True)
                if stateful:
                    continue        # its acknowledgement hook came with what it failed to return
        if on_ack is not None:
            acks.append(on_ack)
    return value, acks


class ProducerInterceptors:
    """The interceptors of one producer, in order (Java's ``ProducerInterceptors``): runs
    their hooks around a send, logging and swallowing what they raise."""

    def __init__(self, interceptors: list, owned: Optional[list] = None):
        self.interceptors = tuple(interceptors)
        self._owned = list(owned or ())
        # Per interceptor, in order: (on_send, stateful, on_acknowledgement).
        self._send: list = []
        self._many: list = []
        for ic in self.interceptors:
            state = getattr(ic, "_kp_on_send", None)
            if callable(state):
                self._send.append((state, True, None))
            else:
                on_send = _method(ic, "on_send", ProducerInterceptor.on_send)
                on_ack = _method(ic, "on_acknowledgement", ProducerInterceptor.on_acknowledgement)
                if on_send is not None or on_ack is not None:
                    self._send.append((on_send, False, on_ack))
            state = getattr(ic, "_kp_on_send_many", None)
            if callable(state):
                self._many.append((state, True, None))
            else:
                on_many = _method(ic, "on_send_many", ProducerInterceptor.on_send_many)
                on_ack = _method(ic, "on_acknowledgement_many", ProducerInterceptor.on_acknowledgement_many)
                if on_many is not None or on_ack is not None:
                    self._many.append((on_many, False, on_ack))

    @property
    def intercepts_send_many(self) -> bool:
        return bool(self._many)

    # -- send() ------------------------------------------------------------------------

    def send(self, queue: Callable, topic, value, key, partition, timestamp_ms, headers, on_delivery):
        """on_send in order, then ``queue(topic, value, key, partition, timestamp_ms,
        headers, on_delivery)`` (the producer's send without interceptors) with the record
        they returned and an on_delivery that runs on_acknowledgement first. What ``queue``
        raises goes to on_acknowledgement too (Java's onSendError), then propagates."""
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, metadata) or None, "
                            f"not {type(on_delivery).__name__}")
        record, acks = _run_chain(self._send, ProducerRecord(topic, value, key, partition, timestamp_ms,
                                                           headers), "on_send")
        if not acks:
            return queue(*record, on_delivery)
        delivery = _Acknowledgement(acks, on_delivery, record.topic, record.partition)
        try:
            fut = queue(*record, delivery)
        except BaseException as exc:
            delivery.failed(exc)
            raise
        partition_of = getattr(fut, "partition", None)
        if partition_of is not None:
            delivery.partition = partition_of
        return fut

    # -- send_many() -------------------------------------------------------------------

    def send_many(self, queue: Callable, columns: SendManyColumns, on_delivery, futures: bool):
        """on_send_many in order, then ``queue(*columns, on_delivery, futures)``; once the
        call's records are all settled (or it raised), on_acknowledgement_many."""
        columns, acks = _run_chain(self._many, columns, "on_send_many")
        try:
            result = queue(*columns, on_delivery, futures)
        except BaseException as exc:
            _acknowledge_many(acks, columns, None, exc)
            raise
        if acks:
            result.add_done_callback(lambda res: _acknowledge_many(acks, columns, res, res.first_error))
        return result

    # -- close() -----------------------------------------------------------------------

    def close(self) -> None:
        """Closes the interceptors the producer made (Java closes its interceptors with the
        producer), logging what they raise."""
        owned, self._owned = self._owned, []
        for ic in owned:
            close = getattr(ic, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.warning("Error closing interceptor %r", ic, exc_info=True)


def _acknowledge_many(acks, columns, result, error) -> None:
    for ack in acks:
        try:
            ack(columns, result, error)
        except Exception:
            log.warning("Error executing interceptor on_acknowledgement_many callback for topic "
                        "%r", columns.topic, exc_info=True)


class _Acknowledgement:
    """The on_delivery a send with interceptors is queued with: on_acknowledgement of each
    interceptor in order, then the application's on_delivery (which gets what it would
    without interceptors)."""

    __slots__ = ("acks", "user", "topic", "partition")

    def __init__(self, acks: list, user, topic: str, partition):
        self.acks = acks
        self.user = user
        self.topic = topic
        self.partition = partition

    def _failed_metadata(self):
        p = self.partition
        return RecordMetadata(self.topic, p if isinstance(p, int) else -1, -1, -1)

    def __call__(self, err, md):
        shown = md if md is not None else self._failed_metadata()
        for ack in self.acks:
            try:
                ack(shown, err)
            except Exception:
                log.warning("Error executing interceptor on_acknowledgement callback for topic "
                            "%r", self.topic, exc_info=True)
        if self.user is not None:
            self.user(err, md)

    def failed(self, exc: BaseException) -> None:
        """send() raised after on_send (Java's onSendError): on_acknowledgement only, the
        application's callback is not called (send() raised to it)."""
        md = self._failed_metadata()
        for ack in self.acks:
            try:
                ack(md, exc)
            except Exception:
                log.warning("Error executing interceptor on_acknowledgement callback for topic "
                            "%r", self.topic, exc_info=True)

    def __repr__(self) -> str:
        return f"<interceptors' acknowledgement, then {self.user!r}>"
