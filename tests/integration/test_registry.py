"""The Confluent wire format against a real Schema Registry (Apicurio, ccompat API)."""

from __future__ import annotations

import copy
import io
import uuid
from typing import Any

import fastavro
import pytest

from processor.codec import DecodeError, load_schema, schemas_dir
from processor.local.registry import SchemaRegistry
from processor.wire import (
    RegistryClient,
    SchemaNotFoundError,
    WireCodec,
    frame,
    key_subject,
    unframe,
    value_subject,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def client(schema_registry: SchemaRegistry) -> RegistryClient:
    return RegistryClient(schema_registry.url)


@pytest.fixture
def topic() -> str:
    """A topic (hence subjects) of each test's own on the shared registry."""
    return f"t{uuid.uuid4().hex[:8]}.R"


def r_schema() -> dict[str, Any]:
    return load_schema(schemas_dir() / "relations" / "R.avsc")


def avro_body(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def test_registry_serves_the_ccompat_api(schema_registry: SchemaRegistry, client: RegistryClient) -> None:
    assert schema_registry.url.startswith("http://127.0.0.1:")
    assert schema_registry.url.endswith("/apis/ccompat/v7")
    assert schema_registry.proc.poll() is None
    assert isinstance(client.subjects(), list)


def test_register_is_idempotent_and_fetch_by_id(client: RegistryClient, topic: str) -> None:
    schema = r_schema()
    first = client.register(value_subject(topic), schema)
    again = client.register(value_subject(topic), schema)
    assert first == again
    fresh = RegistryClient(client.url)  # no cache: asks the registry
    fetched = fresh.schema(first)
    assert fetched.schema_type == "AVRO"
    assert fastavro.schema.to_parsing_canonical_form(fetched.avro()) == fastavro.schema.to_parsing_canonical_form(
        schema
    )
    assert fresh.schema(first) is fetched  # cached
    schema_id, version, _text = client.latest(value_subject(topic))
    assert (schema_id, version) == (first, 1)
    assert value_subject(topic) in client.subjects()


def test_round_trip_through_the_registry(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    updates = [((1, 2), 1), ((-5, 2**40), -3), ((0, 0), 7)]
    for row, mult in updates:
        key, value = codec.encode(row, mult)
        key_id, value_id = codec.register()
        assert unframe(key)[0] == key_id and unframe(value)[0] == value_id
        assert codec.decode(value) == (row, mult)
        assert codec.decode_key(key) == row
    assert {key_subject(topic), value_subject(topic)} <= set(client.subjects())
    # a second codec (another process) decodes by asking the registry
    reader = WireCodec.for_relation("R", RegistryClient(client.url), topic)
    _key, value = codec.encode((3, 4), -1)
    assert reader.decode(value) == ((3, 4), -1)


def test_unknown_schema_id_is_a_decode_error(client: RegistryClient, topic: str) -> None:
    with pytest.raises(SchemaNotFoundError):
        client.schema(987_654_321)
    codec = WireCodec.for_relation("R", client, topic)
    body = avro_body(r_schema(), {"A": 1, "B": 2, "mult": 1})
    with pytest.raises(DecodeError, match="unknown schema id 987654321"):
        codec.decode(frame(987_654_321, body))


def test_evolution_extra_field_with_default_and_int_promotion(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    codec.register()
    evolved = copy.deepcopy(r_schema())
    evolved["fields"] = [
        {"name": "A", "type": "int"},  # int -> long promotion
        {"name": "note", "type": "string", "default": ""},  # an extra field the relation does not read
        {"name": "B", "type": "long"},
        {"name": "mult", "type": "int"},  # int -> long promotion
    ]
    evolved_id = client.register(value_subject(topic), evolved)
    assert evolved_id != codec.register()[1]
    body = avro_body(evolved, {"A": 7, "note": "from a newer producer", "B": 2**33, "mult": -2})
    assert codec.decode(frame(evolved_id, body)) == ((7, 2**33), -2)
    # the old writer schema still decodes
    _key, value = codec.encode((1, 1), 1)
    assert codec.decode(value) == ((1, 1), 1)


def test_schemas_that_cannot_carry_the_relation(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    subject = f"{topic}-other-value"
    s_id = client.register(subject, load_schema(schemas_dir() / "relations" / "S.avsc"))
    body = avro_body(load_schema(schemas_dir() / "relations" / "S.avsc"), {"B": 1, "C": 2, "mult": 1})
    with pytest.raises(DecodeError, match=r"expects \['A', 'B'\]: missing \['A'\]"):
        codec.decode(frame(s_id, body))
    no_mult = {"type": "record", "name": "R", "namespace": "ivm.relations", "fields": [{"name": "A", "type": "long"}]}
    no_mult_id = client.register(f"{topic}-nomult-value", no_mult)
    with pytest.raises(DecodeError, match="has no 'mult' field"):
        codec.decode(frame(no_mult_id, avro_body(no_mult, {"A": 1})))
    array = {"type": "array", "items": "long"}
    array_id = client.register(f"{topic}-array-value", array)
    with pytest.raises(DecodeError, match="is not an Avro record"):
        codec.decode(frame(array_id, avro_body(array, [1, 2])))  # type: ignore[arg-type]
    wrong_type = copy.deepcopy(r_schema())
    wrong_type["fields"][0]["type"] = "string"
    wrong_id = client.register(f"{topic}-wrongtype-value", wrong_type)
    with pytest.raises(DecodeError, match="attribute 'A' is a string"):
        codec.decode(frame(wrong_id, avro_body(wrong_type, {"A": "1", "B": 2, "mult": 1})))


def test_malformed_body_and_zero_mult(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    _key, value = codec.encode((1, 2), 1)
    with pytest.raises(DecodeError, match="malformed Avro"):
        codec.decode(value[:-2])
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(value + b"\x00")
    _, value_id = codec.register()
    with pytest.raises(DecodeError, match="multiplicity 0"):
        codec.decode(frame(value_id, avro_body(r_schema(), {"A": 1, "B": 2, "mult": 0})))


def test_resolution_rules_of_avro_apply(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    renamed = copy.deepcopy(r_schema())
    renamed["name"] = "Other"
    renamed_id = client.register(f"{topic}-renamed-value", renamed)
    with pytest.raises(DecodeError, match="needs the same name or an alias"):
        codec.decode(frame(renamed_id, avro_body(renamed, {"A": 1, "B": 2, "mult": 1})))
    other_namespace = copy.deepcopy(r_schema())
    other_namespace["namespace"] = "com.example"  # Avro matches records by their unqualified name
    other_id = client.register(f"{topic}-ns-value", other_namespace)
    assert codec.decode(frame(other_id, avro_body(other_namespace, {"A": 1, "B": 2, "mult": 1}))) == ((1, 2), 1)
    nullable = copy.deepcopy(r_schema())
    nullable["fields"][1]["type"] = ["null", "long"]
    nullable_id = client.register(f"{topic}-nullable-value", nullable)
    assert codec.decode(frame(nullable_id, avro_body(nullable, {"A": 1, "B": 2, "mult": 1}))) == ((1, 2), 1)
    with pytest.raises(DecodeError, match="cannot be resolved"):
        codec.decode(frame(nullable_id, avro_body(nullable, {"A": 1, "B": None, "mult": 1})))


def test_a_json_schema_is_not_an_avro_update(client: RegistryClient, topic: str) -> None:
    codec = WireCodec.for_relation("R", client, topic)
    json_id = client.register(
        f"{topic}-json-value",
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
        schema_type="JSON",
    )
    assert client.schema(json_id).schema_type == "JSON"
    with pytest.raises(DecodeError, match="is a JSON schema, not Avro"):
        codec.decode(frame(json_id, b"{}"))


def test_wire_format_through_a_kafka_topic(kafka, client: RegistryClient, topic_prefix: str) -> None:
    """Keys keep every update of a tuple in one partition; values decode after the trip through the broker."""
    from confluent_kafka import Consumer, Producer

    from processor.topics import CLIENT_DEFAULTS, create_topics

    topic = f"{topic_prefix}R"
    create_topics(kafka.bootstrap, [topic], partitions=3)
    codec = WireCodec.for_relation("R", client, topic)
    updates = [((i % 4, i % 5), i + 1 if i % 3 else -(i + 1)) for i in range(60)]  # tuples recur
    producer = Producer({"bootstrap.servers": kafka.bootstrap, **CLIENT_DEFAULTS})
    for row, mult in updates:
        key, value = codec.encode(row, mult)
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"{topic}.test",
            "auto.offset.reset": "earliest",
            **CLIENT_DEFAULTS,
        }
    )
    consumer.subscribe([topic])
    reader = WireCodec.for_relation("R", RegistryClient(client.url), topic)
    got: list[tuple[int, tuple, tuple, int]] = []
    try:
        while len(got) < len(updates):
            message = consumer.poll(30)
            assert message is not None, f"only {len(got)} of {len(updates)} messages arrived"
            assert message.error() is None, message.error()
            row, mult = reader.decode(message.value())
            got.append((message.partition(), reader.decode_key(message.key()), row, mult))
    finally:
        consumer.close()
    assert sorted((row, mult) for _p, _k, row, mult in got) == sorted(updates)
    assert all(key == row for _p, key, row, _m in got)
    partition_of: dict[tuple, int] = {}
    for partition, key, _row, _mult in got:
        assert partition_of.setdefault(key, partition) == partition
    assert len(set(partition_of.values())) > 1  # the keys spread over the partitions
    for key in partition_of:  # every tuple's updates arrive in the order they were produced
        assert [m for _p, k, _r, m in got if k == key] == [m for row, m in updates if row == key]
