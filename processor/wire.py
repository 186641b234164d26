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
:class:`ivm.processor.codecs.avro.DecodeError` with the reason (it belongs in the
dead-letter topic); a registry that cannot be reached or answers with an
error other than "not found" raises :class:`RegistryError` instead, since the
message itself may be fine.

The registry client is ``confluent_kafka.schema_registry``'s (:class:`RegistryClient`
wraps it): the Confluent-compatible REST API (as served by Apicurio Registry at
``/apis/ccompat/v7``), with basic authentication and TLS settings.

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
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from ivm.processor.codecs.avro import (
    DecodeError,
    PackedCodec,
    PackedDecoded,
    RelationCodec,
    decode_each,
    decode_packed,
    key_schema_of,
    load_schema,
    only_update,
    packed_schema,
    schemas_dir,
)
from ivm.updates import Row

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
    """The Confluent-compatible Schema Registry API through ``confluent_kafka.schema_registry``'s client.

    ``url`` is the API root, e.g. ``http://127.0.0.1:8080/apis/ccompat/v7``; ``properties`` are that
    client's settings besides ``url`` (``[kafka.schema_registry]``: ``basic.auth.user.info`` as
    ``user:password``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
    ``ssl.key.password``).  Schemas fetched by id are cached (an id never changes its schema).  Every
    failure is a :class:`RegistryError` (:class:`SchemaNotFoundError` for HTTP 404) naming the request,
    never the credentials.
    """

    def __init__(self, url: str, timeout: float = 10.0, properties: Mapping[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.properties = dict(properties or {})
        self._client: Any = None
        self._by_id: dict[int, RegisteredSchema] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        from ivm.processor.kafka.clients import masked

        return f"RegistryClient({self.url!r}, {masked(self.properties)!r})"

    def __getstate__(self) -> dict[str, Any]:  # shipped to Spark's executors: the client is made again there
        return {**self.__dict__, "_client": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _sr(self) -> Any:
        with self._lock:
            if self._client is None:
                from confluent_kafka.schema_registry import SchemaRegistryClient

                try:
                    self._client = SchemaRegistryClient(
                        {"url": self.url, "timeout": self.timeout, "max.retries": 0, **self.properties}
                    )
                except (ValueError, TypeError, OSError) as err:  # a bad setting or an unreadable PEM file
                    raise RegistryError(f"the schema registry client for {self.url} cannot be made: {err}") from None
            return self._client

    def register(self, subject: str, schema: Mapping[str, Any] | str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` (or find it there); its id."""
        from confluent_kafka.schema_registry import Schema

        text = schema if isinstance(schema, str) else json.dumps(schema)
        schema_id = int(
            self._call("POST", f"/subjects/{_quote(subject)}/versions", lambda sr: sr.register_schema(
                subject, Schema(text, schema_type)))
        )  # fmt: skip
        with self._lock:
            self._by_id.setdefault(schema_id, RegisteredSchema(schema_id, schema_type, text))
        return schema_id

    def schema(self, schema_id: int) -> RegisteredSchema:
        """The schema with id ``schema_id`` (cached); :class:`SchemaNotFoundError` if there is none."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        got = self._call("GET", f"/schemas/ids/{int(schema_id)}", lambda sr: sr.get_schema(int(schema_id)))
        found = RegisteredSchema(schema_id, got.schema_type or "AVRO", got.schema_str)
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def subjects(self) -> list[str]:
        """The registered subjects."""
        return list(self._call("GET", "/subjects", lambda sr: sr.get_subjects()))

    def latest(self, subject: str) -> tuple[int, int, str]:
        """The latest version of ``subject``: (schema id, version, schema text)."""
        got = self._call(
            "GET", f"/subjects/{_quote(subject)}/versions/latest", lambda sr: sr.get_latest_version(subject)
        )
        return int(got.schema_id), int(got.version), got.schema.schema_str

    def _call(self, method: str, path: str, request: Any) -> Any:
        """``request(client)``, its failures as :class:`RegistryError` naming ``method`` and ``path``."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        client = self._sr()
        try:
            return request(client)
        except SchemaRegistryError as err:
            status = err.http_status_code
            error = SchemaNotFoundError if status == 404 else RegistryError
            hint = ""
            if status in (401, 403):
                hint = " (check [kafka.schema_registry] basic.auth.user.info)"
            raise error(
                f"{method} {self.url}{path}: HTTP {status}: {err.error_message}{hint}",
                status=status,
                error_code=err.error_code,
            ) from None
        except Exception as err:  # httpx's transport errors (refused, TLS, timeout), an unreadable answer
            reason = " ".join(str(err).split()) or type(err).__name__
            if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
                reason += " (check [kafka.schema_registry] ssl.ca.location)"
            raise RegistryError(f"{method} {self.url}{path}: the registry cannot be reached: {reason}") from None


def registry_client(config: Any) -> RegistryClient:
    """The registry client of a pipeline: ``[kafka] schema_registry`` and ``[kafka.schema_registry]``."""
    return RegistryClient(config.schema_registry, properties=dict(getattr(config, "schema_registry_properties", ())))


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
    ``<topic>-key`` and ``<topic>-value`` on first use; with ``register=False``
    it uses the latest schema registered under each subject instead, which must
    be the relation's (the same Avro parsing canonical form): an absent or a
    different one is a :class:`RegistryError` naming the subject.  Thread-safe.
    """

    what = "a relation update"  # what a value holds, for errors

    def __init__(
        self,
        schema: Mapping[str, Any],
        registry: RegistryClient,
        topic: str | None = None,
        relation: str | None = None,
        register: bool = True,
    ) -> None:
        self.schema = dict(schema)
        self.codec = RelationCodec.from_schema(self.schema, relation)
        self.registry = registry
        self.topic = topic or self.codec.relation
        self.registers = register
        self._ids: tuple[int, int] | None = None
        self._writers: dict[int, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_relation(
        cls,
        relation: str,
        registry: RegistryClient,
        topic: str | None = None,
        directory: Path | None = None,
        register: bool = True,
    ) -> WireCodec:
        """The codec of ``relation`` with its schema from ``schemas/relations/<relation>.avsc``."""
        directory = Path(directory or schemas_dir() / "relations")
        return cls(load_schema(directory / f"{relation}.avsc"), registry, topic, register=register)

    @property
    def relation(self) -> str:
        return self.codec.relation

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.codec.attributes

    def register(self) -> tuple[int, int]:
        """The ids (key, value) of the relation's key and value schemas for the topic: registered, or with
        ``register=False`` the latest ones registered (checked to be the relation's)."""
        with self._lock:
            if self._ids is None:
                if self.registers:
                    key_id = self.registry.register(key_subject(self.topic), key_schema_of(self.schema))
                    value_id = self.registry.register(value_subject(self.topic), self.value_schema())
                else:
                    key_id = self._latest(key_subject(self.topic), key_schema_of(self.schema))
                    value_id = self._latest(value_subject(self.topic), self.value_schema())
                self._ids = (key_id, value_id)
            return self._ids

    def value_schema(self) -> Any:
        """The schema of the topic's values, registered under ``<topic>-value``: the relation's update record."""
        return self.schema

    def _latest(self, subject: str, schema: Mapping[str, Any]) -> int:
        """The id of the latest schema of ``subject`` if it is ``schema``; :class:`RegistryError` otherwise."""
        try:
            schema_id, version, text = self.registry.latest(subject)
        except SchemaNotFoundError:
            raise RegistryError(
                f"subject {subject} has no registered schema: register relation {self.relation}'s schema "
                "(produce without --no-register) or ask the registry's owner to"
            ) from None
        canonical = fastavro.schema.to_parsing_canonical_form
        try:
            same = canonical(fastavro.parse_schema(json.loads(text))) == canonical(fastavro.parse_schema(dict(schema)))
        except (ValueError, TypeError, fastavro.schema.SchemaParseException):
            same = False
        if not same:
            raise RegistryError(
                f"subject {subject}: its latest schema (id {schema_id}, version {version}) is not relation "
                f"{self.relation}'s schema: records written with it would not be what the relation reads; "
                "register the relation's schema (produce without --no-register) or fix the relation's .avsc"
            )
        return schema_id

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
            raise DecodeError(f"{err}: not {self.what}") from None
        parsed = self.checked_writer(writer_json, schema_id)
        with self._lock:
            self._writers[schema_id] = parsed
        return parsed

    def checked_writer(self, writer_json: Any, schema_id: int) -> Any:
        """``writer_json`` parsed, if it can carry updates of this relation (:func:`check_writer_schema`)."""
        return check_writer_schema(writer_json, self.codec, self.schema, schema_id)


class PackedWireCodec(WireCodec):
    """Packed records of one relation topic in the Confluent wire format (``encoding = "confluent-packed"``).

    The value is the wire format's header and an Avro array of the relation's update records
    (:class:`ivm.processor.codecs.avro.PackedCodec`), its schema, :func:`ivm.processor.codecs.avro.packed_schema`,
    registered under ``<topic>-value``.  A writer's array schema is resolved to the relation's like a
    one-update record's (its items checked by :func:`check_writer_schema`); a value written with a
    record schema (one update, as ``confluent`` writes it) is read as a packed record of that one
    update, so a producer may switch to packing without a new topic.
    """

    packed = True
    what = "a packed record of relation updates"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._packer = PackedCodec(self.codec, self.schema)

    def value_schema(self) -> Any:
        """An array of the relation's update records (:func:`ivm.processor.codecs.avro.packed_schema`)."""
        return packed_schema(self.schema)

    def encode_many(self, updates: Sequence[tuple[Row, int]]) -> bytes:
        """The wire-format value of a packed record holding ``updates``."""
        _, value_id = self.register()
        return frame(value_id, self._packer.encode_many(updates))

    def encode(self, row: Row, mult: int) -> tuple[bytes, bytes]:
        """The key and value of a packed record holding the one update ``{row ↦ mult}``."""
        key_id, _ = self.register()
        return frame(key_id, self.codec.encode(row, mult)[0]), self.encode_many([(row, mult)])

    def items(self, value: bytes | None) -> list[tuple[Row, int] | str]:
        """The updates in a wire-format packed record (see :meth:`ivm.processor.codecs.avro.PackedCodec.items`)."""
        schema_id, body = unframe(value)
        writer = self.writer_schema(schema_id)
        try:
            if writer.get("type") == "array":
                return self._packer.items(body, writer)
            return [self.codec.decode(body, writer)]
        except DecodeError as err:
            raise DecodeError(f"{err} (schema id {schema_id}, topic {self.topic})") from None

    def decode(self, value: bytes | None) -> tuple[Row, int]:
        """The update of a packed record holding exactly one."""
        return only_update(self.items(value))

    def decode_many(self, values: Sequence[bytes | None]) -> PackedDecoded:  # type: ignore[override]
        """The updates in a micro-batch of wire-format packed records
        (:class:`ivm.processor.codecs.avro.PackedDecoded`)."""
        return decode_packed(self, values)

    def checked_writer(self, writer_json: Any, schema_id: int) -> Any:
        """``writer_json`` parsed: an array of update records (its items checked as
        :meth:`WireCodec.checked_writer` checks a record) or one update record."""
        if isinstance(writer_json, dict) and writer_json.get("type") == "array":
            check_writer_schema(writer_json.get("items"), self.codec, self.schema, schema_id)
            try:
                return fastavro.parse_schema(writer_json)
            except Exception as err:
                raise DecodeError(f"schema id {schema_id} is not a valid Avro schema: {err}") from None
        return super().checked_writer(writer_json, schema_id)
