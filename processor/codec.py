"""Avro codecs for relation updates and the output topics (DESIGN §4).

A relation update is an Avro record with the relation's attributes plus a
``mult`` field (long, non-zero).  Its Kafka key is the tuple's attributes
alone, Avro-encoded, so that every update to a tuple lands in the same
partition and keeps its order.  This module handles plain Avro binary with the
schemas from ``schemas/``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
import numbers
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from ivm.processor.codecs.varint import decode_packed_rows, decode_varint_rows, kernel_built
from ivm.updates import Row


class DecodeError(ValueError):
    """An input message is not a valid update; the message is the reason."""


def schemas_dir() -> Path:
    """``$IVM_SCHEMAS`` or the shipped ``schemas/`` folder (:func:`ivm.resources.schemas_dir`)."""
    from ivm.resources import schemas_dir as shipped_schemas

    return shipped_schemas()


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
    #: the positions (in ``attributes``) of float and double attributes: a NaN or an infinity there is refused
    #: when decoded (a dead letter naming the attribute), as ``ivm.view.View`` refuses it (``not_finite``): a
    #: SUM, AVG or COVAR has no value for it, and a NaN tuple could never be deleted (NaN ≠ NaN)
    float_positions: tuple[int, ...] = ()

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
        for f in fields:
            container = _container(f["type"]) if f["name"] != "mult" else None
            if container is not None:
                raise ValueError(
                    f"schema {schema['name']!r}: attribute {f['name']!r} is an Avro {container}, which decodes to a "
                    f"{'list' if container == 'array' else 'dict'}: a relation's values are scalars (a tuple of them "
                    "is a key in the relation's state), so arrays, maps and records are not supported"
                )
        key = key_schema_of(schema)
        types = [_plain_type(f["type"]) for f in fields]
        widths = tuple(_VARINT_WIDTH.get(t, 0) if isinstance(t, str) else 0 for t in types)  # unions: per record
        floats = tuple(
            i
            for i, a in enumerate(attributes)
            if _may_be_float(_plain_type(next(f["type"] for f in fields if f["name"] == a)))
        )
        return cls(
            relation or schema["name"],
            attributes,
            fastavro.parse_schema(dict(schema)),
            fastavro.parse_schema(key),
            widths if all(widths) else None,
            schema["name"],
            floats,
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
        this relation's schema (used by the Confluent wire format, ``ivm.processor.codecs.confluent``).
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
        return self.update_of(record)

    def update_of(self, record: Mapping[str, Any]) -> tuple[Row, int]:
        """The update of a decoded Avro ``record`` (with this relation's fields); :class:`DecodeError` if
        its multiplicity is 0 or a float attribute is a NaN or an infinity."""
        mult = record["mult"]
        if mult == 0:
            raise DecodeError(f"multiplicity 0 in an update of {self.relation}: not an update")
        row = tuple(record[a] for a in self.attributes)
        for p in self.float_positions:
            x = row[p]
            if type(x) is float and not math.isfinite(x):
                raise DecodeError(
                    f"{self.relation}.{self.attributes[p]} is {x}: a NaN or an infinity has no value in a sum "
                    "(SQL's SUM, AVG and COVAR have none) and a NaN tuple could never be deleted; refused"
                )
        return row, mult

    def decode_many(
        self, values: Sequence[bytes | None], implementation: str = "auto"
    ) -> tuple[list[Row | None], list[int], dict[int, str]]:
        """Decode a micro-batch: ``(rows, mults, errors)``, with ``errors[i]`` the reason record i is not
        an update (its row is ``None``).  Same results as :meth:`decode` one by one; relations whose
        fields are all ``int``/``long`` are decoded in bulk (:func:`ivm.processor.codecs.varint.decode_varint_rows`,
        ``implementation`` its choice of decoder), the records it is unsure of one by one."""
        if self.varint_widths is None:
            return decode_each(self, values)
        index = {f["name"]: i for i, f in enumerate(self.value_schema["fields"])}
        fields = [index[a] for a in self.attributes]
        rows: list[Row | None]
        rows, mults, unsure = decode_varint_rows(values, self.varint_widths, index["mult"], fields, implementation)
        errors: dict[int, str] = {}
        for i in unsure:
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

#: the encodings of a relation topic (``[[relations]] encoding``): one update per Kafka record (the default
#: contract, any Kafka client can write it) or packed (many updates of the relation per record, :class:`PackedCodec`)
ENCODINGS = ("avro", "confluent", "avro-packed", "confluent-packed")


def is_packed(encoding: str) -> bool:
    """Whether ``encoding`` puts many updates in one Kafka record (``avro-packed``, ``confluent-packed``)."""
    return encoding.endswith("-packed")


def uses_registry(encoding: str) -> bool:
    """Whether ``encoding`` is the Confluent wire format with a registry (``confluent``, ``confluent-packed``)."""
    return encoding.split("-", 1)[0] == "confluent"


def packed_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro schema of a packed record of a relation: an array of the relation's update records."""
    return {"type": "array", "items": dict(schema)}


@dataclass
class PackedDecoded:
    """The updates inside a micro-batch of packed records, flattened in record order and, inside a
    record, in array order (the order the producer wrote them).

    Update ``j`` came from record ``source[j]`` (an index into the decoded values) at position
    ``index[j]`` inside it; ``index[j]`` is ``None`` when the whole record is not a packed record
    (malformed Avro, no updates): then ``rows[j]`` is ``None`` and ``errors[j]`` the reason, one entry
    for the record.  An update that is itself invalid (multiplicity 0, a NaN) has ``rows[j] is None``,
    ``errors[j]`` its reason and its own index: the other updates of its record are kept.
    """

    rows: list[Row | None]
    mults: list[int]
    errors: dict[int, str]
    source: list[int]
    index: list[int | None]


def only_update(items: Sequence[tuple[Row, int] | str]) -> tuple[Row, int]:
    """The one update of a packed record's ``items`` (:meth:`PackedCodec.items`); :class:`DecodeError` if it
    holds another number of updates or its one item is not an update."""
    if len(items) != 1:
        raise DecodeError(f"a packed record of {len(items)} updates, not one")
    if isinstance(items[0], str):
        raise DecodeError(items[0])
    return items[0]


class PackedCodec:
    """Encode and decode packed records of one relation (``encoding = "avro-packed"``, DESIGN §4).

    A packed record's value is the Avro binary of an array of the relation's update records
    (:func:`packed_schema`): one Kafka record carries many tuple updates of that relation, so Spark
    reads (and the processor hands over and decodes) one record per many updates.  The updates keep
    their array order; each keeps its own identity, ``(topic, partition, offset, index)``, for the
    input policy and the dead-letter topic: an invalid update inside is dead-lettered alone and the
    others are applied.  A record that is not an array of updates at all (malformed Avro, trailing
    bytes, an empty array) is one dead letter.  The record's Kafka key is free (``ivm produce`` writes
    none): the producer keeps every tuple's updates in one partition itself.

    >>> codec = PackedCodec(RelationCodec.from_schema(load_schema(schemas_dir() / "relations" / "R.avsc")))
    >>> value = codec.encode_many([((1, 2), 1), ((3, 4), -1)])
    >>> codec.items(value)
    [((1, 2), 1), ((3, 4), -1)]
    """

    packed = True

    def __init__(self, codec: RelationCodec, schema: Mapping[str, Any] | None = None) -> None:
        self.codec = codec
        item = schema if schema is not None else codec.value_schema
        self.array_schema = fastavro.parse_schema(packed_schema(item))

    @property
    def relation(self) -> str:
        return self.codec.relation

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.codec.attributes

    def encode_many(self, updates: Sequence[tuple[Row, int]]) -> bytes:
        """The value of a packed record holding ``updates`` (``(row, mult)`` pairs, at least one)."""
        if not updates:
            raise ValueError(f"a packed record of {self.relation} needs at least one update")
        records = []
        for row, mult in updates:
            if len(row) != len(self.attributes):
                raise ValueError(f"{self.relation} has attributes {self.attributes}, got {row!r}")
            record = dict(zip(self.attributes, row, strict=True))
            record["mult"] = mult
            records.append(record)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.array_schema, records)
        return buf.getvalue()

    def encode(self, row: Row, mult: int) -> tuple[bytes, bytes]:
        """The key and value of a packed record holding the one update ``{row ↦ mult}``."""
        return self.codec.encode(row, mult)[0], self.encode_many([(row, mult)])

    def items(self, value: bytes | None, writer_schema: Any = None) -> list[tuple[Row, int] | str]:
        """The updates in the packed record ``value``, in array order: each ``(row, mult)``, or the
        reason it is not an update (the pipeline's dead letter names its index).  :class:`DecodeError`
        if ``value`` is not a packed record at all.
        ``writer_schema``: the (parsed) array schema ``value`` was written with, if not this one."""
        what = f"a packed record of relation {self.relation} (an Avro array of its updates)"
        if not value:
            raise DecodeError(f"empty message: not {what}")
        buf = io.BytesIO(value)
        try:
            if writer_schema is None:
                records = fastavro.schemaless_reader(buf, self.array_schema, None)
            else:
                records = fastavro.schemaless_reader(buf, writer_schema, self.array_schema)
        except SchemaResolutionError as err:
            raise DecodeError(f"the writer schema cannot be resolved to {what}: {_short(err)}") from None
        except Exception as err:  # fastavro raises many types on bad bytes
            raise DecodeError(f"malformed Avro: not {what}: {type(err).__name__}: {err}") from None
        if buf.tell() != len(value):
            raise DecodeError(f"malformed Avro: not {what}: {len(value) - buf.tell()} trailing bytes")
        if not records:
            raise DecodeError(f"a packed record of relation {self.relation} with no updates")
        out: list[tuple[Row, int] | str] = []
        update_of = self.codec.update_of
        for record in records:
            try:
                out.append(update_of(record))
            except DecodeError as err:
                out.append(str(err))
        return out

    def decode(self, value: bytes | None) -> tuple[Row, int]:
        """The update of a packed record holding exactly one (``ivm subscribe``'s one-line form)."""
        return only_update(self.items(value))

    def decode_many(self, values: Sequence[bytes | None], implementation: str = "auto") -> PackedDecoded:
        """Decode a micro-batch of packed records into its updates (:class:`PackedDecoded`).

        Relations whose fields are all ``int``/``long`` are decoded in one compiled pass
        (``ivm.processor.codecs._varint_kernel.decode_packed``) when the kernel is built (``implementation``:
        ``"auto"``; ``"reader"`` always reads with fastavro), the records it is unsure of by fastavro;
        the results are the same."""
        codec = self.codec
        if codec.varint_widths is None or implementation == "reader" or not kernel_built():
            return decode_packed(self, values)
        index_of = {f["name"]: i for i, f in enumerate(codec.value_schema["fields"])}
        listed = values if type(values) is list else list(values)
        rows, mults, counts = decode_packed_rows(
            listed, codec.varint_widths, index_of["mult"], [index_of[a] for a in codec.attributes]
        )
        if -1 in counts:  # some records need the full reader: splice its results in
            out = PackedDecoded([], [], {}, [], [])
            at = 0
            for r, n in enumerate(counts):
                if n < 0:
                    one = decode_packed(self, [listed[r]])
                    for j, reason in one.errors.items():
                        out.errors[len(out.rows) + j] = reason
                    out.rows += one.rows
                    out.mults += one.mults
                    out.source += [r] * len(one.rows)
                    out.index += one.index
                    continue
                out.rows += rows[at : at + n]
                out.mults += mults[at : at + n]
                out.source += [r] * n
                out.index += range(n)
                at += n
        else:
            out = PackedDecoded(
                rows,  # type: ignore[arg-type]
                mults,
                {},
                list(chain.from_iterable(map(repeat, range(len(counts)), counts))),
                list(chain.from_iterable(map(range, counts))),
            )
        if 0 in out.mults:
            for j, m in enumerate(out.mults):
                if m == 0 and j not in out.errors:
                    out.rows[j] = None
                    out.errors[j] = f"multiplicity 0 in an update of {codec.relation}: not an update"
        return out


