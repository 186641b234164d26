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
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
from ivm.updates import Row, Update
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
        self.clock_ms: int | None = None  # sliding windows: the clock the batch being applied ends at
        self.expired: dict[str, int] = {}  # per relation: the last batch's expirations this slice is primary for
        self._replay_clock: int | None = None  # the newest update time a replay read (``settle``)
        self._replaying: list[Record] = []  # with sliding windows: the replay's records, applied by ``settle``
        self._replay_start: Positions | None = None  # the positions the replay started from

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
        """The pipeline's apply of the slice's records; with sliding windows, then the expirations due at the
        batch's clock (:meth:`_expire_to`): a slice sees only its records, so the times of the others' come
        as the clock the batch ends at (``driver.batch_clock``)."""
        self.quiet_updates = set()
        windows = self.state.windows
        if windows is None:
            self.expired = {}
            applied = super()._apply(records)
        else:
            recorder = _Recorder(windows)
            self.state.windows = recorder  # type: ignore[assignment]
            try:
                applied = super()._apply(records)
            finally:
                self.state.windows = windows
            expired = recorder.expired
            if self.clock_ms is not None:
                expired += self._expire_to(self.clock_ms, applied)
            self.expired = self._primary(expired)
        if self.quiet or self.quiet_updates:
            applied.dead = [d for d in applied.dead if not self._muted(d[0])]
        return applied

    def _expire_to(self, clock_ms: int, applied: Applied | None = None) -> list[Any]:
        """Advance the windows to ``clock_ms`` and apply the expirations due (to the relations' contents and the
        slice's views, as the pipeline applies a window's expirations); returns them.

        Exact: an expiration's time depends only on its tuple's insert time and the clock, and every record of
        a tuple reaches each slice holding it, so between two of the slice's records the expirations due are
        the same whether the clock moved at the other slices' records in between or moves at the next of its
        own; at the end of the batch the clock is the whole batch's (``SliceRequest.clock_ms``).  The order of
        a batch's updates within a view does not change its result (the view refuses nothing: ``ADMITTED``)."""
        windows = self.state.windows
        assert windows is not None
        expired = windows.advance(clock_ms / 1000)
        if not expired:
            return []
        store = self.store
        for update in expired:
            store.apply(update)
        segments: list[tuple[str | None, int, int]] = [(None, 0, len(expired))]
        for name, view in self.views.items():
            outcome = self._apply_view(name, view, expired, segments)  # type: ignore[arg-type]
            if applied is not None and name in applied.outcomes:
                applied.outcomes[name].applied += outcome.applied
        return expired

    def _primary(self, expired: list[Any]) -> dict[str, int]:
        """Per relation, the expirations among ``expired`` of tuples this slice is the primary of (each
        expiration is counted once however many slices hold its tuple)."""
        out: dict[str, int] = {}
        for relation, row, _mult in expired:
            if self.placement.slices_of(relation, row)[0] == self.index:
                out[relation] = out.get(relation, 0) + 1
        return out

    def settle(self) -> None:
        """After a rebuild's replay (:meth:`replay`): with sliding windows, apply the replayed records in
        time order, then advance the windows to the newest update time the replay read, all slices' records
        included (the clock the last replayed batch ended at).

        A replay reads the partitions interleaved as Kafka hands them over, in chunks; a window's clock
        never goes back, so the records are applied ordered by (time, topic, partition, offset): the order
        the batches applied them in, as far as a time window can tell (each batch's records, in the order
        the pipeline applies them, had non-decreasing times, ``driver.batch_clock``; a tuple's records keep
        their offset order; two records of one time expire nothing between them).  Each group of records
        whose (topic, partition) does not go back in that order is one apply.  O(records · log records)."""
        records, self._replaying = self._replaying, []
        clock, self._replay_clock = self._replay_clock, None
        start, self._replay_start = self._replay_start, None
        if self.state.windows is None:
            return
        positions = self.state.positions
        end = dict(positions)  # the replay's end (``recovery.replay`` moved the positions there)
        if start is not None:
            positions.clear()
            positions.update(start)
        records.sort(key=lambda r: (r.timestamp_ms, r.topic, r.partition, r.offset))
        group: list[Record] = []
        for record in records:
            if group and (record.topic, record.partition) < (group[-1].topic, group[-1].partition):
                super().replay(group)
                group = []
            group.append(record)
        if group:
            super().replay(group)
        for tp, offset in end.items():
            positions[tp] = max(positions.get(tp, 0), offset)
        if clock is not None:
            self._expire_to(clock)

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

    def _route_keyed(self, relation: str, rows: list[Row], mults: list[int]) -> tuple[list[Row], list[int]]:
        """A keyed relation (upsert, Debezium, ``codecs.formats``): every slice gets all of its records and
        keeps its whole contents, so that the row a record replaces is known wherever the new row goes (the
        routing is by the row's values, which the record changes); its views get only the ``-old +new``
        updates routed here (``routing.py``), exactly the driver's updates for this slice's shards.  Cost:
        each slice holds the keyed relation's rows and decodes all of its records."""
        if not rows:
            return rows, mults
        me = self.index
        keep = [j for j, targets in enumerate(self.placement.slices_of_many(relation, rows)) if me in targets]
        return [rows[j] for j in keep], [mults[j] for j in keep]

    def _held_updates(self, relations: Iterable[str]) -> Iterator[Update]:
        """The contents of ``relations`` routed to this slice: a keyed relation's contents are whole here
        (:meth:`_route_keyed`), the rows of its other slices left out."""
        for update in super()._held_updates(relations):
            if update.relation in self._keyed and self.index not in self.placement.slices_of(*update[:2]):
                continue
            yield update

    @property
    def _keyed(self) -> set[str]:
        return {rel.name for rel in self.config.relations if rel.keyed}

    def replay(self, records: Iterable[Record] | RecordBatch) -> int:
        """Apply committed input again (a rebuild): only the records routed to this slice.  With sliding
        windows they are kept, with the newest time of the records' updates that decode, for :meth:`settle`
        (which the caller runs after the replay's last chunk)."""
        mine = []
        windowed = self.state.windows is not None
        for record in records:
            where, clocked = self._where(record)
            if self.index in where:
                mine.append(record)
            if windowed and clocked and (self._replay_clock is None or record.timestamp_ms > self._replay_clock):
                self._replay_clock = record.timestamp_ms
        if windowed:  # applied in time order by settle, once the replay has read them all
            if self._replay_start is None:
                self._replay_start = dict(self.state.positions)
            self._replaying += mine
            return len(mine)
        return super().replay(mine)

    def holds(self, record: Record) -> bool:
        """Whether ``record`` goes to this slice (``routing.py``; undecodable records go to slice 0)."""
        return self.index in self.slices_of(record)

    def slices_of(self, record: Record) -> list[int]:
        """The slices ``record`` goes to, its primary first (``routing.py``)."""
        return self._where(record)[0]

    def _where(self, record: Record) -> tuple[list[int], bool]:
        """:meth:`slices_of`, and whether the record holds an update that decodes (it moves a window's clock)."""
        codec = self.codecs.get(record.topic)
        if codec is None or record.topic == self.control_topic:
            return [0], False
        if getattr(codec, "keyed", False):  # a keyed relation is kept whole by every slice (_route_keyed); no window
            return list(range(self.placement.slices)), False
        if getattr(codec, "packed", False):  # every slice holding one of its updates (slice 0: an invalid one)
            flat = codec.decode_many([record.value])
            out = {0} if flat.errors else set()
            good = [row for j, row in enumerate(flat.rows) if j not in flat.errors]
            for targets in self.placement.slices_of_many(codec.relation, good) if good else []:  # type: ignore[arg-type]
                out.update(targets)
            return sorted(out), bool(good)
        decoded, _mults, errors = codec.decode_many([record.value])
        if errors:
            return [0], False
        return self.placement.slices_of(codec.relation, decoded[0]), True


