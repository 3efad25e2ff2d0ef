"""Serializers with a context (kproducer.serialization): confluent-kafka's Schema Registry
serializers (Avro, JSON Schema) as kproducer's key/value serializers, in send() and
send_many(), against confluent's in-memory registry; read back with confluent's Consumer
(kproducer.testing.readback) and decoded with confluent's deserializers."""

from __future__ import annotations

import functools
import json

import pytest

from kproducer import Producer
from kproducer import serialization as kser
from kproducer.serialization import MessageField, SerializationContext, serialize_columns, takes_context
from kproducer.testing.readback import read_back

ck_ser = pytest.importorskip("confluent_kafka.serialization")
sr = pytest.importorskip("confluent_kafka.schema_registry")
avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
jsonschema_sr = pytest.importorskip("confluent_kafka.schema_registry.json_schema")

USER_AVRO = json.dumps({
    "type": "record", "name": "User", "namespace": "test",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
               {"name": "email", "type": ["null", "string"], "default": None}],
})
USER_JSON = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "User", "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
})
USERS = [{"name": f"user-{i}", "age": 20 + i % 50, "email": None if i % 3 else f"u{i}@x"} for i in range(50)]


def _registry():
    return sr.SchemaRegistryClient.new_client({"url": "mock://kproducer-tests"})


def _all(got):
    return [m for msgs in got.values() for m in sorted(msgs, key=lambda m: m.offset)]


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


def test_arity_is_decided_at_construction_not_per_record(broker, monkeypatch):
    broker.create_topic("arity", 1)
    calls = []
    real = kser.takes_context
    monkeypatch.setattr(kser, "takes_context", lambda f: calls.append(f) or real(f))
    with Producer(bootstrap_servers=broker.bootstrap, value_serializer=lambda v, ctx: v.encode(),
                  key_serializer=str.encode) as p:
        made = len(calls)
        for i in range(200):
            p.send("arity", f"v{i}", key=f"k{i}")
        p.flush(30)
        assert len(calls) == made <= 2
    got = _all(read_back(broker.bootstrap, "arity"))
    assert [m.value for m in got] == [f"v{i}".encode() for i in range(200)]


# -- confluent's Schema Registry serializers, through the broker -----------------------------


def test_avro_serializer_send_read_back_with_avro_deserializer(broker):
    broker.create_topic("users-avro", 2)
    reg = _registry()
    with Producer(bootstrap_servers=broker.bootstrap, key_serializer=ck_ser.StringSerializer(),
                  value_serializer=avro.AvroSerializer(reg, USER_AVRO)) as p:
        futs = [p.send("users-avro", u, key=u["name"]) for u in USERS]
        p.send("users-avro", None, key="tombstone")          # None stays a tombstone
        p.flush(30)
        assert all(f.result(0).offset >= 0 for f in futs)
    # The schema was registered under the topic's value subject (TopicNameStrategy).
    assert "users-avro-value" in reg.get_subjects()
    de = avro.AvroDeserializer(reg)
    kde = ck_ser.StringDeserializer()
    got = _all(read_back(broker.bootstrap, "users-avro"))
    decoded = {}
    for m in got:
        key = kde(m.key, ck_ser.SerializationContext("users-avro", ck_ser.MessageField.KEY, m.headers))
        if m.value is None:
            decoded[key] = None
            continue
        assert m.value[0] == 0                          # Confluent wire format: magic 0, id
        decoded[key] = de(m.value, ck_ser.SerializationContext("users-avro", ck_ser.MessageField.VALUE,
                                                                m.headers))
    assert decoded == {**{u["name"]: u for u in USERS}, "tombstone": None}


def test_avro_schema_id_in_headers(broker):
    """confluent's header_schema_id_serializer writes the schema id into the context's
    headers: kproducer sends them, and confluent's deserializer finds the id there."""
    broker.create_topic("users-avro-h", 1)
    reg = _registry()
    ser = avro.AvroSerializer(reg, USER_AVRO, conf={"schema.id.serializer": sr.header_schema_id_serializer})
    app_headers = [("app", b"1")]
    with Producer(bootstrap_servers=broker.bootstrap, value_serializer=ser) as p:
        for u in USERS[:5]:
            p.send("users-avro-h", u, headers=app_headers)
        p.flush(30)
    assert app_headers == [("app", b"1")]                 # the application's list untouched
    de = avro.AvroDeserializer(reg)
    got = _all(read_back(broker.bootstrap, "users-avro-h"))
    assert len(got) == 5
    for m, u in zip(got, USERS[:5]):
        names = [k for k, _ in m.headers]
        assert names == ["app", "__value_schema_id"]
        assert de(m.value, ck_ser.SerializationContext("users-avro-h", ck_ser.MessageField.VALUE,
                                                       m.headers)) == u


