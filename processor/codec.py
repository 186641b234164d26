"""Avro codecs for relation updates and the output topics (DESIGN §4).

A relation update is an Avro record with the relation's attributes plus a
``mult`` field (long, non-zero).  Its Kafka key is the tuple's attributes
alone, Avro-encoded, so that every update to a tuple lands in the same
partition and keeps its order.  This module handles plain Avro binary with the
schemas from ``schemas/``.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from ivm.updates import Row
from processor.varint import decode_varint_records


class DecodeError(ValueError):
    """An input message is not a valid update; the message is the reason."""


def schemas_dir() -> Path:
    """``$IVM_SCHEMAS`` or the ``schemas/`` folder of this checkout."""
    env = os.environ.get("IVM_SCHEMAS")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "schemas"


def load_schema(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


@dataclass(frozen=True)
class RelationCodec:
    """Encode and decode the updates of one relation.

    >>> codec = RelationCodec.from_schema(load_schema(schemas_dir() / "relations" / "R.avsc"))
    >>> key, value = codec.encode((1, 2), -1)
    >>> codec.decode(value)
    ((1, 2), -1)
    """

    relation: str  # the relation's name in the configuration and the queries
    attributes: tuple[str, ...]
    value_schema: Any
    key_schema: Any
    varint_widths: tuple[int, ...] | None = None  # every field int (5) or long (10): the bulk decoder applies
    record_name: str = ""  # the Avro record's own name (schema resolution matches writers by it)

    @classmethod
    def from_schema(cls, schema: Mapping[str, Any], relation: str | None = None) -> RelationCodec:
        """The codec of ``relation`` (default: the record's name) whose updates are ``schema`` records.

        The relation is named by the configuration, not by the record: a relation ``edges`` may be
        carried by records named ``Edge``; its updates are decoded by the schema's fields and
        applied to ``edges``.
        """
        fields = schema.get("fields", [])
        names = [f["name"] for f in fields]
        if schema.get("type") != "record" or "mult" not in names:
            raise ValueError(f"schema {schema.get('name')!r} is not a record with a 'mult' field")
        mult = next(f for f in fields if f["name"] == "mult")
        if _plain_type(mult["type"]) not in ("long", "int"):
            raise ValueError(f"schema {schema['name']!r}: 'mult' must be an int or long")
        attributes = tuple(n for n in names if n != "mult")
        key = key_schema_of(schema)
        widths = tuple(_VARINT_WIDTH.get(_plain_type(f["type"]), 0) for f in fields)
        return cls(
            relation or schema["name"],
            attributes,
            fastavro.parse_schema(dict(schema)),
            fastavro.parse_schema(key),
            widths if all(widths) else None,
            schema["name"],
        )

    def encode(self, row: Row, mult: int) -> tuple[bytes, bytes]:
        """The Kafka key and value of the update ``{row ↦ mult}``."""
        if len(row) != len(self.attributes):
            raise ValueError(f"{self.relation} has attributes {self.attributes}, got {row!r}")
        record = dict(zip(self.attributes, row, strict=True))
        key = io.BytesIO()
        fastavro.schemaless_writer(key, self.key_schema, record)
        record["mult"] = mult
        value = io.BytesIO()
        fastavro.schemaless_writer(value, self.value_schema, record)
        return key.getvalue(), value.getvalue()

    def decode(self, value: bytes | None, writer_schema: Any = None) -> tuple[Row, int]:
        """The update in ``value``; :class:`DecodeError` with the reason if it is not one.

        ``writer_schema`` (a parsed schema) is the schema ``value`` was written
        with, if not this relation's own; Avro's schema resolution maps it to
        this relation's schema (used by the Confluent wire format, ``processor.wire``).
        """
        if not value:
            raise DecodeError(f"empty message: not an Avro {self.relation} update")
        buf = io.BytesIO(value)
        try:
            if writer_schema is None:
                record = fastavro.schemaless_reader(buf, self.value_schema, None)
            else:
                record = fastavro.schemaless_reader(buf, writer_schema, self.value_schema)
        except SchemaResolutionError as err:
            raise DecodeError(
                f"the writer schema cannot be resolved to relation {self.relation}'s schema: {_short(err)}"
            ) from None
        except Exception as err:  # fastavro raises many types on bad bytes
            raise DecodeError(f"malformed Avro for relation {self.relation}: {type(err).__name__}: {err}") from None
        if buf.tell() != len(value):
            raise DecodeError(f"malformed Avro for relation {self.relation}: {len(value) - buf.tell()} trailing bytes")
        mult = record["mult"]
        if mult == 0:
            raise DecodeError(f"multiplicity 0 in an update of {self.relation}: not an update")
        return tuple(record[a] for a in self.attributes), mult

    def decode_many(self, values: Sequence[bytes | None]) -> tuple[list[Row | None], list[int], dict[int, str]]:
        """Decode a micro-batch: ``(rows, mults, errors)``, with ``errors[i]`` the reason record i is not
        an update (its row is ``None``).  Same results as :meth:`decode` one by one; relations whose
        fields are all ``int``/``long`` are decoded in bulk (:mod:`processor.varint`)."""
        if self.varint_widths is None:
            return decode_each(self, values)
        columns, unsure = decode_varint_records(values, self.varint_widths)
        index = {f["name"]: i for i, f in enumerate(self.value_schema["fields"])}
        mults = columns[index["mult"]]
        rows: list[Row | None] = list(zip(*(columns[index[a]] for a in self.attributes), strict=True))
        errors: dict[int, str] = {}
        for i in unsure.tolist():
            try:
                rows[i], mults[i] = self.decode(values[i])
            except DecodeError as err:
                rows[i] = None
                errors[i] = str(err)
        if 0 in mults:
            for i, m in enumerate(mults):
                if m == 0 and i not in errors:
                    rows[i] = None
                    errors[i] = f"multiplicity 0 in an update of {self.relation}: not an update"
        return rows, mults, errors


def decode_each(codec: Any, values: Sequence[bytes | None]) -> tuple[list[Row | None], list[int], dict[int, str]]:
    """:meth:`RelationCodec.decode_many` for any codec with a ``decode``: one record at a time."""
    rows: list[Row | None] = []
    mults: list[int] = []
    errors: dict[int, str] = {}
    for i, value in enumerate(values):
        try:
            row, mult = codec.decode(value)
        except DecodeError as err:
            row, mult = None, 0
            errors[i] = str(err)
        rows.append(row)
        mults.append(mult)
    return rows, mults, errors


_VARINT_WIDTH = {"int": 5, "long": 10}


def _plain_type(avro_type: Any) -> Any:
    """``"long"`` for ``"long"`` and ``{"type": "long"}`` (no logical type); anything else as is."""
    if isinstance(avro_type, dict) and set(avro_type) <= {"type", "doc"}:
        return avro_type["type"]
    return avro_type


def key_schema_of(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Kafka key schema of a relation's value schema: the record without ``mult``."""
    return {
        "type": "record",
        "name": f"{schema['name']}Key",
        "namespace": schema.get("namespace", "ivm.relations"),
        "fields": [f for f in schema.get("fields", []) if f["name"] != "mult"],
    }


def _short(err: Exception, limit: int = 300) -> str:
    text = str(err)
    return text if len(text) <= limit else text[:limit] + "..."


class OutputCodec:
    """Encode the records of an output topic (result, delta, dead letter)."""

    def __init__(self, name: str) -> None:
        self.schema = fastavro.parse_schema(load_schema(schemas_dir() / f"{name}.avsc"))

    def encode(self, record: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.schema, dict(record))
        return buf.getvalue()

    def decode(self, value: bytes) -> dict[str, Any]:
        return fastavro.schemaless_reader(io.BytesIO(value), self.schema, None)


def load_relation_codecs(directory: Path | None = None) -> dict[str, RelationCodec]:
    """Every relation schema of ``schemas/relations/``, by relation name."""
    directory = directory or schemas_dir() / "relations"
    codecs = {}
    for path in sorted(Path(directory).glob("*.avsc")):
        codec = RelationCodec.from_schema(load_schema(path))
        codecs[codec.relation] = codec
    return codecs


def result_to_json(value: Any) -> str:
    """The JSON text of a result: exact integers of any size, group-by dicts as objects.

    >>> result_to_json(10**30)
    '1000000000000000000000000000000'
    >>> result_to_json({(1, "x"): 2})
    '{"[1, \\\\"x\\\\"]": 2}'
    """
    if isinstance(value, dict):
        return json.dumps(
            {json.dumps(list(k)) if isinstance(k, tuple) else str(k): _plain(v) for k, v in value.items()}
        )
    return json.dumps(_plain(value))


def _plain(value: Any) -> Any:
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)
