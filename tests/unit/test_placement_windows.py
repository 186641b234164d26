"""Sliding windows and bootstrapped pipelines on the executors' placement, without Spark: the slices give the
driver's outputs.

A time window's clock is the whole input's; a slice sees its own records only, so each batch's seal carries
the clock the batch ends at (``driver.batch_clock``) and every slice expires its own tuples at it
(``slices.SlicePipeline``).  A rebuilt slice replays the committed records in time order and settles at the
replay's clock.  A bootstrapped pipeline's slices start from the bootstrap's snapshot cut to the slice
(``host.restrict``).  Each test runs the same batches through the driver's placement (one ``Pipeline``) and
the executors' (``InProcess``: routed, staged, sealed, assembled, published) and compares what they publish.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from ivm.patterns.windows import CountWindow, TimeWindow, Windows
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.pipeline import Pipeline, Record
from ivm.processor.placement.driver import PartitionSummary, batch_clock
from ivm.processor.placement.host import SliceTable, restrict
from ivm.processor.placement.routes import Router
from ivm.processor.placement.routing import slice_count
from ivm.processor.placement.slices import SlicePipeline
from ivm.processor.planning import placement_errors
from ivm.processor.state.relations import load_view
from ivm.processor.state.snapshots import StateStore
from ivm.updates import Update
from tests.unit.test_pipeline import MemorySink
from tests.unit.test_placement import CODECS, QUERIES, SCHEMAS, InProcess, _outputs


def _config(
    window: dict[str, float | int | str | None], shards: int = 4, **queries: tuple[str, int | None]
) -> PipelineConfig:
    """R and S share a time window (group ``w``), U has one of its own, T none."""
    relations = (
        RelationConfig("R", "R", SCHEMAS["R"], **window),
        RelationConfig("S", "S", SCHEMAS["S"], **window),
        RelationConfig("T", "T", SCHEMAS["T"]),
        RelationConfig("U", "U", SCHEMAS["R"], **{k: v for k, v in window.items() if k != "window_group"}),
    )
    qs = tuple(QueryConfig(name, text, shards=s) for name, (text, s) in queries.items())
    return PipelineConfig(relations=relations, queries=qs, shards=shards, snapshot_every=0)


def _stream(seed: int, batches: int, size: int, step_ms: int, domain: int = 6) -> list[list[Record]]:
    """Random batches over R, S, T, U (inserts, deletes of held and of absent tuples, malformed records, an
    unknown topic, redeliveries) whose fresh records have times that grow by ``step_ms`` in the order the
    driver's placement applies them ((topic, partition) then offset): a window's clock never goes back."""
    rng = random.Random(seed)
    offsets: dict[str, int] = {}
    held: dict[str, list[tuple]] = {t: [] for t in "RSTU"}
    out: list[list[Record]] = []
    previous: list[Record] = []
    now = 1_000_000
    for b in range(batches):
        fresh: list[Record] = []
        for _ in range(size):
            topic = rng.choice("RRSSTU")
            offset = offsets.get(topic, 0)
            offsets[topic] = offset + 1
            roll = rng.random()
            codec = CODECS["R" if topic == "U" else topic]
            if roll < 0.03:
                fresh.append(Record(topic, 0, offset, b"k", b"\x01bad"))
                continue
            if roll < 0.35 and held[topic]:
                row = rng.choice(held[topic])
                mult = -1
            elif roll < 0.4:
                row = (rng.randrange(domain), rng.randrange(domain))
                mult = -1  # often of an absent (or expired) tuple: a dead letter
            else:
                row = (rng.randrange(domain), rng.randrange(domain))
                mult = rng.choice([1, 1, 2])
                held[topic].append(row)
            fresh.append(Record(topic, 0, offset, *codec.encode(row, mult)))
        fresh.sort(key=lambda r: (r.topic, r.partition, r.offset))
        stamped = []
        for record in fresh:
            now += step_ms
            stamped.append(record._replace(timestamp_ms=now))
        batch = list(stamped)
        if b % 3 == 2:
            batch.append(Record("X", 0, b, None, b"\x00", 5))  # a topic no relation reads
        if previous and rng.random() < 0.5:
            batch += rng.sample(previous, min(3, len(previous)))  # redelivered: applied once, no clock move
        rng.shuffle(batch)  # the pipelines put them in order
        previous = stamped
        out.append(batch)
        now += rng.choice([0, step_ms * size])  # some batches follow at once, some later
    return out


def _live(pipeline) -> dict[str, int]:
    return pipeline.state.windows.stats()


WINDOWS = [
    {"window_seconds": 0.3, "window_group": "w"},  # expirations inside batches
    {"window_seconds": 2.5, "window_group": "w"},  # windows spanning several batches
]


@pytest.mark.parametrize("window", WINDOWS, ids=["short", "long"])
@pytest.mark.parametrize("seed", range(3))
def test_time_windows_on_the_executors_publish_what_the_driver_publishes(window: dict, seed: int) -> None:
    config = _config(window, 4, **QUERIES)
    assert placement_errors(replace(config, placement="executors")) == []
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    held = 0
    for records in _stream(seed, batches=14, size=40, step_ms=20):
        report = driver.process(records)
        placed.process(records)
        for name, view in placed.pipeline.views.items():
            assert view.result() == report.results[name], name
        live = _live(driver)
        held = max(held, live["window_live.R"] + live["window_live.S"])
    assert held > 0, "the windows held tuples"
    expired = [r for r in driver_sink.on("ivm.dead-letter") if "absent" in r["reason"]]
    assert expired, "deletes of absent or expired tuples are dead letters"
    # the expirations count as applied updates: some batch applied more than its records
    progress = driver_sink.on("triangle.result")
    assert any(r["applied"] > 0 for r in progress)
    assert _outputs(placed.sink) == _outputs(driver_sink)
    # every slice's windows hold exactly its tuples' live entries: the windows over all slices, each tuple once
    for relation in "RSU":
        held = {}
        for current in placed.table.slices.values():
            for row, mult in current.pipeline.state.relations[relation].items():
                held[row] = mult
        assert held == dict(driver.state.relations[relation]), relation


def test_expirations_are_applied_updates_counted_once() -> None:
    """A triangle tuple is held by several slices; its expiration is one applied update, as in the driver's
    placement (the published ``applied`` of every batch agrees, checked record for record above), and the
    batch that only expires tuples publishes the drop."""
    config = _config({"window_seconds": 1.0}, 8, triangle=QUERIES["triangle"])
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    rows = {"R": (1, 2), "S": (2, 3), "T": (3, 1)}
    first = [Record(rel, 0, 0, *CODECS[rel].encode(row, 1), 1000 + i) for i, (rel, row) in enumerate(rows.items())]
    later = [Record("T", 0, 1, *CODECS["T"].encode((7, 7), 1), 5000)]
    for records in (first, later):
        driver.process(records)
        placed.process(records)
    results = [r["value"] for r in placed.sink.on("triangle.result")]
    assert results == ["1", "0"]
    applied = [r["applied"] for r in placed.sink.on("triangle.result")]
    # batch 1: T's insert and the expirations of R(1,2) and S(2,3) (T has no window), each counted once though
    # the triangle's shards hold R's and S's tuples on two slices each
    assert applied == [3, 3]
    assert _outputs(placed.sink) == _outputs(driver_sink)


def test_a_rebuilt_slice_replays_in_time_order_and_settles_at_the_clock() -> None:
    """Batches 0-7 on one host; then each slice rebuilt by a replay of every committed record handed over
    topic by topic (as a Kafka consumer may: R's records of all batches before S's, whose times are earlier),
    then settled: it holds what the running slice holds (contents, results, live window entries)."""
    config = _config({"window_seconds": 0.5, "window_group": "w"}, 4, **QUERIES)
    placed = InProcess(config)
    batches = _stream(5, batches=8, size=40, step_ms=20)
    for records in batches:
        placed.process(records)
    committed = sorted(
        {r for records in batches for r in records if r.topic != "X"}, key=lambda r: (r.topic, r.partition, r.offset)
    )
    end = dict(placed.pipeline.positions)
    for index, running in placed.table.slices.items():
        rebuilt = SlicePipeline(config, index)
        for start in range(0, len(committed), 50):  # chunks, as recovery.replay hands them over
            rebuilt.replay(committed[start : start + 50])
        rebuilt.state.positions.update(end)  # recovery.replay ends every partition at the committed end
        rebuilt.settle()
        assert rebuilt.state.relations == running.pipeline.state.relations, index
        assert rebuilt.state.windows.stats() == running.pipeline.state.windows.stats(), index
        for name in running.pipeline.held:
            assert rebuilt.views[name].result() == running.pipeline.views[name].result(), (index, name)


def test_a_slice_without_the_batch_clock_would_keep_expired_tuples() -> None:
    """The seal's clock matters: without it a slice whose last record is older keeps a tuple the whole
    input's clock expired (the check above would fail)."""
    config = _config({"window_seconds": 1.0}, 8, triangle=QUERIES["triangle"])
    placed = InProcess(config)
    placed.process([Record("R", 0, 0, *CODECS["R"].encode((1, 2), 1), 1000)])
    placed.process([Record("T", 0, 0, *CODECS["T"].encode((5, 5), 1), 9000)])
    assert all(not s.pipeline.state.relations["R"] for s in placed.table.slices.values())
    unclocked = InProcess(config)
    unclocked.process([Record("R", 0, 0, *CODECS["R"].encode((1, 2), 1), 1000)])
    unclocked.clock = None
    real = batch_clock
    try:
        import tests.unit.test_placement as harness

        harness.batch_clock = lambda summaries, previous: None  # type: ignore[assignment]
        unclocked.process([Record("T", 0, 0, *CODECS["T"].encode((5, 5), 1), 9000)])
    finally:
        harness.batch_clock = real
    assert any(s.pipeline.state.relations["R"] for s in unclocked.table.slices.values())


