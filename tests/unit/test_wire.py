"""The Confluent wire format: framing, writer-schema checks, resolution, errors (no registry needed)."""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
import pytest

from ivm.processor.codecs.avro import DecodeError, RelationCodec, key_schema_of, load_schema, schemas_dir
from ivm.processor.codecs.confluent import (
    RegisteredSchema,
    RegistryClient,
    RegistryError,
    WireCodec,
    check_writer_schema,
    frame,
    key_subject,
    unframe,
    value_subject,
)
from ivm.processor.local.ports import free_port


def r_schema() -> dict[str, Any]:
    return load_schema(schemas_dir() / "relations" / "R.avsc")


def avro_body(schema: Any, record: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def closed_registry() -> RegistryClient:
    """A client whose registry does not exist: any request fails at once."""
    return RegistryClient(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", timeout=2)


# framing


@pytest.mark.parametrize("schema_id", [0, 1, 255, 256, 2**31, 2**32 - 1])
def test_frame_round_trip(schema_id: int) -> None:
    message = frame(schema_id, b"body")
    assert message[0] == 0
    assert message[1:5] == schema_id.to_bytes(4, "big")
    assert unframe(message) == (schema_id, b"body")


def test_frame_with_empty_body() -> None:
    assert unframe(frame(3, b"")) == (3, b"")


@pytest.mark.parametrize("schema_id", [-1, 2**32])
def test_frame_rejects_ids_beyond_four_bytes(schema_id: int) -> None:
    with pytest.raises(ValueError):
        frame(schema_id, b"")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (None, "empty message"),
        (b"", "empty message"),
        (b"\x01\x00\x00\x00\x01\x02", "wrong magic byte 0x01"),
        (b"\x7b\x22A\x22: 1}", "wrong magic byte 0x7b"),  # JSON, say
        (b"\x00", "too short"),
        (b"\x00\x00\x00\x01", "too short"),
    ],
)
def test_unframe_errors(message: bytes | None, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        unframe(message)


def test_subjects_follow_the_topic_name_strategy() -> None:
    assert value_subject("rel.R") == "rel.R-value"
    assert key_subject("rel.R") == "rel.R-key"


# the codec: framing errors come before any registry request; registry failures are not DecodeErrors


def test_framing_errors_do_not_ask_the_registry() -> None:
    codec = WireCodec.for_relation("R", closed_registry())
    plain = RelationCodec.from_schema(r_schema()).encode((1, 2), 1)[1]  # plain Avro, no header
    with pytest.raises(DecodeError, match="magic byte"):
        codec.decode(b"\x02" + plain)
    with pytest.raises(DecodeError, match="too short"):
        codec.decode(b"\x00\x00")
    with pytest.raises(DecodeError, match="empty message"):
        codec.decode(None)


def test_an_unreachable_registry_is_not_a_decode_error() -> None:
    codec = WireCodec.for_relation("R", closed_registry())
    with pytest.raises(RegistryError, match="cannot be reached") as caught:
        codec.decode(frame(1, b"\x02\x04\x02"))
    assert not isinstance(caught.value, DecodeError)
    with pytest.raises(RegistryError):
        codec.encode((1, 2), 1)  # registering needs the registry too


def test_codec_defaults() -> None:
    codec = WireCodec.for_relation("T", closed_registry())
    assert codec.topic == "T" and codec.relation == "T" and codec.attributes == ("C", "A")
    assert WireCodec.for_relation("T", closed_registry(), topic="rel.T").topic == "rel.T"


def test_registered_schema_avro() -> None:
    assert RegisteredSchema(1, "AVRO", '"long"').avro() == "long"
    with pytest.raises(ValueError, match="PROTOBUF schema, not Avro"):
        RegisteredSchema(2, "PROTOBUF", "syntax = 'proto3';").avro()
    with pytest.raises(ValueError, match="not valid JSON"):
        RegisteredSchema(3, "AVRO", "{").avro()


# writer schemas: what can carry updates of a relation


def check(writer: Any) -> Any:
    schema = r_schema()
    return check_writer_schema(writer, RelationCodec.from_schema(schema), schema, 42)


def test_the_relation_schema_itself_passes() -> None:
    assert check(r_schema())["name"] == "ivm.relations.R"


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda s: "string", "schema id 42 is not an Avro record"),
        (lambda s: {"type": "array", "items": "long"}, "is not an Avro record"),
        (lambda s: {**s, "fields": s["fields"][:2]}, "has no 'mult' field"),
        (lambda s: {**s, "fields": [*s["fields"][:2], {"name": "mult", "type": "string"}]}, "int or long"),
        (lambda s: {**s, "fields": s["fields"][1:]}, r"expects \['A', 'B'\]: missing \['A'\]"),
        (lambda s: {**s, "name": "S"}, "needs the same name or an alias"),
        (
            lambda s: {**s, "fields": [{"name": "A", "type": "string"}, *s["fields"][1:]]},
            "attribute 'A' is a string, relation R reads a long",
        ),
        (
            lambda s: {**s, "fields": [{"name": "A", "type": "double"}, *s["fields"][1:]]},
            "not an Avro promotion",
        ),
    ],
)
def test_writer_schemas_that_cannot_carry_the_relation(mutate: Any, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        check(mutate(copy.deepcopy(r_schema())))


def test_writer_schemas_within_the_rules_pass() -> None:
    evolved = copy.deepcopy(r_schema())
    evolved["namespace"] = "com.example"  # records match by unqualified name
    evolved["fields"] = [
        {"name": "B", "type": "long"},  # field order does not matter
        {"name": "A", "type": "int"},  # promoted
        {"name": "extra", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "mult", "type": "int"},
    ]
    check(evolved)
    aliased = copy.deepcopy(r_schema())
    aliased["name"] = "OldR"
    schema = {**r_schema(), "aliases": ["OldR"]}
    check_writer_schema(aliased, RelationCodec.from_schema(schema), schema, 1)


# resolution of the body (RelationCodec.decode with a writer schema)


def test_decode_resolves_an_evolved_writer_schema() -> None:
    codec = RelationCodec.from_schema(r_schema())
    writer = copy.deepcopy(r_schema())
    writer["fields"] = [
        {"name": "note", "type": "string", "default": ""},
        {"name": "B", "type": "int"},
        {"name": "A", "type": "long"},
        {"name": "mult", "type": "int"},
    ]
    body = avro_body(writer, {"note": "hi", "B": -3, "A": 2**40, "mult": -1})
    assert codec.decode(body, fastavro.parse_schema(writer)) == ((2**40, -3), -1)


def test_decode_reports_resolution_failures_per_message() -> None:
    codec = RelationCodec.from_schema(r_schema())
    writer = copy.deepcopy(r_schema())
    writer["fields"][0]["type"] = ["null", "long"]
    parsed = check(writer)
    assert codec.decode(avro_body(writer, {"A": 1, "B": 2, "mult": 3}), parsed) == ((1, 2), 3)
    with pytest.raises(DecodeError, match="cannot be resolved to relation R's schema"):
        codec.decode(avro_body(writer, {"A": None, "B": 2, "mult": 3}), parsed)


def test_decode_with_a_writer_schema_reports_malformed_bodies() -> None:
    codec = RelationCodec.from_schema(r_schema())
    parsed = check(r_schema())
    body = avro_body(r_schema(), {"A": 1, "B": 2, "mult": 1})
    with pytest.raises(DecodeError, match="malformed Avro"):
        codec.decode(body[:-1], parsed)
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(body + b"\x00", parsed)
    with pytest.raises(DecodeError, match="multiplicity 0"):
        codec.decode(avro_body(r_schema(), {"A": 1, "B": 2, "mult": 0}), parsed)


def test_key_schema_of() -> None:
    key = key_schema_of(r_schema())
    assert key["name"] == "RKey" and [f["name"] for f in key["fields"]] == ["A", "B"]
    fastavro.parse_schema(key)
