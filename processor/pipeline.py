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
   transaction when the sink is transactional (exactly once, DESIGN §5); the
   positions also go to the pipeline's consumer group (``[kafka] consumer_group``,
   for lag tools) once the outputs are visible (``ivm/processor/kafka/sink.py``).
"""

from __future__ import annotations

import bisect
import gc
import json
import logging
import operator
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import compress, pairwise, repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

import ivm
from ivm.patterns.windows import CountWindow, TimeWindow, Windows
from ivm.policy import Policy
from ivm.processor.codecs.avro import (
    OutputCodec,
    PackedCodec,
    PackedDecoded,
    RelationCodec,
    is_packed,
    json_value,
    load_schema,
    result_to_json,
    schemas_dir,
    uses_registry,
)
from ivm.processor.codecs.confluent import PackedWireCodec, RegistryClient, WireCodec
from ivm.processor.config import ConfigError, PipelineConfig, QueryConfig
from ivm.processor.control import ACKS as CONTROL_ACKS
from ivm.processor.control import control_topic, encode_ack
from ivm.processor.control import decode as decode_control
from ivm.processor.kafka.sink import Sink
from ivm.processor.operations.metrics import Metrics
from ivm.processor.planning import build_view
from ivm.processor.publish import GroupKeyCodec, KeyedResult, group_key_schema
from ivm.processor.state.relations import Contents, RelationStore, fingerprint, load_view
from ivm.updates import Row, Update

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

log = logging.getLogger(__name__)

Positions = dict[tuple[str, int], int]
ADMITTED = Policy(negative="allow")  # the views' policy: every update reaching them was admitted already


class Record(NamedTuple):
    """One Kafka message of a relation topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0


