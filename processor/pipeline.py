"""One micro-batch, from Kafka records to published outputs.

This is the runtime's core, independent of Spark: the Spark job (``job.py``)
collects each micro-batch and hands its records here.  For each batch:

1. records are put in (topic, partition, offset) order, so every tuple's
   updates are applied in the order they were produced (the key is the tuple,
   so a tuple's updates share a partition);
2. each record is decoded with its relation's Avro schema; undecodable input
   goes to the dead-letter topic with the reason, topic, partition and offset;
3. each query's :class:`ivm.View` applies the updates of its relations as one
   batch; updates it rejects (input policy) go to the dead-letter topic too;
4. each query's result is published to ``<query>.result`` with the batch id
   and the input offsets it reflects, answer deltas to ``<query>.delta``.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import ivm
from ivm.updates import Update
from processor.codec import DecodeError, OutputCodec, RelationCodec, load_schema, result_to_json, schemas_dir
from processor.config import PipelineConfig, QueryConfig
from processor.metrics import Metrics
from processor.sink import Sink

log = logging.getLogger(__name__)


class Record(NamedTuple):
    """One Kafka message of a relation topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0


@dataclass
class BatchReport:
    """What one batch did (also what the tests inspect)."""

    batch_id: int
    records: int = 0
    applied: dict[str, int] = field(default_factory=dict)  # per query
    dead_letters: int = 0
    results: dict[str, Any] = field(default_factory=dict)  # per query
    seconds: float = 0.0


class Pipeline:
    """The configured queries over the configured relation topics."""

    def __init__(self, config: PipelineConfig, sink: Sink, metrics: Metrics | None = None) -> None:
        self.config = config
        self.sink = sink
        self.metrics = metrics or Metrics()
        self.codecs: dict[str, RelationCodec] = {}
        schema_of = {}
        for rel in config.relations:
            path = rel.schema if rel.schema.is_absolute() else schemas_dir() / rel.schema
            codec = RelationCodec.from_schema(load_schema(path))
            self.codecs[rel.topic] = codec
            schema_of[rel.name] = list(codec.attributes)
        self.queries: list[tuple[QueryConfig, ivm.View]] = []
        for q in config.queries:
            options = {"eps": q.eps} if q.eps is not None else {}
            view = ivm.maintain(q.query, engine=q.engine, schema=schema_of, policy=config.policy, **options)
            missing = set(view.query.relations) - set(schema_of)
            if missing:
                raise ValueError(f"query {q.name!r} uses relations {sorted(missing)} with no configured topic")
            self.queries.append((q, view))
        self.positions: dict[tuple[str, int], int] = {}
        self._dead_count = 0
        self._result = OutputCodec("result")
        self._delta = OutputCodec("delta")
        self._dead = OutputCodec("dead_letter")

    @property
    def topics(self) -> list[str]:
        return [rel.topic for rel in self.config.relations]

    def process(self, batch_id: int, records: Iterable[Record]) -> BatchReport:
        started = time.perf_counter()
        report = BatchReport(batch_id)
        ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
        report.records = len(ordered)
        updates: list[Update] = []
        sources: list[Record] = []
        for record in ordered:
            self.positions[(record.topic, record.partition)] = record.offset + 1
            codec = self.codecs.get(record.topic)
            if codec is None:
                self._dead_letter(record, f"unknown relation topic {record.topic!r}", "unknown_topic", None)
                continue
            try:
                row, mult = codec.decode(record.value)
            except DecodeError as err:
                self._dead_letter(record, str(err), "malformed", None, codec.relation)
                continue
            updates.append(Update(codec.relation, row, mult))
            sources.append(record)
        for q, view in self.queries:
            mine = [i for i, u in enumerate(updates) if u.relation in view.query.relations]
            outcome = view.apply([updates[i] for i in mine])
            rejected = {mine[r.index]: r for r in outcome.rejected}
            for i, r in rejected.items():
                self._dead_letter(sources[i], r.reason, r.kind, q.name, r.update.relation)
            applied = Counter(updates[i].relation for i in mine if i not in rejected)
            for relation, n in applied.items():
                self.metrics.updates_applied.labels(q.name, relation).inc(n)
            report.applied[q.name] = outcome.applied
            report.results[q.name] = self._publish(batch_id, q, view, outcome)
        self.sink.flush()
        report.dead_letters = self._dead_count
        self._dead_count = 0
        report.seconds = time.perf_counter() - started
        self.metrics.batches.inc()
        self.metrics.batch_size.observe(report.records)
        self.metrics.batch_duration.observe(report.seconds)
        self.metrics.last_batch_id.set(batch_id)
        return report

    def _publish(self, batch_id: int, q: QueryConfig, view: ivm.View, outcome: ivm.Outcome) -> Any:
        value = view.result()
        now = int(time.time() * 1000)
        record = {
            "query": q.name,
            "batch_id": batch_id,
            "value": result_to_json(value),
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.positions.items())],
            "applied": outcome.applied,
            "rejected": len(outcome.rejected),
            "engine": view.engine.name,
            "timestamp_ms": now,
        }
        self.sink.send(q.result_topic, q.name.encode(), self._result.encode(record))
        drain = getattr(view.engine, "drain_delta", None)
        if drain is not None:
            for answer, mult in drain():
                delta = {
                    "query": q.name,
                    "batch_id": batch_id,
                    "answer": json.dumps(list(answer)),
                    "mult": mult,
                }
                self.sink.send(q.delta_topic, json.dumps(list(answer)).encode(), self._delta.encode(delta))
        if isinstance(value, int):
            self.metrics.result_value.labels(q.name).set(value)
        for stat, number in view.stats().items():
            self.metrics.engine_stat.labels(q.name, view.engine.name, stat).set(number)
        return value

    def _dead_letter(
        self, record: Record, reason: str, kind: str, query: str | None, relation: str | None = None
    ) -> None:
        log.warning("dead letter %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason)
        self._dead_count += 1
        self.sink.send(
            self.config.dead_letter_topic,
            record.key,
            self._dead.encode(
                {
                    "reason": reason,
                    "topic": record.topic,
                    "partition": record.partition,
                    "offset": record.offset,
                    "key": record.key,
                    "value": record.value,
                    "query": query,
                    "timestamp_ms": int(time.time() * 1000),
                }
            ),
        )
        self.metrics.dead_letters.labels(self.config.dead_letter_topic).inc()
        self.metrics.updates_rejected.labels(query or "", relation or record.topic, kind).inc()