def test_the_batch_clock_refuses_a_time_that_goes_back_as_the_driver_does() -> None:
    def summary(topic: str, first: int, last: int) -> PartitionSummary:
        return PartitionSummary(topic, 0, 9, 10, first, first_ms=first, clock_ms=last)

    assert batch_clock([summary("S", 30, 40), summary("R", 10, 20)]) == 40
    assert batch_clock([], 7) == 7
    assert batch_clock([PartitionSummary("R", 0, 1, 1, 0)], 7) == 7  # no update that decodes: no move
    with pytest.raises(ValueError, match="must not decrease"):
        batch_clock([summary("R", 30, 40), summary("S", 10, 20)])
    with pytest.raises(ValueError, match="must not decrease"):
        batch_clock([summary("R", 30, 40)], 50)
    config = _config({"window_seconds": 1.0}, 2, triangle=QUERIES["triangle"])
    back = [Record("R", 0, i, *CODECS["R"].encode((i, i), 1), t) for i, t in enumerate([2000, 1000])]
    with pytest.raises(ValueError, match="must not decrease"):
        Pipeline(config, MemorySink()).process(back)
    from ivm.processor.pipeline import RecordBatch

    with pytest.raises(ValueError, match="must not decrease"):
        Router(config).split(RecordBatch.of(back), {})


