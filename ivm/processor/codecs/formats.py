"""Keyed input formats of a relation topic: upsert (compacted) topics and Debezium change events.

A relation topic carries, per ``[[relations]] format``:

- ``"updates"`` (the default): tuple updates with a multiplicity (``ivm.processor.codecs.avro``);
- ``"upsert"``: the current row per key, as a service writes a compacted topic.  The value is the
  row (the relation's attributes); the Kafka record key holds the key attributes (``key = [...]``);
  a tombstone (null value) deletes the key's row;
- ``"debezium"``: Debezium's change events (the envelope ``before``, ``after``, ``op``, ``source``,
  ``ts_ms`` as its JSON converter, with or without the ``schema``/``payload`` wrapper, or its Avro
  converter through the schema registry writes them), the key the table's primary key.

Both keyed formats make the relation a *keyed table*: at most one row per key, each with
multiplicity 1.  A record is turned into the updates ``-old +new`` where ``old`` is the row the
relation holds for the record's key (:class:`KeyIndex`, derived from the relation's contents,
``ivm.processor.state.relations``) and ``new`` the record's row:

===============================  ===========================================================
record                           updates
===============================  ===========================================================
upsert row r for key k           ``-old(k) +r`` (nothing if ``old(k) == r``; ``+r`` if k absent)
upsert tombstone for key k       ``-old(k)`` (nothing if k is absent: a no-op, not an error)
Debezium ``op`` c, r, u          as an upsert of ``after``
Debezium ``op`` d                as a tombstone of the key (``before``'s, else the record key's)
Debezium tombstone               as a tombstone of the record key (a no-op after its ``d``)
===============================  ===========================================================

Why the stored row, not Debezium's ``before``: ``before`` is absent for updates under Postgres's
``REPLICA IDENTITY DEFAULT`` (and partial for deletes), and Debezium delivers at least once (a
connector restart re-sends events, a snapshot re-sends ``op = r`` rows): the stored row is the
one the views hold, so a re-sent event is a no-op instead of a second ``-before``.  The same rule
makes a tombstone for an absent key a no-op (Kafka's compaction keeps only the tombstone of a
deleted key, and a consumer reading a compacted topic must accept it); it is counted as applied.

Guarantees.  The records of one input partition are converted in offset order, each against the
rows the earlier ones left (several records of a key in one micro-batch apply in order).  The
index is derived from the relation's contents, which are part of the pipeline's state: state and
input positions are committed together (snapshot + replay of committed input, DESIGN §5), so
after a restart every key's old row is the one its last applied record left — a record whose
old row is unknown cannot occur.  Records of one key must share a partition (Kafka's default
partitioner on the record key does that), which is why the record key must carry the key.

Refused, each a dead letter with its reason (never silently dropped): a record that does not
decode; a row missing one of the relation's attributes, with an attribute it does not have, or with
a value of another type (for Debezium: "schema change in the source of relation R: ..." naming the
field); a non-tombstone without a record key or whose record key differs from its row's key
attributes; Debezium ``op`` values other than c, r, u, d (``t`` truncate, ``m`` message).

Cost: one decode, one hash lookup and at most two updates per record, O(1) expected.  The index
holds one entry per key (the row tuples are shared with the contents).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro

from ivm.processor.codecs.avro import DecodeError, _plain_type
from ivm.updates import Row

#: ``[[relations]] format``: tuple updates with a multiplicity, or a keyed format
FORMATS = ("updates", "upsert", "debezium")
KEYED_FORMATS = ("upsert", "debezium")
#: the value encodings of each keyed format (``[[relations]] encoding``)
FORMAT_ENCODINGS = {"upsert": ("avro", "confluent", "json"), "debezium": ("json", "confluent")}
#: Debezium's ``op`` values this processor applies: create, read (snapshot), update, delete
DEBEZIUM_OPS = ("c", "r", "u", "d")

Change = tuple[Row, Row | None]  # (key, new row or None: delete the key)


def with_mult(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A keyed relation's row schema as the relation's update schema (the row plus a long ``mult``):
    what the rest of the processor (views, fingerprints, group keys) reads.  A ``mult`` given is kept."""
    out = dict(schema)
    fields = list(out.get("fields", []))
    if all(f.get("name") != "mult" for f in fields):
        fields.append({"name": "mult", "type": "long"})
    out["fields"] = fields
    return out


