"""The executors' placement without Spark: slices applied in-process give the driver's outputs.

Each batch goes through the driver's placement (one ``Pipeline``) and through the
executors' placement's own code (``Router.split`` -> one ``SliceRequest`` per
slice -> ``SliceTable.apply`` -> ``assemble`` -> ``publish``); the published
records (results, deltas, dead letters, progress) must be identical but for
their timestamps.  Spark and the shard host processes are in
tests/integration/test_placement_cluster.py.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

import ivm
from ivm.processor.codecs.avro import OutputCodec, RelationCodec, load_relation_codecs
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.pipeline import Pipeline, Record, RecordBatch
from ivm.processor.placement.driver import PlacedPipeline, assemble
from ivm.processor.placement.host import HostSpec, SliceTable, clear_slices, slice_stores
from ivm.processor.placement.routes import Router
from ivm.processor.placement.routing import Placement, slice_count
from ivm.processor.placement.slices import Behind, Piece, Seal, Slice, SlicePipeline, SliceRequest
from tests.unit.test_engine_protocol import CASES, random_stream
from tests.unit.test_pipeline import MemorySink

CODECS = load_relation_codecs()
SCHEMAS = {name: Path(f"relations/{name}.avsc") for name in "RST"}


def _config(shards: int = 4, **queries: tuple[str, int | None]) -> PipelineConfig:
    relations = (*(RelationConfig(n, n, SCHEMAS[n]) for n in "RST"), RelationConfig("U", "U", SCHEMAS["R"]))
    qs = tuple(QueryConfig(name, text, shards=s) for name, (text, s) in queries.items())
    return PipelineConfig(relations=relations, queries=qs, shards=shards, snapshot_every=0)


QUERIES = {
    "triangle": ("Q() :- R(a,b), S(b,c), T(c,a)", None),
    "selfjoin": ("Q() :- R(a,b), R(b,c), R(c,a)", 8),
    "grouped": ("Q(a) :- R(a,b), S(b,c)", 2),
    "listing": ("Q(a,b,c) :- R(a,b), S(b,c)", 3),
    "single": ("Q() :- S(b,c), T(c,a)", 1),
}


def _stream(seed: int, batches: int, size: int, domain: int = 6) -> list[list[Record]]:
    """Random batches over R, S, T, U: inserts, deletes (some of absent tuples), malformed records, a
    topic no relation reads, and redelivered records."""
    rng = random.Random(seed)
    offsets: dict[str, int] = {}
    held: dict[str, list[tuple]] = {t: [] for t in "RSTU"}
    out: list[list[Record]] = []
    previous: list[Record] = []
    for _ in range(batches):
        batch: list[Record] = []
        for _ in range(size):
            topic = rng.choice("RRSTU")
            offset = offsets.get(topic, 0)
            offsets[topic] = offset + 1
            roll = rng.random()
            codec = CODECS["R" if topic == "U" else topic]
            if roll < 0.03:
                batch.append(Record(topic, 0, offset, b"k", b"\x01bad", 1000 + offset))
                continue
            if roll < 0.3 and held[topic]:
                row = rng.choice(held[topic])
                mult = -rng.choice([1, 1, 2])
            elif roll < 0.35:
                row = (rng.randrange(domain), rng.randrange(domain))
                mult = -1  # often of an absent tuple
            else:
                row = (rng.randrange(domain), rng.randrange(domain))
                mult = rng.choice([1, 1, 1, 2])
                held[topic].append(row)
            key, value = codec.encode(row, mult)
            batch.append(Record(topic, 0, offset, key, value, 1000 + offset))
        if rng.random() < 0.3:
            batch.append(Record("X", 0, len(out), None, b"\x00", 5))
        if previous and rng.random() < 0.5:
            batch += rng.sample(previous, min(3, len(previous)))  # redelivered: applied once
        previous = batch
        out.append(batch)
    return out


def _outputs(sink: MemorySink) -> list[tuple[str, bytes | None, object]]:
    """The sent records without their timestamps, in the order of the transaction they are in (the
    order of different groups' records within one batch is not a contract: a group's records, and
    every batch's, keep theirs)."""
    out: list[tuple[str, bytes | None, object]] = []
    for topic, key, value in sink.sent:
        if value is None:
            out.append((topic, key, None))
            continue
        kind = "dead_letter" if "dead" in topic else topic.rsplit(".", 1)[1]
        record = OutputCodec(kind).decode(value)
        record.pop("timestamp_ms", None)
        out.append((topic, key, record))
    batch = 0
    order = []
    for topic, key, _record in out:
        if topic.endswith(".progress"):
            batch += 1
        order.append((batch, topic, key or b""))
    return [o for _, o in sorted(zip(order, out, strict=True), key=lambda pair: pair[0])]


class InProcess:
    """The executors' placement with the slices in this process (a ``SliceTable``, as a host keeps them):
    the batch routed, each slice's piece staged, every slice sealed."""

    def __init__(self, config: PipelineConfig, location: str = "/nonexistent") -> None:
        self.sink = MemorySink()
        self.pipeline = PlacedPipeline(config, self.sink)
        self.router = Router(config)
        self.table = SliceTable(HostSpec(config, "test", b"k", location))
        self.history: list[tuple[list[Piece], list[Seal]]] = []  # per batch: what the slices were sent

    def process(self, records: list[Record]) -> None:
        pipeline = self.pipeline
        batch = RecordBatch.of(records)
        before = dict(pipeline.positions)
        routed = self.router.split(batch, before)
        version = pipeline.state.last_batch_id + 1
        after = dict(before)
        for s in routed.summaries:
            after[(s.topic, s.partition)] = s.last_offset + 1
        seals, sent = [], []
        for s in range(pipeline.slices):
            rows = routed.rows.get(s, [])
            expected: dict[tuple[str, int], int] = {}
            for i in rows:
                tp = (batch.topic[i], batch.partition[i])
                expected[tp] = expected.get(tp, 0) + 1
            for tp in expected:
                members = [i for i in rows if (batch.topic[i], batch.partition[i]) == tp]
                quiet = {batch.offset[i] for i in routed.quiet.get(s, ()) if i in members}
                piece = Piece(s, version, tp, RecordBatch.of([batch.record(i) for i in members]), quiet)
                self.table.stage([piece])
                sent.append(piece)
            full = any(s < len(v.shards) and not v.has_part(s) for v in pipeline.views.values())
            seals.append(Seal(s, version, before, after, expected, {}, full))
        self.history.append((sent, seals))
        responses = [self.table.seal(seal) for seal in seals]
        pipeline.publish(assemble(pipeline, responses, routed.summaries))


@pytest.mark.parametrize("seed", range(4))
def test_slices_publish_what_the_driver_publishes(seed: int) -> None:
    config = _config(4, **QUERIES)
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    assert placed.pipeline.slices == 8
    for records in _stream(seed, batches=12, size=40):
        report = driver.process(records)
        placed.process(records)
        for name, view in placed.pipeline.views.items():
            assert view.result() == report.results[name], name
    assert driver_sink.on("ivm.dead-letter"), "the stream has dead letters"
    assert any(r["value"] not in ("0", "{}") for r in driver_sink.on("triangle.result"))
    assert _outputs(placed.sink) == _outputs(driver_sink)


def test_every_accepted_tuple_is_kept_by_exactly_its_slices() -> None:
    """U is read by no query: its tuples are still kept (one slice each), and a delete of an absent U
    tuple is dead-lettered once."""
    config = _config(4, **QUERIES)
    placed = InProcess(config)
    u = CODECS["R"]
    rows = [(1, 2), (3, 4), (5, 6)]
    records = [Record("U", 0, i, *u.encode(r, 1)) for i, r in enumerate(rows)]
    records.append(Record("U", 0, 3, *u.encode((9, 9), -1)))
    placed.process(records)
    held = {s: dict(t.pipeline.state.relations["U"]) for s, t in placed.table.slices.items()}
    placement = Placement(config, {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "A"], "U": ["A", "B"]})
    for row in rows:
        (where,) = placement.slices_of("U", row)
        assert [s for s, contents in held.items() if row in contents] == [where]
    dead = placed.sink.on("ivm.dead-letter")
    assert [(d["topic"], d["offset"]) for d in dead] == [("U", 3)]