def test_count_windows_stay_refused_on_the_executors_with_the_reason() -> None:
    config = replace(_config({"window_count": 5, "window_group": "w"}, 2, triangle=QUERIES["triangle"]),
                     placement="executors")  # fmt: skip
    (error,) = placement_errors(config)
    assert "count windows" in error and "['R', 'S', 'U']" in error and "window_seconds" in error
    assert placement_errors(replace(_config({"window_seconds": 5.0}, 2), placement="executors")) == []


def test_windows_restrict_keeps_a_part_in_order() -> None:
    shared = TimeWindow(10)
    windows = Windows({"R": shared, "S": shared, "C": CountWindow(2)})
    for t, (rel, row) in enumerate([("R", (1,)), ("S", (2,)), ("C", (3,)), ("R", (4,)), ("C", (5,)), ("C", (6,))]):
        windows.admit(Update(rel, row, 1), t)
    windows.restrict(lambda relation, row: row[0] % 2 == 0)
    assert windows.stats() == {"window_live.R": 1, "window_live.S": 1, "window_live.C": 1}
    assert windows.advance(12) == [Update("S", (2,), -1)]
    assert windows.advance(13) == [Update("R", (4,), -1)]
    assert windows.admit(Update("C", (8,), 1), 14) == []  # two live: C(6,) and C(8,)
    assert windows.admit(Update("C", (10,), 1), 15) == [Update("C", (6,), -1)]


def _bootstrapped(config: PipelineConfig, bulk: dict[str, list[tuple]], location: Path) -> Pipeline:
    """What `ivm bootstrap` leaves (``ivm.processor.bootstrap``): batch 0 with the bulk tuples, committed at the
    topics' current ends, and its snapshot."""
    sink = MemorySink()
    pipeline = Pipeline(config, sink)
    store = pipeline.store
    for relation, rows in bulk.items():
        _kept, refused = store.admit(relation, rows, [1] * len(rows), initial=True)
        assert not refused
    for view in pipeline.views.values():
        load_view(view, list(store.updates(sorted(view.query.relations))))
    positions = {("R", 0): 3, ("S", 0): 0}
    pipeline.positions.update(positions)
    pipeline.state.origin = dict(positions)
    pipeline.state.bootstrapped = True
    pipeline.process([], batch_id=0)
    StateStore(location).save(pipeline.state)
    return pipeline