def row_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro record of a keyed relation's rows: its schema without ``mult``."""
    return {**schema, "fields": [f for f in schema.get("fields", []) if f["name"] != "mult"]}


def key_schema(schema: Mapping[str, Any], key: Sequence[str]) -> dict[str, Any]:
    """The Avro record of a keyed relation's record keys: the key attributes, in ``key``'s order."""
    by_name = {f["name"]: f for f in schema.get("fields", [])}
    return {
        "type": "record",
        "name": f"{schema['name']}Key",
        "namespace": schema.get("namespace", "ivm.relations"),
        "fields": [by_name[a] for a in key],
    }


def debezium_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro envelope Debezium's Avro converter writes for a table whose rows are ``schema``'s: ``before``
    and ``after`` (the ``Value`` record or null), ``source``, ``op``, ``ts_ms`` (``ivm produce`` writes it)."""
    name = schema["name"]
    value = {**row_schema(schema), "name": "Value", "namespace": f"ivm.debezium.{name}"}
    value.pop("doc", None)
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector",
        "fields": [
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "table", "type": ["null", "string"], "default": None},
            {"name": "snapshot", "type": ["null", "string"], "default": None},
            {"name": "ts_ms", "type": "long"},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": f"ivm.debezium.{name}",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", f"ivm.debezium.{name}.Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


_INTEGRAL = ("int", "long")
_REAL = ("float", "double")


@dataclass(frozen=True)
class RowReader:
    """Reads a keyed relation's rows (and keys) out of decoded records (dicts), checking their fields.

    ``types`` are the attributes' Avro types.  A row must have exactly the relation's attributes,
    each of its type (an int for a double is taken as a float; JSON has one number type); anything
    else raises :class:`DecodeError` naming the field.  ``what`` names the cause in the reasons
    (Debezium: a schema change in the source table)."""

    relation: str
    attributes: tuple[str, ...]
    types: tuple[Any, ...]
    what: str = "row of relation"

    @classmethod
    def of(cls, relation: str, schema: Mapping[str, Any], what: str = "row of relation") -> RowReader:
        fields = [f for f in schema["fields"] if f["name"] != "mult"]
        return cls(relation, tuple(f["name"] for f in fields), tuple(f["type"] for f in fields), what)

    def row(self, record: Any, names: Sequence[str] | None = None) -> Row:
        """The row of ``record`` (a mapping), its fields ``names`` (default: all attributes) in order."""
        names = self.attributes if names is None else names
        if not isinstance(record, Mapping):
            raise DecodeError(f"{self.what} {self.relation}: expected an object, got {_kind(record)}")
        if len(record) != len(names) or any(n not in record for n in names):
            extra = sorted(str(n) for n in record if n not in names)
            missing = [n for n in names if n not in record]
            parts = [f"field {n!r} is not an attribute of relation {self.relation}" for n in extra]
            parts += [f"field {n!r} is missing" for n in missing]
            raise DecodeError(f"{self.what} {self.relation}: " + "; ".join(parts) + f" (attributes: {list(names)})")
        return tuple(self._value(n, record[n]) for n in names)

    def _value(self, name: str, value: Any) -> Any:
        avro = _plain_type(self.types[self.attributes.index(name)])
        branches = avro if isinstance(avro, list) else [avro]
        if value is None:
            if "null" in branches:
                return None
            raise DecodeError(
                f"{self.what} {self.relation}: field {name!r} is null, its type {json.dumps(avro)} is not nullable"
            )
        for branch in branches:
            kind = _plain_type(branch)
            if kind in _INTEGRAL and type(value) is int:
                bits = 31 if kind == "int" else 63
                if -(2**bits) <= value < 2**bits:
                    return value
                raise DecodeError(
                    f"{self.what} {self.relation}: field {name!r} is {value}, out of range of an Avro {kind}"
                )
            if kind in _REAL and type(value) in (int, float):
                x = float(value)
                if not math.isfinite(x):
                    raise DecodeError(
                        f"{self.what} {self.relation}: field {name!r} is {x}: a NaN or an infinity has no value in "
                        "a sum and a NaN tuple could never be deleted; refused"
                    )
                return x
            if (
                (kind == "string" and type(value) is str)
                or (kind == "boolean" and type(value) is bool)
                or (kind == "bytes" and type(value) is bytes)
            ):
                return value
            checked = isinstance(kind, str) and kind in (*_INTEGRAL, *_REAL, "string", "boolean", "bytes", "null")
            if not checked and not isinstance(value, (dict, list)):  # logical and named types: as decoded
                return value
        raise DecodeError(
            f"{self.what} {self.relation}: field {name!r} is {_kind(value)} {_show(value)}, "
            f"its type is {json.dumps(avro)}"
        )


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", bytes: "bytes"}.get(type(value), type(value).__name__)  # fmt: skip


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def unwrap(document: Any) -> Any:
    """A JSON converter's message without its ``{"schema": ..., "payload": ...}`` wrapper (``schemas.enable``)."""
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return document["payload"]
    return document