def test_json_schema_serializer_send_read_back_with_json_deserializer(broker):
    broker.create_topic("users-json", 1)
    reg = _registry()
    people = [{"name": u["name"], "age": u["age"]} for u in USERS]
    with Producer(bootstrap_servers=broker.bootstrap,
                  value_serializer=jsonschema_sr.JSONSerializer(USER_JSON, reg)) as p:
        for person in people:
            p.send("users-json", person)
        p.flush(30)
        with pytest.raises(Exception):                   # the schema is enforced on send()
            p.send("users-json", {"name": 1})
    de = jsonschema_sr.JSONDeserializer(USER_JSON, schema_registry_client=reg)
    got = _all(read_back(broker.bootstrap, "users-json"))
    assert [de(m.value, ck_ser.SerializationContext("users-json", ck_ser.MessageField.VALUE, m.headers))
            for m in got] == people


def test_send_many_with_schema_registry_serializers(broker):
    broker.create_topic("many-avro", 3)
    reg = _registry()
    with Producer(bootstrap_servers=broker.bootstrap, key_serializer=ck_ser.StringSerializer(),
                  value_serializer=avro.AvroSerializer(reg, USER_AVRO)) as p:
        res = p.send_many("many-avro", USERS, [u["name"] for u in USERS], headers=[("batch", b"1")])
        assert res.wait(30)
        res.raise_for_errors()
        assert res.acked == len(USERS)
    de = avro.AvroDeserializer(reg)
    got = _all(read_back(broker.bootstrap, "many-avro"))
    decoded = {m.key.decode(): de(m.value, ck_ser.SerializationContext("many-avro", ck_ser.MessageField.VALUE,
                                                                      m.headers)) for m in got}
    assert decoded == {u["name"]: u for u in USERS}
    assert all(m.headers == [("batch", b"1")] for m in got)


def test_send_many_schema_ids_in_headers_become_per_record(broker):
    broker.create_topic("many-json-h", 1)
    reg = _registry()
    ser = jsonschema_sr.JSONSerializer(USER_JSON, reg, conf={"schema.id.serializer": sr.header_schema_id_serializer})
    people = [{"name": u["name"], "age": u["age"]} for u in USERS[:20]]
    with Producer(bootstrap_servers=broker.bootstrap, value_serializer=ser) as p:
        res = p.send_many("many-json-h", people, futures=True)
        assert res.wait(30) and res.acked == 20
    de = jsonschema_sr.JSONDeserializer(USER_JSON, schema_registry_client=reg)
    got = _all(read_back(broker.bootstrap, "many-json-h"))
    assert all([k for k, _ in m.headers] == ["__value_schema_id"] for m in got)
    assert [de(m.value, ck_ser.SerializationContext("many-json-h", ck_ser.MessageField.VALUE, m.headers))
            for m in got] == people


def test_send_many_one_argument_serializers_and_numpy_objects(broker):
    np = pytest.importorskip("numpy")
    broker.create_topic("many-plain", 2)
    values = np.array([f"v{i}" for i in range(100)], dtype=object)
    with Producer(bootstrap_servers=broker.bootstrap, value_serializer=str.encode,
                  key_serializer=lambda k: k.to_bytes(4, "big")) as p:
        res = p.send_many("many-plain", values, list(range(100)))
        assert res.wait(30) and res.acked == 100
        with pytest.raises(TypeError) as exc:              # 5 is no str: nothing sent
            p.send_many("many-plain", ["a", 5], [1, 2])
        assert "values[1]" in exc.value.__notes__[0]
        p.flush(10)
    got = _all(read_back(broker.bootstrap, "many-plain"))
    assert sorted((int.from_bytes(m.key, "big"), m.value) for m in got) == [(i, f"v{i}".encode()) for i in range(100)]


def test_cluster_id_resolver_offered_to_serializers(broker):
    broker.create_topic("cid", 1)

    class WantsClusterId:
        resolver = None

        def set_cluster_id_resolver(self, resolver):
            self.resolver = resolver

        def __call__(self, obj, ctx):
            return obj
    ser = WantsClusterId()
    with Producer(bootstrap_servers=broker.bootstrap, value_serializer=ser) as p:
        assert ser.resolver is not None
        cluster_id = ser.resolver()
        assert isinstance(cluster_id, str) and cluster_id
        assert cluster_id == p._metadata.cluster.cluster_id