def test_a_replicated_tuple_is_dead_lettered_once() -> None:
    """A triangle tuple goes to several slices; a delete of it when absent is one dead letter."""
    config = _config(8, triangle=QUERIES["triangle"])
    placed = InProcess(config)
    key, value = CODECS["R"].encode((1, 2), -1)
    placed.process([Record("R", 0, 0, key, value)])
    assert len(Placement(config, {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "A"]}).slices_of("R", (1, 2))) == 2
    assert len(placed.sink.on("ivm.dead-letter")) == 1


def test_a_repeated_batch_returns_the_stored_outputs_and_a_gap_is_behind() -> None:
    config = _config(2, triangle=QUERIES["triangle"])
    pipeline = SlicePipeline(config, 0)
    current = Slice(pipeline)
    encode = CODECS["R"].encode
    batch = RecordBatch.of([Record("R", 0, 0, *encode((1, 2), 1))])
    first = current.apply(SliceRequest(0, 0, batch, {}))
    again = current.apply(SliceRequest(0, 0, batch, {}))
    assert again is first and current.version == 0
    with pytest.raises(Behind):
        current.apply(SliceRequest(0, 2, batch, {}))


def test_slice_count_is_the_largest_shard_count() -> None:
    assert slice_count(_config(2, **QUERIES)) == 8
    assert slice_count(_config(3, single=QUERIES["single"])) == 3