class _Recorder:
    """A batch's view of the sliding windows that keeps the expirations they return (``SlicePipeline._apply``)."""

    def __init__(self, windows: Any) -> None:
        self.windows = windows
        self.expired: list[Any] = []

    def admit(self, update: Any, timestamp: float) -> list[Any]:
        out = self.windows.admit(update, timestamp)
        self.expired += out
        return out

    def advance(self, timestamp: float) -> list[Any]:
        out = self.windows.advance(timestamp)
        self.expired += out
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.windows, name)


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
    clock_ms: int | None = None  # sliding windows: the batch's clock at its end (``driver.batch_clock``)


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
    clock_ms: int | None = None  # sliding windows: the batch's clock at its end (``driver.batch_clock``)


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
    # sliding windows: per relation, the expirations of the tuples this slice is primary for (applied updates)
    expired: dict[str, int] = field(default_factory=dict)


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
                again.expired = last.expired
                return again
            return last
        if self.version != request.version - 1:
            raise Behind(self.version, request.version - 1)
        started = time.perf_counter()
        pipeline = self.pipeline
        self.advance(request.before)
        pipeline.quiet = request.quiet
        pipeline.clock_ms = request.clock_ms
        try:
            applied = pipeline._apply(request.records)
        finally:
            pipeline.quiet = set()
            pipeline.clock_ms = None
        pipeline.state.last_batch_id = request.version
        counts = {name: outcome.applied for name, outcome in applied.outcomes.items() if name in pipeline.held}
        response = self._respond(request, counts, full=request.full, seconds=time.perf_counter() - started)
        response.dead = applied.dead
        response.control = applied.control
        response.expired = pipeline.expired
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
