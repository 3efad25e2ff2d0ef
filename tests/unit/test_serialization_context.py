"""Serializers with a context (kproducer.serialization) without a broker: whether a
serializer takes a context, decided once; the SerializationContext is confluent-kafka's;
record and column serializers pass per-record contexts and headers, and name the record
that fails. In send() and send_many() against the broker: tests/broker/test_serializers.py."""

from __future__ import annotations

import functools
import json

import pytest

from kproducer import serialization as kser
from kproducer.serialization import MessageField, SerializationContext, serialize_columns, takes_context

from _schema_registry import ck_ser, avro, jsonschema_sr, USER_AVRO, USER_JSON, _registry


# -- arity, decided once ---------------------------------------------------------------------


class _CtxObject:
    def __call__(self, obj, ctx):
        return b"x"


class _OneArgObject:
    def __call__(self, obj):
        return b"x"


def _optional_ctx(obj, ctx=None):
    return b"x"


def _annotated(obj, c: "SerializationContext | None" = None):
    return b"x"


def _with_encoding(obj, encoding="utf-8"):
    return obj.encode(encoding)


@pytest.mark.parametrize("fn, expected", [
    (lambda o: o, False),
    (lambda o, c: o, True),
    (str.encode, False),                 # optional encoding/errors: not a context
    (json.dumps, False),
    (_with_encoding, False),
    (_CtxObject(), True),                # __call__(self, obj, ctx) counts as two
    (_OneArgObject(), False),
    (_optional_ctx, True),               # the second argument is named ctx
    (_annotated, True),                  # annotated as a SerializationContext
    (functools.partial(lambda a, o, c: o, 1), True),
    (bytes, False),                      # no signature Python can tell: one argument
    (None, False),
])
def test_takes_context(fn, expected):
    assert takes_context(fn) is expected


def test_confluent_serializers_take_a_context():
    reg = _registry()
    assert takes_context(avro.AvroSerializer(reg, USER_AVRO))
    assert takes_context(jsonschema_sr.JSONSerializer(USER_JSON, reg))
    assert takes_context(ck_ser.StringSerializer())      # __call__(self, obj, ctx=None)


def test_context_matches_confluents():
    assert MessageField.KEY == ck_ser.MessageField.KEY == "key"
    assert MessageField.VALUE == ck_ser.MessageField.VALUE == "value"
    assert ck_ser.MessageField.KEY == MessageField.KEY and str(MessageField.VALUE) == "value"
    ctx = SerializationContext("t", MessageField.KEY, [])
    assert (ctx.topic, ctx.field, ctx.headers) == ("t", "key", [])
    theirs = ck_ser.SerializationContext("t", ck_ser.MessageField.KEY, [])
    assert {a for a in vars(theirs)} == set(SerializationContext.__slots__)


def test_record_serializer_context_headers_and_none():
    seen = []

    def key_ser(obj, ctx):
        seen.append((ctx.topic, ctx.field, list(ctx.headers)))
        ctx.headers.append(("k-id", b"1"))
        return obj.encode()

    def value_ser(obj, ctx):
        seen.append((ctx.topic, ctx.field, list(ctx.headers)))
        return obj.encode()
    ser = kser.record_serializer(key_ser, value_ser)
    given = [("h", b"v")]
    k, v, h = ser("t", "key", "value", given)
    assert (k, v) == (b"key", b"value")
    assert h == [("h", b"v"), ("k-id", b"1")] and given == [("h", b"v")]      # a copy
    assert seen == [("t", MessageField.KEY, [("h", b"v")]),
                    ("t", MessageField.VALUE, [("h", b"v"), ("k-id", b"1")])]   # one list
    seen.clear()
    assert ser("t", None, None, None) == (None, None, None)   # None is never serialized
    assert seen == []
    # Unchanged headers come back as given (no new list sent).
    plain = kser.record_serializer(None, lambda o, c: o)
    hdrs = (("a", b"b"),)
    assert plain("t", b"k", b"v", hdrs)[2] is hdrs
    assert kser.record_serializer(str.encode, None) is None    # one-argument: inline path


def test_serialize_columns_per_record_contexts_and_headers():
    def value_ser(obj, ctx):
        ctx.headers.append(("field", str(ctx.field).encode()))
        return json.dumps(obj).encode()
    values, keys, headers = serialize_columns(str.encode, value_ser, "t", [{"a": 1}, None, {"b": 2}],
                                              ["k0", None, "k2"], [("h", b"1")])
    assert values == [b'{"a": 1}', None, b'{"b": 2}'] and keys == [b"k0", None, b"k2"]
    # A serializer added headers: one list per record (None records untouched).
    assert headers == [[("h", b"1"), ("field", b"value")], [("h", b"1")],
                       [("h", b"1"), ("field", b"value")]]
    # Nothing added: the headers stay as given (one list for every record).
    shared = [("h", b"1")]
    _, _, same = serialize_columns(None, lambda o, c: o, "t", [b"a", b"b"], None, shared)
    assert same is shared
    # Per-record header lists stay per record.
    _, _, per = serialize_columns(None, lambda o, c: o, "t", [b"a", b"b"], None, [[("x", b"1")], None])
    assert per == [[("x", b"1")], []]


def test_serialize_columns_errors_name_the_record():
    def fails_on_two(obj):
        if obj == 2:
            raise ValueError("bad")
        return b"ok"
    with pytest.raises(ValueError, match="bad") as exc:
        serialize_columns(None, fails_on_two, "t", [0, 1, 2, 3], None, None)
    assert "send_many: serializing values[2]" in getattr(exc.value, "__notes__", [""])[0]
    with pytest.raises(ValueError, match="3 keys for 2 values"):
        serialize_columns(str.encode, None, "t", [b"a", b"b"], ["a", "b", "c"], None)