def decode_packed(codec: Any, values: Sequence[bytes | None]) -> PackedDecoded:
    """:class:`PackedDecoded` of ``values`` for any codec with ``items`` (plain Avro or the wire format)."""
    out = PackedDecoded([], [], {}, [], [])
    rows, mults, errors, source, index = out.rows, out.mults, out.errors, out.source, out.index
    for r, value in enumerate(values):
        try:
            items = codec.items(value)
        except DecodeError as err:
            errors[len(rows)] = str(err)
            rows.append(None)
            mults.append(0)
            source.append(r)
            index.append(None)
            continue
        for i, item in enumerate(items):
            if isinstance(item, str):
                errors[len(rows)] = item
                rows.append(None)
                mults.append(0)
            else:
                rows.append(item[0])
                mults.append(item[1])
            source.append(r)
            index.append(i)
    return out


def _container(avro_type: Any) -> str | None:
    """``"array"``, ``"map"`` or ``"record"`` if a value of ``avro_type`` may decode to a list or a dict
    (a union is one if any branch is), else ``None``."""
    if isinstance(avro_type, list):
        return next((c for c in map(_container, avro_type) if c is not None), None)
    if isinstance(avro_type, dict):
        kind = avro_type.get("type")
        return kind if kind in ("array", "map", "record") else _container(kind) if isinstance(kind, list) else None
    return None


