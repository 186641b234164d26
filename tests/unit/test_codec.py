"""Avro codecs: round trips, and every malformed input detected with a reason."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ivm.processor.codecs.avro import DecodeError, OutputCodec, RelationCodec, load_relation_codecs, result_to_json

CODECS = load_relation_codecs()


def test_relation_schemas_are_loaded_with_their_attributes() -> None:
    assert {name: c.attributes for name, c in CODECS.items()} == {
        "R": ("A", "B"),
        "S": ("B", "C"),
        "T": ("C", "A"),
    }


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(1, 2**40))
def test_round_trip(a: int, b: int, m: int) -> None:
    codec = CODECS["R"]
    for mult in (m, -m):
        key, value = codec.encode((a, b), mult)
        assert codec.decode(value) == ((a, b), mult)
        # the key is the tuple alone: the same for an insert and a delete
        assert key == codec.encode((a, b), 1)[0]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "empty message"),
        (None, "empty message"),
        (b"\x02", "malformed Avro"),  # truncated
        (CODECS["R"].encode((1, 2), 1)[1] + b"\x00", "trailing bytes"),
        (b"\x02\x04\x00", "multiplicity 0"),  # R(1, 2) with mult 0
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "malformed Avro"),  # varint too long
    ],
)
def test_malformed_inputs_are_rejected_with_a_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        CODECS["R"].decode(value)


@settings(max_examples=300)
@given(st.binary(max_size=40))
def test_random_bytes_never_escape_as_another_exception(data: bytes) -> None:
    codec = CODECS["S"]
    try:
        row, mult = codec.decode(data)
    except DecodeError:
        return
    # accepted input is a whole update (Avro also accepts over-long varints, e.g. 0x81 0x00 for 1)
    assert len(row) == 2 and all(isinstance(v, int) for v in row)
    assert mult != 0
    assert codec.decode(codec.encode(row, mult)[1]) == (row, mult)


def test_wrong_schema_is_detected_by_length() -> None:
    # a record of a 3-attribute relation read as R(A, B): trailing bytes
    value = CODECS["R"].encode((1, 2), 1)[1] + struct.pack("B", 2)
    with pytest.raises(DecodeError):
        CODECS["R"].decode(value)


def test_output_codecs_round_trip() -> None:
    result = OutputCodec("result")
    record = {
        "query": "q",
        "batch_id": 3,
        "value": result_to_json(10**40),
        "offsets": [{"topic": "R", "partition": 0, "offset": 17}],
        "applied": 5,
        "rejected": 1,
        "engine": "first_order",
        "timestamp_ms": 1,
    }
    decoded = result.decode(result.encode(record))
    assert int(decoded["value"]) == 10**40
    assert decoded["offsets"] == record["offsets"]


def test_a_nullable_attribute_round_trips() -> None:
    """A union-typed attribute (``["null", "double"]``) is decoded record by record (it crashed the codec)."""
    schema = {
        "type": "record",
        "name": "P",
        "fields": [
            {"name": "x", "type": ["null", "double"]},
            {"name": "k", "type": "long"},
            {"name": "mult", "type": "long"},
        ],
    }
    codec = RelationCodec.from_schema(schema, "points")
    values = [codec.encode((None, 3), 1)[1], codec.encode((2.5, 4), -1)[1]]
    assert codec.relation == "points" and codec.record_name == "P"
    assert codec.decode_many(values) == ([(None, 3), (2.5, 4)], [1, -1], {})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_refused_with_the_attribute(bad: float) -> None:
    """A NaN or an infinity in a double (also in a nullable one) is a dead letter naming the attribute: the
    exact sums have no value for it (issue 36), and the view would refuse it (``not_finite``) mid-batch."""
    schema = {
        "type": "record",
        "name": "O",
        "fields": [
            {"name": "k", "type": "long"},
            {"name": "price", "type": "double"},
            {"name": "q", "type": ["null", "float"]},
            {"name": "mult", "type": "long"},
        ],
    }
    codec = RelationCodec.from_schema(schema, "orders")
    assert codec.float_positions == (1, 2)
    values = [
        codec.encode((1, 2.5, None), 1)[1],
        codec.encode((2, bad, 1.5), 1)[1],
        codec.encode((3, 1.0, bad), 1)[1],
        codec.encode((4, 1e308, 0.25), -1)[1],
    ]
    rows, mults, errors = codec.decode_many(values)
    assert mults[0] == 1 and mults[3] == -1
    assert rows[0] == (1, 2.5, None) and rows[3] == (4, 1e308, 0.25) and rows[1] is None and rows[2] is None
    assert sorted(errors) == [1, 2] and "orders.price" in errors[1] and "orders.q" in errors[2]
    assert all("refused" in reason for reason in errors.values())


@pytest.mark.parametrize(("name", "dropped"), [("result", 1), ("delta", 2), ("progress", 2)])
def test_records_of_earlier_schema_versions_decode(name: str, dropped: int) -> None:
    """A record written before the trailing defaulted fields existed reads with their defaults."""
    import io

    import fastavro

    from ivm.processor.codecs.avro import load_schema, schemas_dir

    raw = load_schema(schemas_dir() / f"{name}.avsc")
    earlier = {**raw, "fields": raw["fields"][:-dropped]}
    record = {
        "query": "q", "batch_id": 3, "value": "7", "offsets": [], "applied": 1, "rejected": 0, "engine": "fivm",
        "answer": "[1]", "mult": -1, "pipeline": "p", "timestamp_ms": 5,
    }  # fmt: skip
    fields = {f["name"] for f in earlier["fields"]}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(earlier), {k: v for k, v in record.items() if k in fields})
    decoded = OutputCodec(name).decode(buf.getvalue())
    assert decoded["batch_id"] == 3
    for field in raw["fields"][-dropped:]:
        assert decoded[field["name"]] == field["default"]