class PackedUpdate(NamedTuple):
    """One update inside a packed record (``encoding = "avro-packed"``): the record, and the update's
    position in it, ``item``.  Where a :class:`Record` goes (a dead letter) so does this: it names
    the update by ``(topic, partition, offset, item)`` (the dead letter's ``index``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0
    item: int | None = None  # None: the whole record (not a packed record at all)


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
    """Everything a restart needs besides the topics: picklable, written as snapshots.

    ``relations`` holds every relation's contents (the sum of the accepted updates, bootstrap
    included), from which a new or changed query is built; ``fingerprints`` says what each
    relation's contents and each query's view were built from (``relation:<name>`` and
    ``query:<name>``), so that a restart reuses a piece of state only for the same definition.
    ``origin`` is where the pipeline's history starts in each input partition (absent: offset 0)
    and ``bootstrapped`` whether batch 0 loaded tuples that are in no topic: together they say
    whether the state can be rebuilt from the relation topics alone.  ``control`` holds the
    queries added (or replaced) and removed through the control topic (``ivm.processor.control``).
    """

    views: dict[str, Any]  # query name -> View or ShardedView
    positions: Positions  # next offset to apply, per input partition
    last_batch_id: int = -1  # the last batch whose outputs were committed
    windows: Windows | None = None  # sliding windows and the tuples they hold
    models: dict[str, Any] = field(default_factory=dict)  # query name -> LinearRegression / ChowLiuTree
    relations: dict[str, Contents] = field(default_factory=dict)  # relation -> tuple -> multiplicity
    fingerprints: dict[str, str] = field(default_factory=dict)
    origin: Positions = field(default_factory=dict)
    bootstrapped: bool = False
    control: dict[str, QueryConfig | None] = field(default_factory=dict)  # queries added/removed at run time


@dataclass
class Applied:
    """What applying one batch did, before anything is published: per query its outcome, the dead
    letters ``(record, reason, kind, query, relation)``, and per topic and relation the counts."""

    outcomes: dict[str, ivm.Outcome]
    dead: list[tuple[Record, str, str, str | None, str | None]]
    per_topic: dict[str, int]  # fresh records (applied or rejected; redeliveries excluded) per topic
    oldest_ms: int  # the oldest Kafka timestamp among them (0: none)
    accepted: dict[str, int] = field(default_factory=dict)  # per relation: records applied to its contents
    refused: dict[str, int] = field(default_factory=dict)  # per relation: decoded updates the input policy refused
    # the control commands taken: (record, query name, None if applied else why refused), acknowledged on publish
    control: list[tuple[Record, str, str | None]] = field(default_factory=list)
    # per packed topic: its updates less its records; a packed record counts as its updates in
    # relation_consumed (consumed = applied + dead-lettered holds per update)
    packed_extra: dict[str, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(self.per_topic.values())


@dataclass
class RecordBatch:
    """A micro-batch of relation-topic messages, in columns (as Spark hands it over in Arrow).

    Row i is ``Record(topic[i], partition[i], offset[i], key[i], value[i], timestamp_ms[i])``.
    """

    topic: list[str]
    partition: list[int]
    offset: list[int]
    key: list[bytes | None]
    value: list[bytes | None]
    timestamp_ms: list[int]

    @classmethod
    def of(cls, records: Iterable[Record]) -> RecordBatch:
        columns = list(zip(*records, strict=True))
        if not columns:
            return cls([], [], [], [], [], [])
        return cls(*(list(c) for c in columns))

    @classmethod
    def from_arrow(cls, table: Any) -> RecordBatch:
        """From a ``pyarrow.Table`` with columns topic, partition, offset, key, value, timestamp_ms.

        The topic column is dictionary-encoded first: each topic is one ``str`` object, shared by
        its rows (a batch holds a few topics), so comparing two rows' topics is an identity test.
        """
        topic = table.column("topic")
        if len(topic) and topic.null_count == 0:
            encoded = topic.combine_chunks().dictionary_encode()
            names = encoded.dictionary.to_pylist()
            topics = list(map(names.__getitem__, encoded.indices.to_pylist()))
        else:
            topics = topic.to_pylist()
        return cls(topics, *(table.column(name).to_pylist() for name in Record._fields[1:]))

    def __len__(self) -> int:
        return len(self.offset)

    def take(self, rows: list[int]) -> RecordBatch:
        """The records at ``rows``, in that order: O(len(rows)) list work per column, no record objects."""
        return RecordBatch(*([column[i] for i in rows] for column in self.columns()))

    def columns(self) -> tuple[list[Any], ...]:
        """The six columns, in :class:`Record`'s field order."""
        return (self.topic, self.partition, self.offset, self.key, self.value, self.timestamp_ms)

    @classmethod
    def concat(cls, batches: Iterable[RecordBatch]) -> RecordBatch:
        """The records of ``batches`` one after the other."""
        out = cls([], [], [], [], [], [])
        for batch in batches:
            for mine, theirs in zip(out.columns(), batch.columns(), strict=True):
                mine += theirs
        return out

    def record(self, i: int) -> Record:
        return Record(
            self.topic[i], self.partition[i], self.offset[i], self.key[i], self.value[i], self.timestamp_ms[i]
        )

    def runs(self) -> list[tuple[tuple[str, int], Sequence[int]]]:
        """The row indices of each input partition in offset order, partitions in (topic, partition) order.

        Spark delivers each partition's messages together and in order, so this is
        usually one slice per partition, returned as a ``range`` (no list of indices);
        any other arrangement is sorted.  The boundaries and the order checks are
        C-level passes (``map``, ``compress``): O(n) with no Python step per record.
        """
        n = len(self.offset)
        if not n:
            return []
        topic, partition = self.topic, self.partition
        changed: Iterable[bool] = map(operator.ne, topic[1:], topic)
        if len(set(partition)) > 1:
            changed = map(operator.or_, changed, map(operator.ne, partition[1:], partition))
        bounds = [0, *compress(range(1, n), changed), n]
        groups: dict[tuple[str, int], list[range]] = {}
        for start, stop in pairwise(bounds):
            groups.setdefault((topic[start], partition[start]), []).append(range(start, stop))
        out: list[tuple[tuple[str, int], Sequence[int]]] = []
        offset = self.offset
        for tp in sorted(groups):
            ranges = groups[tp]
            if len(ranges) == 1:
                r = ranges[0]
                offsets = offset[r.start : r.stop]
                if all(map(operator.lt, offsets, offsets[1:])):
                    out.append((tp, r))
                    continue
            out.append((tp, sorted((i for r in ranges for i in r), key=offset.__getitem__)))
        return out


