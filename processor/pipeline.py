"""One micro-batch, from Kafka records to published outputs.

This is the runtime's core, independent of Spark: the Spark job (``job.py``)
collects each micro-batch and hands its records here.  For each batch:

1. records are put in (topic, partition, offset) order, so every tuple's
   updates are applied in the order they were produced (the key is the tuple,
   so a tuple's updates share a partition); records at or before the position
   already applied are skipped (a redelivered record is not applied twice);
2. each record is decoded with its relation's Avro schema; undecodable input
   goes to the dead-letter topic with the reason, topic, partition and offset;
3. each query's view applies the updates of its relations as one batch;
   updates it rejects (input policy) go to the dead-letter topic too;
4. each query's result goes to ``<query>.result`` with the batch id and the
   input offsets it reflects, answer deltas to ``<query>.delta``, and the
   batch's input positions to ``<pipeline>.progress`` — all in one Kafka
   transaction when the sink is transactional (exactly once, DESIGN §5).
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

Positions = dict[tuple[str, int], int]


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


@dataclass
class PipelineState:
    """Everything a restart needs besides the topics: picklable, written as snapshots."""

    views: dict[str, Any]  # query name -> View or ShardedView
    positions: Positions  # next offset to apply, per input partition
    last_batch_id: int = -1  # the last batch whose outputs were committed


@dataclass
class _Applied:
    records: int  # records applied or rejected (redeliveries excluded)
    updates: list[Update]
    sources: list[Record]
    outcomes: dict[str, ivm.Outcome]
    dead: list[tuple[Record, str, str, str | None, str | None]]


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
        self.query_configs: dict[str, QueryConfig] = {q.name: q for q in config.queries}
        views = {}
        for q in config.queries:
            options = {"eps": q.eps} if q.eps is not None else {}
            view = ivm.maintain(
                q.query,
                engine=q.engine,
                schema=schema_of,
                policy=config.policy,
                shards=q.shards or config.shards,
                **options,
            )
            missing = set(view.query.relations) - set(schema_of)
            if missing:
                raise ValueError(f"query {q.name!r} uses relations {sorted(missing)} with no configured topic")
            views[q.name] = view
        self.state = PipelineState(views, {})
        self._result = OutputCodec("result")
        self._delta = OutputCodec("delta")
        self._dead = OutputCodec("dead_letter")
        self._progress = OutputCodec("progress")

    @property
    def topics(self) -> list[str]:
        return [rel.topic for rel in self.config.relations]

    @property
    def positions(self) -> Positions:
        return self.state.positions

    @property
    def views(self) -> dict[str, Any]:
        return self.state.views

    def process(self, records: Iterable[Record], batch_id: int | None = None) -> BatchReport:
        """Apply one micro-batch and publish its outputs (one transaction)."""
        started = time.perf_counter()
        batch_id = self.state.last_batch_id + 1 if batch_id is None else batch_id
        report = BatchReport(batch_id)
        applied = self._apply(records)
        report.records = (
            len(applied.sources) + len(applied.dead) - sum(len(o.rejected) for o in applied.outcomes.values())
        )
        self.sink.begin()
        for record, reason, kind, query, relation in applied.dead:
            self._dead_letter(record, reason, kind, query, relation)
        for name, outcome in applied.outcomes.items():
            report.applied[name] = outcome.applied
            report.results[name] = self._publish(batch_id, self.query_configs[name], self.views[name], outcome)
        self._publish_progress(batch_id)
        self.sink.commit()
        self.state.last_batch_id = batch_id
        report.dead_letters = len(applied.dead)
        report.seconds = time.perf_counter() - started
        self.metrics.batches.inc()
        self.metrics.batch_size.observe(report.records)
        self.metrics.batch_duration.observe(report.seconds)
        self.metrics.last_batch_id.set(batch_id)
        return report

    def replay(self, records: Iterable[Record]) -> int:
        """Apply already-committed input again, publishing nothing (recovery); returns the records applied."""
        return self._apply(records).records

    def _apply(self, records: Iterable[Record]) -> _Applied:
        positions = self.state.positions
        ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
        updates: list[Update] = []
        sources: list[Record] = []
        dead: list[tuple[Record, str, str, str | None, str | None]] = []
        fresh = 0
        for record in ordered:
            tp = (record.topic, record.partition)
            if record.offset < positions.get(tp, 0):
                continue  # already applied: a redelivery
            fresh += 1
            positions[tp] = record.offset + 1
            codec = self.codecs.get(record.topic)
            if codec is None:
                dead.append((record, f"unknown relation topic {record.topic!r}", "unknown_topic", None, None))
                continue
            try:
                row, mult = codec.decode(record.value)
            except DecodeError as err:
                dead.append((record, str(err), "malformed", None, codec.relation))
                continue
            updates.append(Update(codec.relation, row, mult))
            sources.append(record)
        outcomes = {}
        for name, view in self.views.items():
            relations = view.query.relations
            mine = [i for i, u in enumerate(updates) if u.relation in relations]
            outcome = view.apply([updates[i] for i in mine])
            rejected = {mine[r.index]: r for r in outcome.rejected}
            for i, r in rejected.items():
                dead.append((sources[i], r.reason, r.kind, name, r.update.relation))
            for relation, n in Counter(updates[i].relation for i in mine if i not in rejected).items():
                self.metrics.updates_applied.labels(name, relation).inc(n)
            outcomes[name] = outcome
        return _Applied(fresh, updates, sources, outcomes, dead)

    def _offsets(self) -> list[dict[str, Any]]:
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.positions.items())]

    def _publish(self, batch_id: int, q: QueryConfig, view: Any, outcome: ivm.Outcome) -> Any:
        value = view.result()
        record = {
            "query": q.name,
            "batch_id": batch_id,
            "value": result_to_json(value),
            "offsets": self._offsets(),
            "applied": outcome.applied,
            "rejected": len(outcome.rejected),
            "engine": view.engine.name,
            "timestamp_ms": int(time.time() * 1000),
        }
        self.sink.send(q.result_topic, q.name.encode(), self._result.encode(record))
        drain = getattr(view, "drain_delta", None) or getattr(view.engine, "drain_delta", None)
        if drain is not None and view.query.free:
            for answer, mult in drain():
                text = json.dumps(list(answer))
                delta = {"query": q.name, "batch_id": batch_id, "answer": text, "mult": mult}
                self.sink.send(q.delta_topic, text.encode(), self._delta.encode(delta))
        if isinstance(value, int):
            self.metrics.result_value.labels(q.name).set(value)
        for stat, number in view.stats().items():
            if isinstance(number, int | float):
                self.metrics.engine_stat.labels(q.name, view.engine.name, stat).set(number)
        return value

    def _publish_progress(self, batch_id: int) -> None:
        record = {
            "pipeline": self.config.name,
            "batch_id": batch_id,
            "offsets": self._offsets(),
            "timestamp_ms": int(time.time() * 1000),
        }
        self.sink.send(self.config.progress_topic, self.config.name.encode(), self._progress.encode(record))

    def _dead_letter(
        self, record: Record, reason: str, kind: str, query: str | None, relation: str | None = None
    ) -> None:
        log.warning("dead letter %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason)
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