def _schema_file(folder: Path, relation: str, arity: int) -> Path:
    path = folder / f"{relation}.avsc"
    fields = [{"name": f"x{i}", "type": "long"} for i in range(arity)] + [{"name": "mult", "type": "long"}]
    path.write_text(json.dumps({"type": "record", "name": relation, "fields": fields}))
    return path


@pytest.mark.parametrize(("engine", "text"), CASES)
@pytest.mark.parametrize("shards", [1, 2, 4, 8])
def test_every_engine_on_the_executors_publishes_what_the_driver_publishes(
    engine: str, text: str, shards: int, tmp_path: Path
) -> None:
    """Every engine's sample query (the engine protocol's cases), on 1, 2, 4 and 8 shards."""
    query = ivm.parse(text)
    arity = dict(query.relations)
    relations = tuple(RelationConfig(r, r, _schema_file(tmp_path, r, arity[r])) for r in sorted(arity))
    config = PipelineConfig(
        relations=relations, queries=(QueryConfig("q", text, engine, shards=shards),), snapshot_every=0
    )
    codecs = {r: RelationCodec.from_schema(json.loads((tmp_path / f"{r}.avsc").read_text())) for r in arity}
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    stream = random_stream(query, random.Random(shards), 200, domain=7)
    offsets: dict[str, int] = {}
    for start in range(0, len(stream), 25):
        records = []
        for relation, row, mult in stream[start : start + 25]:
            offsets[relation] = offsets.get(relation, -1) + 1
            records.append(Record(relation, 0, offsets[relation], *codecs[relation].encode(row, mult)))
        report = driver.process(records)
        placed.process(records)
        assert placed.pipeline.views["q"].result() == report.results["q"]
    assert _outputs(placed.sink) == _outputs(driver_sink)


@pytest.mark.parametrize("reset", [None, "grouped", "selfjoin"])
def test_a_new_host_rebuilds_each_slice_from_its_snapshot(tmp_path: Path, reset: str | None) -> None:
    """Batches 0-3 on one host, which snapshots every 2 committed batches (batch 2 when batch 3 is sealed,
    in a forked child); a fresh host sealing batch 3 rebuilds every slice from that snapshot (no replay:
    the snapshot is at the batch's start) and reaches the first host's state.  ``reset``: that query's
    state dropped from the slices' snapshots first (``ivm reset QUERY``): the fresh host builds it again
    from the slices' relation contents.  The store is ``ivm.processor.state.snapshots`` over ``pyarrow.fs``,
    tested with URLs there."""
    config = replace(_config(4, **QUERIES), snapshot_every=2)
    location = str(tmp_path / "snapshots")
    first = InProcess(config, location)
    for records in _stream(7, batches=4, size=60):
        first.process(records)
    first.table.close()
    stores = slice_stores(location)
    assert len(stores) == first.pipeline.slices
    if reset is not None:
        assert sum(store.drop_query(reset) for store in stores) >= first.pipeline.slices  # each keeps two
        assert all(reset not in store.load().views for store in stores)
    second = SliceTable(first.table.spec)
    pieces, seals = first.history[3]
    second.stage(pieces)
    for seal in seals:
        response = second.seal(seal)
        assert response.rebuilt and response.replayed == 0
    for index, current in first.table.slices.items():
        rebuilt = second.slices[index]
        assert rebuilt.version == current.version == 3
        for name in current.pipeline.held:
            assert rebuilt.pipeline.views[name].result() == current.pipeline.views[name].result(), (index, name)
        assert rebuilt.pipeline.state.relations == current.pipeline.state.relations


def test_routing_many_rows_at_once_equals_routing_each() -> None:
    config = _config(4, **QUERIES)
    placement = Placement(config, {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "A"], "U": ["A", "B"]})
    rng = random.Random(3)
    rows = [(rng.randrange(-50, 50), rng.choice([rng.randrange(9), 2**62, -(2**63)])) for _ in range(300)]
    for relation in "RSTU":
        assert placement.slices_of_many(relation, rows) == [placement.slices_of(relation, r) for r in rows]


def test_clear_slices_removes_every_slice_snapshot(tmp_path: Path) -> None:
    config = replace(_config(2, triangle=QUERIES["triangle"]), snapshot_every=1)
    location = str(tmp_path / "snapshots")
    placed = InProcess(config, location)
    for records in _stream(3, batches=3, size=20):
        placed.process(records)
    placed.table.close()
    assert sum(len(store.snapshots()) for store in slice_stores(location)) >= 2
    assert clear_slices(location) >= 2
    assert slice_stores(location) == []
