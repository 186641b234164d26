"""The driver's side of the executors' placement: results merged from the slices, nothing else kept.

In ``placement = "executors"`` the driver holds no engine state and no relation
contents.  Per query it keeps a :class:`RemoteView`: the planned (empty) view,
for the query, the engine's name and ``explain``, and the slices' last parts of
the result, which it adds up (``ivm.shards``: counts, sums and ring payloads add
across shards; a group-by adds per group).  A scalar result costs O(slices) per
batch; a group-by result O(slices) per changed group and the published groups'
space, as in the driver's placement (the result topic's contents are kept there
too, ``ivm.processor.publish``).

:func:`assemble` turns one batch's slice responses and the input partitions'
summaries into the :class:`~ivm.processor.pipeline.Applied` that the pipeline
publishes, with every count the driver's placement would give: a record counts
once however many slices hold its tuple.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from ivm.processor.config import PipelineConfig, QueryConfig
from ivm.processor.kafka.sink import Sink
from ivm.processor.pipeline import ADMITTED, Applied, PackedUpdate, Pipeline, Positions, Record, RecordBatch
from ivm.processor.placement.routing import slice_count
from ivm.processor.placement.slices import SliceResponse
from ivm.processor.planning import build_view, engine_of
from ivm.view import Outcome

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

log = logging.getLogger(__name__)

#: dead-letter kinds that are not the input policy's refusals
_NOT_POLICY = frozenset({"malformed", "unknown_topic", "control"})


@dataclass(frozen=True)
class RemoteEngine:
    """The engine of a slice, by name (its state is in a shard host)."""

    name: str


class RemoteShard:
    """One slice's part of a query: its last stats and where it lives."""

    def __init__(self, index: int, engine: RemoteEngine) -> None:
        self.index = index
        self.engine = engine
        self.last_stats: dict[str, Any] = {}
        self.host = ""
        self.executor = ""
        self.version = -1
        self.tuples = 0
        self.rebuilds = 0
        self.seconds = 0.0

    def stats(self) -> dict[str, Any]:
        return self.last_stats


class RemoteView:
    """A query whose state lives in the slices on Spark's executors (module docstring)."""

    def __init__(self, planned: Any, slices: int) -> None:
        self.planned = planned
        self.query = planned.query
        self.engine = RemoteEngine(engine_of(planned))
        held = len(planned.shards) if hasattr(planned, "shards") else 1
        self.shards = [RemoteShard(i, self.engine) for i in range(min(held, slices))]
        self._scalar: dict[int, Any] = {}
        self._groups: dict[int, dict[Any, Any]] = {}
        self._merged: dict[Any, Any] = {}
        self.grouped = bool(self.query.free)

    def has_part(self, index: int) -> bool:
        """Whether the driver holds slice ``index``'s part (else it asks for the whole part)."""
        return index in (self._groups if self.grouped else self._scalar)

    def absorb(self, name: str, response: SliceResponse) -> None:
        """Take slice ``response.index``'s part of this query from its response."""
        index = response.index
        part = response.parts[name]
        shard = self.shards[index]
        shard.last_stats = response.stats.get(name, {})
        shard.host, shard.executor, shard.version = response.host, response.executor, response.version
        shard.tuples, shard.seconds = response.tuples, response.seconds
        shard.rebuilds += int(response.rebuilt)
        if not isinstance(part, dict):
            self._scalar[index] = part
            return
        groups = self._groups.setdefault(index, {})
        touched = set(part)
        if response.full:
            touched |= set(groups)
            groups.clear()
        for key, value in part.items():
            if value is None:
                groups.pop(key, None)
            else:
                groups[key] = value
        for key in touched:
            values = [g[key] for g in self._groups.values() if key in g]
            total = reduce(operator.add, values) if values else None
            if total:
                self._merged[key] = total
            else:
                self._merged.pop(key, None)

    def result(self) -> Any:
        if self.grouped:
            return dict(self._merged)
        if not self._scalar:
            return self.planned.result()
        return reduce(operator.add, (self._scalar[i] for i in sorted(self._scalar)))

    def stats(self) -> dict[str, Any]:
        from ivm.processor.operations.metrics import _combine

        return _combine([s.last_stats for s in self.shards])

    def explain(self) -> dict[str, Any]:
        out = dict(self.planned.explain())
        out["placement"] = {
            "where": "executors",
            "slices": [
                {"slice": s.index, "host": s.host, "executor": s.executor, "batch": s.version, "tuples": s.tuples}
                for s in self.shards
            ],
        }
        return out


class PlacedPipeline(Pipeline):
    """The driver's pipeline when the state lives on the executors: it publishes and commits what the
    slices did; its views are :class:`RemoteView` s."""

    def __init__(self, config: PipelineConfig, sink: Sink, metrics: Any = None) -> None:
        self.slices = slice_count(config)
        super().__init__(config, sink, metrics)

    def _maintain(self, q: QueryConfig, schema_of: Mapping[str, Sequence[str]], windows: Any) -> Any:
        return RemoteView(build_view(self.config, q, schema_of, windows, ADMITTED), self.slices)

    def _apply(self, records: Iterable[Record] | RecordBatch) -> Applied:
        raise RuntimeError("the state is on the executors: batches are applied there (ivm.processor.placement)")


