"""Serializers that take a context, as confluent-kafka's do.

A ``key_serializer`` / ``value_serializer`` is called as ``f(obj)``, or, when it takes two
arguments, as ``f(obj, ctx)`` with a :class:`SerializationContext`: the record's ``topic``,
which ``field`` is being serialized (:class:`MessageField` ``KEY`` or ``VALUE``) and its
``headers`` (a list of ``(str, bytes)`` pairs the serializer may append to; what it leaves
there is sent with the record). These have the attributes and values of
``confluent_kafka.serialization.SerializationContext`` and ``MessageField`` (whose members
are the strings ``"key"`` and ``"value"``), so confluent's Schema Registry serializers
(``AvroSerializer``, ``JSONSerializer``, ``ProtobufSerializer``) work unchanged::

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    registry = SchemaRegistryClient({"url": "http://registry:8081"})
    p = Producer(bootstrap_servers="broker:9092",
                 value_serializer=AvroSerializer(registry, schema_str))
    p.send("users", {"name": "Ada", "age": 36})

kproducer does not import confluent-kafka: the classes here stand in for confluent's.

Which form a serializer gets is decided once, when the producer is created
(:func:`takes_context`), never per record.
"""

from __future__ import annotations

import inspect
import weakref
from enum import Enum
from typing import Any, Callable, Optional

__all__ = ["MessageField", "SerializationContext", "takes_context"]


class MessageField(str, Enum):
    """Which part of a record a serializer is given (confluent-kafka's ``MessageField``:
    a ``str`` enum, so ``MessageField.KEY == "key"``, either way round, and confluent's
    ``MessageField.KEY`` equals this one's)."""

    NONE = "none"
    KEY = "key"
    VALUE = "value"

    def __str__(self) -> str:
        return str(self.value)


class SerializationContext:
    """What a two-argument serializer is told about the record (confluent-kafka's
    ``SerializationContext``): ``topic``, ``field`` (:class:`MessageField`) and ``headers``,
    the record's headers as a new list of ``(str, bytes | None)`` pairs, shared by the key's
    and the value's context. A serializer may append to it (confluent's
    ``header_schema_id_serializer`` puts the schema id there): the record is sent with the
    list as the serializers left it."""

    __slots__ = ("topic", "field", "headers")

    def __init__(self, topic: str, field: MessageField, headers: Optional[list] = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers

    def __repr__(self) -> str:
        return f"SerializationContext(topic={self.topic!r}, field={self.field!s}, headers={self.headers!r})"


_CONTEXT_NAMES = frozenset({"ctx", "context", "serialization_context"})


def takes_context(serializer: Optional[Callable]) -> bool:
    """Whether ``serializer`` is called as ``f(obj, ctx)`` rather than ``f(obj)``.

    Decided from its signature (``inspect.signature``; an object's ``__call__(self, obj,
    ctx)`` counts as two arguments): two arguments or more that must be given, or a second
    positional argument named ``ctx``/``context`` or annotated as a SerializationContext
    (confluent's ``Serializer.__call__(self, obj, ctx=None)``), or any subclass of
    confluent's ``Serializer``. Anything else, including a callable whose signature Python
    cannot tell (some builtins), takes one: ``str.encode`` and ``json.dumps`` stay
    one-argument serializers although they take more optional arguments.
    """
    if serializer is None:
        return False
    for cls in type(serializer).__mro__:
        if cls.__name__ == "Serializer" and cls.__module__.startswith("confluent_kafka"):
            return True
    try:
        sig = inspect.signature(serializer)
    except (TypeError, ValueError):
        return False
    positional = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()) and not positional:
        return False        # f(*args): nothing says what it wants
    required = [p for p in positional if p.default is p.empty]
    if len(required) >= 2:
        return True
    if len(positional) >= 2:
        second = positional[1]
        if second.name in _CONTEXT_NAMES:
            return True
        annotation = second.annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
        if "SerializationContext" in str(text):
            return True
    return False


# The one context field per column: MessageField members are singletons.
KEY = MessageField.KEY
VALUE = MessageField.VALUE


def record_serializer(key_serializer: Optional[Callable], value_serializer: Optional[Callable]):
    """``serialize(topic, key, value, headers) -> (key, value, headers)`` for a producer
    whose serializers include one that takes a context; None when neither does (the
    producer then calls them as ``f(obj)`` inline). None keys and values are not
    serialized (a None value stays a tombstone), as with one-argument serializers. The
    headers come back as the list the serializers saw when they added to it, else as given."""
    key_ctx, value_ctx = takes_context(key_serializer), takes_context(value_serializer)
    if not key_ctx and not value_ctx:
        return None

    def serialize(topic: str, key: Any, value: Any, headers: Any):
        given = 0 if headers is None else len(headers)
        seen = list(headers) if given else []
        if key_serializer is not None and key is not None:
            key = key_serializer(key, SerializationContext(topic, KEY, seen)) if key_ctx \
                else key_serializer(key)
        if value_serializer is not None and value is not None:
            value = value_serializer(value, SerializationContext(topic, VALUE, seen)) if value_ctx \
                else value_serializer(value)
        return key, value, (seen if len(seen) != given else headers)
    return serialize


