"""Keyed results: a query with free variables publishes one record per changed group.

The result topic of a group-by (or listing) query is a changelog keyed by the
group: the key is the group's values, Avro-encoded with a key schema derived
from the query's head (:func:`group_key_schema`: one field per free variable,
typed like the relation attribute it binds); the value is the group's new
aggregate (a ``Result`` record, ``schemas/result.avsc``, whose ``group`` field
repeats the group as JSON), or a tombstone (no value) when the group's result
becomes zero or empty.  The topic is created compacted, so it holds the
current result: last value per key, tombstones delete.  The delta topic
carries the same changes with the value before and after (``schemas/delta.avsc``,
as Debezium and ksqlDB changelogs do).

:class:`KeyedResult` remembers what the result topic holds (read back from it
at start-up, :func:`materialize`) and diffs each batch's result against it:
O(|result|) per batch, the cost of publishing the whole result before.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fastavro

from ivm.processor.kafka.topics import TopicReader
from ivm.updates import Row

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka


def group_key_schema(query: Any, relation_schemas: Mapping[str, Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The Avro key schema of query ``name``'s groups: a record with one field per free variable, in
    head order, typed like the first attribute the variable binds (its relation's schema).

    >>> from ivm.query import parse
    >>> schema = {"type": "record", "name": "R", "fields": [
    ...     {"name": "A", "type": "long"}, {"name": "B", "type": "string"}, {"name": "mult", "type": "long"}]}
    >>> group_key_schema(parse("Q(b) :- R(a, b)"), {"R": schema}, "paths.by-b")["fields"]
    [{'name': 'b', 'type': 'string'}]
    """
    fields = []
    for variable in query.free:
        avro_type: Any = None
        for atom in query.atoms:
            if variable in atom.terms:
                attributes = [f for f in relation_schemas[atom.relation]["fields"] if f["name"] != "mult"]
                avro_type = attributes[atom.terms.index(variable)]["type"]
                break
        fields.append({"name": _avro_name(variable), "type": avro_type})
    return {"type": "record", "name": _avro_name(name) + "Key", "namespace": "ivm.results", "fields": fields}


def _avro_name(text: str) -> str:
    """``text`` as an Avro name: letters, digits and underscores, not starting with a digit."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return out if out and not out[0].isdigit() else "_" + out


class GroupKeyCodec:
    """Encode and decode group keys with a key schema (see :func:`group_key_schema`)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = dict(schema)
        self.fields = [f["name"] for f in schema["fields"]]
        self._parsed = fastavro.parse_schema(self.schema)

    def encode(self, group: Row) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._parsed, dict(zip(self.fields, group, strict=True)))
        return buf.getvalue()

    def decode(self, key: bytes) -> Row:
        record = fastavro.schemaless_reader(io.BytesIO(key), self._parsed, None)
        return tuple(record[f] for f in self.fields)


@dataclass
class Change:
    """One group's change in a batch: its key, values as JSON text (``None``: absent).  ``group`` is
    ``None`` for a key the current key schema cannot read (left by an earlier definition of the query)."""

    group: Row | None
    key: bytes
    before: str | None
    after: str | None


@dataclass
class KeyedResult:
    """What a query's result topic holds, key by key: the group and the value's JSON text."""

    codec: GroupKeyCodec
    published: dict[bytes, tuple[Row | None, str]] = field(default_factory=dict)
    _keys: dict[Row, bytes] = field(default_factory=dict)

    def load(self, contents: Mapping[bytes, str]) -> None:
        """Start from the topic's contents (key bytes -> value JSON text), as :func:`materialize` reads them."""
        self.published = {}
        for key, text in contents.items():
            try:
                group: Row | None = self.codec.decode(key)
                if self.codec.encode(group) != key:  # type: ignore[arg-type]
                    group = None
            except Exception:  # a key of another schema: an earlier definition of the query
                group = None
            self.published[key] = (group, text)

    def changes(self, current: Mapping[Row, Any], render: Any) -> list[Change]:
        """The groups whose value differs from the published one (appeared, changed, gone); the published
        state becomes ``current``.  ``render`` turns a value into JSON text.  O(|current| + |published|)."""
        out: list[Change] = []
        published = self.published
        keys = self._keys
        seen: set[bytes] = set()
        for group, value in current.items():
            key = keys.get(group)
            if key is None:
                key = keys[group] = self.codec.encode(group)
            seen.add(key)
            text = render(value)
            old = published.get(key)
            if old is not None and old[1] == text:
                continue
            out.append(Change(group, key, None if old is None else old[1], text))
            published[key] = (group, text)
        for key in [k for k in published if k not in seen]:
            group, text = published.pop(key)
            if group is not None:
                keys.pop(group, None)
            out.append(Change(group, key, text, None))
        return out