def _json(data: bytes, what: str) -> Any:
    try:
        return unwrap(json.loads(data))
    except (UnicodeDecodeError, ValueError) as err:
        raise DecodeError(f"malformed JSON {what}: {err}") from None


class KeyedCodec:
    """Decodes (and, for ``ivm produce``, encodes) one keyed relation topic: records to :data:`Change`\\ s.

    ``schema`` is the relation's schema (:func:`with_mult`'s), ``key`` its key attributes,
    ``fmt`` ``"upsert"`` or ``"debezium"``, ``encoding`` one of :data:`FORMAT_ENCODINGS`'s;
    ``registry`` (a ``ivm.processor.codecs.confluent.RegistryClient``) for ``"confluent"``.  Picklable (Spark ships
    it to the executors).  ``keyed = True`` is how the pipeline tells it from an update codec.
    """

    keyed = True
    packed = False

    def __init__(
        self,
        schema: Mapping[str, Any],
        key: Sequence[str],
        fmt: str,
        encoding: str,
        relation: str | None = None,
        topic: str | None = None,
        registry: Any = None,
        register: bool = True,
    ) -> None:
        if fmt not in KEYED_FORMATS:
            raise ValueError(f"format must be one of {KEYED_FORMATS}, got {fmt!r}")
        if encoding not in FORMAT_ENCODINGS[fmt]:
            raise ValueError(f"format {fmt!r} is read in encodings {FORMAT_ENCODINGS[fmt]}, got {encoding!r}")
        if encoding == "confluent" and registry is None:
            raise ValueError("the confluent encoding needs a schema registry client")
        self.schema = with_mult(schema)
        self.relation = relation or self.schema["name"]
        self.topic = topic or self.relation
        self.format = fmt
        self.encoding = encoding
        what = "schema change in the source of relation" if fmt == "debezium" else "row of relation"
        self.reader = RowReader.of(self.relation, self.schema, what)
        self.attributes = self.reader.attributes
        unknown = [a for a in key if a not in self.attributes]
        if not key or unknown or len(set(key)) != len(key):
            raise ValueError(
                f"relation {self.relation}: key {list(key)} must name distinct attributes of {list(self.attributes)}"
            )
        self.key = tuple(key)
        self.key_positions = tuple(self.attributes.index(a) for a in key)
        self.key_reader = RowReader(self.relation, self.key, tuple(self.reader.types[p] for p in self.key_positions),
                                    "record key of relation")  # fmt: skip
        self.row_avro = fastavro.parse_schema(row_schema(self.schema))
        self.key_avro = fastavro.parse_schema(key_schema(self.schema, self.key))
        self.envelope_avro = fastavro.parse_schema(debezium_schema(self.schema))
        self.registry = registry
        self.registers = register
        self._writers: dict[int, Any] = {}
        self._ids: tuple[int, int] | None = None
        from ivm.processor.codecs.avro import RelationCodec

        self.codec = RelationCodec.from_schema(self.schema, self.relation)  # the rows' types (ivm produce's Target)
        self.op = "c"  # the op ivm produce writes a Debezium row with (c, r or u)
        self.with_schema = False  # ivm produce: Debezium JSON with the schema/payload wrapper

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_writers": {}}

    # ------------------------------------------------------------------ decoding

    def key_of(self, row: Row) -> Row:
        """The key attributes' values of ``row``."""
        return tuple(row[p] for p in self.key_positions)

    def decode_changes(
        self, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> tuple[list[Change | None], dict[int, str]]:
        """Each record's :data:`Change` (``None`` where it is refused) and ``errors[i]``, the reason record ``i``
        is refused.  A registry that cannot be reached raises (the batch fails and is retried)."""
        changes: list[Change | None] = []
        errors: dict[int, str] = {}
        decode = self._upsert if self.format == "upsert" else self._debezium
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            try:
                changes.append(decode(key, value))
            except DecodeError as err:
                changes.append(None)
                errors[i] = str(err)
        return changes, errors

    def _record_key(self, key: bytes | None) -> Row:
        if key is None:
            raise DecodeError(
                f"record without a key in keyed relation {self.relation}: its key attributes {list(self.key)} "
                "go in the record key (records of one key must share a partition)"
            )
        return self.key_reader.row(self._decode(key, self.key_avro, "record key"), self.key)

    def _checked_key(self, key: bytes | None, row: Row) -> Row:
        """``row``'s key, which the record key must hold too."""
        mine = self.key_of(row)
        theirs = self._record_key(key)
        if theirs != mine:
            raise DecodeError(
                f"record key {dict(zip(self.key, theirs, strict=True))} of relation {self.relation} differs from its "
                f"row's key attributes {dict(zip(self.key, mine, strict=True))}"
            )
        return mine

    def _upsert(self, key: bytes | None, value: bytes | None) -> Change:
        if value is None:  # a tombstone
            return self._record_key(key), None
        row = self.reader.row(self._decode(value, self.row_avro, "row"))
        return self._checked_key(key, row), row

    def _debezium(self, key: bytes | None, value: bytes | None) -> Change:
        if value is None:  # the tombstone Debezium writes after a delete (for compaction)
            return self._record_key(key), None
        event = self._decode(value, self.envelope_avro, "Debezium change event")
        if not isinstance(event, Mapping) or "op" not in event:
            got = sorted(event) if isinstance(event, Mapping) else _kind(event)
            raise DecodeError(
                f"not a Debezium change event for relation {self.relation}: no 'op' field (got {got}); "
                'an unwrapped row (ExtractNewRecordState) is read with format = "upsert"'
            )
        op = event["op"]
        if op in ("c", "r", "u"):
            after = event.get("after")
            if after is None:
                raise DecodeError(f"Debezium event op {op!r} for relation {self.relation} without 'after'")
            row = self.reader.row(after)
            return self._checked_key(key, row), row
        if op == "d":
            before = event.get("before")
            record_key = self._record_key(key)
            if isinstance(before, Mapping) and all(before.get(a) is not None for a in self.key):
                mine = self.key_reader.row({a: before[a] for a in self.key}, self.key)
                if mine != record_key:
                    raise DecodeError(
                        f"record key {dict(zip(self.key, record_key, strict=True))} of relation {self.relation} "
                        f"differs from the deleted row's key {dict(zip(self.key, mine, strict=True))}"
                    )
            return record_key, None
        what = {"t": "a truncate", "m": "a message"}.get(op, "unknown")
        raise DecodeError(
            f"Debezium op {op!r} ({what}) for relation {self.relation} is not applied: only c, r, u and d are"
        )

    def _decode(self, data: bytes, schema: Any, what: str) -> Any:
        """``data`` as a Python value: JSON, plain Avro with ``schema``, or the wire format's writer schema."""
        if self.encoding == "json":
            return _json(data, f"{what} for relation {self.relation}")
        if self.encoding == "avro":
            return _avro(data, schema, f"{what} for relation {self.relation}")
        from ivm.processor.codecs.confluent import unframe

        schema_id, body = unframe(data)
        return _avro(body, self._writer(schema_id), f"{what} for relation {self.relation} (schema id {schema_id})")

    def _writer(self, schema_id: int) -> Any:
        """The parsed writer schema ``schema_id`` (cached).  Its fields are checked per record (the row's
        field names and types), which is what names the field of a schema change."""
        writer = self._writers.get(schema_id)
        if writer is None:
            from ivm.processor.codecs.confluent import SchemaNotFoundError

            try:
                registered = self.registry.schema(schema_id)
            except SchemaNotFoundError:
                raise DecodeError(
                    f"unknown schema id {schema_id}: the registry has no such schema (topic {self.topic})"
                ) from None
            try:
                writer = fastavro.parse_schema(registered.avro())
            except Exception as err:
                raise DecodeError(f"schema id {schema_id} is not a valid Avro schema: {err}") from None
            self._writers[schema_id] = writer
        return writer

    # ------------------------------------------------------------------ encoding (ivm produce, tests)

    def encode_upsert(self, row: Row | None, key: Row | None = None) -> tuple[bytes, bytes | None]:
        """The record of an upsert of ``row`` (``None``: a tombstone of ``key``)."""
        if self.format != "upsert":
            raise ValueError(f"relation {self.relation} is format {self.format!r}, not upsert")
        if row is None:
            if key is None:
                raise ValueError("a tombstone needs its key")
            return self._encode_key(key), None
        self._check_row(row)
        return self._encode_key(self.key_of(row)), self._encode(dict(zip(self.attributes, row, strict=True)), "value")

    def encode_debezium(
        self, op: str, before: Row | None, after: Row | None, ts_ms: int = 0, with_schema: bool = False
    ) -> tuple[bytes, bytes]:
        """The record of a Debezium event: ``op`` c/r (``after``), u (``before``, may be ``None``, and ``after``)
        or d (``before``).  ``with_schema``: JSON with the ``schema``/``payload`` wrapper."""
        if self.format != "debezium":
            raise ValueError(f"relation {self.relation} is format {self.format!r}, not debezium")
        if op not in DEBEZIUM_OPS:
            raise ValueError(f"op must be one of {DEBEZIUM_OPS}, got {op!r}")
        for row in (before, after):
            if row is not None:
                self._check_row(row)
        if (op == "d") != (after is None) or (op == "d" and before is None):
            raise ValueError(f"op {op!r}: c, r and u need 'after', d needs 'before' and no 'after'")
        keyed = after if after is not None else before
        assert keyed is not None
        event = {
            "before": None if before is None else dict(zip(self.attributes, before, strict=True)),
            "after": None if after is None else dict(zip(self.attributes, after, strict=True)),
            "source": {"connector": "ivm", "name": "ivm-produce", "table": self.relation,
                       "snapshot": "true" if op == "r" else "false", "ts_ms": ts_ms},
            "op": op,
            "ts_ms": ts_ms,
        }  # fmt: skip
        if self.encoding == "json":
            document: Any = {"schema": self.json_schema(), "payload": event} if with_schema else event
            return self._encode_key(self.key_of(keyed)), json.dumps(document).encode()
        return self._encode_key(self.key_of(keyed)), self._encode(event, "value")

    def encode_records(self, row: Row, mult: int) -> list[tuple[bytes, bytes | None]]:
        """``ivm produce``'s records of an input row: ``mult > 0`` the row (an upsert, or the Debezium
        event :attr:`op` with ``after`` the row), ``mult < 0`` a delete of the row's key (a tombstone, or
        Debezium's ``d`` event with ``before`` the row followed by its tombstone, as Debezium writes them)."""
        if not mult:
            raise ValueError(f"multiplicity 0 for {self.relation}: not an update")
        if self.format == "upsert":
            return [self.encode_upsert(row) if mult > 0 else self.encode_upsert(None, self.key_of(row))]
        if mult > 0:
            return [self.encode_debezium(self.op, None, row, with_schema=self.with_schema)]
        deleted = self.encode_debezium("d", row, None, with_schema=self.with_schema)
        return [deleted, self.encode_tombstone(self.key_of(row))]

    def encode_tombstone(self, key: Row) -> tuple[bytes, None]:
        """A tombstone of ``key`` (what Debezium writes after a delete, what deletes a key of an upsert topic)."""
        return self._encode_key(key), None

    def json_schema(self) -> dict[str, Any]:
        """A Kafka Connect JSON schema of the envelope (what ``schemas.enable=true`` puts in ``schema``)."""
        kinds = {"int": "int32", "long": "int64", "float": "float", "double": "float64", "string": "string",
                 "boolean": "boolean", "bytes": "bytes"}  # fmt: skip
        fields = []
        for name, avro in zip(self.attributes, self.reader.types, strict=True):
            plain = _plain_type(avro)
            branches = plain if isinstance(plain, list) else [plain]
            kind = next((kinds[b] for b in branches if isinstance(b, str) and b in kinds), "string")
            fields.append({"type": kind, "optional": "null" in branches, "field": name})
        value = {"type": "struct", "fields": fields, "optional": True, "name": f"ivm.{self.relation}.Value"}
        return {
            "type": "struct",
            "name": f"ivm.{self.relation}.Envelope",
            "optional": False,
            "fields": [
                {**value, "field": "before"},
                {**value, "field": "after"},
                {"type": "struct", "fields": [], "optional": False, "field": "source"},
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
            ],
        }

    def _check_row(self, row: Row) -> None:
        self.reader.row(dict(zip(self.attributes, row, strict=True)) if len(row) == len(self.attributes) else {})

    def _encode_key(self, key: Row) -> bytes:
        record = dict(zip(self.key, key, strict=True))
        self.key_reader.row(record, self.key)
        return self._encode(record, "key")

    def _encode(self, record: Mapping[str, Any], part: str) -> bytes:
        if self.encoding == "json":
            return json.dumps(record).encode()
        value = self.row_avro if self.format == "upsert" else self.envelope_avro
        schema = self.key_avro if part == "key" else value
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, dict(record))
        if self.encoding == "avro":
            return buf.getvalue()
        from ivm.processor.codecs.confluent import frame

        key_id, value_id = self.register()
        return frame(key_id if part == "key" else value_id, buf.getvalue())

    def register(self) -> tuple[int, int]:
        """The registry ids of the key and value schemas under ``<topic>-key`` and ``<topic>-value``
        (registered, or with ``register=False`` the latest ones registered)."""
        if self._ids is None:
            from ivm.processor.codecs.confluent import key_subject, value_subject

            value = row_schema(self.schema) if self.format == "upsert" else debezium_schema(self.schema)
            key = key_schema(self.schema, self.key)
            if self.registers:
                ids = (self.registry.register(key_subject(self.topic), key),
                       self.registry.register(value_subject(self.topic), value))  # fmt: skip
            else:
                ids = (self.registry.latest(key_subject(self.topic))[0],
                       self.registry.latest(value_subject(self.topic))[0])  # fmt: skip
            self._ids = ids
        return self._ids