def offer_cluster_id(producer, serializers) -> None:
    """Hands each serializer that takes one (``set_cluster_id_resolver``: confluent's
    Schema Registry serializers, 2.16+, for the associated subject name strategy) a
    resolver of the producer's cluster id, as confluent's SerializingProducer does. Nothing
    is resolved here: the resolver waits for the brokers' metadata (up to max.block.ms)
    when a serializer first calls it. It holds the producer weakly."""
    offer = [s for s in serializers if s is not None and callable(getattr(s, "set_cluster_id_resolver", None))]
    if not offer:
        return
    ref = weakref.ref(producer)

    def resolve() -> str:
        p = ref()
        if p is None:
            raise RuntimeError("the producer is gone")
        return p._cluster_id()
    for s in offer:
        s.set_cluster_id_resolver(resolve)


def _objects(column, what: str) -> list:
    """A column of Python objects to serialize, as a list."""
    if column is None:
        raise TypeError(f"send_many: {what} must be a sequence, not None")
    if isinstance(column, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"send_many: {what} must be a sequence of records, not {type(column).__name__}")
    to_pylist = getattr(column, "to_pylist", None)      # an Arrow array: its Python values
    if to_pylist is not None:
        return to_pylist()
    tolist = getattr(column, "tolist", None)            # a NumPy array
    if tolist is not None and hasattr(column, "dtype"):
        return tolist()
    return list(column)


def _noted(exc: BaseException, note: str) -> BaseException:
    if hasattr(exc, "add_note"):        # 3.11+
        exc.add_note(note)
    return exc


def serialize_columns(key_serializer: Optional[Callable], value_serializer: Optional[Callable],
                      topic: str, values, keys, headers):
    """send_many's columns with the serializers applied, once per record in Python:
    ``(values, keys, headers)``. A serializer that takes a context gets one per record; the
    headers become one list per record when a serializer added to a record's headers (or
    when they were per record already), else stay as given. A serializer's exception
    propagates with a note naming the record's index."""
    key_ctx, value_ctx = takes_context(key_serializer), takes_context(value_serializer)
    if value_serializer is not None:
        values = _objects(values, "values")
    n = len(values) if hasattr(values, "__len__") else None
    if key_serializer is not None and keys is not None:
        keys = _objects(keys, "keys")
        if n is not None and len(keys) != n:
            raise ValueError(f"send_many: {len(keys)} keys for {n} values")
    if not key_ctx and not value_ctx:
        # One-argument serializers: no context, the headers as given.
        if value_serializer is not None:
            values = _column(value_serializer, values, "values")
        if key_serializer is not None and keys is not None:
            keys = _column(key_serializer, keys, "keys")
        return values, keys, headers
    if n is None:
        values = _objects(values, "values")
        n = len(values)
    # One header list per record (a copy): what the serializers see and may add to.
    shared = headers is not None and (len(headers) == 0 or isinstance(headers[0], tuple))
    if headers is None or shared:
        base = list(headers) if headers else []
        lists = [base.copy() for _ in range(n)]
    else:
        if len(headers) != n:
            raise ValueError(f"send_many: {len(headers)} header lists for {n} values")
        lists = [list(h) if h else [] for h in headers]
    given = [len(h) for h in lists]
    if key_serializer is not None and keys is not None:
        keys = _column(key_serializer, keys, "keys", topic, KEY, lists if key_ctx else None)
    if value_serializer is not None:
        values = _column(value_serializer, values, "values", topic, VALUE, lists if value_ctx else None)
    if not shared and headers is not None:
        headers = lists                                     # per record already
    elif any(len(h) != g for h, g in zip(lists, given)):
        headers = lists                                     # a serializer added headers
    return values, keys, headers


def _column(serializer: Callable, column: list, what: str, topic: str = "", field=None,
            header_lists: Optional[list] = None) -> list:
    """One column serialized: None stays None; with ``header_lists``, record i's serializer
    gets a context with its list."""
    out: list = []
    append = out.append
    i = 0
    try:
        if header_lists is None:
            for i, obj in enumerate(column):
                append(None if obj is None else serializer(obj))
        else:
            for i, obj in enumerate(column):
                append(None if obj is None else
                       serializer(obj, SerializationContext(topic, field, header_lists[i])))
    except Exception as exc:
        raise _noted(exc, f"send_many: serializing {what}[{i}]")
    return out
