"""The control topic: queries added, replaced and removed while a pipeline runs.

``ivm query add|remove`` writes a :data:`Control <schemas/control.avsc>` record to
``<pipeline>.control``.  The job reads that topic with its relation topics; at
the start of each micro-batch it applies the control records of the batch, in
offset order, before the batch's updates:

- ``add`` registers the query (or replaces the one of the same name).  Its
  view is built from the relations' current contents (``Pipeline.build_query``,
  the same mechanism as a restart over changed queries), so its first result
  is the query over every update committed before it, and the batch's updates
  then reach it like every other query;
- ``remove`` drops the query's state; its output topics stay.

The control topic's positions are committed with every batch, like the
relation topics', so a command is applied exactly once, and a restart replays
the commands after its snapshot.  The set of queries a pipeline runs is the
configuration's, overridden by the control records: an added name wins over
the file, a removed name is gone until it is added again (``ivm query list``
says where each query comes from).  A command the pipeline cannot serve (a
query that does not parse, an engine that refuses it) goes to the dead-letter
topic with the reason, and nothing changes.
"""

from __future__ import annotations

import io
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import fastavro

from processor.codec import load_schema, schemas_dir
from processor.config import PipelineConfig, QueryConfig

if TYPE_CHECKING:
    from processor.kafka_clients import Kafka

Overrides = dict[str, QueryConfig | None]  # query name -> the query added last, or None: removed

_SCHEMA = fastavro.parse_schema(load_schema(schemas_dir() / "control.avsc"))


def control_topic(config: PipelineConfig) -> str:
    """``<pipeline>.control``."""
    return f"{config.name}.control"


def encode_add(q: QueryConfig) -> bytes:
    record = {
        "op": "add",
        "name": q.name,
        "query": q.query,
        "engine": q.engine,
        "eps": None if q.eps is None else float(q.eps),
        "shards": q.shards,
        "patterns": list(q.patterns),
        "model": q.model,
        "label": q.label,
        "method": q.method,
        "timestamp_ms": int(time.time() * 1000),
    }
    return _write(record)


def encode_remove(name: str) -> bytes:
    return _write({"op": "remove", "name": name, "timestamp_ms": int(time.time() * 1000)})


def _write(record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _SCHEMA, record)
    return buf.getvalue()


def decode(value: bytes | None) -> tuple[str, str, QueryConfig | None]:
    """``(op, name, query)`` of a control record (``query`` is ``None`` for a removal); ValueError with the
    reason if the bytes are not one."""
    if not value:
        raise ValueError("empty control message")
    buf = io.BytesIO(value)
    try:
        record = fastavro.schemaless_reader(buf, _SCHEMA, None)
    except Exception as err:
        raise ValueError(f"malformed control record: {type(err).__name__}: {err}") from None
    if buf.tell() != len(value):
        raise ValueError(f"malformed control record: {len(value) - buf.tell()} trailing bytes")
    if record["op"] == "remove":
        return "remove", record["name"], None
    if not record.get("query"):
        raise ValueError(f"control record adds query {record['name']!r} without its text")
    q = QueryConfig(
        record["name"],
        record["query"],
        record["engine"],
        record["eps"],
        record["shards"],
        tuple(record["patterns"]),
        record["model"],
        record["label"],
        record["method"],
    )
    return "add", q.name, q


def effective(config: PipelineConfig, overrides: Overrides) -> PipelineConfig:
    """The configuration with the control topic's overrides applied (added or replaced, removed)."""
    queries = {q.name: q for q in config.queries}
    for name, q in overrides.items():
        if q is None:
            queries.pop(name, None)
        else:
            queries[name] = q
    return replace(config, queries=tuple(queries.values()))


def read_overrides(bootstrap: Kafka, topic: str, timeout: float = 60) -> tuple[Overrides, int]:
    """Every command of ``topic`` folded into overrides (the last command per name wins), read with
    read_committed; also the number of commands read."""
    from processor.topics import TopicReader

    overrides: Overrides = {}
    seen = 0
    with TopicReader(bootstrap, topic) as reader:
        for _key, value in reader.to_end(timeout):
            try:
                op, name, q = decode(value)
            except ValueError:
                continue  # the job dead-letters it
            overrides[name] = q if op == "add" else None
            seen += 1
    return overrides, seen