def _may_be_float(avro_type: Any) -> bool:
    """Whether a field of this (plain) Avro type can decode to a Python float: float, double, or a union
    with one of them."""
    if isinstance(avro_type, list):
        return any(_may_be_float(_plain_type(t)) for t in avro_type)
    return avro_type in ("float", "double")


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
    """Encode and decode the records of an output topic (result, delta, model, progress, dead letter).

    The schemas grow only by fields appended with a default (``group`` of a result, ``before`` and
    ``after`` of a delta, ``origin`` of a progress record), so a record an earlier version wrote is
    the current schema without some trailing fields: :meth:`decode` reads it with those fields
    dropped from the writer schema and fills in their defaults (Avro's schema resolution).
    """

    def __init__(self, name: str) -> None:
        raw = load_schema(schemas_dir() / f"{name}.avsc")
        self.schema = fastavro.parse_schema(raw)
        fields = raw["fields"]
        self._earlier: list[Any] = []  # writer schemas of earlier versions: trailing defaulted fields dropped
        while fields and "default" in fields[-1]:
            fields = fields[:-1]
            self._earlier.append(fastavro.parse_schema({**raw, "fields": fields}))

    def encode(self, record: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.schema, dict(record))
        return buf.getvalue()

    def decode(self, value: bytes) -> dict[str, Any]:
        return self.decode_versioned(value)[0]

    def decode_versioned(self, value: bytes) -> tuple[dict[str, Any], int]:
        """The record, and how many trailing fields its writer lacked (0: the current schema)."""
        try:
            return fastavro.schemaless_reader(io.BytesIO(value), self.schema, None), 0
        except EOFError:
            for missing, writer in enumerate(self._earlier, start=1):
                buf = io.BytesIO(value)
                try:
                    record = fastavro.schemaless_reader(buf, writer, self.schema)
                except EOFError:
                    continue
                if buf.tell() == len(value):
                    return record, missing
            raise