class Pipeline:
    """The configured queries over the configured relation topics."""

    def __init__(self, config: PipelineConfig, sink: Sink, metrics: Metrics | None = None) -> None:
        self.config = config
        self.sink = sink
        self.metrics = metrics or Metrics()
        self.metrics.dead_letters.labels(config.dead_letter_topic)  # exported from 0: increase() sees the first
        self.codecs, self.relation_schemas = relation_codecs(config)
        schema_of = {codec.relation: list(codec.attributes) for codec in self.codecs.values()}
        self.relation_of_topic = {rel.topic: rel.name for rel in config.relations}
        self.control_topic = control_topic(config)
        self.on_new_query: Callable[[QueryConfig, Any], None] | None = None  # e.g. create its output topics
        self.keyed: dict[str, KeyedResult] = {}  # per query with free variables: what its result topic holds
        # control commands refused earlier ((partition, offset) -> reason, ``control.refusals``): refused again
        # when replayed, whatever this run could serve
        self.refused_commands: dict[tuple[int, int], str] = {}
        # dead letters the topic already holds (source topic, partition, offset, reason): not written again when
        # a pipeline that started over meets the same records (ivm.processor.kafka.deadletters)
        self.dead_lettered: set[tuple[str, int, int, str]] = set()
        self.query_configs: dict[str, QueryConfig] = {q.name: q for q in config.queries}
        self._schema_of = schema_of
        windows = _windows(config)
        views = {q.name: self._maintain(q, schema_of, windows) for q in config.queries}
        models = {q.name: _model(q, views[q.name]) for q in config.queries if q.model}
        self.fingerprints = self._fingerprints(views)
        contents: dict[str, Contents] = {rel.name: {} for rel in config.relations}
        self.state = PipelineState(
            views, {}, windows=windows, models=models, relations=contents, fingerprints=dict(self.fingerprints)
        )
        self.metrics.observe_relations(self.relation_of_topic.values())
        for name in self.query_configs:
            self.metrics.rebuilds.labels(name)  # exported from 0
            self.metrics.model_not_converged.labels(name)  # exported from 0 (only a regression's can grow)
        self._result = OutputCodec("result")
        self._delta = OutputCodec("delta")
        self._dead = OutputCodec("dead_letter")
        self._progress = OutputCodec("progress")
        self._model = OutputCodec("model")

    def _maintain(self, q: QueryConfig, schema_of: dict[str, list[str]], windows: Windows | None) -> Any:
        # the relations' contents enforce the input policy, once per update; a view applies what they admitted
        return build_view(self.config, q, schema_of, windows, ADMITTED)

    def _fingerprints(self, views: Mapping[str, Any]) -> dict[str, str]:
        """What each relation's contents and each query's view are built from (see :class:`PipelineState`).

        A relation: its topic, its attributes with their Avro types, its window.  A query: the
        normalised query, every option that shapes its state (engine, eps, shards, patterns, model)
        and the fingerprints of the relations it reads.
        """
        out: dict[str, str] = {}
        for rel in self.config.relations:
            codec = self.codecs[rel.topic]
            types = {f["name"]: f["type"] for f in self.relation_schemas[rel.name]["fields"]}
            out[f"relation:{rel.name}"] = fingerprint(
                {
                    "topic": rel.topic,
                    "attributes": [[a, types[a]] for a in codec.attributes],
                    "window": [rel.window_count, rel.window_seconds, rel.window_group],
                }
            )
        out["windows"] = fingerprint(
            {rel.name: [rel.window_count, rel.window_seconds, rel.window_group] for rel in self.config.relations
             if rel.window_count is not None or rel.window_seconds is not None}
        )  # fmt: skip
        for name, view in views.items():
            out[f"query:{name}"] = self._query_fingerprint(self.query_configs[name], view, out)
        return out

    def _query_fingerprint(self, q: QueryConfig, view: Any, fingerprints: Mapping[str, str]) -> str:
        return fingerprint(
            {
                "query": str(view.query),
                "engine": q.engine,
                "eps": q.eps,
                "shards": q.shards or self.config.shards,
                "patterns": sorted(q.patterns),
                "model": [q.model, q.label, q.method],
                "relations": {r: fingerprints[f"relation:{r}"] for r in sorted(view.query.relations)},
            }
        )

    def declare(self, q: QueryConfig) -> Any:
        """Make ``q`` one of the pipeline's queries (added, or replacing the one of its name) without state:
        its planned (empty) view is returned; :meth:`build_query` gives it its state.  Raises
        ``ConfigError`` with the reason if the pipeline cannot serve it (the planning ``ivm check`` does)."""
        from ivm.processor.planning import plan_pipeline

        others = tuple(c for n, c in self.query_configs.items() if n != q.name)
        plan_pipeline(replace(self.config, queries=(*others, q)))  # the same checks as `ivm check` and `ivm run`
        view = self._maintain(q, self._schema_of, self.state.windows)
        self.query_configs[q.name] = q
        self.fingerprints[f"query:{q.name}"] = self._query_fingerprint(q, view, self.fingerprints)
        return view

    def retract(self, name: str) -> None:
        """Stop maintaining query ``name``: its state is dropped (its output topics stay)."""
        self.query_configs.pop(name, None)
        self.fingerprints.pop(f"query:{name}", None)
        self.state.views.pop(name, None)
        self.state.models.pop(name, None)
        self.state.fingerprints.pop(f"query:{name}", None)

    def _control(self, batch: RecordBatch, tp: tuple[str, int], rows: list[int], dead: list, acks: list) -> None:
        """Apply the control records ``rows`` in offset order (before the batch's updates): add, replace or
        remove a query; a command that cannot be served is dead-lettered with its reason, and so is one
        refused before (a replay).  Every command gets its answer in ``acks`` (``ivm.processor.control``)."""
        for i in rows:
            record = batch.record(i)
            name = ""
            try:
                op, name, q = decode_control(batch.value[i])
                if op in CONTROL_ACKS:  # the job's own answers
                    continue
                earlier = self.refused_commands.get((record.partition, record.offset))
                if earlier is not None:
                    raise ValueError(earlier.removeprefix("control command refused: "))
                if op == "remove":
                    if name not in self.query_configs:
                        raise ValueError(f"no query {name!r} to remove (queries: {sorted(self.query_configs)})")
                    self.retract(name)
                    log.warning("control %s[%d]@%d: query %s removed", tp[0], tp[1], record.offset, name)
                else:
                    assert q is not None
                    replaced = name in self.query_configs
                    planned = self.declare(q)
                    if self.on_new_query is not None:
                        self.on_new_query(q, planned)
                    view = self.build_query(name)
                    self.metrics.rebuilds.labels(name).inc()
                    log.warning(
                        "control %s[%d]@%d: query %s %s, built from the relations' contents (%d tuples)",
                        tp[0], tp[1], record.offset, name, "replaced" if replaced else "added",
                        self.store.count(view.query.relations),
                    )  # fmt: skip
                self.state.control[name] = q
                acks.append((record, name, None))
            except (ValueError, ConfigError) as err:
                reason = str(err).replace("\n", "; ")
                dead.append((record, f"control command refused: {reason}", "control", None, None))
                acks.append((record, name, f"control command refused: {reason}"))

    def build_query(self, name: str) -> Any:
        """A fresh view of configured query ``name`` (and its model), loaded from the relations' current
        contents: how a query new to the pipeline, or changed, gets its state.  Returns the view."""
        q = self.query_configs[name]
        view = self._maintain(q, self._schema_of, self.state.windows)
        load_view(view, list(self.store.updates(sorted(view.query.relations))))
        self.state.views[name] = view
        if q.model:
            self.state.models[name] = _model(q, view)
        else:
            self.state.models.pop(name, None)
        self.state.fingerprints[f"query:{name}"] = self.fingerprints[f"query:{name}"]
        return view

    @property
    def store(self) -> RelationStore:
        """The relations' contents under the input policy (held by :attr:`state`)."""
        return RelationStore(self.state.relations, self.config.policy)

    @property
    def topics(self) -> list[str]:
        """The input topics: every relation's, and the control topic."""
        return [rel.topic for rel in self.config.relations] + [self.control_topic]

    @property
    def positions(self) -> Positions:
        return self.state.positions

    @property
    def views(self) -> dict[str, Any]:
        return self.state.views

    def process(self, records: Iterable[Record] | RecordBatch, batch_id: int | None = None) -> BatchReport:
        """Apply one micro-batch and publish its outputs (one transaction)."""
        started = time.perf_counter()
        return self.publish(self._apply(records), batch_id, started)

    def publish(self, applied: Applied, batch_id: int | None = None, started: float | None = None) -> BatchReport:
        """Publish what a batch did (its dead letters, every query's result, the progress) in one
        transaction and count it.  ``applied`` comes from :meth:`_apply`, or from the shards of
        ``ivm.processor.placement`` when they apply the batch on Spark's executors."""
        started = time.perf_counter() if started is None else started
        batch_id = self.state.last_batch_id + 1 if batch_id is None else batch_id
        report = BatchReport(batch_id)
        report.records = applied.records
        self.sink.begin()
        for record, reason, kind, query, relation in applied.dead:
            self._dead_letter(record, reason, kind, query, relation)
        for record, name, refusal in applied.control:  # visible exactly when the command's effect is
            ack = encode_ack(name, record.partition, record.offset, refusal)
            self.sink.send(self.control_topic, name.encode(), ack)
        for name, outcome in applied.outcomes.items():
            report.applied[name] = outcome.applied
            view = self.views[name]
            refused = sum(applied.refused.get(r, 0) for r in view.query.relations)
            report.results[name] = self._publish(batch_id, self.query_configs[name], view, outcome, refused)
            self._publish_model(batch_id, self.query_configs[name])
        self._publish_progress(batch_id)
        send_offsets = getattr(self.sink, "send_offsets", None)  # Kafka sinks: the consumer group's offsets
        if send_offsets is not None:
            send_offsets(self.positions)
        self.sink.commit()
        self.state.last_batch_id = batch_id
        report.dead_letters = len(applied.dead)
        self._count_relations(applied)
        report.seconds = time.perf_counter() - started
        self.metrics.batches.inc()
        self.metrics.batch_size.observe(report.records)
        self.metrics.batch_duration.observe(report.seconds)
        self.metrics.last_batch_id.set(batch_id)
        self.metrics.observe_input_counts(applied.per_topic, applied.oldest_ms)
        return report

    def _count_relations(self, applied: Applied) -> None:
        """Per relation: records consumed = records applied + records dead-lettered (the exported invariant)."""
        dead: Counter[str] = Counter(relation or self.relation_of_topic.get(r.topic, r.topic)
                                     for r, _, _, _, relation in applied.dead
                                     if r.topic != self.control_topic)  # fmt: skip
        for topic, n in applied.per_topic.items():
            if topic == self.control_topic:
                continue
            relation = self.relation_of_topic.get(topic, topic)
            self.metrics.relation_consumed.labels(relation).inc(n + applied.packed_extra.get(topic, 0))
        for relation, n in applied.accepted.items():
            self.metrics.relation_applied.labels(relation).inc(n)
        for relation, n in dead.items():
            self.metrics.relation_dead_lettered.labels(relation).inc(n)

    def replay(self, records: Iterable[Record] | RecordBatch) -> int:
        """Apply already-committed input again, publishing nothing (recovery); returns the records applied."""
        return self._apply(records).records

    def _apply(self, records: Iterable[Record] | RecordBatch) -> Applied:
        """:meth:`_apply_records` with Python's cyclic garbage collector paused (:func:`collector_paused`)."""
        with collector_paused():
            return self._apply_records(records)

    def _apply_records(self, records: Iterable[Record] | RecordBatch) -> Applied:
        """Decode the fresh records of ``batch`` partition by partition, admit them to the relations'
        contents under the input policy, and apply the admitted updates to every view.

        Every fresh record ends in exactly one place: applied (to its relation's contents and to
        every query over that relation) or dead-lettered once, with its reason; the dead letters in
        (topic, partition, offset) order, as record-by-record processing gives them.  Updates keep their
        (topic, partition, offset) order, a window's expirations before the update that caused them;
        ``segments`` are runs of updates of one relation (``None``: mixed, when windows interleave
        expirations).  A view gets its relations' runs interleaved (:func:`interleave`), each
        partition's updates in offset order.
        """
        batch = records if isinstance(records, RecordBatch) else RecordBatch.of(records)
        positions = self.state.positions
        windows = self.state.windows
        store = self.store
        updates: list[tuple[str, Row, int]] = []
        segments: list[tuple[str | None, int, int]] = []
        dead: list[tuple[Record, str, str, str | None, str | None]] = []
        acks: list[tuple[Record, str, str | None]] = []
        per_topic: dict[str, int] = {}
        units: dict[str, int] = {}  # per packed topic: its updates less its records (consumed counts updates)
        accepted: dict[str, int] = {}
        refusals: dict[str, int] = {}
        oldest = 0
        runs = batch.runs()
        runs.sort(key=lambda run: run[0][0] != self.control_topic)  # control records first: stable otherwise
        for tp, rows in runs:
            offsets = _gather(batch.offset, rows)
            first = bisect.bisect_left(offsets, positions.get(tp, 0))  # earlier ones: redeliveries
            if first == len(rows):
                continue
            rows = rows[first:]
            positions[tp] = offsets[-1] + 1
            topic = tp[0]
            per_topic[topic] = per_topic.get(topic, 0) + len(rows)
            stamp = min(filter(_POSITIVE, _gather(batch.timestamp_ms, rows)), default=0)
            if stamp and (not oldest or stamp < oldest):
                oldest = stamp
            if topic == self.control_topic:
                self._control(batch, tp, rows, dead, acks)
                continue
            codec = self.codecs.get(topic)
            if codec is None:
                reason = f"unknown relation topic {topic!r}"
                dead += [(batch.record(i), reason, "unknown_topic", None, None) for i in rows]
                continue
            relation = codec.relation
            values = _gather(batch.value, rows)
            index: list[int | None] | None = None  # packed records: update j is update index[j] of its record
            if getattr(codec, "packed", False):
                flat = codec.decode_many(values)
                rows = _gather(rows, flat.source)  # update j -> its record's row in the batch
                units[topic] = units.get(topic, 0) + len(flat.index) - len(values)
                rows, flat = self._select_packed(batch, relation, rows, flat)
                decoded, mults, errors, index = flat.rows, flat.mults, flat.errors, flat.index
            else:
                decoded, mults, errors = codec.decode_many(values)
            origin = _Origins(batch, rows, index)

            mark = len(dead)
            for j, reason in errors.items():
                dead.append((origin(j), reason, "malformed", None, relation))
            start = len(updates)
            if windows is not None:
                kept = 0
                for j, i in enumerate(rows):
                    if j in errors:
                        continue
                    for expired in windows.advance(batch.timestamp_ms[i] / 1000):
                        store.apply(expired)
                        updates.append(expired)
                    refused = store.admit_one(relation, decoded[j], mults[j])
                    if refused is not None:
                        dead.append((origin(j), refused[1], refused[0], None, relation))
                        refusals[relation] = refusals.get(relation, 0) + 1
                        continue
                    update = Update(relation, decoded[j], mults[j])  # type: ignore[arg-type]
                    for expired in windows.admit(update, batch.timestamp_ms[i] / 1000):
                        store.apply(expired)
                        updates.append(expired)
                    updates.append(update)
                    kept += 1
                accepted[relation] = accepted.get(relation, 0) + kept
                segments.append((None, start, len(updates)))
                _in_offset_order(dead, mark)
                continue
            keep, refused = store.admit(relation, decoded, mults, errors)
            if refused:
                refusals[relation] = refusals.get(relation, 0) + len(refused)
            for j, kind, reason in refused:
                dead.append((origin(j), reason, kind, None, relation))
            _in_offset_order(dead, mark)
            if len(keep) < len(rows):
                decoded = list(map(decoded.__getitem__, keep))
                mults = list(map(mults.__getitem__, keep))
            accepted[relation] = accepted.get(relation, 0) + len(keep)
            updates += zip(repeat(relation, len(keep)), decoded, mults, strict=True)  # type: ignore[arg-type]
            segments.append((relation, start, len(updates)))
        outcomes = {name: self._apply_view(name, view, updates, segments)
                    for name, view in self.views.items()}  # fmt: skip
        return Applied(outcomes, dead, per_topic, oldest, accepted, refusals, acks, units)

    def _select_packed(
        self, batch: RecordBatch, relation: str, rows: list[int], flat: PackedDecoded
    ) -> tuple[list[int], PackedDecoded]:
        """The updates of packed records this pipeline applies, with their rows in ``batch``: all of them here;
        a slice of the executors' placement keeps those routed to it (``ivm.processor.placement.slices``)."""
        return rows, flat

    def _apply_view(
        self,
        name: str,
        view: Any,
        updates: list[tuple[str, Row, int]],
        segments: list[tuple[str | None, int, int]],
    ) -> ivm.Outcome:
        """Apply the admitted updates of ``view``'s relations as one batch.

        The relations' contents enforced the input policy already, so a view refuses nothing; if
        one does, the view and the contents disagree, and the batch fails (nothing is committed).
        """
        relations = view.query.relations
        mine: list[tuple[str, Row, int]] = []
        applied: Counter[str] = Counter()
        if any(relation is None for relation, _, _ in segments):  # windows: keep the batch's order
            for relation, start, stop in segments:
                if relation is None:  # mixed: filter update by update
                    for j in range(start, stop):
                        if updates[j][0] in relations:
                            mine.append(updates[j])
                            applied[updates[j][0]] += 1
                elif relation in relations:
                    mine += updates[start:stop]
                    applied[relation] += stop - start
        else:
            spans = [(start, stop) for relation, start, stop in segments if relation in relations and stop > start]
            for relation, start, stop in segments:
                if relation in relations:
                    applied[relation] += stop - start
            mine = interleave(updates, spans)
        # finite: RelationCodec.decode refuses a NaN or an infinity (a dead letter), so the view need not look
        outcome = view.apply_admitted(mine, finite=True)
        if outcome.rejected:
            first = outcome.rejected[0]
            raise RuntimeError(
                f"query {name} refused {len(outcome.rejected)} updates its relations' contents accepted, "
                f"first {first.update}: {first.reason}"
            )
        for relation, n in applied.items():
            if n:
                self.metrics.updates_applied.labels(name, relation).inc(n)
        return outcome

    def _publish_model(self, batch_id: int, q: QueryConfig) -> None:
        model = self.state.models.get(q.name)
        if model is None:
            return
        try:
            parameters = model.update()
        except Exception as err:  # e.g. a singular system before enough rows arrived
            parameters = {"type": q.model, "error": f"{type(err).__name__}: {err}"}
        if parameters.get("converged") is False:
            log.warning(
                "query %s, batch %d: %s stopped at its cap of %d iterations, not converged (relative gradient "
                "norm %.3g); the published parameters are not the least-squares fit (method = \"closed_form\" is)",
                q.name, batch_id, parameters.get("method"), parameters.get("max_iterations", 0),
                parameters.get("gradient_norm", float("nan")),
            )  # fmt: skip
            self.metrics.model_not_converged.labels(q.name).inc()
        record = {
            "query": q.name,
            "batch_id": batch_id,
            "model": json.dumps(json_value(parameters), allow_nan=False),  # NaN/inf as null: valid JSON
            "timestamp_ms": int(time.time() * 1000),
        }
        self.sink.send(q.model_topic, q.name.encode(), self._model.encode(record))

    def _offsets(self) -> list[dict[str, Any]]:
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.positions.items())]

    def keyed_result(self, name: str) -> KeyedResult:
        """The published state of query ``name`` (free variables): its groups' keys and values."""
        keyed = self.keyed.get(name)
        if keyed is None:
            query = self.views[name].query
            keyed = self.keyed[name] = KeyedResult(GroupKeyCodec(group_key_schema(query, self.relation_schemas, name)))
        return keyed

    def _publish(self, batch_id: int, q: QueryConfig, view: Any, outcome: ivm.Outcome, refused: int) -> Any:
        """A scalar query: one result record under the query's name.  A query with free variables: one
        record per changed group, keyed by the group (a tombstone when it is gone), and its before/after
        on the delta topic (``ivm/processor/publish.py``)."""
        value = view.result()
        record = {
            "query": q.name,
            "batch_id": batch_id,
            "value": "",
            "offsets": self._offsets(),
            "applied": outcome.applied,
            "rejected": refused,
            "engine": view.engine.name,
            "timestamp_ms": int(time.time() * 1000),
            "group": None,
        }
        query = view.query
        if not query.free:
            record["value"] = result_to_json(value, query)
            self.sink.send(q.result_topic, q.name.encode(), self._result.encode(record))
        else:
            listing = query.aggregate.kind == "count"
            for change in self.keyed_result(q.name).changes(value, lambda v: result_to_json(v, query)):
                group = None if change.group is None else json.dumps(json_value(list(change.group)))
                if change.after is None:
                    self.sink.send(q.result_topic, change.key, None)  # a tombstone: the group is gone
                else:
                    record["value"], record["group"] = change.after, group
                    self.sink.send(q.result_topic, change.key, self._result.encode(record))
                if group is None:
                    continue  # a key of an earlier definition of the query: removed, no delta to describe
                if listing:
                    mult = int(json.loads(change.after or "0")) - int(json.loads(change.before or "0"))
                else:
                    mult = (change.after is not None) - (change.before is not None)
                delta = {
                    "query": q.name,
                    "batch_id": batch_id,
                    "answer": group,
                    "mult": mult,
                    "before": change.before,
                    "after": change.after,
                }
                self.sink.send(q.delta_topic, change.key, self._delta.encode(delta))
        self.metrics.observe_view(q.name, view, value)
        return value

    def load_published(self, bootstrap: Kafka) -> None:
        """Read what each group-by query's result topic holds (a compacted changelog), so that the next
        batches publish exactly the differences, including tombstones for groups of an earlier definition."""
        from ivm.processor.publish import materialize

        for name, view in self.views.items():
            if not view.query.free:
                continue
            topic = self.query_configs[name].result_topic
            contents = materialize(bootstrap, topic, lambda v: self._result.decode(v)["value"])
            self.keyed_result(name).load(contents)

    def _publish_progress(self, batch_id: int) -> None:
        record = {
            "pipeline": self.config.name,
            "batch_id": batch_id,
            "offsets": self._offsets(),
            "timestamp_ms": int(time.time() * 1000),
            "origin": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.state.origin.items())],
            "bootstrapped": self.state.bootstrapped,
        }
        self.sink.send(self.config.progress_topic, self.config.name.encode(), self._progress.encode(record))

    def _dead_letter(
        self, record: Record | PackedUpdate, reason: str, kind: str, query: str | None, relation: str | None = None
    ) -> None:
        """Send one dead letter (once: not if an earlier history wrote it already).  An update inside a
        packed record is named by its record and its ``index`` there, which the reason also starts with."""
        item = record.item if isinstance(record, PackedUpdate) else None
        if item is not None:
            reason = f"update {item} of the packed record: {reason}"
        self.metrics.updates_rejected.labels(query or "", relation or record.topic, kind).inc()
        if (record.topic, record.partition, record.offset, reason) in self.dead_lettered:
            log.info(
                "dead letter %s[%d]@%d: already in %s (an earlier history): %s",
                record.topic, record.partition, record.offset, self.config.dead_letter_topic, reason,
            )  # fmt: skip
            return
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
                    "index": item,
                }
            ),
        )
        self.metrics.dead_letters.labels(self.config.dead_letter_topic).inc()


