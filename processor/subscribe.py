"""Read a pipeline's topics as they change (``ivm subscribe``).

Every topic a pipeline writes or reads has a *kind*, and each kind one decoder
and two renderings, all in :data:`KINDS` (testable without Kafka):

=============== ===================================== ==========================
kind            topic                                 records
=============== ===================================== ==========================
``result``      ``<query>.result``                    ``schemas/result.avsc``
``delta``       ``<query>.delta``                     ``schemas/delta.avsc``
``model``       ``<query>.model``                     ``schemas/model.avsc``
``progress``    ``<pipeline>.progress``               ``schemas/progress.avsc``
``dead_letter`` ``[kafka].dead_letter_topic``         ``schemas/dead_letter.avsc``
``control``     ``<pipeline>.control``                ``schemas/control.avsc``
``relation``    each relation's ``topic``             the relation's schema, plain
                                                      Avro or the Confluent wire
                                                      format (``encoding``)
=============== ===================================== ==========================

With a pipeline configuration a topic's kind is known exactly
(:func:`pipeline_topics`); without one it is inferred from the name
(:func:`infer_kind`), and relation topics cannot be read.  ``--json`` prints
one JSON document per record (:func:`to_json`): the fields that carry JSON text
(a result's ``value``, a delta's ``answer``, a model's ``model``) parsed,
datetimes, bytes and decimals as :func:`ivm.processor.codecs.avro.json_value` maps them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ivm.processor.codecs.avro import (
    DecodeError,
    OutputCodec,
    PackedCodec,
    RelationCodec,
    is_packed,
    json_value,
    load_schema,
    schemas_dir,
    uses_registry,
)
from ivm.processor.kafka.clients import Kafka
from ivm.processor.kafka.clients import admin as new_admin
from ivm.processor.kafka.clients import consumer as new_consumer
from ivm.processor.kafka.topics import PROBE_TIMEOUT

DEFAULT_DEAD_LETTER_TOPIC = "ivm.dead-letter"

#: Topic name suffixes of the per-query and per-pipeline outputs, and their kinds.
SUFFIXES = {".result": "result", ".delta": "delta", ".model": "model", ".progress": "progress", ".control": "control"}

Decoder = Callable[[bytes | None], dict[str, Any]]


class UnknownTopicError(ValueError):
    """A topic that is not one of the pipeline's (or not inferable); the message says which are."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic and what it carries: ``kind`` (a key of :data:`KINDS`) and, for a relation
    topic, its configuration (``name``, ``schema``, ``encoding``)."""

    topic: str
    kind: str
    owner: str = ""  # the query, relation or pipeline the topic belongs to
    relation: Any = None  # ivm.processor.config.RelationConfig of a relation topic


@dataclass(frozen=True)
class TopicKind:
    """How to read and print one kind of topic.

    ``schema``: the output schema's name in ``schemas/`` (``None`` for relation
    topics, whose schema comes from the configuration); ``json_text``: the
    fields holding JSON text, parsed in :func:`to_json`; ``plain``: the
    one-line human rendering of a decoded record.
    """

    name: str
    schema: str | None
    json_text: tuple[str, ...]
    plain: Callable[[dict[str, Any]], str]


def _time(value: Any) -> str:
    text = json_value(value)
    return text if isinstance(text, str) else str(text)


def _plain_result(r: dict[str, Any]) -> str:
    if r.get("tombstone"):
        return f"{r.get('group') or '(a group of an earlier definition)'} gone"
    group = f"{r['group']}" if r.get("group") is not None else ""
    return (
        f"batch {r['batch_id']:>6}  {r['query']}{group} = {r['value']}"
        f"  ({r['engine']}, applied {r['applied']}, rejected {r['rejected']}, {_time(r['timestamp_ms'])})"
    )


def _plain_delta(r: dict[str, Any]) -> str:
    if r.get("before") is None and r.get("after") is None:  # a record of the earlier form
        return f"batch {r['batch_id']:>6}  {r['query']} {r['mult']:+d} {r['answer']}"
    before = "absent" if r.get("before") is None else r["before"]
    after = "absent" if r.get("after") is None else r["after"]
    return f"batch {r['batch_id']:>6}  {r['query']}{r['answer']}: {before} -> {after}"


def _plain_model(r: dict[str, Any]) -> str:
    head = f"batch {r['batch_id']:>6}  {r['query']} model: "
    try:
        model = json.loads(r["model"])
    except (TypeError, ValueError):
        return head + str(r["model"])
    if not isinstance(model, dict):
        return head + json.dumps(model)
    if "error" in model:
        return head + f"{model.get('type', '?')}: {model['error']}"
    if model.get("type") == "linear_regression":
        terms = [f"{model.get('intercept')}"] + [f"{c} * {f}" for f, c in (model.get("coefficients") or {}).items()]
        return head + f"{model.get('label')} = {' + '.join(terms)}  ({model.get('rows')} rows)"
    if model.get("type") == "chow_liu_tree":
        edges = ", ".join(
            f"{e['parent']} -> {e['child']} (MI {e['mutual_information']:.4g})" for e in model.get("edges", [])
        )
        return head + f"Chow-Liu tree rooted at {model.get('root')}: {edges or 'no edges'}  ({model.get('rows')} rows)"
    return head + json.dumps(model)


def _plain_progress(r: dict[str, Any]) -> str:
    offsets = ", ".join(f"{o['topic']}[{o['partition']}]@{o['offset']}" for o in r["offsets"]) or "no input"
    return f"batch {r['batch_id']:>6}  {r['pipeline']} committed {_time(r['timestamp_ms'])}: {offsets}"


def _plain_dead_letter(r: dict[str, Any]) -> str:
    query = f" (query {r['query']})" if r.get("query") else ""
    return f"{r['topic']}[{r['partition']}]@{r['offset']}{query}: {r['reason']}  ({_time(r['timestamp_ms'])})"


def _plain_control(r: dict[str, Any]) -> str:
    when = _time(r["timestamp_ms"])
    if r["op"] == "remove":
        return f"remove {r['name']}  ({when})"
    if r["op"] in ("applied", "refused"):
        why = f": {r['reason']}" if r.get("reason") else ""
        return f"{r['op']} {r['name']} (command [{r['command_partition']}]@{r['command_offset']}){why}  ({when})"
    options = [f"engine {r['engine']}"]
    options += [f"{k} {r[k]}" for k in ("eps", "shards", "model", "label") if r.get(k) is not None]
    if r.get("model") == "linear_regression":
        options.append(f"method {r['method']}")
    if r.get("patterns"):
        options.append(f"patterns {', '.join(r['patterns'])}")
    return f"add {r['name']}: {r['query']}  ({'; '.join(options)}; {when})"


def _plain_relation(r: dict[str, Any]) -> str:
    values = [json.dumps(json_value(v)) for k, v in r.items() if k not in ("relation", "mult")]
    return f"{r['relation']}({', '.join(values)}) {r['mult']:+d}"


#: The topic kinds: decoder schema, JSON-text fields and plain rendering (the one registry).
KINDS: dict[str, TopicKind] = {
    "result": TopicKind("result", "result", ("value", "group"), _plain_result),
    "delta": TopicKind("delta", "delta", ("answer", "before", "after"), _plain_delta),
    "model": TopicKind("model", "model", ("model",), _plain_model),
    "progress": TopicKind("progress", "progress", (), _plain_progress),
    "dead_letter": TopicKind("dead_letter", "dead_letter", (), _plain_dead_letter),
    "control": TopicKind("control", "control", (), _plain_control),
    "relation": TopicKind("relation", None, (), _plain_relation),
}


def infer_kind(topic: str, dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC) -> str | None:
    """The kind of an output topic by its name alone, ``None`` if the name does not tell.

    The suffixes ``.result``, ``.delta``, ``.model``, ``.progress`` and ``.control``; the dead-letter
    topic by its configured name (default ``ivm.dead-letter``) or a name ending in
    ``dead-letter``.  Relation topics have no telling names.

    >>> infer_kind("triangle.result"), infer_kind("ivm.dead-letter"), infer_kind("R")
    ('result', 'dead_letter', None)
    """
    for suffix, kind in SUFFIXES.items():
        if topic.endswith(suffix) and len(topic) > len(suffix):
            return kind
    if topic == dead_letter_topic or topic.endswith("dead-letter"):
        return "dead_letter"
    return None


def pipeline_topics(config: Any) -> dict[str, TopicSpec]:
    """Every topic of a pipeline configuration (``ivm.processor.config.PipelineConfig``), by name.

    Results and deltas of every query, models of the queries with a ``model``, the
    progress, control and dead-letter topics, and the relation topics.  A relation topic
    that is also named like an output is a relation topic.
    """
    out: dict[str, TopicSpec] = {}
    for q in config.queries:
        out[q.result_topic] = TopicSpec(q.result_topic, "result", q.name)
        out[q.delta_topic] = TopicSpec(q.delta_topic, "delta", q.name)
        if q.model:
            out[q.model_topic] = TopicSpec(q.model_topic, "model", q.name)
    out[config.progress_topic] = TopicSpec(config.progress_topic, "progress", config.name)
    control = f"{config.name}.control"  # ivm.processor.control.control_topic
    out[control] = TopicSpec(control, "control", config.name)
    out[config.dead_letter_topic] = TopicSpec(config.dead_letter_topic, "dead_letter", config.name)
    for rel in config.relations:
        out[rel.topic] = TopicSpec(rel.topic, "relation", rel.name, rel)
    return out


def describe_topics(specs: Mapping[str, TopicSpec], existing: set[str] | None = None) -> str:
    """One line per topic: name, kind and owner (and ``not created yet`` when ``existing`` says so)."""
    lines = []
    for spec in sorted(specs.values(), key=lambda s: (list(KINDS).index(s.kind), s.topic)):
        missing = existing is not None and spec.topic not in existing
        owner = f" of {spec.owner}" if spec.owner else ""
        lines.append(f"  {spec.topic:<40} {spec.kind}{owner}{'  (not created yet)' if missing else ''}")
    return "\n".join(lines) or "  (none)"


def resolve_topic(topic: str, config: Any = None) -> TopicSpec:
    """The :class:`TopicSpec` of ``topic``: exact from ``config``, else inferred (:func:`infer_kind`).

    Raises :class:`UnknownTopicError` if ``topic`` is not one of the configured
    pipeline's topics, or, without a configuration, if its name does not tell its kind.
    """
    if config is not None:
        specs = pipeline_topics(config)
        if topic in specs:
            return specs[topic]
        raise UnknownTopicError(
            f"topic {topic!r} is not one of pipeline {config.name!r}'s topics; they are:\n{describe_topics(specs)}"
        )
    kind = infer_kind(topic)
    if kind is None:
        raise UnknownTopicError(
            f"cannot tell what topic {topic!r} carries: output topics end in "
            f"{', '.join(SUFFIXES)} or are the dead-letter topic ({DEFAULT_DEAD_LETTER_TOPIC}); "
            f"give the pipeline configuration (-c) to read a relation topic or a differently named one"
        )
    return TopicSpec(topic, kind)


def relation_schema_path(schema: Path | str) -> Path:
    """The file of a relation's ``schema``: absolute as is (``load_config`` makes the file's paths
    absolute), relative to the schemas folder otherwise, as the pipeline reads it."""
    path = Path(schema)
    return path if path.is_absolute() else schemas_dir() / path


def relation_decoder(spec: TopicSpec, config: Any = None) -> Decoder:
    """The decoder of a relation topic: ``{"relation": name, <attribute>: value, ..., "mult": m}``.

    Plain Avro with the relation's schema, or for ``encoding = "confluent"`` the
    wire format with writer schemas from ``[kafka] schema_registry``
    (:class:`ivm.processor.codecs.confluent.WireCodec`).  Raises ``ValueError`` when the schema
    cannot be read or the registry is not configured.
    """
    rel = spec.relation
    path = relation_schema_path(rel.schema)
    try:
        schema = load_schema(path)
    except (OSError, ValueError) as err:
        raise ValueError(f"relation {rel.name}: cannot read its schema {path}: {err}") from None
    encoding = getattr(rel, "encoding", "avro")
    codec: Any
    if uses_registry(encoding):
        from ivm.processor.codecs.confluent import PackedWireCodec, WireCodec, registry_client

        registry = getattr(config, "schema_registry", "") if config is not None else ""
        if not registry:
            raise ValueError(f"relation {rel.name} uses encoding {encoding!r} but [kafka].schema_registry is not set")
        wire = PackedWireCodec if is_packed(encoding) else WireCodec
        codec = wire(schema, registry_client(config), spec.topic)
    else:
        codec = RelationCodec.from_schema(schema)
        if is_packed(encoding):
            codec = PackedCodec(codec, schema)
    attributes = codec.attributes

    def decode(value: bytes | None) -> dict[str, Any]:
        row, mult = codec.decode(value)
        return {"relation": rel.name, **dict(zip(attributes, row, strict=True)), "mult": mult}

    def decode_packed(value: bytes | None) -> dict[str, Any]:
        """A packed record: its updates in order, an invalid one as ``{"error": reason}`` at its index."""
        updates = [
            {"error": item}
            if isinstance(item, str)
            else {**dict(zip(attributes, item[0], strict=True)), "mult": item[1]}
            for item in codec.items(value)
        ]
        return {"relation": rel.name, "updates": updates}

    return decode_packed if is_packed(encoding) else decode


def output_decoder(kind: str) -> Decoder:
    """The decoder of an output topic of ``kind`` (its schema in ``schemas/``); :class:`DecodeError`
    with the reason for a message that is not such a record."""
    codec = OutputCodec(KINDS[kind].schema or kind)

    def decode(value: bytes | None) -> dict[str, Any]:
        if not value:
            raise DecodeError(f"empty message: not a {kind} record")
        try:
            return codec.decode(value)
        except Exception as err:  # fastavro raises many types on bad bytes
            raise DecodeError(f"not a {kind} record ({type(err).__name__}: {err})") from None

    return decode


def decoder_for(spec: TopicSpec, config: Any = None) -> Decoder:
    """The decoder of a topic: bytes of a message value -> its record as a dict."""
    if spec.kind == "relation":
        return relation_decoder(spec, config)
    if spec.kind not in KINDS:
        raise ValueError(f"unknown topic kind {spec.kind!r}; known: {sorted(KINDS)}")
    return output_decoder(spec.kind)


def to_json(kind: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """A decoded record as plain JSON data: its JSON-text fields parsed (text that is not JSON
    stays a string), every other value as :func:`ivm.processor.codecs.avro.json_value` maps it."""
    text_fields = KINDS[kind].json_text
    if record.get("tombstone"):  # a keyed result's group is gone: its key, its group if seen before
        group = record.get("group")
        return {"tombstone": True, "group": None if group is None else json.loads(group), "value": None,
                "key": json_value(record.get("key"))}  # fmt: skip
    out: dict[str, Any] = {}
    for name, value in record.items():
        if name in text_fields and isinstance(value, str):
            try:
                out[name] = json_value(json.loads(value))
                continue
            except ValueError:
                pass
        out[name] = json_value(value)
    return out


def render(kind: str, record: Mapping[str, Any], as_json: bool = False) -> str:
    """One output line for a decoded record: its JSON document (strict JSON, no NaN) or the plain form."""
    if as_json:
        return json.dumps(to_json(kind, record), allow_nan=False)
    return KINDS[kind].plain(dict(record))


def broker_topics(bootstrap: Kafka, timeout: float = 10.0) -> set[str]:
    """The topics on the broker (internal ``__`` ones left out); :class:`~ivm.processor.kafka.topics.BrokerUnreachable`
    (a ``RuntimeError``) naming the address if it cannot be reached."""
    from confluent_kafka import KafkaException

    from ivm.processor.kafka.topics import BrokerUnreachable, kafka_reason, require_broker

    require_broker(bootstrap, timeout=min(timeout, PROBE_TIMEOUT))
    admin = new_admin(bootstrap)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as err:
        raise BrokerUnreachable(
            f"cannot read the topics of the Kafka broker at {bootstrap}: {kafka_reason(err)}"
        ) from None
    return {t for t in metadata.topics if not t.startswith("__")}


def follow(
    bootstrap: Kafka,
    topic: str,
    *,
    from_beginning: bool = True,
    poll_timeout: float = 1.0,
    idle_timeout: float | None = None,
    stop: threading.Event | None = None,
    decoder: Decoder | None = None,
    on_error: Callable[[str, int, int, DecodeError], None] | None = None,
    isolation: str = "read_committed",
) -> Iterator[dict[str, Any]]:
    """Decoded records of a topic, read with ``isolation`` (``read_committed``: the processor's outputs are
    transactional; a relation topic is read as the pipeline reads it, ``[kafka] isolation_level``).

    ``decoder`` defaults to the output topic kind the name tells (:func:`infer_kind`;
    :class:`UnknownTopicError` if it tells none).  A topic that does not exist yet
    is waited for (``ivm subscribe`` checks existence first).  A message that does
    not decode raises :class:`DecodeError`, or goes to ``on_error(topic, partition,
    offset, error)`` and is skipped.  Stops after ``idle_timeout`` seconds without a
    record (never, if ``None``), or once ``stop`` is set.
    """

    if decoder is None:
        decoder = decoder_for(resolve_topic(topic))
    consumer = new_consumer(
        bootstrap,
        {
            "group.id": f"ivm-subscribe-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        },
    )
    consumer.subscribe([topic])
    last = time.monotonic()
    groups: dict[bytes, str] = {}
    try:
        while stop is None or not stop.is_set():
            msg = consumer.poll(poll_timeout)
            if msg is None:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    return
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    continue
                if "UNKNOWN_TOPIC" in str(msg.error()):
                    continue
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            last = time.monotonic()
            if msg.value() is None and msg.key() is not None:  # a tombstone of a keyed result: the group is gone
                yield {"tombstone": True, "key": msg.key(), "group": groups.get(msg.key()), "value": None}
                groups.pop(msg.key(), None)
                continue
            try:
                record = decoder(msg.value())
            except DecodeError as err:
                if on_error is None:
                    raise
                on_error(msg.topic(), msg.partition(), msg.offset(), err)
                continue
            if record.get("group") is not None and msg.key() is not None:
                groups[msg.key()] = record["group"]  # the group a later tombstone of this key removes
            yield record
    finally:
        consumer.close()


def reflects(result: dict[str, Any], offsets: dict[tuple[str, int], int]) -> bool:
    """Whether a result record reflects every input before ``offsets``."""
    seen = {(o["topic"], o["partition"]): o["offset"] for o in result["offsets"]}
    return all(seen.get(tp, 0) >= end for tp, end in offsets.items() if end > 0)