def load_relation_codecs(directory: Path | None = None) -> dict[str, RelationCodec]:
    """Every relation schema of ``schemas/relations/``, by relation name."""
    directory = directory or schemas_dir() / "relations"
    codecs = {}
    for path in sorted(Path(directory).glob("*.avsc")):
        codec = RelationCodec.from_schema(load_schema(path))
        codecs[codec.relation] = codec
    return codecs


def result_to_json(value: Any, query: Any = None) -> str:
    """The JSON text of a result, the ``value`` of ``<query>.result`` (the forms: ``docs/results.md``).

    Exact integers stay exact (any size); a group-by result is an object keyed by
    the JSON text of each group's tuple; a ring element (COVAR's covariance
    triple, the categorical covariance, a relation) is an object, never its
    Python ``repr``.  ``query``, the view's parsed query (``view.query``) or the
    sequence of the COVAR variable names, names the variables of a covariance;
    without it they are named by their positions ``"0"``, ``"1"``, ...  Non-finite
    floats become ``null`` (JSON has no NaN).

    >>> result_to_json(10**30)
    '1000000000000000000000000000000'
    >>> result_to_json({(1, "x"): 2})
    '{"[1, \\\\"x\\\\"]": 2}'
    >>> from ivm.rings import CovarianceRing
    >>> cov = json.loads(result_to_json(CovarianceRing(("x", "y")).lift_tuple(("x", "y"), (2, 3)), ["x", "y"]))
    >>> cov["count"], cov["sums"], cov["products"]
    (1, {'x': 2, 'y': 3}, {'x': {'x': 4, 'y': 6}, 'y': {'x': 6, 'y': 9}})
    """
    return json.dumps(_plain(value, covar_variables(query)), allow_nan=False)


def covar_variables(query: Any) -> tuple[str, ...] | None:
    """The names of a covariance result's variables, in the ring's order, if ``query`` tells them.

    ``query`` is a parsed query (its ``COVAR(...)`` variables, or all its variables
    sorted for a bare ``COVAR()``, as F-IVM orders them), a sequence of names, or ``None``.
    """
    if query is None:
        return None
    if isinstance(query, Sequence) and not isinstance(query, str):
        return tuple(str(v) for v in query)
    aggregate = getattr(query, "aggregate", None)
    if aggregate is None or aggregate.kind != "covariance":
        return None
    return tuple(aggregate.variables) or tuple(sorted(query.variables))


def group_key(key: Any) -> str:
    """The JSON object key of a group-by result's group: the JSON text of its tuple (``'[1, "x"]'``)."""
    if isinstance(key, tuple):
        return json.dumps([json_value(k) for k in key], allow_nan=False)
    return key if isinstance(key, str) else json.dumps(json_value(key), allow_nan=False)