def materialize(bootstrap: Kafka, topic: str, decode_value: Any = None, timeout: float = 60) -> dict[bytes, Any]:
    """The current contents of a compacted changelog topic, read as a Kafka consumer would: the last value
    per key, tombstones delete (``read_committed``).  ``decode_value`` maps a value's bytes (default:
    kept as bytes)."""
    out: dict[bytes, Any] = {}
    with TopicReader(bootstrap, topic) as log:
        for key, value in log.to_end(timeout):
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value if decode_value is None else decode_value(value)
    return out


def snapshot_then_changes(
    bootstrap: Kafka,
    topic: str,
    *,
    poll_timeout: float = 1.0,
    idle_timeout: float | None = None,
    stop: Any = None,
) -> Iterator[dict[str, Any]]:
    """A query's current result, then each change as it commits (as ``SUBSCRIBE`` in Materialize).

    Reads the result topic ``topic`` (``read_committed``) to its end and yields one event
    ``{"type": "snapshot", "query", "batch_id", "result"}`` -- the scalar value, or the groups as
    ``{json group: value}`` for a query with free variables -- then, as batches commit,
    ``{"type": "change", "query", "batch_id", "group", "value"}`` per changed group (``value`` ``None``:
    the group is gone; ``group`` ``None`` for a scalar query).  Values are JSON-decoded.  Stops after
    ``idle_timeout`` seconds without a record, or once ``stop`` (an Event) is set.
    """
    from ivm.processor.codecs.avro import OutputCodec

    codec = OutputCodec("result")
    groups: dict[bytes, Any] = {}  # key -> group (from the value records: tombstones carry none)
    current: dict[bytes, tuple[Any, Any]] = {}  # key -> (group, value)
    scalar: dict[str, Any] = {}
    last_batch = -1
    newest: Any = None  # the newest record's time: its batch is the snapshot's (after `ivm reset` the batch
    # ids start over while records of the earlier history stay in the compacted topic, with higher ids)
    with TopicReader(bootstrap, topic) as log:
        for key, value in log.to_end():
            if value is None:
                current.pop(key, None)
                continue
            record = codec.decode(value)
            stamp = record.get("timestamp_ms")
            if newest is None or stamp is None or stamp >= newest:
                newest, last_batch = stamp, record["batch_id"]
            scalar["query"] = record["query"]
            if record.get("group") is None:
                scalar["value"] = json.loads(record["value"])
                continue
            group = groups[key] = json.loads(record["group"])
            current[key] = (group, json.loads(record["value"]))
        query = scalar.get("query", topic.rsplit(".", 1)[0])
        if current or "value" not in scalar:
            result: Any = {json.dumps(g): v for g, v in current.values()}
        else:
            result = scalar["value"]
        yield {"type": "snapshot", "query": query, "batch_id": last_batch, "result": result}
        for key, value in log.follow(poll_timeout, idle_timeout, stop):
            if value is None:
                group = groups.pop(key, None)
                if group is not None:
                    yield {"type": "change", "query": query, "batch_id": None, "group": group, "value": None}
                continue
            record = codec.decode(value)
            group = json.loads(record["group"]) if record.get("group") is not None else None
            if group is not None:
                groups[key] = group
            yield {
                "type": "change",
                "query": record["query"],
                "batch_id": record["batch_id"],
                "group": group,
                "value": json.loads(record["value"]),
            }


def json_text(value: Any) -> str:
    """Compact JSON text (the published form of a group's value)."""
    return json.dumps(value, separators=(",", ":"))