@pytest.mark.parametrize("window", [None, {"window_seconds": 0.4, "window_group": "w"}], ids=["plain", "windowed"])
def test_a_bootstrapped_pipeline_on_the_executors_publishes_what_the_driver_publishes(
    tmp_path: Path, window: dict | None
) -> None:
    """The slices start from the bootstrap's snapshot cut to each (the bulk tuples are in no topic): the
    results of the batches after it are the driver's, and the slices hold the bulk tuples, each where it
    is routed."""
    base = _config(window, 4, **QUERIES) if window else replace(_config({}, 4, **QUERIES))
    config = replace(base, snapshot_every=2)
    rng = random.Random(9)
    bulk = {rel: sorted({(rng.randrange(6), rng.randrange(6)) for _ in range(15)}) for rel in "RST"}
    location = tmp_path / "snapshots"
    driver = _bootstrapped(config, bulk, location)
    driver_sink = driver.sink
    assert isinstance(driver_sink, MemorySink)
    driver_sink.sent.clear()
    placed = InProcess(config, str(location))
    for name in driver.keyed:  # what the result topics hold after batch 0 (``Pipeline.load_published``)
        placed.pipeline.keyed_result(name).load({k: text for k, (_g, text) in driver.keyed[name].published.items()})
    placed.pipeline.state.last_batch_id = 0
    placed.pipeline.state.positions = dict(driver.positions)
    placed.pipeline.state.origin = dict(driver.state.origin)
    placed.pipeline.state.bootstrapped = True  # as recover_positions takes it from the committed progress
    stream = _stream(2, batches=6, size=30, step_ms=20)
    for records in stream:
        # the topics held records before the bootstrap: R's first three are not part of the history
        records = [r._replace(offset=r.offset + 3) if r.topic == "R" else r for r in records]
        report = driver.process(records)
        placed.process(records)
        for name, view in placed.pipeline.views.items():
            assert view.result() == report.results[name], name
    assert _outputs(placed.sink) == _outputs(driver_sink)
    assert any(v not in ("0", "{}") for v in (r["value"] for r in driver_sink.on("triangle.result")))


def test_restrict_cuts_a_whole_state_to_a_slice(tmp_path: Path) -> None:
    config = _config({"window_seconds": 100.0, "window_group": "w"}, 4, **QUERIES)
    pipeline = Pipeline(config, MemorySink())
    rng = random.Random(1)
    records = []
    for i in range(60):
        rel = rng.choice("RSTU")
        records.append(
            Record(rel, 0, i, *CODECS["R" if rel == "U" else rel].encode((rng.randrange(5), i % 7), 1), 1000)
        )
    pipeline.process(records)
    state = pipeline.state
    total = {rel: dict(c) for rel, c in state.relations.items()}
    seen: dict[str, dict] = {rel: {} for rel in total}
    for index in range(slice_count(config)):
        StateStore(tmp_path / str(index)).save(state)
        part = StateStore(tmp_path / str(index)).load()
        slice_pipeline = SlicePipeline(config, index)
        restrict(part, slice_pipeline)
        assert part.views == {}
        for rel, contents in part.relations.items():
            for row, mult in contents.items():
                assert index in slice_pipeline.placement.slices_of(rel, row)
                seen[rel][row] = mult
        entries = {(e.relation, e.row) for w in part.windows._windows for e in w._queue if e.mult}
        assert entries == {(rel, row) for rel in "RSU" for row in part.relations[rel]}  # T has no window
    assert seen == total


def test_a_table_rebuilds_from_the_bootstrap_snapshot_only_of_its_history(tmp_path: Path) -> None:
    config = replace(_config({}, 2, triangle=QUERIES["triangle"]), snapshot_every=0)
    location = tmp_path / "snapshots"
    _bootstrapped(config, {"R": [(1, 2)], "S": [(2, 3)], "T": [(3, 1)]}, location)
    placed = InProcess(config, str(location))
    placed.pipeline.state.last_batch_id = 0
    placed.pipeline.state.positions = {("R", 0): 3, ("S", 0): 0}
    placed.pipeline.state.origin = {("R", 0): 3}
    placed.process([])
    assert [r["value"] for r in placed.sink.on("triangle.result")] == ["1"]
    other = InProcess(config, str(location))  # another history (its origin differs): not this snapshot
    other.pipeline.state.last_batch_id = 0
    other.pipeline.state.origin = {("R", 0): 9}
    other.process([])
    assert [r["value"] for r in other.sink.on("triangle.result")] == ["0"]
    assert isinstance(placed.table, SliceTable)