def json_value(value: Any) -> Any:
    """``value`` as plain JSON data: the one mapping of Avro-decoded and engine values to JSON.

    Integers stay exact; other real numbers become floats (non-finite ones ``null``);
    datetimes ISO-8601 strings, in UTC with a ``Z`` and milliseconds (microseconds
    when they have some) for aware ones; dates and times ISO-8601; bytes base64
    (RFC 4648, padded); decimals and UUIDs strings (exact); lists, tuples and
    numpy arrays lists; mappings objects (non-string keys as their JSON text).
    Anything else is a :class:`TypeError`, never a ``repr`` string.

    >>> import datetime
    >>> json_value(datetime.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=datetime.timezone.utc))
    '2024-05-01T12:00:00.250Z'
    >>> json_value(b"\\x00\\xff"), json_value(float("nan")), json_value((1, 2.5))
    ('AP8=', None, [1, 2.5])
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime.datetime):
        timespec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
        if value.tzinfo is None:
            return value.isoformat(timespec=timespec)
        return value.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(timespec=timespec) + "Z"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, numbers.Integral):  # numpy integers
        return int(value)
    if isinstance(value, numbers.Real):  # fractions, numpy floats
        return json_value(float(value))
    if isinstance(value, Mapping):
        return {group_key(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return json_value(value.tolist())
    raise TypeError(f"no JSON form for a {type(value).__name__}: {value!r:.200}")


def _plain(value: Any, variables: Sequence[str] | None = None) -> Any:
    """The JSON data of a result or ring element (``docs/results.md``); ``variables`` names COVAR's."""
    from ivm.rings import Covariance, GeneralizedCovariance, Pair, Relation
    from ivm.rings.matrix import Matrix

    if value is None or isinstance(value, bool | int | str | float):
        return json_value(value)
    if isinstance(value, Covariance):
        return _covariance_json(value, variables)
    if isinstance(value, GeneralizedCovariance):
        return _generalized_covariance_json(value, variables)
    if isinstance(value, Relation):
        return {
            "type": "relation",
            "variables": list(value.schema),
            "tuples": [[json_value(row), _plain(mult)] for row, mult in value.data.items()],
        }
    if isinstance(value, Pair):
        return [_plain(value.first, variables), _plain(value.second, variables)]
    if isinstance(value, Matrix):
        return json_value(value.array)
    if isinstance(value, Mapping):  # group-by: group tuple -> aggregate value
        return {group_key(k): _plain(v, variables) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, variables) for v in value]
    return json_value(value)


def _variable_names(variables: Sequence[str] | None, m: int) -> list[str]:
    """``variables`` if they name the ``m`` variables uniquely, else the positions ``"0"``, ``"1"``, ..."""
    if variables is not None and len(variables) == m and len(set(variables)) == m:
        return list(variables)
    return [str(i) for i in range(m)]


def _covariance_json(cov: Any, variables: Sequence[str] | None) -> dict[str, Any]:
    """A :class:`~ivm.rings.covariance.Covariance` ``(c, s, Q)``: count, sums and the full symmetric products."""
    names = _variable_names(variables, len(cov.s))
    s, q = json_value(cov.s), json_value(cov.Q)
    return {
        "type": "covariance",
        "variables": names,
        "count": json_value(cov.c),
        "sums": dict(zip(names, s, strict=True)),
        "products": {a: dict(zip(names, row, strict=True)) for a, row in zip(names, q, strict=True)},
    }


def _generalized_covariance_json(cov: Any, variables: Sequence[str] | None) -> dict[str, Any]:
    """A :class:`~ivm.rings.generalized_covariance.GeneralizedCovariance`: the covariance with categorical
    variables kept as group-by keys.  An entry touching a categorical variable is a list of
    ``[[its categorical values, in the order of the entry's variables], number]``; a continuous one a number."""
    used = set(cov.s) | {i for ij in cov.Q for i in ij} | set(cov.cat)
    m = len(variables) if variables is not None else (max(used) + 1 if used else 0)
    names = _variable_names(variables, m)

    def entry(values: Mapping[tuple[Any, ...], Any], categorical: bool, swap: bool = False) -> Any:
        if not categorical:
            return _plain(values.get((), 0))
        return [[json_value(key[::-1] if swap else key), _plain(v)] for key, v in values.items()]

    return {
        "type": "categorical_covariance",
        "variables": names,
        "categorical": [names[j] for j in sorted(cov.cat) if j < m],
        "count": _plain(cov.c),
        "sums": {names[j]: entry(cov.s.get(j, {}), j in cov.cat) for j in range(m)},
        "products": {
            names[i]: {names[j]: entry(cov.entry(i, j), i in cov.cat or j in cov.cat, swap=i > j) for j in range(m)}
            for i in range(m)
        },
    }
