"""One slice of a pipeline's state, and its versions: what a shard host keeps for the driver.

:class:`SlicePipeline` is the driver's :class:`~ivm.processor.pipeline.Pipeline`
restricted to slice ``s`` (``routing.py``): the same decoding, the same input
policy over the relation contents, the same views, but only for the tuples
routed to ``s`` and only shard ``s`` of each query.  Applying every slice's
records and adding the slices' results gives the driver's results, update for
update: that is what makes the executors' placement exact.

:class:`Slice` adds the batch versions that make a remote apply safe to retry:
batch ``v`` is applied only on top of ``v - 1``; asked for ``v`` again (a task
retried by Spark) it returns the outputs it stored; anything else is a
:class:`Behind` (the host rebuilds the slice from its snapshot and a replay of
the committed inputs, ``host.py``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ivm.processor.codecs.avro import PackedDecoded
from ivm.processor.config import PipelineConfig, QueryConfig
from ivm.processor.control import ACKS as CONTROL_ACKS
from ivm.processor.control import decode as decode_control
from ivm.processor.kafka.sink import Sink
from ivm.processor.pipeline import ADMITTED, Applied, PackedUpdate, Pipeline, Positions, Record, RecordBatch
from ivm.processor.placement.routing import Placement
from ivm.processor.planning import build_view
from ivm.shards import ShardedView, ShardSlice
from ivm.view import Outcome


class NoSink(Sink):
    """A slice publishes nothing: the driver does, for all slices at once."""

    def begin(self) -> None:
        pass

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        raise RuntimeError("a slice of the state never publishes: the driver does")

    def commit(self) -> None:
        pass


class SlicePipeline(Pipeline):
    """The pipeline restricted to slice ``index`` of ``slices`` (module docstring).

    ``held`` are the queries with a shard here.  ``quiet`` holds the records whose dead
    letters another slice reports (it is not their primary): set per batch by the caller.
    """

    def __init__(self, config: PipelineConfig, index: int) -> None:
        self.index = index
        self.held: set[str] = set()
        super().__init__(config, NoSink())
        self.placement = Placement(config, self._schema_of)
        self.quiet: set[tuple[str, int, int]] = set()
        # the updates of packed records whose dead letters another slice reports: (topic, partition, offset, index)
        self.quiet_updates: set[tuple[str, int, int, int | None]] = set()

    def _maintain(self, q: QueryConfig, schema_of: Mapping[str, Sequence[str]], windows: Any) -> Any:
        view = build_view(self.config, q, schema_of, windows, ADMITTED)
        if self.index < (q.shards or self.config.shards):
            self.held.add(q.name)
        if isinstance(view, ShardedView):
            return ShardSlice.of(view, min(self.index, len(view.shards) - 1))
        return view

    def _apply_view(self, name: str, view: Any, updates: list, segments: list) -> Any:
        if name not in self.held:  # a query with fewer shards than this slice's index: nothing here
            return Outcome()
        return super()._apply_view(name, view, updates, segments)

    def _control(self, batch: RecordBatch, tp: tuple[str, int], rows: list[int], dead: list, acks: list) -> None:
        """The executors' placement fixes a run's queries at its start (the configuration with the control
        topic's commands, ``job.prepare``): a command asking for what the run already does is applied (it
        was taken at the start), any other is refused with the reason and the fix."""
        for i in rows:
            record = batch.record(i)
            try:
                op, name, q = decode_control(batch.value[i])
            except ValueError as err:
                reason = f"control command refused: {err}"
                dead.append((record, reason, "control", None, None))
                acks.append((record, "", reason))
                continue
            if op in CONTROL_ACKS:
                continue
            current = self.query_configs.get(name)
            if (op == "add" and current == q) or (op == "remove" and current is None):
                acks.append((record, name, None))
                continue
            reason = (
                f"control command refused: the running job (placement executors) cannot {op} query {name!r} at run "
                "time: its queries are fixed when it starts; stop the pipeline, send the command again, then start "
                "it (a start takes every command of the control topic that is not refused), or run with placement "
                '"driver", which applies commands while it runs'
            )
            dead.append((record, reason, "control", None, None))
            acks.append((record, name, reason))

    def _apply(self, records: Iterable[Record] | RecordBatch) -> Applied:
        self.quiet_updates = set()
        applied = super()._apply(records)
        if self.quiet or self.quiet_updates:
            applied.dead = [d for d in applied.dead if not self._muted(d[0])]
        return applied

    def _muted(self, record: Record | PackedUpdate) -> bool:
        """Whether another slice reports ``record``'s dead letter: a packed record's update by its own index
        (:meth:`_select_packed`), any other record by its offset (``quiet``, from the routing)."""
        if isinstance(record, PackedUpdate):
            return (record.topic, record.partition, record.offset, record.item) in self.quiet_updates
        return (record.topic, record.partition, record.offset) in self.quiet

    def _select_packed(
        self, batch: RecordBatch, relation: str, rows: list[int], flat: PackedDecoded
    ) -> tuple[list[int], PackedDecoded]:
        """The updates of packed records that go to this slice: a packed record comes to every slice holding
        one of its updates (``routes.py``), and each slice keeps the updates routed to it, each by its own
        tuple (``routing.py``), exactly the updates the driver's pipeline would hand this slice's shards.
        An update that is not one (or a record that is not a packed record) goes to slice 0, which
        dead-letters it; an update whose primary is another slice is kept quiet (``quiet_updates``).
        O(updates · slices per tuple)."""
        n = len(flat.rows)
        errors = flat.errors
        good = [j for j in range(n) if j not in errors] if errors else range(n)
        many = self.placement.slices_of_many(relation, [flat.rows[j] for j in good]) if good else []  # type: ignore[misc]
        where: list[list[int] | None] = [None] * n
        for j, targets in zip(good, many, strict=True):
            where[j] = targets
        me = self.index
        keep: list[int] = []
        for j in range(n):
            targets = where[j]
            if targets is None:
                if me == 0:
                    keep.append(j)
            elif me in targets:
                keep.append(j)
                if targets[0] != me:
                    i = rows[j]
                    self.quiet_updates.add((batch.topic[i], batch.partition[i], batch.offset[i], flat.index[j]))
        if len(keep) == n:
            return rows, flat
        kept = PackedDecoded(
            [flat.rows[j] for j in keep],
            [flat.mults[j] for j in keep],
            {k: errors[j] for k, j in enumerate(keep) if j in errors},
            [flat.source[j] for j in keep],
            [flat.index[j] for j in keep],
        )
        return [rows[j] for j in keep], kept

    def replay(self, records: Iterable[Record] | RecordBatch) -> int:
        """Apply committed input again (a rebuild): only the records routed to this slice."""
        return super().replay([r for r in records if self.holds(r)])

    def holds(self, record: Record) -> bool:
        """Whether ``record`` goes to this slice (``routing.py``; undecodable records go to slice 0)."""
        return self.index in self.slices_of(record)

    def slices_of(self, record: Record) -> list[int]:
        """The slices ``record`` goes to, its primary first (``routing.py``)."""
        codec = self.codecs.get(record.topic)
        if codec is None or record.topic == self.control_topic:
            return [0]
        if getattr(codec, "packed", False):  # every slice holding one of its updates (slice 0: an invalid one)
            flat = codec.decode_many([record.value])
            out = {0} if flat.errors else set()
            good = [row for j, row in enumerate(flat.rows) if j not in flat.errors]
            for targets in self.placement.slices_of_many(codec.relation, good) if good else []:  # type: ignore[arg-type]
                out.update(targets)
            return sorted(out)
        decoded, _mults, errors = codec.decode_many([record.value])
        if errors:
            return [0]
        return self.placement.slices_of(codec.relation, decoded[0])


class Behind(Exception):
    """The slice is not at the version the request builds on: it must be rebuilt first."""

    def __init__(self, have: int, need: int) -> None:
        super().__init__(f"slice at batch {have}, the request builds on batch {need}")
        self.have = have
        self.need = need


@dataclass
class SliceRequest:
    """Apply batch ``version`` to slice ``index``: its records and the positions around it.

    ``before`` are the committed positions the batch starts from (what a rebuild replays up to, and
    the positions a snapshot of batch ``version - 1`` records); ``quiet`` the records whose dead
    letters another slice reports; ``full`` asks for every group of a group-by result rather than
    the changed ones (the driver has none of this slice's yet).
    """

    index: int
    version: int
    records: RecordBatch
    before: Positions
    origin: Positions = field(default_factory=dict)
    quiet: set[tuple[str, int, int]] = field(default_factory=set)
    full: bool = False


@dataclass
class Piece:
    """The records of batch ``version`` that one Spark task read from input partition ``tp`` and routed
    to slice ``index`` (``routes.py``), sent to the slice's host ahead of the batch's seal; ``quiet``
    the offsets whose dead letters another slice reports."""

    index: int
    version: int
    tp: tuple[str, int]
    records: RecordBatch
    quiet: set[int] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, int, int]:
        """What tells two pieces of one partition apart (a task's first offset): a retried task's piece
        replaces the first attempt's."""
        return (*self.tp, self.records.offset[0] if len(self.records) else -1)


@dataclass
class Seal:
    """The driver's word that batch ``version`` is complete for slice ``index``: the batch runs from the
    committed positions ``before`` to ``after``, and ``expected`` says how many records of each input
    partition the tasks routed to the slice.  A host missing some reads them from Kafka."""

    index: int
    version: int
    before: Positions
    after: Positions
    expected: dict[tuple[str, int], int]
    origin: Positions = field(default_factory=dict)
    full: bool = False


@dataclass
class SliceResponse:
    """What slice ``index`` did with batch ``version``: per query its part of the result (a scalar,
    or for a group-by the groups changed, ``None`` for a group gone), applied counts and stats; the
    dead letters it is primary for; and where it ran."""

    index: int
    version: int
    parts: dict[str, Any]
    applied: dict[str, int]
    stats: dict[str, dict[str, Any]]
    dead: list[tuple[Record, str, str, str | None, str | None]]
    full: bool
    control: list[tuple[Record, str, str | None]] = field(default_factory=list)  # the commands' answers
    host: str = ""
    pid: int = 0
    executor: str = ""
    snapshot: int | None = None  # the batch of the slice's newest snapshot taken by its host
    rebuilt: bool = False
    replayed: int = 0
    seconds: float = 0.0
    tuples: int = 0


class Slice:
    """A :class:`SlicePipeline` at a batch version, with the outputs of its last batch kept for retries.

    Group-by results travel as changes: the slice keeps the groups it reported last
    (``_reported``), so a batch sends only its changed groups, or all of them when asked.
    """

    def __init__(self, pipeline: SlicePipeline) -> None:
        self.pipeline = pipeline
        self._last: SliceResponse | None = None
        self._reported: dict[str, dict[Any, Any]] = {}

    @property
    def version(self) -> int:
        return self.pipeline.state.last_batch_id

    def apply(self, request: SliceRequest) -> SliceResponse:
        """Apply ``request`` on top of batch ``version - 1``; the stored response if it is the batch
        applied last; :class:`Behind` otherwise.  O(the batch's work) or O(1)."""
        last = self._last
        if last is not None and last.version == request.version and self.version == request.version:
            if request.full and not last.full:
                again = self._respond(request, last.applied, full=True, seconds=last.seconds)
                again.dead = last.dead
                again.control = last.control
                return again
            return last
        if self.version != request.version - 1:
            raise Behind(self.version, request.version - 1)
        started = time.perf_counter()
        pipeline = self.pipeline
        self.advance(request.before)
        pipeline.quiet = request.quiet
        try:
            applied = pipeline._apply(request.records)
        finally:
            pipeline.quiet = set()
        pipeline.state.last_batch_id = request.version
        counts = {name: outcome.applied for name, outcome in applied.outcomes.items() if name in pipeline.held}
        response = self._respond(request, counts, full=request.full, seconds=time.perf_counter() - started)
        response.dead = applied.dead
        response.control = applied.control
        self._last = response
        return response

    def advance(self, before: Positions) -> None:
        """Take the committed positions batch ``version`` ended at (partitions without records for this
        slice move too), so that a snapshot or a rebuild starts exactly there."""
        self.pipeline.state.positions.update(before)

    def _respond(self, request: SliceRequest, applied: dict[str, int], full: bool, seconds: float) -> SliceResponse:
        pipeline = self.pipeline
        parts: dict[str, Any] = {}
        stats: dict[str, dict[str, Any]] = {}
        for name in sorted(pipeline.held):
            view = pipeline.views[name]
            value = view.result()
            stats[name] = dict(view.stats())
            if isinstance(value, dict):
                before = self._reported.get(name, {})
                if full:
                    parts[name] = dict(value)
                else:
                    changed: dict[Any, Any] = {k: v for k, v in value.items() if before.get(k) != v}
                    changed.update({k: None for k in before if k not in value})
                    parts[name] = changed
                self._reported[name] = dict(value)
            else:
                parts[name] = copy.deepcopy(value)
        tuples = sum(len(c) for c in pipeline.state.relations.values())
        return SliceResponse(
            self.pipeline.index, request.version, parts, applied, stats, [], full, seconds=seconds, tuples=tuples
        )

    def baseline(self) -> None:
        """Take the current group-by results as the ones reported (after a rebuild: the driver holds
        the slice's groups as of the batch the rebuild reached)."""
        for name in self.pipeline.held:
            value = self.pipeline.views[name].result()
            if isinstance(value, dict):
                self._reported[name] = dict(value)
