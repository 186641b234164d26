"""The Confluent wire format for relation updates, with a Schema Registry (DESIGN §4).

A message in the wire format is one magic byte ``0``, the 4-byte big-endian id
of its writer schema in a Schema Registry, then the Avro binary body.  Keys and
values of a relation topic ``<topic>`` are registered under the subjects
``<topic>-key`` and ``<topic>-value`` (Confluent's TopicNameStrategy).

Decoding reads the body with the writer schema fetched from the registry and
resolves it to the relation's own schema (``schemas/relations/<R>.avsc``) by
Avro's schema resolution rules, so producers may evolve their schema within
them: extra fields are skipped, ``int`` is promoted to ``long``, and so on.

Errors: a message that is not a valid update raises
:class:`processor.codec.DecodeError` with the reason (it belongs in the
dead-letter topic); a registry that cannot be reached or answers with an
error other than "not found" raises :class:`RegistryError` instead, since the
message itself may be fine.

The registry client speaks the Confluent-compatible REST API (as served by
Apicurio Registry at ``/apis/ccompat/v7``) with the standard library only.

>>> frame(7, b"\\x02")
b'\\x00\\x00\\x00\\x00\\x07\\x02'
>>> unframe(b"\\x00\\x00\\x00\\x00\\x07\\x02")
(7, b'\\x02')
"""

from __future__ import annotations

import io
import json
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from ivm.updates import Row
from processor.codec import DecodeError, RelationCodec, decode_each, key_schema_of, load_schema, schemas_dir

MAGIC = 0
HEADER = struct.Struct(">bI")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

# Avro's promotions of primitive types (writer -> reader), besides equality.
_PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class RegistryError(RuntimeError):
    """The registry could not be reached or refused a request (not the message's fault)."""

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class SchemaNotFoundError(RegistryError):
    """The registry has no such schema or subject (HTTP 404)."""


def value_subject(topic: str) -> str:
    """The registry subject of a topic's values (TopicNameStrategy)."""
    return f"{topic}-value"


def key_subject(topic: str) -> str:
    """The registry subject of a topic's keys (TopicNameStrategy)."""
    return f"{topic}-key"


def frame(schema_id: int, body: bytes) -> bytes:
    """``body`` in the wire format: magic byte, schema id, body."""
    if not 0 <= schema_id < 2**32:
        raise ValueError(f"schema id {schema_id} does not fit in 4 bytes")
    return HEADER.pack(MAGIC, schema_id) + body


def unframe(message: bytes | None) -> tuple[int, bytes]:
    """The schema id and the body of a wire-format message; :class:`DecodeError` if it is not one."""
    if not message:
        raise DecodeError("empty message: not in the Confluent wire format (magic byte 0, schema id, Avro body)")
    if message[0] != MAGIC:
        raise DecodeError(f"wrong magic byte 0x{message[0]:02x} (expected 0x00): not in the Confluent wire format")
    if len(message) < HEADER.size:
        raise DecodeError(
            f"message of {len(message)} bytes is too short for the Confluent wire format "
            f"(magic byte and 4-byte schema id)"
        )
    _, schema_id = HEADER.unpack_from(message)
    return schema_id, bytes(message[HEADER.size :])


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it."""

    schema_id: int
    schema_type: str  # "AVRO", "PROTOBUF" or "JSON"
    text: str

    def avro(self) -> Any:
        """The schema's JSON (a dict for records); ValueError if it is not an Avro schema."""
        if self.schema_type != "AVRO":
            raise ValueError(f"schema id {self.schema_id} is a {self.schema_type} schema, not Avro")
        try:
            return json.loads(self.text)
        except json.JSONDecodeError as err:
            raise ValueError(f"schema id {self.schema_id} is not valid JSON: {err}") from None


