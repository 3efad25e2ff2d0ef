"""Serializers with a context (kproducer.serialization): confluent-kafka's Schema Registry
serializers (Avro, JSON Schema) as kproducer's key/value serializers, in send() and
send_many(), against confluent's in-memory registry; read back with confluent's Consumer
(kproducer.testing.readback) and decoded with confluent's deserializers. The context itself,
without a broker: tests/unit/test_serialization_context.py."""

from __future__ import annotations

import pytest

from kproducer import Producer
from kproducer import serialization as kser
from kproducer.testing.readback import read_back

from _schema_registry import ck_ser, sr, avro, jsonschema_sr, USER_AVRO, USER_JSON, _registry

USERS = [{"name": f"user-{i}", "age": 20 + i % 50, "email": None if i % 3 else f"u{i}@x"} for i in range(50)]


def _all(got):
    return [m for msgs in got.values() for m in sorted(msgs, key=lambda m: m.offset)]


# -- arity, decided once: a producer's serializers are asked when it is made -----------------


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