def _avro(data: bytes, schema: Any, what: str) -> Any:
    if not data:
        raise DecodeError(f"empty message: not an Avro {what}")
    buf = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buf, schema, None)
    except Exception as err:  # fastavro raises many types on bad bytes
        raise DecodeError(f"malformed Avro {what}: {type(err).__name__}: {err}") from None
    if buf.tell() != len(data):
        raise DecodeError(f"malformed Avro {what}: {len(data) - buf.tell()} trailing bytes")
    return record


@dataclass
class KeyIndex:
    """Key -> row of a keyed relation, derived from the relation's contents (held, not copied).

    Valid while every change to ``contents`` goes through :meth:`convert` and the admission of its
    updates; :func:`key_index` rebuilds it when the contents were replaced (a restore) or grew
    elsewhere (a bootstrap).  Building it checks that the contents are a keyed table: each row once,
    with multiplicity 1, one row per key (``ValueError`` naming the first row that is not)."""

    relation: str
    positions: tuple[int, ...]
    contents: dict[Row, int]
    rows: dict[Row, Row] = field(default_factory=dict)

    def __post_init__(self) -> None:
        positions, rows = self.positions, self.rows
        for row, mult in self.contents.items():
            key = tuple(row[p] for p in positions)
            if mult != 1 or key in rows:
                why = f"multiplicity {mult}" if mult != 1 else f"a second row for key {key} (the first: {rows[key]})"
                raise ValueError(
                    f"relation {self.relation} is keyed but holds {row} with {why}: a keyed relation holds one row per "
                    "key, once (were its contents loaded as tuple updates, e.g. a bootstrap with duplicates?)"
                )
            rows[key] = row

    def fits(self, contents: dict[Row, int]) -> bool:
        return contents is self.contents and len(contents) == len(self.rows)

    def convert(
        self, changes: Sequence[Change | None], errors: Mapping[int, str]
    ) -> tuple[list[Row], list[int], list[int]]:
        """The updates of ``changes`` (in order; the indices in ``errors`` skipped): ``(rows, mults, source)``,
        ``source[j]`` the change update ``j`` comes from.  The index follows the changes as it goes, so the
        caller must admit every update returned (they fit the contents by construction: ``-old`` is held
        with multiplicity 1, ``+new`` is absent since its key's row was just removed)."""
        rows: list[Row] = []
        mults: list[int] = []
        source: list[int] = []
        index = self.rows
        for j, change in enumerate(changes):
            if change is None or j in errors:
                continue
            key, new = change
            old = index.get(key)
            if old == new:  # the same row again, or a delete of an absent key: no change
                continue
            if old is not None:
                rows.append(old)
                mults.append(-1)
                source.append(j)
            if new is None:
                del index[key]
            else:
                index[key] = new
                rows.append(new)
                mults.append(1)
                source.append(j)
        return rows, mults, source


def key_index(
    cache: dict[str, KeyIndex], relation: str, positions: tuple[int, ...], contents: dict[Row, int]
) -> KeyIndex:
    """The :class:`KeyIndex` of ``relation`` over ``contents`` from ``cache``, (re)built if it does not fit them."""
    index = cache.get(relation)
    if index is None or not index.fits(contents) or index.positions != positions:
        index = cache[relation] = KeyIndex(relation, positions, contents)
    return index


def keyed_codec(config: Any, rel: Any, schema: Mapping[str, Any], register: bool = True) -> KeyedCodec:
    """The codec of keyed relation ``rel`` (a ``RelationConfig``) of pipeline ``config``."""
    registry = None
    if rel.encoding == "confluent":
        from ivm.processor.codecs.confluent import registry_client

        registry = registry_client(config)
    return KeyedCodec(schema, rel.key, rel.format, rel.encoding, rel.name, rel.topic, registry, register)