@dataclass(frozen=True)
class PartitionSummary:
    """The fresh records of one input partition in a batch: how many, the last offset, the oldest time."""

    topic: str
    partition: int
    last_offset: int
    records: int
    oldest_ms: int
    updates: int | None = None  # packed records: the updates in them (None: one update per record)

    @property
    def consumed(self) -> int:
        """The updates the records carry: a packed record counts as its updates (consumed = applied + dead)."""
        return self.records if self.updates is None else self.updates


def assemble(
    pipeline: PlacedPipeline, responses: Sequence[SliceResponse], summaries: Iterable[PartitionSummary]
) -> Applied:
    """One batch's :class:`Applied` from the slices' responses and the partitions' summaries; the
    pipeline's positions move to the batch's end and every view takes its slices' parts."""
    positions: Positions = pipeline.state.positions
    per_topic: dict[str, int] = {}
    consumed: dict[str, int] = {}
    extra: dict[str, int] = {}  # per packed topic: its updates less its records (Applied.packed_extra)
    oldest = 0
    for s in summaries:
        positions[(s.topic, s.partition)] = max(positions.get((s.topic, s.partition), 0), s.last_offset + 1)
        per_topic[s.topic] = per_topic.get(s.topic, 0) + s.records
        if s.updates is not None:
            extra[s.topic] = extra.get(s.topic, 0) + s.updates - s.records
        relation = pipeline.relation_of_topic.get(s.topic)
        if relation is not None:
            consumed[relation] = consumed.get(relation, 0) + s.consumed
        if s.oldest_ms and (not oldest or s.oldest_ms < oldest):
            oldest = s.oldest_ms
    dead: list[tuple[Record, str, str, str | None, str | None]] = []
    control: list[tuple[Record, str, str | None]] = []
    for response in sorted(responses, key=lambda r: r.index):
        dead += response.dead
        control += response.control
        for name, view in pipeline.views.items():
            if name in response.parts:
                view.absorb(name, response)
    # in (topic, partition, offset) order, a packed record's updates in their order (its whole record first)
    dead.sort(key=lambda d: (d[0].topic, d[0].partition, d[0].offset, _item(d[0])))
    dead_per_relation: dict[str, int] = {}
    refused: dict[str, int] = {}
    for _record, _reason, kind, _query, relation in dead:
        if relation is None:
            continue
        dead_per_relation[relation] = dead_per_relation.get(relation, 0) + 1
        if kind not in _NOT_POLICY:
            refused[relation] = refused.get(relation, 0) + 1
    accepted = {r: n - dead_per_relation.get(r, 0) for r, n in consumed.items()}
    outcomes = {
        name: Outcome(applied=sum(accepted.get(r, 0) for r in view.query.relations))
        for name, view in pipeline.views.items()
    }
    for name, view in pipeline.views.items():
        for relation in view.query.relations:
            if accepted.get(relation):
                pipeline.metrics.updates_applied.labels(name, relation).inc(accepted[relation])
    control.sort(key=lambda c: (c[0].partition, c[0].offset))
    return Applied(outcomes, dead, per_topic, oldest, accepted, refused, control, extra)


def _item(record: Record | PackedUpdate) -> int:
    """A dead letter's place in its record: the update's index in a packed record, else -1."""
    item = getattr(record, "item", None)
    return -1 if item is None else item


def recover_positions(pipeline: PlacedPipeline, bootstrap: Kafka) -> None:
    """Where the driver resumes: the last committed batch and its positions (``<pipeline>.progress``).

    The driver has no state to recover: each slice rebuilds itself in its shard host when the first
    batch reaches it (``host.py``).  A pipeline whose batch 0 was a bulk bootstrap is refused: its tuples
    are in no topic, so a slice without a snapshot could not be rebuilt.
    """
    from ivm.processor.state.recovery import RecoveryError, _fix_origins, read_committed_progress

    committed = read_committed_progress(bootstrap, pipeline.config.progress_topic)
    if committed is None:  # a new history: slice snapshots of an earlier one (a reset) must never be read
        from ivm.processor.job import snapshot_location
        from ivm.processor.placement.host import clear_slices

        removed = clear_slices(snapshot_location(pipeline.config))
        if removed:
            log.warning("no committed batch: %d slice snapshot(s) of an earlier history removed", removed)
    if committed is not None:
        if committed.get("bootstrapped"):
            raise RecoveryError(
                f"pipeline {pipeline.config.name!r} was bootstrapped (`ivm bootstrap`): those tuples are in no "
                'topic, and placement = "executors" rebuilds slices from the topics; run it with placement = '
                '"driver", or start over with `ivm reset` and without the bootstrap'
            )
        topics = set(pipeline.topics)
        pipeline.state.positions = {
            (o["topic"], o["partition"]): o["offset"] for o in committed["offsets"] if o["topic"] in topics
        }
        pipeline.state.origin = {
            (o["topic"], o["partition"]): o["offset"] for o in committed.get("origin", []) if o["topic"] in topics
        }
        pipeline.state.last_batch_id = committed["batch_id"]
    _fix_origins(pipeline, bootstrap)
