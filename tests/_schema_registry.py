"""confluent-kafka's Schema Registry serializers for the serializer tests
(tests/unit/test_serialization_context.py, tests/broker/test_serializers.py): its modules,
skipped without them, two User schemas (Avro, JSON Schema) and confluent's in-memory
registry."""

from __future__ import annotations

import json

import pytest

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


def _registry():
    return sr.SchemaRegistryClient.new_client({"url": "mock://kproducer-tests"})