_POSITIVE = (0).__lt__  # t > 0: a Kafka timestamp (-1 or 0: none)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block (a batch's application), as it was after.

    A batch allocates O(n) tuples (rows, updates) that form no reference cycles; left on, the
    collector runs a young-generation pass every 700 container allocations: 768 passes and 70
    of the middle generation over 2·10^5 updates of the q-hierarchical count in batches of
    5·10^4 (``bench/e2e.py``'s pipeline stage), 12-14% of its CPU time; paused, 4 passes, 3-4%
    (the first pass after a block sees the survivors once).  Reference counting frees everything
    that is not in a cycle meanwhile; a cycle made during the block waits for that pass.  With
    threads: the collector is process-wide, and it is switched back on only by the block that
    found it on, so it ends on when it was on before the first of overlapping blocks.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _in_offset_order(dead: list[tuple[Record, str, str, str | None, str | None]], mark: int) -> None:
    """Put the dead letters of one partition's run (``dead[mark:]``: its undecodable records, then
    the ones the policy refused) in offset order, the order the records came in."""
    if len(dead) - mark > 1:
        dead[mark:] = sorted(dead[mark:], key=_place)


class _Origins:
    """Where update ``j`` of a partition's run came from: its record (``rows[j]`` in the batch), or
    for a packed record (``index`` given) its place in it (:class:`PackedUpdate`)."""

    __slots__ = ("batch", "index", "rows")

    def __init__(self, batch: RecordBatch, rows: Sequence[int], index: list[int | None] | None) -> None:
        self.batch, self.rows, self.index = batch, rows, index

    def __call__(self, j: int) -> Record | PackedUpdate:
        record = self.batch.record(self.rows[j])
        return record if self.index is None else PackedUpdate(*record, item=self.index[j])


def _place(dead: tuple[Any, ...]) -> tuple[int, int]:
    """Where a dead letter's update was: its record's offset, and its index in a packed record (-1: the record)."""
    item = dead[0].item if isinstance(dead[0], PackedUpdate) else None
    return dead[0].offset, -1 if item is None else item


def _gather(column: list[Any], rows: Sequence[int]) -> list[Any]:
    """``[column[i] for i in rows]``: a slice when ``rows`` is a range, else one C-level ``map`` pass."""
    if isinstance(rows, range) and rows.step == 1:
        return column[rows.start : rows.stop]
    return list(map(column.__getitem__, rows))


def interleave(updates: list[Any], spans: Sequence[tuple[int, int]]) -> list[Any]:
    """The updates of ``spans`` (runs ``updates[start:stop]``, each one input partition's admitted
    updates in offset order) merged into one batch, every run spread evenly over it: the update
    at position j of a run of length n goes to the fraction (j + 1/2)/n of the batch, ties in the
    runs' order.

    Each run keeps its order (a tuple's updates share a partition, so each tuple's updates stay in
    the order they were produced) and the view's state after the batch is the same for every
    merge (the sum of the updates; Z-relations commute, IVM^eps §1.1, F-IVM §2).  What depends on
    the merge is the path through the batch: Kafka orders no two topics, and a batch handed over
    one relation after the other looks to an engine that chooses its strategy from the degrees
    seen so far (``ivm_eps_auto``: heavy/light partitions once the first-order work outruns its
    budget, or under ``promote="degree"`` once a degree reaches λ·√N, N the database size) as if
    each relation came alone, N a third of the stream's at that point;
    spread evenly, the batch looks like the producers' interleaved stream.  One stable numpy
    sort and one gather: O(n log n) in C for n updates, no Python step per update.
    """
    if len(spans) == 1:
        start, stop = spans[0]
        return updates[start:stop]
    if not spans:
        return []
    where = np.concatenate([(np.arange(stop - start) + 0.5) / (stop - start) for start, stop in spans])
    index = np.concatenate([np.arange(start, stop) for start, stop in spans])
    return list(map(updates.__getitem__, index[np.argsort(where, kind="stable")].tolist()))


def _windows(config: PipelineConfig) -> Windows | None:
    """The configured sliding windows; relations of one ``window_group`` share a window."""
    shared: dict[str, TimeWindow | CountWindow] = {}
    by_relation: dict[str, TimeWindow | CountWindow] = {}
    for rel in config.relations:
        if rel.window_count is None and rel.window_seconds is None:
            continue
        key = rel.window_group or f"relation:{rel.name}"
        if key not in shared:
            members = [r.name for r in config.relations if (r.window_group or f"relation:{r.name}") == key]
            if rel.window_count is not None:
                shared[key] = CountWindow(rel.window_count, members)
            else:
                shared[key] = TimeWindow(float(rel.window_seconds), members)
        by_relation[rel.name] = shared[key]
    return Windows(by_relation) if by_relation else None


def _model(q: QueryConfig, view: Any) -> Any:
    """The model app fed by a query's covariance result."""
    from ivm.apps.chow_liu import ChowLiuTree
    from ivm.apps.regression import LinearRegression

    variables = view.query.aggregate.variables
    if view.query.aggregate.kind != "covariance":
        raise ValueError(f"query {q.name!r}: a {q.model} model needs a COVAR(...) aggregate")
    if q.model == "linear_regression":
        if q.label not in variables:
            raise ValueError(f"query {q.name!r}: label {q.label!r} is not one of the COVAR variables {variables}")
        return LinearRegression(view, variables, q.label, method=q.method)
    return ChowLiuTree(view, variables)


def relation_codecs(config: PipelineConfig) -> tuple[dict[str, RelationCodec | WireCodec], dict[str, dict[str, Any]]]:
    """Every configured relation's codec by topic, and its Avro schema by relation name."""
    codecs: dict[str, RelationCodec | WireCodec] = {}
    schemas: dict[str, dict[str, Any]] = {}
    for rel in config.relations:
        path = rel.schema if rel.schema.is_absolute() else schemas_dir() / rel.schema
        schemas[rel.name] = load_schema(path)
        codecs[rel.topic] = relation_codec(config, rel.topic, schemas[rel.name], rel.encoding, rel.name)
    return codecs, schemas


def relation_codec(
    config: PipelineConfig,
    topic: str,
    schema: dict[str, Any],
    encoding: str,
    relation: str | None = None,
    register: bool = True,
) -> Any:
    """The codec of a relation topic: plain Avro, or the Confluent wire format with the registry.

    ``relation`` is the configured relation's name (its updates go to it whatever the Avro
    record is called); ``register=False``: encode with the latest registered schemas, registering
    none (``ivm produce --no-register``).  A registry that cannot be reached raises (the batch fails and is
    retried after recovery); only messages that are themselves bad go to the dead-letter topic.
    """
    if uses_registry(encoding):
        registry = RegistryClient(config.schema_registry, properties=dict(config.schema_registry_properties))
        wire = PackedWireCodec if is_packed(encoding) else WireCodec
        return wire(schema, registry, topic, relation, register=register)
    codec = RelationCodec.from_schema(schema, relation)
    return PackedCodec(codec, schema) if is_packed(encoding) else codec