class RegistryClient:
    """A small client for the Confluent-compatible Schema Registry API.

    ``url`` is the API root, e.g. ``http://127.0.0.1:8080/apis/ccompat/v7``.
    Schemas fetched by id are cached (an id never changes its schema).
    """

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._by_id: dict[int, RegisteredSchema] = {}
        self._lock = threading.Lock()

    def register(self, subject: str, schema: Mapping[str, Any] | str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` (or find it there); its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body: dict[str, Any] = {"schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        answer = self._request("POST", f"/subjects/{_quote(subject)}/versions", body)
        schema_id = int(answer["id"])
        with self._lock:
            self._by_id.setdefault(schema_id, RegisteredSchema(schema_id, schema_type, text))
        return schema_id

    def schema(self, schema_id: int) -> RegisteredSchema:
        """The schema with id ``schema_id`` (cached); :class:`SchemaNotFoundError` if there is none."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        answer = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        found = RegisteredSchema(schema_id, answer.get("schemaType") or "AVRO", answer["schema"])
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def subjects(self) -> list[str]:
        """The registered subjects."""
        return list(self._request("GET", "/subjects"))

    def latest(self, subject: str) -> tuple[int, int, str]:
        """The latest version of ``subject``: (schema id, version, schema text)."""
        answer = self._request("GET", f"/subjects/{_quote(subject)}/versions/latest")
        return int(answer["id"]), int(answer["version"]), answer["schema"]

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                detail = json.loads(text)
            except json.JSONDecodeError:
                detail = {"message": text}
            if not isinstance(detail, dict):
                detail = {"message": text}
            error = SchemaNotFoundError if err.code == 404 else RegistryError
            raise error(
                f"{method} {self.url}{path}: HTTP {err.code}: {detail.get('message', text)}",
                status=err.code,
                error_code=detail.get("error_code"),
            ) from None
        except (urllib.error.URLError, OSError) as err:
            raise RegistryError(f"{method} {self.url}{path}: the registry cannot be reached: {err}") from None


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _type_name(avro_type: Any) -> Any:
    return avro_type.get("type") if isinstance(avro_type, dict) and "logicalType" not in avro_type else avro_type


def check_writer_schema(writer: Any, codec: RelationCodec, reader: Mapping[str, Any], schema_id: int) -> Any:
    """Check that ``writer`` (schema JSON) can carry updates of ``codec``'s relation; parse it.

    ``reader`` is the relation's schema JSON.  Raises :class:`DecodeError` with
    the reason when ``writer`` is not a record with an int/long ``mult`` field,
    lacks one of the relation's attributes (that the reader has no default for),
    is named differently (without an alias), or has an attribute of a primitive
    type Avro cannot promote.  Other mismatches (in unions, nested types) surface
    when a message is read.
    """
    where = f"schema id {schema_id}"
    if not isinstance(writer, dict) or writer.get("type") != "record":
        kind = writer.get("type") if isinstance(writer, dict) else writer
        raise DecodeError(f"{where} is not an Avro record (it is {json.dumps(kind)[:80]}): not a relation update")
    fields = {f.get("name"): f for f in writer.get("fields", []) if isinstance(f, dict)}
    if "mult" not in fields:
        raise DecodeError(f"{where} (record {writer.get('name')!r}) has no 'mult' field: not a relation update")
    if _type_name(fields["mult"]["type"]) not in ("int", "long"):
        raise DecodeError(f"{where}: its 'mult' field must be an int or long, not {json.dumps(fields['mult']['type'])}")
    reader_fields = {f["name"]: f for f in reader["fields"]}
    missing = [a for a in codec.attributes if a not in fields and "default" not in reader_fields[a]]
    if missing:
        raise DecodeError(
            f"{where} has attributes {sorted(n for n in fields if n != 'mult')}, "
            f"relation {codec.relation} expects {list(codec.attributes)}: missing {missing}"
        )
    w_name = str(writer.get("name", "")).rsplit(".", 1)[-1]
    aliases = reader.get("aliases", [])
    if w_name != codec.record_name.rsplit(".", 1)[-1] and w_name not in aliases and writer.get("name") not in aliases:
        raise DecodeError(
            f"{where} is the record {writer.get('name')!r}, relation {codec.relation} reads the record "
            f"{reader['name']!r}: Avro resolution needs the same name or an alias"
        )
    for name in codec.attributes:
        if name not in fields:
            continue
        w_type, r_type = _type_name(fields[name]["type"]), _type_name(reader_fields[name]["type"])
        if not (isinstance(w_type, str) and isinstance(r_type, str) and {w_type, r_type} <= _PRIMITIVES):
            continue  # unions, named and logical types: fastavro resolves them per message
        if w_type != r_type and (w_type, r_type) not in _PROMOTIONS:
            raise DecodeError(
                f"{where}: attribute {name!r} is a {w_type}, relation {codec.relation} reads a {r_type} "
                f"(not an Avro promotion)"
            )
    try:
        return fastavro.parse_schema(writer)
    except Exception as err:
        raise DecodeError(f"{where} is not a valid Avro schema: {err}") from None


class WireCodec:
    """Encode and decode one relation topic's updates in the Confluent wire format.

    ``schema`` is the relation's Avro schema (JSON), the reader schema for
    decoding and the writer schema for encoding; ``topic`` defaults to the
    relation's name.  Encoding registers the key and value schemas under
    ``<topic>-key`` and ``<topic>-value`` on first use.  Thread-safe.
    """

    def __init__(
        self,
        schema: Mapping[str, Any],
        registry: RegistryClient,
        topic: str | None = None,
        relation: str | None = None,
    ) -> None:
        self.schema = dict(schema)
        self.codec = RelationCodec.from_schema(self.schema, relation)
        self.registry = registry
        self.topic = topic or self.codec.relation
        self._ids: tuple[int, int] | None = None
        self._writers: dict[int, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_relation(
        cls, relation: str, registry: RegistryClient, topic: str | None = None, directory: Path | None = None
    ) -> WireCodec:
        """The codec of ``relation`` with its schema from ``schemas/relations/<relation>.avsc``."""
        directory = Path(directory or schemas_dir() / "relations")
        return cls(load_schema(directory / f"{relation}.avsc"), registry, topic)

    @property
    def relation(self) -> str:
        return self.codec.relation

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.codec.attributes

    def register(self) -> tuple[int, int]:
        """Register the relation's key and value schemas for the topic; their ids (key, value)."""
        with self._lock:
            if self._ids is None:
                key_id = self.registry.register(key_subject(self.topic), key_schema_of(self.schema))
                value_id = self.registry.register(value_subject(self.topic), self.schema)
                self._ids = (key_id, value_id)
            return self._ids

    def encode(self, row: Row, mult: int) -> tuple[bytes, bytes]:
        """The Kafka key and value of the update ``{row ↦ mult}`` in the wire format."""
        key_id, value_id = self.register()
        key, value = self.codec.encode(row, mult)
        return frame(key_id, key), frame(value_id, value)

    def decode(self, value: bytes | None) -> tuple[Row, int]:
        """The update in a wire-format ``value``, resolved to the relation's schema.

        Raises :class:`DecodeError` with the reason if ``value`` is not a valid
        update, :class:`RegistryError` if the registry cannot be asked.
        """
        schema_id, body = unframe(value)
        writer = self.writer_schema(schema_id)
        try:
            return self.codec.decode(body, writer)
        except DecodeError as err:
            raise DecodeError(f"{err} (schema id {schema_id}, topic {self.topic})") from None

    def decode_many(self, values: Sequence[bytes | None]) -> tuple[list[Row | None], list[int], dict[int, str]]:
        """:meth:`decode` of each value, as ``RelationCodec.decode_many`` returns it (each message names
        its own writer schema, so there is no bulk path)."""
        return decode_each(self, values)

    def decode_key(self, key: bytes | None) -> Row:
        """The tuple in a wire-format ``key``, resolved to the relation's key schema.

        Raises :class:`DecodeError` with the reason if ``key`` is not a valid key.
        """
        schema_id, body = unframe(key)
        try:
            registered = self.registry.schema(schema_id)
        except SchemaNotFoundError:
            raise DecodeError(f"unknown key schema id {schema_id}: the registry has no such schema") from None
        try:
            writer = fastavro.parse_schema(registered.avro())
            buf = io.BytesIO(body)
            record = fastavro.schemaless_reader(buf, writer, self.codec.key_schema)
        except Exception as err:
            raise DecodeError(f"malformed key for relation {self.relation} (schema id {schema_id}): {err}") from None
        if buf.tell() != len(body):
            raise DecodeError(f"malformed key for relation {self.relation}: {len(body) - buf.tell()} trailing bytes")
        return tuple(record[a] for a in self.attributes)

    def writer_schema(self, schema_id: int) -> Any:
        """The parsed, checked writer schema with id ``schema_id`` (cached once checked).

        Raises :class:`DecodeError` if the registry has no such schema or the
        schema cannot carry updates of this relation.
        """
        with self._lock:
            cached = self._writers.get(schema_id)
        if cached is not None:
            return cached
        try:
            registered = self.registry.schema(schema_id)
        except SchemaNotFoundError:
            raise DecodeError(
                f"unknown schema id {schema_id}: the registry has no such schema (topic {self.topic})"
            ) from None
        try:
            writer_json = registered.avro()
        except ValueError as err:
            raise DecodeError(f"{err}: not a relation update") from None
        parsed = check_writer_schema(writer_json, self.codec, self.schema, schema_id)
        with self._lock:
            self._writers[schema_id] = parsed
        return parsed
